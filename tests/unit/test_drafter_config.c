// test_drafter_config.c: reading the drafter's config.json the way the z-lab dflash package does
// (a real Qwen3-8B drafter config, a 27B-style one with sliding layers, Qwen3Config's defaults,
// both DFlash key spellings, layer types and is_causal), writing it back (round trip), loading
// from a file, and every refusal naming its field; the kinds' table (drafter_kind.h): every
// registered kind fills every required hook, is found by its name and its architecture, and lists
// the trunk's tensors where drafter_layout.h says they sit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/drafter_kind.h"
#include "student/model/drafter_layout.h"
#include "testing.h"

// z-lab/Qwen3-8B-DFlash-b16's config.json. The key set and layout are those of the z-lab
// Qwen3-*-DFlash-b16 drafter configs as copied verbatim into public training scripts (e.g. the
// Qwen3-4B-DFlash-b16 one in a tree_flash SLURM script found by the code search); the Qwen3-8B
// values (hidden 4096, MLP 12288, 32/8 heads, 5 layers, num_target_layers 36, target_layer_ids
// [1, 9, 17, 25, 33], mask_token_id 151669, block_size 16) are those of vllm-project/speculators'
// tests/unit/convert/dflash test of the z-lab source config, and agree with SPEC §3.
static const char *qwen3_8b_json =
    "{\n"
    "  \"architectures\": [\n    \"DFlashDraftModel\"\n  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"auto_map\": {\n    \"AutoModel\": \"dflash.DFlashDraftModel\"\n  },\n"
    "  \"block_size\": 16,\n"
    "  \"bos_token_id\": 151643,\n"
    "  \"dflash_config\": {\n"
    "    \"mask_token_id\": 151669,\n"
    "    \"target_layer_ids\": [\n      1,\n      9,\n      17,\n      25,\n      33\n    ]\n"
    "  },\n"
    "  \"dtype\": \"bfloat16\",\n"
    "  \"eos_token_id\": 151645,\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 4096,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 12288,\n"
    "  \"layer_types\": [\n    \"full_attention\",\n    \"full_attention\",\n    \"full_attention\",\n"
    "    \"full_attention\",\n    \"full_attention\"\n  ],\n"
    "  \"max_position_embeddings\": 40960,\n"
    "  \"max_window_layers\": 5,\n"
    "  \"model_type\": \"qwen3\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 5,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"num_target_layers\": 36,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"transformers_version\": \"4.57.1\",\n"
    "  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n"
    "  \"vocab_size\": 151936\n"
    "}\n";

// A Qwen3.6-27B-style drafter (SPEC §3: 5 layers at H 5120, MLP 17408, [sliding x4, full], window
// 2048), in the transformers 5 spelling (rope_parameters, block_size inside dflash_config) that
// z-lab's newer drafters use (cf. z-lab/dflash tests/fixtures/dflash2-config.json). The values
// (target 64 layers, ids [1, 16, 31, 46, 61], mask 248070, vocab 248320, theta 1e7) are those of
// the public Qwen3.5/3.6-27B DFlash drafters.
static const char *qwen36_27b_json =
    "{\n"
    "  \"architectures\": [\"DFlashDraftModel\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"dflash_config\": {\n"
    "    \"block_size\": 16,\n"
    "    \"mask_token_id\": 248070,\n"
    "    \"target_layer_ids\": [1, 16, 31, 46, 61]\n"
    "  },\n"
    "  \"dtype\": \"bfloat16\",\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 5120,\n"
    "  \"intermediate_size\": 17408,\n"
    "  \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\",\n"
    "                  \"sliding_attention\", \"full_attention\"],\n"
    "  \"max_position_embeddings\": 262144,\n"
    "  \"max_window_layers\": 5,\n"
    "  \"model_type\": \"qwen3\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 5,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"num_target_layers\": 64,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_parameters\": {\"rope_theta\": 10000000, \"rope_type\": \"default\"},\n"
    "  \"sliding_window\": 2048,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"use_sliding_window\": true,\n"
    "  \"vocab_size\": 248320\n"
    "}\n";

// A small config to vary in the refusal tests.
static const char *small_json =
    "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"hidden_size\": 32,"
    " \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 8, \"vocab_size\": 211, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0,"
    " \"layer_types\": [\"sliding_attention\", \"full_attention\"], \"use_sliding_window\": true,"
    " \"sliding_window\": 12, \"num_target_layers\": 8, \"block_size\": 4,"
    " \"dflash_config\": {\"target_layer_ids\": [1, 2], \"mask_token_id\": 210}}";

// with: json with the first `from` replaced by `to` (4 rotating buffers, so calls can nest).
static const char *with(const char *json, const char *from, const char *to) {
    static char bufs[4][8192];
    static int next;
    char *buf = bufs[next++ % 4];
    const char *at = strstr(json, from);
    if (!at) {
        fprintf(stderr, "test bug: '%s' not in the config\n", from);
        exit(1);
    }
    snprintf(buf, sizeof bufs[0], "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    return buf;
}

static int parse(drafter_config *c, const char *json) { return drafter_config_parse(c, json, "d/config.json"); }

static void test_real_configs(void) {
    drafter_config c;
    CHECK(parse(&c, qwen3_8b_json) == 0);
    CHECK(c.n_layers == 5 && c.hidden == 4096 && c.intermediate == 12288);
    CHECK(c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128 && c.vocab == 151936);
    CHECK(c.max_positions == 40960);
    CHECK_CLOSE(c.rms_eps, 1e-6, 0);
    CHECK_CLOSE(c.rope_theta, 1e6, 0);
    CHECK(c.block_size == 16 && c.mask_token_id == 151669 && c.num_target_layers == 36);
    CHECK(c.n_feat == 5 && c.target_layer_ids[0] == 1 && c.target_layer_ids[1] == 9 && c.target_layer_ids[4] == 33);
    int sliding = 0;
    for (int i = 0; i < 5; i++) sliding += c.layer_sliding[i];
    CHECK(sliding == 0 && c.sliding_window == 0 && c.sliding_causal == 1);
    CHECK(strcmp(c.torch_dtype, "bfloat16") == 0);

    CHECK(parse(&c, qwen36_27b_json) == 0);
    CHECK(c.n_layers == 5 && c.hidden == 5120 && c.intermediate == 17408 && c.vocab == 248320);
    CHECK(c.layer_sliding[0] == 1 && c.layer_sliding[3] == 1 && c.layer_sliding[4] == 0);
    CHECK(c.sliding_window == 2048 && c.sliding_causal == 1);
    CHECK_CLOSE(c.rope_theta, 1e7, 0);
    CHECK(c.block_size == 16 && c.mask_token_id == 248070 && c.num_target_layers == 64);
    CHECK(c.n_feat == 5 && c.target_layer_ids[4] == 61);
}

static void test_defaults_and_spellings(void) {
    drafter_config c;
    // The structural keys are required (never Qwen3Config's defaults, Qwen3-8B's: issue 27 item 8); the
    // rest from the class's defaults.
    static const char *const shape[] = {"\"vocab_size\": 300, ", "\"hidden_size\": 64, ", "\"intermediate_size\": 96, ",
                                        "\"num_hidden_layers\": 2, ", "\"num_attention_heads\": 4, ", "\"head_dim\": 16, ",
                                        "\"num_key_value_heads\": null, "};
    const char *minimal = "{\"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                          "\"num_attention_heads\": 4, \"head_dim\": 16, \"num_key_value_heads\": null, "
                          "\"dflash_config\": {\"mask_token_id\": 5, \"target_layer_ids\": [3]}}";
    for (int i = 0; i < 7; i++) {
        char want[64];
        snprintf(want, sizeof want, "missing '%.*s'", (int)(strchr(shape[i] + 1, '"') - shape[i] - 1), shape[i] + 1);
        CHECK_ERR(parse(&c, with(minimal, shape[i], "")), want);
    }
    CHECK_ERR(parse(&c, with(minimal, "\"intermediate_size\": 96", "\"intermediate_size\": 1099511627776")),
              "'intermediate_size' is 1099511627776: at most 1048576");
    CHECK(parse(&c, minimal) == 0);
    CHECK(c.vocab == 300 && c.hidden == 64 && c.intermediate == 96 && c.n_layers == 2);
    CHECK(c.n_heads == 4 && c.n_kv_heads == 4 && c.head_dim == 16 && c.max_positions == 32768);
    CHECK_CLOSE(c.rope_theta, 10000.0, 0);
    CHECK_CLOSE(c.rms_eps, 1e-6, 0);
    CHECK(c.block_size == 16 && c.n_feat == 1 && c.target_layer_ids[0] == 3 && c.num_target_layers == 0);
    CHECK(c.layer_sliding[0] == 0 && c.layer_sliding[1] == 0 && c.sliding_window == 0 && c.sliding_causal == 1);
    CHECK(c.torch_dtype[0] == '\0');
    // num_key_value_heads null = num_attention_heads
    CHECK(parse(&c, with(small_json, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": null")) == 0);
    CHECK(c.n_kv_heads == 4);
    // DFlash keys at the top level (the package's _draft_value falls back to them)
    CHECK(parse(&c, with(small_json, "\"dflash_config\": {\"target_layer_ids\": [1, 2], \"mask_token_id\": 210}",
                         "\"target_layer_ids\": [4], \"mask_token_id\": 7")) == 0);
    CHECK(c.mask_token_id == 7 && c.n_feat == 1 && c.target_layer_ids[0] == 4 && c.block_size == 4);
    // block_size inside dflash_config only, or in both places agreeing
    CHECK(parse(&c, with(small_json, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"block_size\": 4}")) == 0);
    CHECK(c.block_size == 4);
    const char *inner_only = with(small_json, "\"block_size\": 4,", "");
    CHECK(parse(&c, with(inner_only, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"block_size\": 8}")) == 0);
    CHECK(c.block_size == 8);
    CHECK(parse(&c, with(inner_only, "\"sliding_window\": 12", "\"sliding_window\": 16")) == 0);
    CHECK(c.block_size == 16); // the package's default
    // target_layer_ids derived as build_target_layer_ids(num_target_layers, num_hidden_layers)
    CHECK(parse(&c, with(qwen3_8b_json, "\"target_layer_ids\": [\n      1,\n      9,\n      17,\n      25,\n      33\n    ]\n",
                         "\"block_size\": 16\n")) == 0);
    CHECK(c.n_feat == 5 && c.target_layer_ids[0] == 1 && c.target_layer_ids[1] == 9 && c.target_layer_ids[2] == 17 &&
          c.target_layer_ids[3] == 25 && c.target_layer_ids[4] == 33);
    // rope_parameters / rope_scaling spellings; a theta inside wins
    CHECK(parse(&c, with(small_json, "\"rope_theta\": 10000.0", "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5e5}")) == 0);
    CHECK_CLOSE(c.rope_theta, 5e5, 0);
    CHECK(parse(&c, with(small_json, "\"rope_theta\": 10000.0", "\"rope_theta\": 3e4, \"rope_scaling\": {\"type\": \"default\", \"rope_theta\": 7e4}")) == 0);
    CHECK_CLOSE(c.rope_theta, 7e4, 0);
    // "torch_dtype" (4.x) or "dtype" (5.x)
    CHECK(parse(&c, with(small_json, "\"rms_norm_eps\"", "\"torch_dtype\": \"float16\", \"rms_norm_eps\"")) == 0);
    CHECK(strcmp(c.torch_dtype, "float16") == 0);
}

static void test_layer_types(void) {
    drafter_config c;
    CHECK(parse(&c, small_json) == 0);
    CHECK(c.layer_sliding[0] == 1 && c.layer_sliding[1] == 0 && c.sliding_window == 12 && c.sliding_causal == 1);
    // is_causal false: every layer bidirectional (sliding_causal 0); true with only sliding layers: causal
    CHECK(parse(&c, with(small_json, "\"block_size\"", "\"is_causal\": false, \"block_size\"")) == 0);
    CHECK(c.sliding_causal == 0 && c.sliding_window == 12);
    CHECK(parse(&c, with(small_json, "\"full_attention\"]", "\"sliding_attention\"], \"is_causal\": true")) == 0);
    CHECK(c.layer_sliding[1] == 1 && c.sliding_causal == 1);
    CHECK(parse(&c, with(small_json, "\"block_size\"", "\"is_causal\": null, \"block_size\"")) == 0);
    CHECK(c.sliding_causal == 1);
    // sliding layers with no window: sliding_window null, or use_sliding_window false and no window named
    CHECK(parse(&c, with(small_json, "\"sliding_window\": 12", "\"sliding_window\": null")) == 0);
    CHECK(c.layer_sliding[0] == 1 && c.sliding_window == 0 && c.sliding_causal == 1);
    CHECK(parse(&c, with(small_json, "\"use_sliding_window\": true, \"sliding_window\": 12,", "")) == 0);
    CHECK(c.layer_sliding[0] == 1 && c.sliding_window == 0);
    // no layer_types: Qwen3Config's rule, sliding for i >= max_window_layers when the window is in use
    const char *no_types = with(qwen36_27b_json, "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\",\n"
                                                 "                  \"sliding_attention\", \"full_attention\"],\n", "");
    char buf[8192];
    snprintf(buf, sizeof buf, "%s", no_types);
    CHECK(parse(&c, with(buf, "\"max_window_layers\": 5", "\"max_window_layers\": 3")) == 0);
    CHECK(c.layer_sliding[2] == 0 && c.layer_sliding[3] == 1 && c.layer_sliding[4] == 1 && c.sliding_window == 2048);
    CHECK(parse(&c, buf) == 0); // max_window_layers 5 = no layer slides
    CHECK(c.layer_sliding[4] == 0 && c.sliding_window == 0);
    // ... and the window defaults to Qwen3Config's 4096 when the key is absent
    snprintf(buf, sizeof buf, "%s", with(no_types, "\"sliding_window\": 2048,\n", ""));
    CHECK(parse(&c, with(buf, "\"max_window_layers\": 5", "\"max_window_layers\": 0")) == 0);
    CHECK(c.layer_sliding[0] == 1 && c.sliding_window == 4096);
}

// parse(to_json(c)) == c, and the JSON has what the dflash package reads.
static void roundtrip(const char *name, const char *json) {
    drafter_config a, b;
    CHECK_MSG(parse(&a, json) == 0, "%s: %s", name, error_msg());
    char *out = drafter_config_to_json(&a);
    CHECK_MSG(drafter_config_parse(&b, out, "out/config.json") == 0, "%s: %s", name, error_msg());
    if (!a.torch_dtype[0]) snprintf(a.torch_dtype, sizeof a.torch_dtype, "float32"); // written when unknown
    CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "%s: the round trip changed the config:\n%s", name, out);
    CHECK(strstr(out, "\"architectures\":\t[\"DFlashDraftModel\"]") != NULL);
    CHECK(strstr(out, "\"model_type\":\t\"qwen3\"") != NULL);
    CHECK(strstr(out, "\"dflash_config\":\t{") != NULL);
    CHECK(strstr(out, "\"torch_dtype\":") != NULL);
    free(out);
}

static void test_roundtrip_and_load(void) {
    roundtrip("qwen3-8b", qwen3_8b_json);
    roundtrip("27b-style", qwen36_27b_json);
    roundtrip("small", small_json);
    roundtrip("bidirectional sliding", with(small_json, "\"block_size\"", "\"is_causal\": false, \"block_size\""));
    roundtrip("sliding, no window", with(small_json, "\"sliding_window\": 12", "\"sliding_window\": null"));
    roundtrip("defaults", "{\"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                          "\"num_attention_heads\": 4, \"head_dim\": 16, \"num_key_value_heads\": 4, "
                          "\"dflash_config\": {\"mask_token_id\": 5, \"target_layer_ids\": [3]}}");

    drafter_config c;
    CHECK(parse(&c, qwen36_27b_json) == 0);
    char *out = drafter_config_to_json(&c);
    CHECK(strstr(out, "\"use_sliding_window\":\ttrue") && strstr(out, "\"sliding_window\":\t2048"));
    CHECK(strstr(out, "\"is_causal\"") == NULL); // the package's default needs no key
    CHECK(strstr(out, "\"rope_theta\":\t10000000.0") != NULL);
    CHECK(strstr(out, "\"torch_dtype\":\t\"bfloat16\"") != NULL);
    CHECK(test_write_file(test_path("config.json"), out, strlen(out)) == 0);
    free(out);
    drafter_config d;
    CHECK(drafter_config_load(&d, test_path("config.json")) == 0);
    CHECK(memcmp(&c, &d, sizeof c) == 0);
    CHECK_ERR(drafter_config_load(&d, test_path("absent.json")), "absent.json: No such file");
    CHECK(test_write_file(test_path("bad.json"), "{\n\"a\": 1,\n}", 11) == 0);
    CHECK_ERR(drafter_config_load(&d, test_path("bad.json")), "bad.json: not valid JSON");

    // An empty torch_dtype is written as float32; the bidirectional flag survives.
    CHECK(parse(&c, with(small_json, "\"block_size\"", "\"is_causal\": false, \"block_size\"")) == 0);
    out = drafter_config_to_json(&c);
    CHECK(strstr(out, "\"torch_dtype\":\t\"float32\"") && strstr(out, "\"is_causal\":\tfalse"));
    free(out);
}

static void test_refusals(void) {
    drafter_config c;
    const char *s = small_json;
    CHECK_ERR(parse(&c, "{\"a\": "), "d/config.json: not valid JSON");
    CHECK_ERR(parse(&c, "[1]"), "must be a JSON object");
    // identity and unsupported package features
    char archs[256], want[512]; // every registered kind's architecture (drafter_kind.c): a new kind adds its own
    drafter_kind_list(1, 1, archs, sizeof archs);
    snprintf(want, sizeof want, "d/config.json: 'architectures' is [\"Eagle3DraftModel\"]: only [%s]", archs);
    CHECK(strncmp(archs, "\"DFlashDraftModel\", \"DFlash2DraftModel\"", 39) == 0);
    CHECK_ERR(parse(&c, with(s, "[\"DFlashDraftModel\"]", "[\"Eagle3DraftModel\"]")), want);
    CHECK_ERR(parse(&c, with(s, "[\"DFlashDraftModel\"]", "\"DFlashDraftModel\"")), "'architectures' wants a list");
    CHECK_ERR(parse(&c, with(s, "\"model_type\": \"qwen3\"", "\"model_type\": \"llama\"")), "'model_type' is \"llama\"");
    CHECK_ERR(parse(&c, with(s, "\"rms_norm_eps\"", "\"hidden_act\": \"gelu\", \"rms_norm_eps\"")), "'hidden_act' is \"gelu\"");
    CHECK_ERR(parse(&c, with(s, "\"rms_norm_eps\"", "\"attention_bias\": true, \"rms_norm_eps\"")), "'attention_bias' is true");
    CHECK_ERR(parse(&c, with(s, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"input_embedding_scale\": 2.0}")),
              "'dflash_config.input_embedding_scale' is 2");
    CHECK_ERR(parse(&c, with(s, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"output_multiplier\": 0.5}")),
              "'dflash_config.output_multiplier' is 0.5");
    CHECK_ERR(parse(&c, with(s, "\"rms_norm_eps\"", "\"final_logit_softcapping\": 20.0, \"rms_norm_eps\"")),
              "'final_logit_softcapping' is 20: logit soft-capping");
    CHECK_ERR(parse(&c, with(s, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"output_multiplier\": \"x\"}")),
              "'dflash_config.output_multiplier' wants a number, got \"x\"");
    // shape
    CHECK_ERR(parse(&c, with(s, "\"hidden_size\": 32", "\"hidden_size\": 0")), "'hidden_size' must be positive, got 0");
    CHECK_ERR(parse(&c, with(s, "\"hidden_size\": 32", "\"hidden_size\": \"32\"")), "'hidden_size' wants an integer, got \"32\"");
    CHECK_ERR(parse(&c, with(s, "\"intermediate_size\": 48", "\"intermediate_size\": 4.5")), "'intermediate_size' wants an integer, got 4.5");
    CHECK_ERR(parse(&c, with(s, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 65")), "'num_hidden_layers' is 65: at most 64");
    CHECK_ERR(parse(&c, with(s, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3")),
              "'num_key_value_heads' 3 does not divide 'num_attention_heads' 4");
    CHECK_ERR(parse(&c, with(s, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 0")), "'num_key_value_heads' must be positive");
    CHECK_ERR(parse(&c, with(s, "\"num_key_value_heads\": 2,", "")), "missing 'num_key_value_heads' (a structural key");
    CHECK_ERR(parse(&c, with(s, "\"head_dim\": 8", "\"head_dim\": 7")), "'head_dim' must be even");
    CHECK_ERR(parse(&c, with(s, "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 0")), "'rms_norm_eps' must be in (0, 1), got 0");
    CHECK_ERR(parse(&c, with(s, "\"vocab_size\": 211", "\"vocab_size\": -1")), "'vocab_size' must be positive, got -1");
    // RoPE
    CHECK_ERR(parse(&c, with(s, "\"rope_theta\": 10000.0", "\"rope_theta\": 0.5")), "'rope_theta' must be a finite number > 1, got 0.5");
    CHECK_ERR(parse(&c, with(s, "\"rope_theta\": 10000.0", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}")),
              "'rope_scaling.rope_type' is \"yarn\": the drafter supports only the default RoPE");
    CHECK_ERR(parse(&c, with(s, "\"rope_theta\": 10000.0", "\"rope_parameters\": 5")), "'rope_parameters' wants an object, got 5");
    CHECK_ERR(parse(&c, with(s, "\"rope_theta\": 10000.0", "\"partial_rotary_factor\": 0.5")), "'partial_rotary_factor' is 0.5");
    // DFlash keys
    CHECK_ERR(parse(&c, with(s, "\"dflash_config\": {", "\"dflash_config\": 3, \"x\": {")), "'dflash_config' wants an object, got 3");
    CHECK_ERR(parse(&c, with(s, "\"block_size\": 4", "\"block_size\": 1")), "'block_size' must be at least 2");
    CHECK_ERR(parse(&c, with(s, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"block_size\": 8}")),
              "'dflash_config.block_size' 8 and 'block_size' 4 disagree");
    CHECK_ERR(parse(&c, with(s, ", \"mask_token_id\": 210", "")), "d/config.json: missing 'dflash_config.mask_token_id'");
    CHECK_ERR(parse(&c, with(s, "\"mask_token_id\": 210", "\"mask_token_id\": 211")),
              "'dflash_config.mask_token_id' 211 is outside the vocabulary [0, 211)");
    CHECK_ERR(parse(&c, with(s, "\"mask_token_id\": 210", "\"mask_token_id\": -1")), "'dflash_config.mask_token_id' -1 is outside");
    CHECK_ERR(parse(&c, with(s, "\"num_target_layers\": 8", "\"num_target_layers\": 0")), "'num_target_layers' must be positive, got 0");
    CHECK_ERR(parse(&c, with(with(s, "\"num_target_layers\": 8,", ""), "\"target_layer_ids\": [1, 2], ", "")),
              "missing 'dflash_config.target_layer_ids' (and no 'num_target_layers'");
    CHECK_ERR(parse(&c, with(s, "[1, 2]", "[]")), "'dflash_config.target_layer_ids' wants a non-empty list of layer ids, got []");
    CHECK_ERR(parse(&c, with(s, "[1, 2]", "[1, 8]")), "'dflash_config.target_layer_ids[1]' is 8: outside the target's layers [0, 8)");
    CHECK_ERR(parse(&c, with(s, "[1, 2]", "[1, \"2\"]")), "'dflash_config.target_layer_ids[1]' wants an integer");
    CHECK_ERR(parse(&c, with(s, "[1, 2]", "[0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7,"
                                          "0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7,0]")),
              "'dflash_config.target_layer_ids' has 65 ids: at most 64");
    CHECK_ERR(parse(&c, with(with(s, "\"target_layer_ids\": [1, 2], ", ""), "\"num_target_layers\": 8", "\"num_target_layers\": 2")),
              "no 'dflash_config.target_layer_ids': target layer ids:");
    // layer types, window, is_causal
    CHECK_ERR(parse(&c, with(s, "\"sliding_attention\", \"full_attention\"]", "\"full_attention\"]")),
              "'layer_types' has 1 entries but 'num_hidden_layers' is 2");
    CHECK_ERR(parse(&c, with(s, "\"sliding_attention\", \"full_attention\"]", "\"sliding_attention\", \"linear_attention\"]")),
              "'layer_types[1]' is \"linear_attention\": expected");
    CHECK_ERR(parse(&c, with(s, "[\"sliding_attention\", \"full_attention\"]", "\"full_attention\"")), "'layer_types' wants a list");
    CHECK_ERR(parse(&c, with(s, "\"use_sliding_window\": true", "\"use_sliding_window\": false")),
              "'sliding_window' is 12 but 'use_sliding_window' is not true");
    CHECK_ERR(parse(&c, with(s, "\"use_sliding_window\": true, ", "")), "'sliding_window' is 12 but 'use_sliding_window' is not true");
    CHECK_ERR(parse(&c, with(s, "\"use_sliding_window\": true", "\"use_sliding_window\": \"yes\"")),
              "'use_sliding_window' wants true or false, got \"yes\"");
    CHECK_ERR(parse(&c, with(s, "\"sliding_window\": 12", "\"sliding_window\": 0")), "'sliding_window' must be positive or null, got 0");
    CHECK_ERR(parse(&c, with(s, "\"sliding_window\": 12", "\"sliding_window\": 3")),
              "'sliding_window' 3 is smaller than the block size 4");
    CHECK_ERR(parse(&c, with(s, "\"block_size\"", "\"is_causal\": true, \"block_size\"")),
              "'is_causal' is true: the dflash package then makes the full_attention layers causal");
    CHECK_ERR(parse(&c, with(s, "\"block_size\"", "\"is_causal\": 0, \"block_size\"")), "'is_causal' wants true or false, got 0");
    CHECK_ERR(parse(&c, with(s, "\"rms_norm_eps\"", "\"dtype\": 16, \"rms_norm_eps\"")), "'dtype' wants a string, got 16");
    // every failure leaves the config zeroed
    drafter_config zero;
    memset(&zero, 0, sizeof zero);
    CHECK(parse(&c, with(s, "\"head_dim\": 8", "\"head_dim\": 7")) < 0 && memcmp(&c, &zero, sizeof c) == 0);
}

// DFlash2 (drafter_dflash2.c): the published defaults, the keys in dflash_config or at the root
// (dflash_config winning, as the package's _draft_value), the round trip, the refusals, and the
// tensors it adds (names, shapes, aligned offsets after DFlash's).
static void test_dflash2(void) {
    drafter_config c;
    static char s2[8192], keys[8192]; // with() reuses its buffers
    snprintf(s2, sizeof s2, "%s", with(small_json, "[\"DFlashDraftModel\"]", "[\"DFlash2DraftModel\"]"));
    // its four keys are required in a config.json (issue 49: a removed one fell back to its default)
    static const char *const k4[4] = {"conv_kernel_size", "conv_group_size", "selector_top_k", "selector_rank"};
    static char all4[8192], miss[8192];
    snprintf(all4, sizeof all4, "%s",
             with(with(s2, "\"hidden_size\": 32", "\"hidden_size\": 64"), "\"mask_token_id\": 210}",
                  "\"mask_token_id\": 210, \"conv_kernel_size\": 2, \"conv_group_size\": 16, \"selector_top_k\": 16, "
                  "\"selector_rank\": 256}"));
    CHECK_MSG(parse(&c, all4) == 0, "%s", error_msg());
    CHECK(strcmp(c.kind->name, "dflash2") == 0 && c.conv_kernel == 2 && c.conv_group == 16 && c.selector_top_k == 16 &&
          c.selector_rank == 256);
    for (int i = 0; i < 4; i++) {
        char key[64], msg[96];
        snprintf(key, sizeof key, "\"%s\": ", k4[i]);
        snprintf(miss, sizeof miss, "%s", all4);
        char *at = strstr(miss, key), *end = at ? strpbrk(at, ",}") : NULL;
        CHECK(at && end);
        if (!at || !end) continue;
        if (*end == ',') memmove(at, end + 2, strlen(end + 2) + 1); // "key": v, -> (gone)
        else memmove(at - 2, end, strlen(end) + 1);                // , "key": v} -> }
        snprintf(msg, sizeof msg, "missing 'dflash_config.%s'", k4[i]);
        CHECK_ERR(parse(&c, miss), msg);
    }
    CHECK_ERR(parse(&c, with(s2, "\"hidden_size\": 32", "\"hidden_size\": 64")), "missing 'dflash_config.conv_kernel_size'");
    // s2f: the four at the root (the error cases below override one in dflash_config, which wins)
    static char s2f[8192];
    snprintf(s2f, sizeof s2f, "%s", with(s2, "\"block_size\": 4,", "\"block_size\": 4, \"conv_kernel_size\": 2, \"conv_group_size\": 16, "
                                         "\"selector_top_k\": 16, \"selector_rank\": 256,"));
    snprintf(keys, sizeof keys, "%s",
             with(with(s2, "\"mask_token_id\": 210}",
                       "\"mask_token_id\": 210, \"conv_kernel_size\": 3, \"conv_group_size\": 4, \"selector_top_k\": 5}"),
                  "\"block_size\": 4,", "\"block_size\": 4, \"conv_kernel_size\": 9, \"selector_rank\": 7,"));
    CHECK_MSG(parse(&c, keys) == 0, "%s", error_msg());
    CHECK(c.conv_kernel == 3 && c.conv_group == 4 && c.selector_top_k == 5 && c.selector_rank == 7);
    char *out = drafter_config_to_json(&c);
    drafter_config b;
    CHECK_MSG(drafter_config_parse(&b, out, "out/config.json") == 0, "%s", error_msg());
    CHECK(strstr(out, "\"architectures\":\t[\"DFlash2DraftModel\"]") && b.kind == c.kind && b.conv_kernel == 3 &&
          b.conv_group == 4 && b.selector_top_k == 5 && b.selector_rank == 7);
    free(out);
    CHECK_ERR(parse(&c, with(s2f, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"conv_group_size\": 5}")),
              "'conv_group_size' 5 does not divide hidden_size 32");
    CHECK_ERR(parse(&c, with(s2f, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"conv_kernel_size\": 5, \"conv_group_size\": 4}")),
              "'conv_kernel_size' 5 is longer than the block");
    CHECK_ERR(parse(&c, with(s2f, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"selector_top_k\": 257}")),
              "'selector_top_k' 257 is above 256");
    CHECK_ERR(parse(&c, with(s2f, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"selector_top_k\": 212}")),
              "'selector_top_k' 212 is larger than vocab_size 211");
    CHECK_ERR(parse(&c, with(s2f, "\"mask_token_id\": 210}", "\"mask_token_id\": 210, \"conv_kernel_size\": 0}")),
              "'conv_kernel_size' must be positive");

    CHECK(parse(&c, keys) == 0); // H 32, 2 layers, K 3, G 4, V 211, selector rank 7
    drafter_config d1 = c;
    d1.kind = drafter_kind_find("dflash");
    int n1 = d1.kind->param_list(&d1, NULL), n2 = c.kind->param_list(&c, NULL);
    CHECK(n1 == 2 + 11 * 2 + 1 && n2 == n1 + 4 * 2 + 3);
    drafter_param *p1 = calloc((size_t)n1, sizeof *p1), *p2 = calloc((size_t)n2, sizeof *p2);
    d1.kind->param_list(&d1, p1);
    c.kind->param_list(&c, p2);
    CHECK(memcmp(p1, p2, (size_t)n1 * sizeof *p1) == 0); // DFlash's tensors first, laid out alike
    const char *want[4] = {"attention_conv.base_kernel", "attention_conv.kernel_projection.weight", "mlp_conv.base_kernel",
                           "mlp_conv.kernel_projection.weight"};
    for (int i = n1; i < n2 - 3; i++) {
        const drafter_param *p = &p2[i];
        int l = (i - n1) / 4, j = (i - n1) % 4;
        char nm[96];
        snprintf(nm, sizeof nm, "layers.%d.%s", l, want[j]);
        CHECK_MSG(strcmp(p->name, nm) == 0, "tensor %d is %s, want %s", i, p->name, nm);
        int64_t s0 = j % 2 ? 2 * 3 * (32 / 4) : 2;
        CHECK(p->ndim == (j % 2 ? 2 : 3) && p->shape[0] == s0 && p->shape[1] == (j % 2 ? 32 : 3));
        CHECK(p->numel == (j % 2 ? s0 * 32 : 2 * 3 * 32) && p->is_delta == !(j % 2) && !p->is_norm);
        CHECK(p->offset % DRAFTER_ALIGN == 0 && p->offset >= p2[i - 1].offset + p2[i - 1].numel);
    }
    // the selector, last: the codebooks as the package's key_mapping reads them, the projection [r, H]
    const char *sel[3] = {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook",
                          "candidate_selector.hidden_projection.weight"};
    for (int j = 0; j < 3; j++) {
        const drafter_param *p = &p2[n2 - 3 + j];
        CHECK_MSG(strcmp(p->name, sel[j]) == 0, "tensor %d is %s, want %s", n2 - 3 + j, p->name, sel[j]);
        CHECK(p->ndim == 2 && p->shape[0] == (j < 2 ? 211 : 7) && p->shape[1] == (j < 2 ? 7 : 32) && !p->is_norm && !p->is_delta);
        CHECK(p->offset % DRAFTER_ALIGN == 0 && p->offset >= p2[n2 - 4 + j].offset + p2[n2 - 4 + j].numel);
    }
    CHECK(drafter_param_numel(&c) == p2[n2 - 1].offset + (p2[n2 - 1].numel + DRAFTER_ALIGN - 1) / DRAFTER_ALIGN * DRAFTER_ALIGN);
    free(p1);
    free(p2);
}

// The kinds' table: for every registered kind, the hooks the step and the shared code call without
// a check are there, the optional ones in their pairs; found by name and by architecture; a
// drafter of the kind (small_json under its architecture) lists the trunk where the layout says:
// fc, hidden_norm, layer l's tensor j at drafter_p_layer(l, j), the final norm at drafter_p_norm(L),
// the kind's own tensors from drafter_p_own(L) on.
static void test_kind_table(void) {
    static const char *const layer_suffix[DRAFTER_LAYER_TENSORS] = {
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    int n = 0;
    CHECK(drafter_kind_at(0) == drafter_kind_default() && drafter_kind_at(-1) == NULL);
    for (const drafter_kind *k; (k = drafter_kind_at(n)) != NULL; n++) {
        const char *nm = k->name ? k->name : "(no name)";
        CHECK_MSG(k->name && k->architecture && k->model_type, "kind %d: name, architecture and model_type", n);
        CHECK_MSG(k->param_list && k->bind && k->grad_buckets, "kind %s: param_list, bind, grad_buckets", nm);
        CHECK_MSG(k->layer_forward && k->layer_backward && k->decode_choice, "kind %s: layer_forward, layer_backward, decode_choice", nm);
        CHECK_MSG(!k->config_parse == !k->config_write, "kind %s: config_parse and config_write come together", nm);
        CHECK_MSG(!k->work_create == !k->work_destroy, "kind %s: work_create and work_destroy come together", nm);
        if (!k->name || !k->architecture) continue;
        CHECK_MSG(drafter_kind_find(k->name) == k, "kind %s: drafter_kind_find", nm);
        CHECK_MSG(drafter_kind_by_architecture(k->architecture) == k, "kind %s: by its architecture %s", nm, k->architecture);
        char arch[128];
        snprintf(arch, sizeof arch, "[\"%s\"]", k->architecture);
        drafter_config c;
        // (with DFlash2's required keys, which a kind without them ignores)
        CHECK_MSG(parse(&c, with(with(small_json, "[\"DFlashDraftModel\"]", arch), "\"block_size\": 4,",
                                 "\"block_size\": 4, \"conv_kernel_size\": 2, \"conv_group_size\": 16, \"selector_top_k\": 16, "
                                 "\"selector_rank\": 256,")) == 0, "kind %s: %s", nm, error_msg());
        if (c.kind != k) continue;
        int np = k->param_list(&c, NULL), L = (int)c.n_layers;
        drafter_param *p = calloc((size_t)np, sizeof *p);
        CHECK(k->param_list(&c, p) == np && np >= drafter_p_own(L));
        CHECK_MSG(strcmp(p[DRAFTER_P_FC].name, "fc.weight") == 0 && strcmp(p[DRAFTER_P_HIDDEN_NORM].name, "hidden_norm.weight") == 0 &&
                      strcmp(p[drafter_p_norm(L)].name, "norm.weight") == 0,
                  "kind %s: fc, hidden_norm, norm not where drafter_layout.h places them", nm);
        for (int l = 0; l < L; l++)
            for (int j = 0; j < DRAFTER_LAYER_TENSORS; j++) {
                char want[96];
                snprintf(want, sizeof want, "layers.%d.%s", l, layer_suffix[j]);
                CHECK_MSG(strcmp(p[drafter_p_layer(l, j)].name, want) == 0, "kind %s: tensor %d is %s, the layout says %s", nm,
                          drafter_p_layer(l, j), p[drafter_p_layer(l, j)].name, want);
            }
        free(p);
    }
    CHECK(n >= 2); // dflash and dflash2
}

int main(void) {
    test_kind_table();
    test_real_configs();
    test_defaults_and_spellings();
    test_layer_types();
    test_roundtrip_and_load();
    test_refusals();
    test_dflash2();
    return test_finish("test_drafter_config");
}
