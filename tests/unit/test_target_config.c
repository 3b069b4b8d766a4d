// test_target_config.c: reading a target's config.json (real Qwen3-8B and Llama-3.1-8B files,
// defaults, both RoPE spellings; the Qwen3.5 hybrid in both layouts; the MoE targets, Qwen3-MoE and
// Qwen3.5-MoE in both layouts), writing one back, RoPE inverse
// frequencies against transformers, the default feature layers against z-lab dflash, and every
// refusal naming its field.
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
    // Qwen3 without head_dim or num_key_value_heads: an error naming the key, never Qwen3Config's
    // defaults (128 and 32, a published model's: issue 27 item 8); null kv heads: one per query head.
    const char *qwen3 = "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                        " \"intermediate_size\": 96, \"num_attention_heads\": 4, \"num_key_value_heads\": null,"
                        " \"vocab_size\": 307, \"tie_word_embeddings\": true}";
    CHECK_ERR(parse(&c, qwen3), "missing 'head_dim' (a structural key; Qwen3ForCausalLM has no hidden_size / heads rule)");
    char qwen3_hd[1024];
    snprintf(qwen3_hd, sizeof qwen3_hd, "%s", with(qwen3, "\"vocab_size\": 307", "\"vocab_size\": 307, \"head_dim\": 16"));
    CHECK(parse(&c, qwen3_hd) == 0);
    CHECK(c.arch == ARCH_QWEN3 && strcmp(c.arch_name, "Qwen3ForCausalLM") == 0); // from model_type
    CHECK(c.head_dim == 16 && c.n_kv_heads == 4 && c.max_positions == 32768 && c.tie_embeddings == 1);
    CHECK_ERR(parse(&c, with(qwen3_hd, " \"num_key_value_heads\": null,", "")), "missing 'num_key_value_heads'");

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

// A Qwen3.5 config.json in the layout of the published checkpoints (Qwen3_5ForConditionalGeneration:
// the text model's keys under text_config, rope_parameters with the mrope keys, a vision_config);
// the sizes are those of a 27B-class model.
static const char *qwen35_vl_json =
    "{\n"
    "  \"architectures\": [\"Qwen3_5ForConditionalGeneration\"],\n"
    "  \"model_type\": \"qwen3_5\",\n"
    "  \"image_token_id\": 248056,\n"
    "  \"video_token_id\": 248057,\n"
    "  \"vision_start_token_id\": 248053,\n"
    "  \"vision_end_token_id\": 248054,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"text_config\": {\n"
    "    \"model_type\": \"qwen3_5_text\",\n"
    "    \"attention_bias\": false,\n"
    "    \"attention_dropout\": 0.0,\n"
    "    \"dtype\": \"bfloat16\",\n"
    "    \"eos_token_id\": 248044,\n"
    "    \"full_attention_interval\": 4,\n"
    "    \"head_dim\": 256,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"hidden_size\": 5120,\n"
    "    \"initializer_range\": 0.02,\n"
    "    \"intermediate_size\": 17408,\n"
    "    \"linear_conv_kernel_dim\": 4,\n"
    "    \"linear_key_head_dim\": 128,\n"
    "    \"linear_num_key_heads\": 16,\n"
    "    \"linear_num_value_heads\": 48,\n"
    "    \"linear_value_head_dim\": 128,\n"
    "    \"max_position_embeddings\": 262144,\n"
    "    \"mtp_num_hidden_layers\": 1,\n"
    "    \"num_attention_heads\": 24,\n"
    "    \"num_hidden_layers\": 64,\n"
    "    \"num_key_value_heads\": 4,\n"
    "    \"rms_norm_eps\": 1e-06,\n"
    "    \"rope_parameters\": {\n"
    "      \"mrope_interleaved\": true,\n"
    "      \"mrope_section\": [11, 11, 10],\n"
    "      \"rope_type\": \"default\",\n"
    "      \"rope_theta\": 10000000,\n"
    "      \"partial_rotary_factor\": 0.25\n"
    "    },\n"
    "    \"tie_word_embeddings\": true,\n"
    "    \"use_cache\": true,\n"
    "    \"vocab_size\": 248320\n"
    "  },\n"
    "  \"vision_config\": {\n"
    "    \"model_type\": \"qwen3_5_vision\",\n"
    "    \"depth\": 27, \"hidden_size\": 1152, \"hidden_act\": \"gelu_pytorch_tanh\", \"intermediate_size\": 4304,\n"
    "    \"num_heads\": 16, \"in_channels\": 3, \"patch_size\": 16, \"spatial_merge_size\": 2,\n"
    "    \"temporal_patch_size\": 2, \"out_hidden_size\": 5120, \"num_position_embeddings\": 2304\n"
    "  },\n"
    "  \"torch_dtype\": \"bfloat16\"\n"
    "}\n";

// The text-only layout (Qwen3_5ForCausalLM): keys at the top, explicit layer_types ending in a
// linear layer, tied.
static const char *qwen35_text_json =
    "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\", \"hidden_size\": 48,"
    " \"num_hidden_layers\": 4, \"intermediate_size\": 72, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 24, \"vocab_size\": 173, \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 6,"
    " \"linear_key_head_dim\": 12, \"linear_value_head_dim\": 20, \"linear_conv_kernel_dim\": 3,"
    " \"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\", \"linear_attention\"],"
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0, \"partial_rotary_factor\": 0.25},"
    " \"tie_word_embeddings\": true}";

// transformers 5.24: Qwen3_5TextRotaryEmbedding.compute_default_rope_parameters(Qwen3_5TextConfig(
//   head_dim=24, rope_parameters={rope_type default, rope_theta 1e6, partial_rotary_factor 0.25}))
static const float qwen35_tiny_inv_freq[3] = {1, 0.00999999885f, 9.99999684e-05f};

static void test_hybrid(void) {
    target_config c;
    CHECK(parse(&c, qwen35_vl_json) == 0);
    CHECK(c.arch == ARCH_QWEN3_5 && strcmp(c.arch_name, "Qwen3_5ForConditionalGeneration") == 0);
    CHECK(c.multimodal == 1 && strcmp(target_tensor_prefix(&c), "model.language_model.") == 0);
    CHECK(c.n_layers == 64 && c.hidden == 5120 && c.intermediate == 17408 && c.vocab == 248320);
    CHECK(c.n_heads == 24 && c.n_kv_heads == 4 && c.head_dim == 256 && c.max_positions == 262144);
    CHECK(c.norm_zero_centred == 1 && c.gated_attention == 1);
    CHECK(c.lin_k_heads == 16 && c.lin_v_heads == 48 && c.lin_k_dim == 128 && c.lin_v_dim == 128);
    CHECK(c.lin_conv_kernel == 4 && c.full_interval == 4);
    CHECK_CLOSE(c.partial_rotary, 0.25, 0);
    CHECK(c.rope_dim == 64);
    CHECK_CLOSE(c.rope_theta, 1e7, 0);
    CHECK(c.rope_llama3 == 0);
    int n_lin = 0;
    for (int64_t i = 0; i < c.n_layers; i++) {
        CHECK_MSG(target_layer_is_linear(&c, i) == ((i + 1) % 4 != 0), "layer %lld", (long long)i);
        n_lin += target_layer_is_linear(&c, i);
    }
    CHECK(n_lin == 48);
    // The wrapper ties on its own top-level key; text_config's (true here) is not read.
    CHECK(c.tie_embeddings == 0);
    CHECK(parse(&c, with(qwen35_vl_json, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true")) == 0);
    CHECK(c.tie_embeddings == 1);
    CHECK(parse(&c, with(qwen35_vl_json, "\"tie_word_embeddings\": false,", "")) == 0);
    CHECK(c.tie_embeddings == 0); // absent: Qwen3_5Config's default false
    CHECK(strcmp(c.torch_dtype, "bfloat16") == 0);

    // Text-only, explicit layer types: the last layer is linear; tied on its own key.
    CHECK(parse(&c, qwen35_text_json) == 0);
    CHECK(c.arch == ARCH_QWEN3_5 && strcmp(c.arch_name, "Qwen3_5ForCausalLM") == 0 && c.multimodal == 0);
    CHECK(strcmp(target_tensor_prefix(&c), "model.") == 0);
    CHECK(c.full_interval == 0 && c.tie_embeddings == 1);
    CHECK(target_layer_is_linear(&c, 0) && !target_layer_is_linear(&c, 1) && target_layer_is_linear(&c, 2) &&
          target_layer_is_linear(&c, 3));
    CHECK(c.lin_k_heads == 2 && c.lin_v_heads == 6 && c.lin_k_dim == 12 && c.lin_v_dim == 20 && c.lin_conv_kernel == 3);
    CHECK(c.rope_dim == 6);
    check_inv_freq(&c, qwen35_tiny_inv_freq, 3);
    // layer_types wins over full_attention_interval when both are given (Qwen3_5TextConfig reads the list).
    CHECK(parse(&c, with(qwen35_text_json, "\"layer_types\"", "\"full_attention_interval\": 2, \"layer_types\"")) == 0);
    CHECK(c.full_interval == 0 && target_layer_is_linear(&c, 3));
    // partial_rotary_factor at the top level (the legacy spelling) counts too.
    CHECK(parse(&c, with(qwen35_text_json, ", \"partial_rotary_factor\": 0.25}", "}, \"partial_rotary_factor\": 0.5")) == 0);
    CHECK(c.rope_dim == 12);
    // A Qwen3_5ForCausalLM is not a target of the other families: the target_layer_is_linear of a Qwen3 is 0.
    target_config q;
    CHECK(parse(&q, qwen3_8b_json) == 0);
    CHECK(!target_layer_is_linear(&q, 0) && q.rope_dim == 128 && q.norm_zero_centred == 0 && q.lin_k_heads == 0);
    CHECK_CLOSE(q.partial_rotary, 1.0, 0);
}

static void test_hybrid_defaults(void) {
    target_config c;
    // Qwen3_5TextConfig's defaults for the non-structural keys: partial 0.25, full attention every
    // 4th layer, untied; from model_type alone. head_dim and the Gated DeltaNet's shape are required
    // (never the class's 256 and 16/32 x 128/128, kernel 4: issue 27 item 8).
    const char *min = "{\"model_type\": \"qwen3_5_text\", \"hidden_size\": 64, \"num_hidden_layers\": 6,"
                      " \"intermediate_size\": 96, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                      " \"head_dim\": 256, \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 32,"
                      " \"linear_key_head_dim\": 128, \"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4,"
                      " \"vocab_size\": 300}";
    static const char *const structural[] = {"\"head_dim\": 256, ", "\"linear_num_key_heads\": 16, ",
                                             "\"linear_num_value_heads\": 32, ", "\"linear_key_head_dim\": 128, ",
                                             "\"linear_value_head_dim\": 128, ", "\"linear_conv_kernel_dim\": 4,"};
    for (int i = 0; i < 6; i++) {
        char key[64];
        snprintf(key, sizeof key, "missing '%.*s'", (int)(strchr(structural[i] + 1, '"') - structural[i] - 1),
                 structural[i] + 1);
        CHECK_ERR(parse(&c, with(min, structural[i], "")), key);
    }
    CHECK(parse(&c, min) == 0);
    CHECK(c.arch == ARCH_QWEN3_5 && strcmp(c.arch_name, "Qwen3_5ForCausalLM") == 0 && c.multimodal == 0);
    CHECK(c.head_dim == 256 && c.rope_dim == 64 && c.max_positions == 32768 && c.tie_embeddings == 0);
    CHECK_CLOSE(c.partial_rotary, 0.25, 0);
    CHECK_CLOSE(c.rope_theta, 10000, 0);
    CHECK_CLOSE(c.rms_eps, 1e-6, 0);
    CHECK(c.lin_k_heads == 16 && c.lin_v_heads == 32 && c.lin_k_dim == 128 && c.lin_v_dim == 128);
    CHECK(c.lin_conv_kernel == 4 && c.full_interval == 4);
    // transformers: ['linear', 'linear', 'linear', 'full', 'linear', 'linear'] for 6 layers.
    static const int want[6] = {1, 1, 1, 0, 1, 1};
    for (int i = 0; i < 6; i++) CHECK_MSG(target_layer_is_linear(&c, i) == want[i], "layer %d", i);
    // The wrapper from model_type alone, with its keys under text_config.
    char buf[2048];
    snprintf(buf, sizeof buf, "{\"model_type\": \"qwen3_5\", \"tie_word_embeddings\": true, \"text_config\": %s}", min);
    CHECK(parse(&c, buf) == 0);
    CHECK(c.multimodal == 1 && strcmp(c.arch_name, "Qwen3_5ForConditionalGeneration") == 0 && c.tie_embeddings == 1);
    CHECK(c.head_dim == 256 && c.full_interval == 4);
    // full_attention_interval 1: every layer full; larger than L: every layer linear.
    CHECK(parse(&c, with(min, "\"vocab_size\": 300", "\"vocab_size\": 300, \"full_attention_interval\": 1")) == 0);
    for (int i = 0; i < 6; i++) CHECK(!target_layer_is_linear(&c, i));
    CHECK(parse(&c, with(min, "\"vocab_size\": 300", "\"vocab_size\": 300, \"full_attention_interval\": 7")) == 0);
    for (int i = 0; i < 6; i++) CHECK(target_layer_is_linear(&c, i));
}

static void test_hybrid_refusals(void) {
    target_config c;
    const char *t = qwen35_text_json, *w = qwen35_vl_json;
    CHECK_ERR(parse(&c, with(t, "\"linear_num_value_heads\": 6", "\"linear_num_value_heads\": 5")),
              "m/config.json: 'linear_num_value_heads' 5 is not a multiple of 'linear_num_key_heads' 2");
    CHECK_ERR(parse(&c, with(w, "\"linear_num_value_heads\": 48", "\"linear_num_value_heads\": 40")),
              "m/config.json: text_config: 'linear_num_value_heads' 40 is not a multiple of 'linear_num_key_heads' 16");
    CHECK_ERR(parse(&c, with(t, "\"linear_key_head_dim\": 12", "\"linear_key_head_dim\": 0")),
              "'linear_key_head_dim' must be positive, got 0");
    CHECK_ERR(parse(&c, with(t, "\"linear_conv_kernel_dim\": 3", "\"linear_conv_kernel_dim\": 3.5")),
              "'linear_conv_kernel_dim' wants an integer");
    CHECK_ERR(parse(&c, with(t, "\"linear_conv_kernel_dim\": 3", "\"linear_conv_kernel_dim\": 65")),
              "'linear_conv_kernel_dim' 65 is over 64");
    CHECK_ERR(parse(&c, with(t, "\"linear_attention\", \"linear_attention\"]", "\"linear_attention\"]")),
              "'layer_types' has 3 entries for 4 layers ('num_hidden_layers')");
    CHECK_ERR(parse(&c, with(t, "\"full_attention\"", "\"mamba\"")), "'layer_types[1]' is \"mamba\"");
    CHECK_ERR(parse(&c, with(t, "\"full_attention\"", "\"sliding_attention\"")), "'layer_types[1]' is \"sliding_attention\"");
    CHECK_ERR(parse(&c, with(t, "\"full_attention\"", "3")), "'layer_types[1]' is 3");
    CHECK_ERR(parse(&c, with(t, "\"layer_types\": [\"linear_attention\", ", "\"layer_types\": \"linear_attention\", \"x\": [")),
              "'layer_types' wants a list, got \"linear_attention\"");
    CHECK_ERR(parse(&c, with(w, "\"full_attention_interval\": 4", "\"full_attention_interval\": 0")),
              "text_config: 'full_attention_interval' must be positive, got 0");
    CHECK_ERR(parse(&c, with(w, "\"num_hidden_layers\": 64", "\"num_hidden_layers\": 2000")),
              "'num_hidden_layers' 2000 is over the 1024");
    // rope dims: int(head_dim * factor) must be even and >= 2.
    CHECK_ERR(parse(&c, with(t, "\"head_dim\": 24", "\"head_dim\": 20")), "'partial_rotary_factor' 0.25 gives 5 rotary dims");
    CHECK_ERR(parse(&c, with(t, "\"partial_rotary_factor\": 0.25", "\"partial_rotary_factor\": 0")),
              "'partial_rotary_factor' 0 gives 0 rotary dims");
    CHECK_ERR(parse(&c, with(t, "\"partial_rotary_factor\": 0.25", "\"partial_rotary_factor\": 1.5")),
              "'partial_rotary_factor' 1.5 gives");
    // The layouts: a wrapper needs text_config; model_type and architectures must agree.
    CHECK_ERR(parse(&c, "{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"hidden_size\": 8}"),
              "Qwen3_5ForConditionalGeneration needs a 'text_config' object");
    CHECK_ERR(parse(&c, with(w, "\"text_config\": {", "\"text_config\": 3, \"x\": {")), "needs a 'text_config' object");
    CHECK_ERR(parse(&c, with(w, "\"model_type\": \"qwen3_5\"", "\"model_type\": \"qwen3_5_text\"")),
              "'model_type' is \"qwen3_5_text\" but 'architectures' is [\"Qwen3_5ForConditionalGeneration\"]");
    CHECK_ERR(parse(&c, with(t, "\"model_type\": \"qwen3_5_text\"", "\"model_type\": \"qwen3_5\"")),
              "(expected model_type \"qwen3_5_text\")");
    CHECK_ERR(parse(&c, with(t, "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")), "'architectures' is [\"Qwen3_5MoeForCausalLM\"]");
    CHECK_ERR(parse(&c, with(w, "\"attention_bias\": false", "\"attention_bias\": true")), "text_config: 'attention_bias' is true");
    CHECK_ERR(parse(&c, with(w, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": \"no\"")),
              "'tie_word_embeddings' wants true or false");
    CHECK_ERR(parse(&c, with(w, "\"rope_type\": \"default\"", "\"rope_type\": \"dynamic\"")), "'rope_parameters.rope_type' is \"dynamic\"");
    CHECK_ERR(parse(&c, with(w, "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"")), "missing 'rope_parameters.factor' (required by rope type yarn)");
    CHECK_ERR(parse(&c, with(w, "\"head_dim\": 256", "\"head_dim\": 256, \"head_dim\": 128")),
              "key 'text_config.head_dim' is given twice");
}

// hybrid_roundtrip: target_config_to_json of c parses back to c, field for field.
static void hybrid_roundtrip(const target_config *c, const char *layout) {
    target_config d;
    char *json = target_config_to_json(c);
    CHECK_MSG(target_config_parse(&d, json, "roundtrip") == 0, "%s: %s", layout, error_msg());
    CHECK_MSG(memcmp(c, &d, sizeof d) == 0, "%s: the round trip changed the config", layout);
    free(json);
}

static void test_hybrid_roundtrip(void) {
    target_config c;
    CHECK(parse(&c, qwen35_vl_json) == 0);
    hybrid_roundtrip(&c, "wrapper, derived layer types");
    char *json = target_config_to_json(&c);
    CHECK(strstr(json, "\"Qwen3_5ForConditionalGeneration\"") && strstr(json, "\"text_config\"") &&
          strstr(json, "\"vision_config\"") && strstr(json, "\"full_attention_interval\":\t4") &&
          !strstr(json, "\"layer_types\""));
    free(json);
    c.tie_embeddings = 1;
    hybrid_roundtrip(&c, "wrapper, tied");
    CHECK(parse(&c, qwen35_text_json) == 0);
    hybrid_roundtrip(&c, "text-only, explicit layer types");
    json = target_config_to_json(&c);
    CHECK(strstr(json, "\"Qwen3_5ForCausalLM\"") && strstr(json, "\"layer_types\"") && !strstr(json, "\"text_config\"") &&
          !strstr(json, "\"full_attention_interval\"") && strstr(json, "\"partial_rotary_factor\":\t0.25"));
    free(json);
    // A derived pattern written as an explicit list reads back as the same layers.
    CHECK(parse(&c, qwen35_vl_json) == 0);
    c.full_interval = 0;
    c.multimodal = 0;
    memset(c.arch_name, 0, sizeof c.arch_name); // the parse leaves zeros after the name
    snprintf(c.arch_name, sizeof c.arch_name, "Qwen3_5ForCausalLM");
    hybrid_roundtrip(&c, "text-only, the derived pattern as a list");
}

// ---------------------------------------------------------------- mixture of experts (SPEC §2.2)

// Qwen/Qwen3-30B-A3B config.json as published on the Hugging Face hub.
static const char *qwen3_30b_a3b_json =
    "{\n"
    "  \"architectures\": [\"Qwen3MoeForCausalLM\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n"
    "  \"decoder_sparse_step\": 1,\n"
    "  \"eos_token_id\": 151645,\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 2048,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 6144,\n"
    "  \"max_position_embeddings\": 40960,\n"
    "  \"max_window_layers\": 48,\n"
    "  \"mlp_only_layers\": [],\n"
    "  \"model_type\": \"qwen3_moe\",\n"
    "  \"moe_intermediate_size\": 768,\n"
    "  \"norm_topk_prob\": true,\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_experts\": 128,\n"
    "  \"num_experts_per_tok\": 8,\n"
    "  \"num_hidden_layers\": 48,\n"
    "  \"num_key_value_heads\": 4,\n"
    "  \"output_router_logits\": false,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000.0,\n"
    "  \"router_aux_loss_coef\": 0.001,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.51.0\",\n"
    "  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n"
    "  \"vocab_size\": 151936\n"
    "}\n";

// edits: json with each pair {from, to} of the NULL-terminated list replaced in turn (first
// occurrence each; static buffer, so with() can take the result).
static const char *edits(const char *json, const char *const *pairs) {
    static char a[8192], b[8192];
    char *src = a, *dst = b;
    snprintf(src, sizeof a, "%s", json);
    for (const char *const *p = pairs; p[0]; p += 2) {
        const char *at = strstr(src, p[0]);
        if (!at) {
            fprintf(stderr, "test bug: '%s' not in the config\n", p[0]);
            exit(1);
        }
        snprintf(dst, sizeof a, "%.*s%s%s", (int)(at - src), src, p[1], at + strlen(p[0]));
        char *t = src;
        src = dst, dst = t;
    }
    return src;
}

// qwen35moe_vl: the Qwen3.5 wrapper above made a Qwen3_5MoeForConditionalGeneration of the
// Qwen3.5-35B-A3B kind (no intermediate_size: every MLP is sparse).
static const char *qwen35moe_vl(void) {
    static const char *const pairs[] = {
        "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
        "\"model_type\": \"qwen3_5\"", "\"model_type\": \"qwen3_5_moe\"",
        "\"model_type\": \"qwen3_5_text\"", "\"model_type\": \"qwen3_5_moe_text\"",
        "\"intermediate_size\": 17408,", "\"moe_intermediate_size\": 512, \"shared_expert_intermediate_size\": 512,"
                                       " \"num_experts\": 256, \"num_experts_per_tok\": 8,",
        "\"num_hidden_layers\": 64", "\"num_hidden_layers\": 40",
        "\"hidden_size\": 5120", "\"hidden_size\": 2048",
        "\"qwen3_5_vision\"", "\"qwen3_5_moe_vision\"",
        NULL};
    return edits(qwen35_vl_json, pairs);
}

// The text-only Qwen3_5MoeForCausalLM: 10 experts, top 3, a shared expert of 40.
static const char *qwen35moe_text_json =
    "{\"architectures\": [\"Qwen3_5MoeForCausalLM\"], \"model_type\": \"qwen3_5_moe_text\", \"hidden_size\": 48,"
    " \"num_hidden_layers\": 4, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 24,"
    " \"vocab_size\": 173, \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 6, \"linear_key_head_dim\": 12,"
    " \"linear_value_head_dim\": 20, \"linear_conv_kernel_dim\": 3, \"num_experts\": 10, \"num_experts_per_tok\": 3,"
    " \"moe_intermediate_size\": 20, \"shared_expert_intermediate_size\": 40,"
    " \"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\", \"linear_attention\"],"
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0, \"partial_rotary_factor\": 0.25},"
    " \"tie_word_embeddings\": false}";

static void test_moe(void) {
    target_config c;
    // Qwen3-30B-A3B: Qwen3 attention, every layer sparse (step 1, no mlp-only layers), renormalised.
    CHECK(parse(&c, qwen3_30b_a3b_json) == 0);
    CHECK(c.arch == ARCH_QWEN3 && c.moe == 1 && c.multimodal == 0 && strcmp(c.arch_name, "Qwen3MoeForCausalLM") == 0);
    CHECK(strcmp(target_tensor_prefix(&c), "model.") == 0);
    CHECK(c.n_layers == 48 && c.hidden == 2048 && c.intermediate == 6144 && c.vocab == 151936);
    CHECK(c.n_heads == 32 && c.n_kv_heads == 4 && c.head_dim == 128 && c.rope_dim == 128);
    CHECK(c.n_experts == 128 && c.n_experts_tok == 8 && c.moe_intermediate == 768 && c.shared_intermediate == 0);
    CHECK(c.norm_topk_prob == 1 && c.sparse_step == 1);
    CHECK(c.norm_zero_centred == 0 && c.gated_attention == 0 && !target_layer_is_linear(&c, 0));
    for (int64_t i = 0; i < c.n_layers; i++) CHECK_MSG(target_layer_is_sparse(&c, i), "layer %lld", (long long)i);
    CHECK_CLOSE(c.rope_theta, 1e6, 0);
    check_inv_freq(&c, qwen3_inv_freq, 64); // theta 1e6, head 128: Qwen3-8B's
    // transformers' Qwen3MoeDecoderLayer: sparse iff i not in mlp_only_layers and (i+1) % step == 0.
    CHECK(parse(&c, edits(qwen3_30b_a3b_json, (const char *const[]){"\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2",
                                                                     "\"mlp_only_layers\": []", "\"mlp_only_layers\": [1, 4, 7]",
                                                                     "\"num_hidden_layers\": 48", "\"num_hidden_layers\": 8", NULL})) == 0);
    static const int want8[8] = {0, 0, 0, 1, 0, 1, 0, 0}; // 1, 3, 5, 7 by the step, less 1 and 7 (4 is dense anyway)
    for (int i = 0; i < 8; i++) CHECK_MSG(target_layer_is_sparse(&c, i) == want8[i], "layer %d", i);
    CHECK(c.sparse_step == 2);
    CHECK(parse(&c, with(qwen3_30b_a3b_json, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 3")) == 0);
    for (int i = 0; i < 48; i++) CHECK_MSG(target_layer_is_sparse(&c, i) == ((i + 1) % 3 == 0), "step 3, layer %d", i);
    // a step over L: no sparse layer; mlp_only_layers null counts as absent, duplicates are harmless
    CHECK(parse(&c, with(qwen3_30b_a3b_json, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 49")) == 0);
    for (int i = 0; i < 48; i++) CHECK(!target_layer_is_sparse(&c, i));
    CHECK(parse(&c, with(qwen3_30b_a3b_json, "\"mlp_only_layers\": []", "\"mlp_only_layers\": null")) == 0);
    CHECK(target_layer_is_sparse(&c, 0) && target_layer_is_sparse(&c, 47));
    CHECK(parse(&c, with(qwen3_30b_a3b_json, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 0, 47]")) == 0);
    CHECK(!target_layer_is_sparse(&c, 0) && target_layer_is_sparse(&c, 1) && !target_layer_is_sparse(&c, 47));
    // A dense target is never sparse.
    target_config q;
    CHECK(parse(&q, qwen3_8b_json) == 0);
    CHECK(q.moe == 0 && q.n_experts == 0 && !target_layer_is_sparse(&q, 0));

    // Qwen3.5-MoE, the wrapper: the hybrid's layers, every MLP sparse, always renormalised, a shared expert.
    CHECK(parse(&c, qwen35moe_vl()) == 0);
    CHECK(c.arch == ARCH_QWEN3_5 && c.moe == 1 && c.multimodal == 1);
    CHECK(strcmp(c.arch_name, "Qwen3_5MoeForConditionalGeneration") == 0);
    CHECK(strcmp(target_tensor_prefix(&c), "model.language_model.") == 0);
    CHECK(c.n_layers == 40 && c.hidden == 2048 && c.intermediate == 0 && c.head_dim == 256 && c.rope_dim == 64);
    CHECK(c.n_experts == 256 && c.n_experts_tok == 8 && c.moe_intermediate == 512 && c.shared_intermediate == 512);
    CHECK(c.norm_topk_prob == 1 && c.sparse_step == 1 && c.norm_zero_centred == 1 && c.gated_attention == 1);
    for (int64_t i = 0; i < c.n_layers; i++) {
        CHECK_MSG(target_layer_is_sparse(&c, i), "layer %lld", (long long)i);
        CHECK_MSG(target_layer_is_linear(&c, i) == ((i + 1) % 4 != 0), "layer %lld", (long long)i);
    }
    // Qwen3_5MoeTextConfig has no norm_topk_prob, decoder_sparse_step or mlp_only_layers: its router
    // always renormalises and every decoder layer is sparse, whatever such keys say.
    CHECK(parse(&c, with(qwen35moe_text_json, "\"num_experts\": 10", "\"norm_topk_prob\": false, \"decoder_sparse_step\": 2,"
                                                                  " \"mlp_only_layers\": [0], \"num_experts\": 10")) == 0);
    CHECK(c.norm_topk_prob == 1 && c.sparse_step == 1);
    for (int i = 0; i < 4; i++) CHECK(target_layer_is_sparse(&c, i));
    // The text-only layout.
    CHECK(parse(&c, qwen35moe_text_json) == 0);
    CHECK(c.arch == ARCH_QWEN3_5 && c.moe == 1 && c.multimodal == 0 && strcmp(c.arch_name, "Qwen3_5MoeForCausalLM") == 0);
    CHECK(strcmp(target_tensor_prefix(&c), "model.") == 0);
    CHECK(c.n_experts == 10 && c.n_experts_tok == 3 && c.moe_intermediate == 20 && c.shared_intermediate == 40);
    CHECK(target_layer_is_linear(&c, 0) && !target_layer_is_linear(&c, 1) && target_layer_is_sparse(&c, 1));
    // An intermediate_size in a Qwen3.5-MoE config is not read (no dense MLP).
    CHECK(parse(&c, with(qwen35moe_text_json, "\"hidden_size\": 48", "\"hidden_size\": 48, \"intermediate_size\": 5")) == 0);
    CHECK(c.intermediate == 0);
}

static void test_moe_defaults(void) {
    target_config c;
    // Qwen3MoeConfig's defaults for the non-structural keys: not renormalised, step 1, no mlp-only
    // layers (every layer sparse); from model_type alone. Unlike Qwen3Config it has no
    // head_dim field: Qwen3MoeAttention takes getattr(config, "head_dim", hidden // heads), 64 / 4 here.
    // The expert count, top-k and width are structural: required (issue 27 item 8), never 128, 8, 768.
    const char *min = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 3,"
                      " \"intermediate_size\": 96, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                      " \"vocab_size\": 300, \"num_experts\": 10, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 24}";
    CHECK_ERR(parse(&c, with(min, " \"num_experts_per_tok\": 8,", "")), "missing 'num_experts_per_tok'");
    CHECK(parse(&c, min) == 0);
    CHECK(c.arch == ARCH_QWEN3 && c.moe == 1 && strcmp(c.arch_name, "Qwen3MoeForCausalLM") == 0);
    CHECK(c.n_experts == 10 && c.n_experts_tok == 8 && c.moe_intermediate == 24 && c.shared_intermediate == 0);
    CHECK(c.norm_topk_prob == 0 && c.sparse_step == 1 && c.tie_embeddings == 0 && c.max_positions == 32768);
    CHECK_MSG(c.head_dim == 16, "Qwen3-MoE without head_dim: head_dim %lld, transformers hidden/heads = 16",
              (long long)c.head_dim);
    for (int i = 0; i < 3; i++) CHECK(target_layer_is_sparse(&c, i));
    // Qwen3MoeConfig needs intermediate_size for its dense layers (it has a default; we want it said).
    CHECK_ERR(parse(&c, with(min, "\"intermediate_size\": 96,", "")), "missing 'intermediate_size'");
    // transformers 5 saves Qwen3MoeConfig.num_experts as num_local_experts (its attribute_map alias).
    CHECK(parse(&c, with(min, "\"num_experts\": 10", "\"num_local_experts\": 10")) == 0 && c.n_experts == 10);
    CHECK_ERR(parse(&c, with(min, "\"num_experts\": 10", "\"num_experts\": 10, \"num_local_experts\": 11")),
              "'num_experts' is 10 but 'num_local_experts' is 11");
    CHECK_ERR(parse(&c, with(min, "\"num_experts\": 10,", "")), "missing 'num_experts' (or 'num_local_experts')");
    CHECK_ERR(parse(&c, with(min, ", \"moe_intermediate_size\": 24", "")), "missing 'moe_intermediate_size'");
    CHECK_ERR(parse(&c, with(min, "\"num_experts\": 10", "\"num_experts\": 2147483648")),
              "'num_experts' 2147483648 is over the 65536 this build supports");
    // Qwen3_5MoeTextConfig's: full attention every 4th layer; the shared expert's width required.
    const char *min5 = "{\"model_type\": \"qwen3_5_moe_text\", \"hidden_size\": 64, \"num_hidden_layers\": 6,"
                       " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 300,"
                       " \"head_dim\": 256, \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 32,"
                       " \"linear_key_head_dim\": 128, \"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4,"
                       " \"num_experts\": 9, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 20,"
                       " \"shared_expert_intermediate_size\": 512}";
    CHECK_ERR(parse(&c, with(min5, ", \"shared_expert_intermediate_size\": 512", "")),
              "missing 'shared_expert_intermediate_size'");
    CHECK(parse(&c, min5) == 0);
    CHECK(c.arch == ARCH_QWEN3_5 && c.moe == 1 && c.multimodal == 0 && strcmp(c.arch_name, "Qwen3_5MoeForCausalLM") == 0);
    CHECK(c.n_experts == 9 && c.n_experts_tok == 8 && c.moe_intermediate == 20 && c.shared_intermediate == 512);
    CHECK(c.norm_topk_prob == 1 && c.head_dim == 256 && c.lin_k_heads == 16 && c.lin_v_heads == 32 && c.full_interval == 4);
    for (int i = 0; i < 6; i++) CHECK(target_layer_is_sparse(&c, i) && target_layer_is_linear(&c, i) == (i != 3));
    CHECK_ERR(parse(&c, with(min5, ", \"num_experts\": 9", "")), "missing 'num_experts' (or 'num_local_experts')");
    char buf[2048];
    snprintf(buf, sizeof buf, "{\"model_type\": \"qwen3_5_moe\", \"text_config\": %s}", min5);
    CHECK(parse(&c, buf) == 0);
    CHECK(c.multimodal == 1 && strcmp(c.arch_name, "Qwen3_5MoeForConditionalGeneration") == 0 && c.n_experts == 9);
}

static void test_moe_refusals(void) {
    target_config c;
    const char *q = qwen3_30b_a3b_json, *t = qwen35moe_text_json;
    CHECK_ERR(parse(&c, with(q, "\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 129")),
              "m/config.json: 'num_experts_per_tok' 129 is more than 'num_experts' 128");
    CHECK_ERR(parse(&c, with(t, "\"num_experts_per_tok\": 3", "\"num_experts_per_tok\": 11")),
              "'num_experts_per_tok' 11 is more than 'num_experts' 10");
    CHECK_ERR(parse(&c, with(q, "\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 65")),
              "'num_experts_per_tok' 65 is over 64");
    CHECK_ERR(parse(&c, with(q, "\"num_experts\": 128", "\"num_experts\": 0")), "'num_experts' must be positive, got 0");
    CHECK_ERR(parse(&c, with(q, "\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 0")),
              "'num_experts_per_tok' must be positive, got 0");
    CHECK_ERR(parse(&c, with(q, "\"moe_intermediate_size\": 768", "\"moe_intermediate_size\": \"768\"")),
              "'moe_intermediate_size' wants an integer, got \"768\"");
    CHECK_ERR(parse(&c, with(q, "\"num_experts\": 128", "\"num_experts\": 12.5")), "'num_experts' wants an integer");
    CHECK_ERR(parse(&c, with(q, "\"norm_topk_prob\": true", "\"norm_topk_prob\": 1")),
              "'norm_topk_prob' wants true or false, got 1");
    CHECK_ERR(parse(&c, with(q, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 0")),
              "'decoder_sparse_step' must be positive, got 0");
    CHECK_ERR(parse(&c, with(q, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": \"1\"")),
              "'decoder_sparse_step' wants an integer");
    CHECK_ERR(parse(&c, with(q, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [3, 48]")),
              "m/config.json: 'mlp_only_layers[1]' is 48: want a layer index in [0, 48)");
    CHECK_ERR(parse(&c, with(q, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [-1]")), "'mlp_only_layers[0]' is -1");
    CHECK_ERR(parse(&c, with(q, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [1.5]")), "'mlp_only_layers[0]' is 1.5");
    CHECK_ERR(parse(&c, with(q, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [\"2\"]")), "'mlp_only_layers[0]' is \"2\"");
    CHECK_ERR(parse(&c, with(q, "\"mlp_only_layers\": []", "\"mlp_only_layers\": 2")),
              "'mlp_only_layers' wants a list of layer indices, got 2");
    CHECK_ERR(parse(&c, with(q, "\"num_hidden_layers\": 48", "\"num_hidden_layers\": 2000")), "'num_hidden_layers' 2000 is over the 1024");
    CHECK_ERR(parse(&c, with(q, "\"model_type\": \"qwen3_moe\"", "\"model_type\": \"qwen3\"")),
              "'model_type' is \"qwen3\" but 'architectures' is [\"Qwen3MoeForCausalLM\"] (expected model_type \"qwen3_moe\")");
    CHECK_ERR(parse(&c, with(q, "\"use_sliding_window\": false", "\"use_sliding_window\": true")), "'use_sliding_window' is true");
    CHECK_ERR(parse(&c, with(q, "\"num_experts\": 128", "\"num_experts\": 128, \"num_experts\": 64")),
              "key 'num_experts' is given twice");
    // Qwen3.5-MoE: the shared expert's width, in both layouts (the wrapper's message says text_config).
    CHECK_ERR(parse(&c, with(t, "\"shared_expert_intermediate_size\": 40", "\"shared_expert_intermediate_size\": 0")),
              "m/config.json: 'shared_expert_intermediate_size' must be positive, got 0");
    CHECK_ERR(parse(&c, with(qwen35moe_vl(), "\"shared_expert_intermediate_size\": 512",
                             "\"shared_expert_intermediate_size\": -4")),
              "m/config.json: text_config: 'shared_expert_intermediate_size' must be positive, got -4");
    CHECK_ERR(parse(&c, with(qwen35moe_vl(), "\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 300")),
              "text_config: 'num_experts_per_tok' 300 is more than 'num_experts' 256");
    CHECK_ERR(parse(&c, with(t, "\"model_type\": \"qwen3_5_moe_text\"", "\"model_type\": \"qwen3_5_text\"")),
              "(expected model_type \"qwen3_5_moe_text\")");
    CHECK_ERR(parse(&c, with(qwen35moe_vl(), "\"model_type\": \"qwen3_5_moe\"", "\"model_type\": \"qwen3_5\"")),
              "'model_type' is \"qwen3_5\" but 'architectures' is [\"Qwen3_5MoeForConditionalGeneration\"]");
    CHECK_ERR(parse(&c, "{\"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"], \"hidden_size\": 8}"),
              "Qwen3_5MoeForConditionalGeneration needs a 'text_config' object");
    CHECK_ERR(parse(&c, "{\"model_type\": \"mixtral\", \"hidden_size\": 8}"), "qwen3_moe, qwen3_5_moe, qwen3_5_moe_text");
}

// moe_roundtrip: target_config_to_json of c parses back to c, field for field; the JSON has `want`
// and not `unwanted` (NULL: no check).
static void moe_roundtrip(const target_config *c, const char *what, const char *want, const char *unwanted) {
    target_config d;
    char *json = target_config_to_json(c);
    CHECK_MSG(target_config_parse(&d, json, "roundtrip") == 0, "%s: %s", what, error_msg());
    CHECK_MSG(memcmp(c, &d, sizeof d) == 0, "%s: the round trip changed the config", what);
    CHECK_MSG(!want || strstr(json, want), "%s: no %s in\n%s", what, want, json);
    CHECK_MSG(!unwanted || !strstr(json, unwanted), "%s: %s in\n%s", what, unwanted, json);
    free(json);
}

static void test_moe_roundtrip(void) {
    target_config c;
    CHECK(parse(&c, qwen3_30b_a3b_json) == 0);
    moe_roundtrip(&c, "Qwen3-30B-A3B", "\"norm_topk_prob\":\ttrue", "shared_expert");
    CHECK(parse(&c, edits(qwen3_30b_a3b_json, (const char *const[]){"\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2",
                                                                     "\"mlp_only_layers\": []", "\"mlp_only_layers\": [1, 4, 47]",
                                                                     "\"norm_topk_prob\": true", "\"norm_topk_prob\": false", NULL})) == 0);
    // 4 is dense by the step: only 1 and 47 need listing
    moe_roundtrip(&c, "Qwen3-MoE, step 2 + mlp_only_layers", "\"mlp_only_layers\":\t[1, 47]", NULL);
    c.tie_embeddings = 1;
    moe_roundtrip(&c, "Qwen3-MoE, tied", "\"decoder_sparse_step\":\t2", NULL);
    CHECK(parse(&c, qwen35moe_vl()) == 0);
    moe_roundtrip(&c, "Qwen3.5-MoE wrapper", "\"shared_expert_intermediate_size\":\t512", "norm_topk_prob");
    moe_roundtrip(&c, "Qwen3.5-MoE wrapper", "\"qwen3_5_moe_vision\"", "mlp_only_layers");
    CHECK(parse(&c, qwen35moe_text_json) == 0);
    moe_roundtrip(&c, "Qwen3.5-MoE text-only", "\"Qwen3_5MoeForCausalLM\"", "\"intermediate_size\"");
    moe_roundtrip(&c, "Qwen3.5-MoE text-only", "\"qwen3_5_moe_text\"", "text_config");
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
              "'layer_types' has 2 entries for 36 layers ('num_hidden_layers')"); // issue 27 item 7: a dense target too
    CHECK_ERR(parse(&c, with(l, "\"mlp_bias\": false", "\"mlp_bias\": false, \"layer_types\": [\"full_attention\"]")),
              "'layer_types' has 1 entries for");
    CHECK_ERR(parse(&c, with(q, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"")), "'hidden_act' is \"gelu\"");
    CHECK_ERR(parse(&c, with(l, "\"rope_type\": \"llama3\"", "\"rope_type\": \"longrope\"")),
              "'rope_scaling.rope_type' is \"longrope\"");
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
    test_hybrid();
    test_hybrid_defaults();
    test_hybrid_refusals();
    test_hybrid_roundtrip();
    test_moe();
    test_moe_defaults();
    test_moe_refusals();
    test_moe_roundtrip();
    return test_finish("test_target_config");
}
