// test_target_config.c: reading a target's config.json (real Qwen3-8B and Llama-3.1-8B files,
// defaults, both RoPE spellings), writing one back, RoPE inverse frequencies against transformers,
// the default feature layers against z-lab dflash, and every refusal naming its field.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "teacher/target_config.h"
#include "testing.h"

// Qwen/Qwen3-8B config.json as published on the Hugging Face hub.
static const char *qwen3_8b_json =
    "{\n"
    "  \"architectures\": [\"Qwen3ForCausalLM\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n"
    "  \"eos_token_id\": 151645,\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 4096,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 12288,\n"
    "  \"max_position_embeddings\": 40960,\n"
    "  \"max_window_layers\": 36,\n"
    "  \"model_type\": \"qwen3\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 36,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.51.0\",\n"
    "  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n"
    "  \"vocab_size\": 151936\n"
    "}\n";

// meta-llama/Llama-3.1-8B config.json as published on the Hugging Face hub.
static const char *llama31_8b_json =
    "{\n"
    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": 128001,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 4096,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 14336,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 32,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\n"
    "    \"factor\": 8.0,\n"
    "    \"low_freq_factor\": 1.0,\n"
    "    \"high_freq_factor\": 4.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n"
    "    \"rope_type\": \"llama3\"\n"
    "  },\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.43.0.dev0\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 128256\n"
    "}\n";

// The inverse frequencies below were computed with torch 2.15.0 + transformers 5.24.0 on the dev
// machine and printed with "%.9g" (enough digits to identify the float32 exactly):
//   from transformers import LlamaConfig, Qwen3Config
//   from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
//   from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding
//   ROPE_INIT_FUNCTIONS["llama3"](LlamaConfig(**llama31_8b))[0]          -> llama31_inv_freq
//   Qwen3RotaryEmbedding.compute_default_rope_parameters(Qwen3Config(**qwen3_8b))[0] -> qwen3_inv_freq
//   ROPE_INIT_FUNCTIONS["llama3"](LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=1e4,
//       rope_scaling={rope_type llama3, factor 8, low 1, high 4, original_max_position_embeddings 64}))
//                                                                        -> tiny_inv_freq
static const float llama31_inv_freq[64] = {
    1, 0.814617217f, 0.663601279f, 0.540580988f, 0.440366626f, 0.358730227f, 0.292227834f, 0.238053814f,
    0.193922758f, 0.157972813f, 0.128687382f, 0.10483095f, 0.0853971019f, 0.0695659518f, 0.0566696189f,
    0.0461640507f, 0.0376060307f, 0.0306345206f, 0.0249554086f, 0.0203291047f, 0.0165604409f, 0.0134904198f,
    0.0109895291f, 0.00895225909f, 0.00729266508f, 0.00594073068f, 0.00483942125f, 0.00394227589f,
    0.00321144611f, 0.00216657063f, 0.00137189368f, 0.00085675146f, 0.000524846022f, 0.00031269365f,
    0.000178507791f, 9.55621217e-05f, 7.78465546e-05f, 6.34151438e-05f, 5.16590699e-05f, 4.20823671e-05f,
    3.42810235e-05f, 2.79259093e-05f, 2.2748929e-05f, 1.85316694e-05f, 1.50962178e-05f, 1.22976389e-05f,
    1.00178686e-05f, 8.1607277e-06f, 6.64786967e-06f, 5.41546933e-06f, 4.41153452e-06f, 3.59371188e-06f,
    2.92749974e-06f, 2.38479174e-06f, 1.94269251e-06f, 1.58255079e-06f, 1.28917316e-06f, 1.05018262e-06f,
    8.55496921e-07f, 6.96902532e-07f, 5.6770881e-07f, 4.6246538e-07f, 3.7673226e-07f, 3.06892588e-07f,
};
static const float qwen3_inv_freq[64] = {
    1, 0.805842221f, 0.649381638f, 0.523299158f, 0.421696514f, 0.339820832f, 0.273841977f, 0.220673397f,
    0.177827939f, 0.143301263f, 0.115478203f, 0.0930572003f, 0.0749894157f, 0.0604296438f, 0.0486967526f,
    0.0392418988f, 0.0316227786f, 0.0254829675f, 0.0205352511f, 0.0165481716f, 0.0133352149f, 0.0107460786f,
    0.00865964312f, 0.00697830599f, 0.00562341325f, 0.00453158375f, 0.00365174143f, 0.00294272718f,
    0.00237137382f, 0.00191095285f, 0.00153992651f, 0.00124093785f, 0.00100000005f, 0.000805842225f,
    0.000649381662f, 0.000523299095f, 0.000421696488f, 0.000339820836f, 0.000273841957f, 0.000220673421f,
    0.00017782794f, 0.000143301266f, 0.000115478193f, 9.3057206e-05f, 7.49894243e-05f, 6.04296365e-05f,
    4.86967547e-05f, 3.92418988e-05f, 3.16227743e-05f, 2.54829665e-05f, 2.05352499e-05f, 1.65481706e-05f,
    1.33352141e-05f, 1.07460783e-05f, 8.65964375e-06f, 6.97830637e-06f, 5.62341347e-06f, 4.53158373e-06f,
    3.65174128e-06f, 2.94272718e-06f, 2.37137374e-06f, 1.91095296e-06f, 1.53992653e-06f, 1.24093776e-06f,
};
// head_dim 16, theta 1e4, original context 64: entry 0 unscaled, 1-2 smoothed, 3-7 divided by 8.
static const float tiny_inv_freq[8] = {
    1, 0.244384587f, 0.0130422562f, 0.00395284733f, 0.00124999997f, 0.000395284733f, 0.000125000006f,
    3.95284733e-05f,
};

// check_inv_freq: within 2 float32 ulps of transformers (torch's vectorised pow may differ from
// libm's powf in the last bit). Returns the largest difference in ulps.
static int check_inv_freq(const target_config *c, const float *want, int n) {
    float got[256];
    target_rope_inv_freq(c, got);
    int worst = 0;
    for (int i = 0; i < n; i++) {
        float ulp = nextafterf(want[i], INFINITY) - want[i];
        int d = (int)lrint(fabs((double)got[i] - (double)want[i]) / ulp);
        if (d > worst) worst = d;
        CHECK_MSG(d <= 2, "inv_freq[%d] = %.9g, transformers %.9g (%d ulps)", i, got[i], want[i], d);
    }
    return worst;
}

// with: the JSON text with the first occurrence of `from` replaced by `to` (static buffer).
static const char *with(const char *json, const char *from, const char *to) {
    static char buf[8192];
    const char *at = strstr(json, from);
    if (!at) {
        fprintf(stderr, "test bug: '%s' not in the config\n", from);
        exit(1);
    }
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    return buf;
}

static int parse(target_config *c, const char *json) { return target_config_parse(c, json, "m/config.json"); }

static void test_real_configs(void) {
    target_config c;
    CHECK(parse(&c, qwen3_8b_json) == 0);
    CHECK(c.arch == ARCH_QWEN3 && strcmp(c.arch_name, "Qwen3ForCausalLM") == 0);
    CHECK(c.n_layers == 36 && c.hidden == 4096 && c.intermediate == 12288);
    CHECK(c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128 && c.vocab == 151936);
    CHECK(c.max_positions == 40960);
    CHECK_CLOSE(c.rms_eps, 1e-6, 0);
    CHECK_CLOSE(c.rope_theta, 1e6, 0);
    CHECK(c.rope_llama3 == 0 && c.tie_embeddings == 0);
    CHECK(strcmp(c.torch_dtype, "bfloat16") == 0);
    int worst = check_inv_freq(&c, qwen3_inv_freq, 64);
    printf("qwen3-8b inv_freq: max %d ulps from transformers\n", worst);

    CHECK(parse(&c, llama31_8b_json) == 0);
    CHECK(c.arch == ARCH_LLAMA && strcmp(c.arch_name, "LlamaForCausalLM") == 0);
    CHECK(c.n_layers == 32 && c.hidden == 4096 && c.intermediate == 14336);
    CHECK(c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128 && c.vocab == 128256);
    CHECK(c.max_positions == 131072);
    CHECK_CLOSE(c.rms_eps, 1e-5, 0);
    CHECK_CLOSE(c.rope_theta, 5e5, 0);
    CHECK(c.rope_llama3 == 1 && c.rope_original_max_positions == 8192);
    CHECK_CLOSE(c.rope_factor, 8, 0);
    CHECK_CLOSE(c.rope_low_freq_factor, 1, 0);
    CHECK_CLOSE(c.rope_high_freq_factor, 4, 0);
    worst = check_inv_freq(&c, llama31_inv_freq, 64);
    printf("llama-3.1-8b inv_freq: max %d ulps from transformers\n", worst);

    // The same, as transformers 5 writes it: rope_parameters holding rope_theta and the scaling.
    const char *v5 = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 4096,"
                     " \"num_hidden_layers\": 32, \"intermediate_size\": 14336, \"num_attention_heads\": 32,"
                     " \"num_key_value_heads\": 8, \"vocab_size\": 128256, \"max_position_embeddings\": 131072,"
                     " \"rope_parameters\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
                     " \"original_max_position_embeddings\": 8192, \"rope_theta\": 500000.0, \"rope_type\": \"llama3\"},"
                     " \"dtype\": \"bfloat16\"}";
    CHECK(parse(&c, v5) == 0);
    CHECK(c.rope_llama3 == 1 && c.rope_original_max_positions == 8192 && strcmp(c.torch_dtype, "bfloat16") == 0);
    CHECK_CLOSE(c.rope_theta, 5e5, 0);
    check_inv_freq(&c, llama31_inv_freq, 64);
    // Nested per layer type (transformers 5 with layer_types), and the legacy "type" key.
    CHECK(parse(&c, with(v5, "\"rope_parameters\": {", "\"rope_parameters\": {\"full_attention\": {")) != 0);
    const char *nested = with(v5, "\"rope_type\": \"llama3\"}", "\"rope_type\": \"llama3\"}}");
    char nested_buf[8192];
    snprintf(nested_buf, sizeof nested_buf, "%s", nested);
    CHECK(parse(&c, with(nested_buf, "\"rope_parameters\": {", "\"rope_parameters\": {\"full_attention\": {")) == 0);
    CHECK(c.rope_llama3 == 1);
    CHECK_CLOSE(c.rope_theta, 5e5, 0);
    CHECK(parse(&c, with(llama31_8b_json, "\"rope_type\": \"llama3\"", "\"type\": \"llama3\"")) == 0);
    CHECK(c.rope_llama3 == 1);
    // rope_theta inside the dict wins over the top-level one.
    CHECK(parse(&c, with(llama31_8b_json, "\"rope_type\": \"llama3\"", "\"rope_type\": \"llama3\", \"rope_theta\": 1e4"))
          == 0);
    CHECK_CLOSE(c.rope_theta, 1e4, 0);
    // A default-type dict is no scaling; {} counts as absent.
    CHECK(parse(&c, with(qwen3_8b_json, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"default\"}")) == 0);
    CHECK(c.rope_llama3 == 0);
    CHECK(parse(&c, with(qwen3_8b_json, "\"rope_scaling\": null", "\"rope_scaling\": {}")) == 0);
    CHECK_CLOSE(c.rope_theta, 1e6, 0);
}

static void test_defaults(void) {
    target_config c;
    // A minimal Llama: kv heads, head_dim, positions, eps, theta, tie all defaulted.
    const char *llama = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                        " \"intermediate_size\": 96, \"num_attention_heads\": 4, \"vocab_size\": 500}";
    CHECK(parse(&c, llama) == 0);
    CHECK(c.n_kv_heads == 4 && c.head_dim == 16 && c.max_positions == 2048);
    CHECK_CLOSE(c.rms_eps, 1e-6, 0);
    CHECK_CLOSE(c.rope_theta, 10000, 0);
    CHECK(c.tie_embeddings == 0 && c.rope_llama3 == 0 && c.torch_dtype[0] == '\0');
    // Qwen3 without head_dim: transformers' default 128, not hidden/heads.
    const char *qwen3 = "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                        " \"intermediate_size\": 96, \"num_attention_heads\": 4, \"num_key_value_heads\": null,"
                        " \"vocab_size\": 307, \"tie_word_embeddings\": true}";
    CHECK(parse(&c, qwen3) == 0);
    CHECK(c.arch == ARCH_QWEN3 && strcmp(c.arch_name, "Qwen3ForCausalLM") == 0); // from model_type
    CHECK(c.head_dim == 128 && c.n_kv_heads == 4 && c.max_positions == 32768 && c.tie_embeddings == 1);

    // llama3 scaling on a tiny head: all three branches (kept, smoothed, divided).
    const char *tiny = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                       " \"intermediate_size\": 96, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                       " \"vocab_size\": 500, \"max_position_embeddings\": 32768, \"rope_theta\": 10000.0,"
                       " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1,"
                       " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 64}}";
    CHECK(parse(&c, tiny) == 0);
    check_inv_freq(&c, tiny_inv_freq, 8);
    // original_max_position_embeddings defaults to max_position_embeddings.
    CHECK(parse(&c, with(tiny, ", \"original_max_position_embeddings\": 64", "")) == 0);
    CHECK(c.rope_original_max_positions == 32768);
}

static void test_roundtrip_and_load(void) {
    target_config c, d;
    CHECK(parse(&c, llama31_8b_json) == 0);
    char *json = target_config_to_json(&c);
    CHECK(strstr(json, "\"model_type\":\t\"llama\"") != NULL);
    CHECK(target_config_parse(&d, json, "roundtrip") == 0);
    CHECK(memcmp(&c, &d, sizeof c) == 0);
    free(json);
    CHECK(parse(&c, qwen3_8b_json) == 0);
    c.tie_embeddings = 1;
    json = target_config_to_json(&c);
    CHECK(target_config_parse(&d, json, "roundtrip") == 0);
    CHECK(memcmp(&c, &d, sizeof c) == 0);
    free(json);

    // target_config_load reads DIR/config.json and names the path in its errors.
    const char *dir = test_path("qwen3");
    CHECK(mkdir(dir, 0755) == 0);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(test_write_file(path, qwen3_8b_json, strlen(qwen3_8b_json)) == 0);
    CHECK(target_config_load(&c, dir) == 0 && c.n_layers == 36);
    const char *bad = with(qwen3_8b_json, "\"attention_bias\": false", "\"attention_bias\": true");
    CHECK(test_write_file(path, bad, strlen(bad)) == 0);
    CHECK_ERR(target_config_load(&c, dir), path);
    CHECK_ERR(target_config_load(&c, dir), "'attention_bias' is true");
    CHECK_ERR(target_config_load(&c, test_path("nowhere")), "nowhere/config.json");
}

static void test_layer_ids(void) {
    int64_t ids[8];
    CHECK(target_default_layer_ids(36, 5, ids) == 0); // Qwen3-8B, SPEC §2
    CHECK(ids[0] == 1 && ids[1] == 9 && ids[2] == 17 && ids[3] == 25 && ids[4] == 33);
    // Python: [int(round(1 + i*(L-4)/(n-1))) for i in range(n)], round half to even.
    CHECK(target_default_layer_ids(32, 5, ids) == 0); // 1, 8, 15, 22, 29
    CHECK(ids[0] == 1 && ids[1] == 8 && ids[2] == 15 && ids[3] == 22 && ids[4] == 29);
    CHECK(target_default_layer_ids(28, 5, ids) == 0); // 1, 7, 13, 19, 25
    CHECK(ids[0] == 1 && ids[1] == 7 && ids[2] == 13 && ids[3] == 19 && ids[4] == 25);
    CHECK(target_default_layer_ids(64, 5, ids) == 0); // 1, 16, 31, 46, 61
    CHECK(ids[0] == 1 && ids[1] == 16 && ids[2] == 31 && ids[3] == 46 && ids[4] == 61);
    CHECK(target_default_layer_ids(30, 5, ids) == 0); // 1, 7.5 -> 8, 14, 20.5 -> 20, 27
    CHECK(ids[0] == 1 && ids[1] == 8 && ids[2] == 14 && ids[3] == 20 && ids[4] == 27);
    CHECK(target_default_layer_ids(9, 3, ids) == 0); // 1, 3.5 -> 4, 6
    CHECK(ids[0] == 1 && ids[1] == 4 && ids[2] == 6);
    CHECK(target_default_layer_ids(36, 1, ids) == 0 && ids[0] == 18);
    CHECK(target_default_layer_ids(35, 1, ids) == 0 && ids[0] == 17);
    CHECK(target_default_layer_ids(4, 2, ids) == 0 && ids[0] == 1 && ids[1] == 1); // repeats, as in dflash
    CHECK_ERR(target_default_layer_ids(2, 5, ids), "layer -1 for a 2-layer target");
    CHECK_ERR(target_default_layer_ids(36, 0, ids), "at least one");
}

static void test_refusals(void) {
    target_config c;
    const char *q = qwen3_8b_json, *l = llama31_8b_json;
    CHECK_ERR(parse(&c, with(q, "Qwen3ForCausalLM", "MistralForCausalLM")), "'architectures' is [\"MistralForCausalLM\"]");
    CHECK_ERR(parse(&c, with(q, "[\"Qwen3ForCausalLM\"]", "[\"Qwen3ForCausalLM\", \"X\"]")), "exactly one");
    CHECK_ERR(parse(&c, with(q, "[\"Qwen3ForCausalLM\"]", "\"Qwen3ForCausalLM\"")), "'architectures' wants a list");
    CHECK_ERR(parse(&c, with(q, "\"qwen3\"", "\"llama\"")), "'model_type' is \"llama\"");
    CHECK_ERR(parse(&c, "{\"hidden_size\": 8}"), "missing 'architectures'");
    CHECK_ERR(parse(&c, with(q, "\"hidden_size\": 4096,", "")), "m/config.json: missing 'hidden_size'");
    CHECK_ERR(parse(&c, with(q, "\"vocab_size\": 151936", "\"vocab_size\": 0")), "'vocab_size' must be positive");
    CHECK_ERR(parse(&c, with(q, "\"hidden_size\": 4096", "\"hidden_size\": \"4096\"")),
              "'hidden_size' wants an integer, got \"4096\"");
    CHECK_ERR(parse(&c, with(q, "\"hidden_size\": 4096", "\"hidden_size\": 4096.5")), "'hidden_size' wants an integer");
    CHECK_ERR(parse(&c, with(q, "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": \"small\"")), "'rms_norm_eps' wants a number");
    CHECK_ERR(parse(&c, with(q, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 0")),
              "'tie_word_embeddings' wants true or false, got 0");
    CHECK_ERR(parse(&c, with(q, "\"attention_bias\": false", "\"attention_bias\": true")),
              "m/config.json: 'attention_bias' is true");
    CHECK_ERR(parse(&c, with(l, "\"mlp_bias\": false", "\"mlp_bias\": true")), "'mlp_bias' is true");
    CHECK_ERR(parse(&c, with(q, "\"use_sliding_window\": false", "\"use_sliding_window\": true")),
              "'use_sliding_window' is true");
    CHECK_ERR(parse(&c, with(q, "\"sliding_window\": null", "\"layer_types\": [\"full_attention\", \"sliding_attention\"]")),
              "'layer_types[1]' is \"sliding_attention\"");
    CHECK_ERR(parse(&c, with(q, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"")), "'hidden_act' is \"gelu\"");
    CHECK_ERR(parse(&c, with(l, "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"")),
              "'rope_scaling.rope_type' is \"yarn\"");
    CHECK_ERR(parse(&c, with(l, "\"rope_type\": \"llama3\"", "\"type\": \"dynamic\"")), "'rope_scaling.type' is \"dynamic\"");
    CHECK_ERR(parse(&c, with(l, "\"factor\": 8.0,", "")), "missing 'rope_scaling.factor'");
    CHECK_ERR(parse(&c, with(l, "\"high_freq_factor\": 4.0", "\"high_freq_factor\": 1.0")), "low_freq_factor < high_freq_factor");
    CHECK_ERR(parse(&c, with(l, "\"factor\": 8.0", "\"factor\": \"8\"")), "'rope_scaling.factor' wants a number");
    CHECK_ERR(parse(&c, with(q, "\"rope_scaling\": null", "\"rope_scaling\": 3")), "'rope_scaling' wants an object");
    CHECK_ERR(parse(&c, with(q, "\"rope_scaling\": null", "\"partial_rotary_factor\": 0.5")), "'partial_rotary_factor' is 0.5");
    CHECK_ERR(parse(&c, with(q, "\"rope_theta\": 1000000", "\"rope_theta\": 0")), "'rope_theta' must be");
    // Llama without head_dim: heads must divide hidden.
    CHECK_ERR(parse(&c, with(l, "\"hidden_size\": 4096", "\"hidden_size\": 4100")),
              "'hidden_size' 4100 is not a multiple of 'num_attention_heads' 32");
    CHECK(parse(&c, with(l, "\"hidden_size\": 4096", "\"head_dim\": 100, \"hidden_size\": 4000")) == 0 && c.head_dim == 100);
    CHECK_ERR(parse(&c, with(q, "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5")),
              "'num_key_value_heads' 5 does not divide 'num_attention_heads' 32");
    CHECK_ERR(parse(&c, with(q, "\"head_dim\": 128", "\"head_dim\": 127")), "'head_dim' must be positive and even");
    CHECK_ERR(parse(&c, "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 8,}"), "m/config.json: not valid JSON");
    CHECK_ERR(parse(&c, "[1]"), "must be a JSON object");
    // What Python's json would take silently: a key twice (the last one wins there), a NUL that cuts a string.
    CHECK_ERR(parse(&c, with(q, "\"hidden_size\": 4096", "\"hidden_size\": 4096, \"hidden_size\": 8")),
              "m/config.json: key 'hidden_size' is given twice");
    CHECK_ERR(parse(&c, with(l, "\"factor\": 8.0", "\"factor\": 8.0, \"factor\": 2.0")), "key 'rope_scaling.factor' is given twice");
    CHECK_ERR(parse(&c, with(q, "\"Qwen3ForCausalLM\"", "\"Qwen3ForCausalLM\\u0000Mistral\"")),
              "m/config.json: key 'architectures' holds a NUL character");
    CHECK_ERR(parse(&c, with(l, "\"rope_type\": \"llama3\"", "\"rope_type\": \"llama3\\u0000x\"")),
              "key 'rope_scaling.rope_type' holds a NUL");
    CHECK(parse(&c, with(q, "\"Qwen3ForCausalLM\"", "\"Qwen3ForCausalLM\\u0041\"")) < 0); // another escape: not a NUL
    CHECK(!strstr(error_msg(), "NUL"));
}

int main(void) {
    test_real_configs();
    test_defaults();
    test_roundtrip_and_load();
    test_layer_ids();
    test_refusals();
    return test_finish("test_target_config");
}
