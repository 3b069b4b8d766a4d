// test_target_quant.c: quantised target checkpoints (teacher/target_quant.h).
//
//   8-bit floats     all 256 codes of F8_E4M3 against a decoding computed here from the format's
//                    fields, and F8_E4M3 / F8_E5M2 / F8_E8M0 against torch's .to(float32)
//                    (tests/reference/data/quant_fp8.safetensors, make_quant_fixture.py)
//   config.json      quantization_config as published (Qwen3-8B-FP8, DeepSeek-V3, gpt-oss), its
//                    defaults, the text_config place, and every refusal naming its key and value
//   fp8 blocks       three weights of the fixture (partial last blocks in both dims; F32, BF16 and
//                    F8_E8M0 scales; a 3-D stack of experts) de-quantised bit for bit as torch does,
//                    whole, by rows, and uploaded chunk by chunk in F32 and BF16; a per-matrix scale
//   mxfp4            the fixture's gpt-oss expert blocks against transformers' convert_moe_packed_tensors
//   refusals         a missing, mis-shaped or mistyped companion, F8_E5M2, a quantised tensor the
//                    config does not declare, each in one line naming the tensor
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/backend/backend.h"
#include "common/core/half.h"
#include "common/data/safetensors.h"
#include "teacher/target_config.h"
#include "teacher/target_quant.h"
#include "testing.h"
#include "testing_quant.h"

// Same bits, or both NaN.
static int same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

static int count_diff(const float *a, const float *b, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !same_float(a[i], b[i]);
    return bad;
}

static const st_entry *fx_get(const st_file *f, const char *name) {
    const st_entry *e = safetensors_find(f, name);
    if (!e) test_fail(__FILE__, __LINE__, "fixture tensor %s missing", name);
    return e;
}

// ------------------------------------------------------------------------------------ 8-bit floats

// e4m3fn from its fields: s eeee mmm, bias 7; e = 0: m/8 * 2^-6; e = 15, m = 7: NaN; no infinities.
static float e4m3_by_fields(int c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return (float)(s ? -v : v);
}

static void test_f8_decoding(const st_file *fx) {
    int bad = 0;
    for (int c = 0; c < 256; c++) bad += !same_float(f32_from_f8e4m3((uint8_t)c), e4m3_by_fields(c));
    CHECK_MSG(bad == 0, "%d e4m3 codes differ from the field decoding", bad);
    CHECK(f32_from_f8e4m3(0x7e) == 448.0f && f32_from_f8e4m3(0xfe) == -448.0f);
    CHECK(f32_from_f8e4m3(0x01) == 0x1p-9f && f32_from_f8e4m3(0x08) == 0x1p-6f);
    CHECK(isnan(f32_from_f8e4m3(0x7f)) && isnan(f32_from_f8e4m3(0xff)) && signbit(f32_from_f8e4m3(0x80)));
    CHECK(f32_from_f8e8m0(127) == 1.0f && f32_from_f8e8m0(0) == 0x1p-127f && isnan(f32_from_f8e8m0(255)));
    CHECK(isinf(f32_from_f8e5m2(0x7c)) && f32_from_f8e5m2(0x3c) == 1.0f);

    // against torch, code by code, also through convert_to_f32
    static const struct {
        const char *name;
        dtype dt;
        float (*f)(uint8_t);
    } kinds[] = {{"e4m3.f32", DT_F8_E4M3, f32_from_f8e4m3},
                 {"e5m2.f32", DT_F8_E5M2, f32_from_f8e5m2},
                 {"e8m0.f32", DT_F8_E8M0, f32_from_f8e8m0}};
    uint8_t codes[256];
    for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
    for (int k = 0; k < 3; k++) {
        const st_entry *ref = fx_get(fx, kinds[k].name);
        if (!ref) continue;
        const float *r = ref->data;
        float got[256], arr[256];
        for (int c = 0; c < 256; c++) got[c] = kinds[k].f((uint8_t)c);
        CHECK(convert_to_f32(arr, codes, kinds[k].dt, 256) == 0);
        int d1 = count_diff(got, r, 256), d2 = count_diff(arr, r, 256);
        CHECK_MSG(d1 == 0 && d2 == 0, "%s: %d / %d codes differ from torch", kinds[k].name, d1, d2);
    }
    // the names, as safetensors spells them
    dtype dt;
    CHECK(dtype_parse("F8_E4M3", &dt) == 0 && dt == DT_F8_E4M3 && dtype_size(dt) == 1);
    CHECK(dtype_parse("F8_E5M2", &dt) == 0 && dt == DT_F8_E5M2 && strcmp(dtype_name(dt), "F8_E5M2") == 0);
    CHECK(dtype_parse("F8_E8M0", &dt) == 0 && dt == DT_F8_E8M0);
    CHECK_ERR(dtype_parse("F8_E4M3FNUZ", &dt), "unknown dtype 'F8_E4M3FNUZ'");
}

// ------------------------------------------------------------------------------------ config.json

static void test_config(void) {
    target_quant q;
    char d[64];
    CHECK(parse_qc(&q, "{\"hidden_size\": 8}") == 0 && q.method == TARGET_QUANT_NONE);
    CHECK(parse_qc(&q, "{\"quantization_config\": null}") == 0 && q.method == TARGET_QUANT_NONE);
    CHECK(strcmp(target_quant_describe(&q, d, sizeof d), "none") == 0);
    // Qwen/Qwen3-8B-FP8 as published
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"activation_scheme\": \"dynamic\", \"modules_to_not_convert\": "
                       "[\"lm_head\"], \"fmt\": \"e4m3\", \"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}") == 0);
    CHECK(q.method == TARGET_QUANT_FP8 && q.block_out == 128 && q.block_in == 128);
    CHECK(strcmp(target_quant_describe(&q, d, sizeof d), "fp8 (e4m3, blocks [128, 128])") == 0);
    // deepseek-ai/DeepSeek-V3, and DeepSeek-V3.1's ue8m0 scales
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
                       "\"quant_method\": \"fp8\", \"weight_block_size\": [128, 64], \"scale_fmt\": \"ue8m0\"}}") == 0);
    CHECK(q.method == TARGET_QUANT_FP8 && q.block_out == 128 && q.block_in == 64);
    // defaults: FineGrainedFP8Config's [128, 128]; null: one scale per matrix
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\"}}") == 0 && q.block_out == 128 && q.block_in == 128);
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": null}}") == 0 &&
          q.method == TARGET_QUANT_FP8 && q.block_out == 0 && q.block_in == 0);
    CHECK(strcmp(target_quant_describe(&q, d, sizeof d), "fp8 (e4m3, one scale per matrix)") == 0);
    // openai/gpt-oss-20b
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"modules_to_not_convert\": [\"model.layers.*.self_attn\", "
                       "\"model.layers.*.mlp.router\", \"model.embed_tokens\", \"lm_head\"], \"quant_method\": \"mxfp4\"}}") == 0);
    CHECK(q.method == TARGET_QUANT_MXFP4 && strcmp(target_quant_describe(&q, d, sizeof d), "mxfp4") == 0);
    // a multimodal wrapper's, under text_config
    CHECK(parse_qc(&q, "{\"text_config\": {\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": "
                       "[64, 32]}}}") == 0 && q.method == TARGET_QUANT_FP8 && q.block_out == 64 && q.block_in == 32);

    // refusals, one line naming the key and the value
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4}}"),
              "config.json: 'quantization_config.quant_method' is \"gptq\": not supported (supported: fp8 "
              "block-quantised, mxfp4)");
    static const char *const others[] = {"awq", "compressed-tensors", "bitsandbytes", "fbgemm_fp8", "torchao", "hqq"};
    for (int i = 0; i < 6; i++) {
        char j[160], m[96];
        snprintf(j, sizeof j, "{\"quantization_config\": {\"quant_method\": \"%s\"}}", others[i]);
        snprintf(m, sizeof m, "'quantization_config.quant_method' is \"%s\": not supported", others[i]);
        CHECK_ERR(parse_qc(&q, j), m);
    }
    CHECK_ERR(parse_qc(&q, "{\"text_config\": {\"quantization_config\": {\"quant_method\": \"awq\"}}}"),
              "'text_config.quantization_config.quant_method' is \"awq\": not supported");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e5m2\"}}"),
              "'quantization_config.fmt' is \"e5m2\": not supported (fp8 weights must be e4m3");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"static\"}}"),
              "'quantization_config.activation_scheme' is \"static\": not supported");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"scale_fmt\": \"e4m3\"}}"),
              "'quantization_config.scale_fmt' is \"e4m3\"");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128]}}"),
              "'quantization_config.weight_block_size' is [128]: want [block_out, block_in]");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [0, 128]}}"),
              "weight_block_size' is [0,128]");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [1.5, 2]}}"),
              "weight_block_size");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"bits\": 4}}"), "'quantization_config' has no \"quant_method\"");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": 8}}"), "'quantization_config.quant_method' wants a string");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": \"fp8\"}"), "'quantization_config' is \"fp8\": want an object");

    // through the target's config.json reader
#define QWEN3_BASE                                                                                               \
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"head_dim\": 16, \"hidden_size\": 64, \"intermediate_size\": 96," \
    " \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"num_key_value_heads\": 2, \"vocab_size\": 100%s}"
    char json[1024];
    target_config c;
    snprintf(json, sizeof json, QWEN3_BASE, ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [32, 48]}");
    CHECK(target_config_parse(&c, json, "t/config.json") == 0 && c.quant.method == TARGET_QUANT_FP8 &&
          c.quant.block_out == 32 && c.quant.block_in == 48);
    snprintf(json, sizeof json, QWEN3_BASE, "");
    CHECK(target_config_parse(&c, json, "t/config.json") == 0 && c.quant.method == TARGET_QUANT_NONE);
    snprintf(json, sizeof json, QWEN3_BASE, ", \"quantization_config\": {\"quant_method\": \"gptq\"}");
    CHECK_ERR(target_config_parse(&c, json, "t/config.json"),
              "t/config.json: 'quantization_config.quant_method' is \"gptq\": not supported (supported: fp8 "
              "block-quantised, mxfp4)");
}

// ------------------------------------------------------------------------------------ fp8 blocks

// t de-quantised: whole, by uneven runs of rows, and uploaded (F32 and BF16) in chunks of rows, each
// against ref (F32) and ref16 (BF16, may be NULL: bf16 of ref by the same rounding then).
static void check_dequant(const char *what, const target_quant_tensor *t, const float *ref, const uint16_t *ref16,
                          backend *be) {
    int64_t rows = target_quant_rows(t), cols = target_quant_cols(t), n = rows * cols;
    float *out = calloc((size_t)n, sizeof(float));
    CHECK(target_quant_dequant_rows(t, 0, rows, out) == 0);
    int bad = count_diff(out, ref, n);
    CHECK_MSG(bad == 0, "%s: %d of %lld values differ from the reference", what, bad, (long long)n);
    memset(out, 0, (size_t)n * sizeof(float));
    for (int64_t r = 0, step = 1; r < rows; r += step, step = step % 5 + 2) {
        int64_t k = rows - r < step ? rows - r : step;
        CHECK(target_quant_dequant_rows(t, r, k, out + r * cols) == 0);
    }
    bad = count_diff(out, ref, n);
    CHECK_MSG(bad == 0, "%s: by runs of rows, %d values differ", what, bad);

    int64_t saved = target_quant_chunk;
    float *dev = backend_alloc(be, (size_t)n * sizeof(float));
    uint16_t *dev16 = backend_alloc(be, (size_t)n * 2);
    float *host = calloc((size_t)n, sizeof(float));
    uint16_t *host16 = calloc((size_t)n, 2);
    const int64_t chunks[3] = {TARGET_QUANT_CHUNK, 3 * cols + 1, 1}; // whole, 3 rows, one row at a time
    for (int c = 0; c < 3; c++) {
        target_quant_chunk = chunks[c];
        backend_memset_zero(be, dev, (size_t)n * sizeof(float));
        CHECK(target_quant_upload(be, dev, DT_F32, t) == 0);
        backend_copy_to_host(be, host, dev, (size_t)n * sizeof(float));
        bad = count_diff(host, ref, n);
        CHECK(target_quant_upload(be, dev16, DT_BF16, t) == 0);
        backend_copy_to_host(be, host16, dev16, (size_t)n * 2);
        int bad16 = 0;
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = ref16 ? ref16[i] : bf16_from_f32(ref[i]);
            bad16 += !same_float(f32_from_bf16(host16[i]), f32_from_bf16(want));
        }
        CHECK_MSG(bad == 0 && bad16 == 0, "%s: upload in chunks of %lld elements: %d F32 and %d BF16 values differ", what,
                  (long long)chunks[c], bad, bad16);
    }
    target_quant_chunk = saved;
    CHECK_ERR(target_quant_upload(be, dev, DT_I32, t), "compute dtype I32");
    backend_free(be, dev);
    backend_free(be, dev16);
    free(host);
    free(host16);
    free(out);
}

static void test_fp8_fixture(const st_file *fx, backend *be) {
    st_dir d;
    if (open_fixture_dir(&d, "tests/reference/data/quant_fp8.safetensors", "fp8dir")) {
        test_fail(__FILE__, __LINE__, "fixture dir: %s", error_msg());
        return;
    }
    target_quant q = {.method = TARGET_QUANT_FP8, .block_out = 16, .block_in = 32};
    static const char *const names[] = {"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.experts.gate_up_proj",
                                        "model.layers.0.self_attn.o_proj.weight"};
    static const int64_t shapes[3][3] = {{37, 70, 0}, {2, 37, 70}, {20, 40, 0}};
    static const dtype scale_dt[3] = {DT_F32, DT_BF16, DT_F8_E8M0};
    for (int k = 0; k < 3; k++) {
        target_quant_tensor t;
        CHECK(target_quant_lookup(&q, &d, names[k], &t) == 0);
        int nd = shapes[k][2] ? 3 : 2;
        CHECK(t.kind == TARGET_QUANT_STORED_FP8 && t.ndim == nd && t.block_out == 16 && t.block_in == 32);
        for (int j = 0; j < nd; j++) CHECK(t.shape[j] == shapes[k][j]);
        if (t.kind != TARGET_QUANT_STORED_FP8) continue;
        CHECK(t.scale->dt == scale_dt[k] && t.w->dt == DT_F8_E4M3);
        CHECK(target_quant_disk_bytes(&t) == t.w->nbytes + t.scale->nbytes);
        char rn[160];
        snprintf(rn, sizeof rn, "ref.%s", names[k]);
        const st_entry *ref = fx_get(fx, rn);
        snprintf(rn, sizeof rn, "ref.%s.bf16", names[k]);
        const st_entry *ref16 = safetensors_find(fx, rn);
        if (ref) check_dequant(names[k], &t, ref->data, ref16 ? ref16->data : NULL, be);
        CHECK(k != 0 || ref16); // the fixture's bf16 rounding is torch's
    }
    CHECK(target_quant_disk_bytes(&(target_quant_tensor){0}) == 0);
    // the same weights read with the wrong block size: the scale's shape is refused
    target_quant wrong = {.method = TARGET_QUANT_FP8, .block_out = 32, .block_in = 32};
    target_quant_tensor t;
    CHECK_ERR(target_quant_lookup(&wrong, &d, names[0], &t),
              "tensor model.layers.0.mlp.down_proj.weight_scale_inv has shape [3, 3], want [2, 3] (weight [37, 70], "
              "scales ceil(out/32) x ceil(in/32))");
    safetensors_dir_close(&d);
}

// ------------------------------------------------------------------------------------ mxfp4

static void test_mxfp4_fixture(backend *be) {
    st_file fx;
    st_dir d;
    if (safetensors_open(&fx, test_src_path("tests/reference/data/quant_mxfp4.safetensors")) ||
        open_fixture_dir(&d, "tests/reference/data/quant_mxfp4.safetensors", "mxdir")) {
        test_fail(__FILE__, __LINE__, "mxfp4 fixture: %s", error_msg());
        return;
    }
    target_quant q = {.method = TARGET_QUANT_MXFP4, .block_out = 0, .block_in = 0};
    static const char *const names[] = {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"};
    static const int64_t shapes[2][3] = {{2, 64, 64}, {2, 64, 32}}; // [E, 2I, H], [E, H, I]: [E, out, in]
    for (int k = 0; k < 2; k++) {
        target_quant_tensor t;
        CHECK(target_quant_present(&d, names[k]));
        CHECK(target_quant_lookup(&q, &d, names[k], &t) == 0);
        CHECK(t.kind == TARGET_QUANT_STORED_MXFP4 && t.ndim == 3);
        for (int j = 0; j < 3; j++) CHECK(t.shape[j] == shapes[k][j]);
        if (t.kind != TARGET_QUANT_STORED_MXFP4) continue;
        CHECK(target_quant_disk_bytes(&t) == (size_t)(shapes[k][0] * shapes[k][1] * shapes[k][2] / 2 +
                                                      shapes[k][0] * shapes[k][1] * shapes[k][2] / 32));
        char rn[160];
        snprintf(rn, sizeof rn, "ref.%s.f32", names[k]);
        const st_entry *ref = fx_get(&fx, rn);
        // transformers keeps infinities from scale 255 / 254 (exact ldexp): so must we
        int inf = 0;
        for (int64_t i = 0; ref && i < target_quant_numel(&t); i++) inf += isinf(((const float *)ref->data)[i]) != 0;
        CHECK(inf > 0);
        if (ref) check_dequant(names[k], &t, ref->data, NULL, be);
    }
    CHECK(!target_quant_present(&d, "model.layers.0.mlp.experts.up_proj"));
    target_quant_tensor t;
    CHECK(target_quant_lookup(&q, &d, "model.layers.0.mlp.experts.up_proj", &t) == 0 && t.kind == TARGET_QUANT_ABSENT);
    target_quant none = {.method = TARGET_QUANT_NONE, .block_out = 0, .block_in = 0};
    CHECK_ERR(target_quant_lookup(&none, &d, names[0], &t),
              "tensor model.layers.0.mlp.experts.gate_up_proj is stored as MXFP4 "
              "(model.layers.0.mlp.experts.gate_up_proj_blocks) but config.json has no quantization_config");
    safetensors_dir_close(&d);
    safetensors_close(&fx);
}

// ------------------------------------------------------------------------------------ built here

// A directory with one model.safetensors of the given tensors.
typedef struct {
    const char *name;
    dtype dt;
    int ndim;
    int64_t shape[3];
} spec;

static int make_dir(st_dir *d, const char *tag, const spec *s, int n, void **data) {
    st_writer w;
    safetensors_writer_init(&w);
    for (int i = 0; i < n; i++) {
        tensor t = tensor_make(s[i].dt, NULL, DEVICE_CPU, s[i].ndim, s[i].shape);
        size_t bytes = tensor_bytes(&t);
        data[i] = calloc(bytes ? bytes : 1, 1);
        t.data = data[i];
        if (safetensors_writer_add(&w, s[i].name, t)) return -1;
    }
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", test_path(tag));
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = safetensors_writer_write(&w, path);
    safetensors_writer_free(&w);
    for (int i = 0; i < n; i++) free(data[i]);
    return rc ? rc : safetensors_dir_open(d, dir);
}

static void test_refusals(void) {
    const spec s[] = {
        {"a.weight", DT_F8_E4M3, 2, {5, 7}},           {"a.weight_scale_inv", DT_F32, 2, {3, 2}}, // blocks [2, 4]
        {"b.weight", DT_F8_E4M3, 2, {5, 7}},                                                      // no scale
        {"c.weight", DT_F8_E4M3, 2, {5, 7}},           {"c.weight_scale_inv", DT_F32, 2, {2, 3}}, // transposed
        {"e.weight", DT_F8_E4M3, 2, {5, 7}},           {"e.weight_scale_inv", DT_I32, 2, {3, 2}},
        {"f.weight", DT_F8_E5M2, 2, {5, 7}},           {"g.weight", DT_F8_E4M3, 1, {8}},
        {"g.weight_scale_inv", DT_F32, 1, {1}},        {"p.weight", DT_BF16, 2, {5, 7}},
        {"x_blocks", DT_U8, 3, {4, 2, 16}},            {"x_scales", DT_U8, 2, {4, 2}},
        {"y_blocks", DT_U8, 3, {4, 2, 16}},            {"z_scales", DT_U8, 2, {4, 2}},
        {"u_blocks", DT_U8, 3, {4, 2, 16}},            {"u_scales", DT_U8, 2, {4, 3}},
        {"v_blocks", DT_U8, 3, {4, 2, 15}},            {"v_scales", DT_U8, 2, {4, 2}},
        {"w_blocks", DT_I8, 3, {4, 2, 16}},            {"w_scales", DT_U8, 2, {4, 2}},
    };
    void *data[32];
    st_dir d;
    if (make_dir(&d, "refuse", s, (int)(sizeof s / sizeof s[0]), data)) {
        test_fail(__FILE__, __LINE__, "refusal dir: %s", error_msg());
        return;
    }
    target_quant fp8 = {.method = TARGET_QUANT_FP8, .block_out = 2, .block_in = 4}, mx = {.method = TARGET_QUANT_MXFP4, .block_out = 0, .block_in = 0}, none = {.method = TARGET_QUANT_NONE, .block_out = 0, .block_in = 0};
    target_quant_tensor t;
    CHECK(target_quant_lookup(&fp8, &d, "a.weight", &t) == 0 && t.kind == TARGET_QUANT_STORED_FP8);
    CHECK(target_quant_lookup(&fp8, &d, "p.weight", &t) == 0 && t.kind == TARGET_QUANT_PLAIN && t.w->dt == DT_BF16);
    CHECK(target_quant_lookup(&none, &d, "p.weight", &t) == 0 && t.kind == TARGET_QUANT_PLAIN);
    CHECK(target_quant_lookup(&fp8, &d, "nothing.weight", &t) == 0 && t.kind == TARGET_QUANT_ABSENT && !t.w);
    CHECK_ERR(target_quant_lookup(&none, &d, "a.weight", &t),
              "tensor a.weight is F8_E4M3 but config.json has no quantization_config");
    CHECK_ERR(target_quant_lookup(&mx, &d, "a.weight", &t), "tensor a.weight is F8_E4M3 but config.json declares mxfp4");
    CHECK_ERR(target_quant_lookup(&fp8, &d, "b.weight", &t),
              "tensor b.weight is F8_E4M3 but its scale b.weight_scale_inv is missing");
    CHECK_ERR(target_quant_lookup(&fp8, &d, "c.weight", &t),
              "tensor c.weight_scale_inv has shape [2, 3], want [3, 2] (weight [5, 7], scales ceil(out/2) x ceil(in/4))");
    CHECK_ERR(target_quant_lookup(&fp8, &d, "e.weight", &t), "tensor e.weight_scale_inv has dtype I32");
    CHECK_ERR(target_quant_lookup(&fp8, &d, "f.weight", &t),
              "tensor f.weight is F8_E5M2 (float8_e5m2): not supported (fp8 weights must be F8_E4M3");
    CHECK_ERR(target_quant_lookup(&fp8, &d, "g.weight", &t), "tensor g.weight is F8_E4M3 of shape [8]: an fp8 weight is a matrix");
    CHECK(target_quant_lookup(&mx, &d, "x", &t) == 0 && t.kind == TARGET_QUANT_STORED_MXFP4 && t.ndim == 2 &&
          t.shape[0] == 4 && t.shape[1] == 64);
    CHECK_ERR(target_quant_lookup(&fp8, &d, "x", &t), "tensor x is stored as MXFP4 (x_blocks) but config.json declares fp8");
    CHECK_ERR(target_quant_lookup(&mx, &d, "y", &t), "tensor y: y_scales is missing (MXFP4 stores y_blocks and y_scales)");
    CHECK_ERR(target_quant_lookup(&mx, &d, "z", &t), "tensor z: z_blocks is missing");
    CHECK_ERR(target_quant_lookup(&mx, &d, "u", &t),
              "tensor u_scales has shape [4, 3], want [4, 2] (one scale per group of u_blocks [4, 2, 16])");
    CHECK_ERR(target_quant_lookup(&mx, &d, "v", &t), "tensor v_blocks has shape [4, 2, 15]: want [..., rows, groups, 16]");
    CHECK_ERR(target_quant_lookup(&mx, &d, "w", &t), "tensor w_blocks has dtype I8 (MXFP4 blocks and scales are U8)");
    safetensors_dir_close(&d);
}

// Random fp8 codes and scales, de-quantised against a direct loop: blocks [3, 4] over [2, 7, 10]
// (partial last blocks in both dims, a stack of two), and one scale per matrix in three spellings.
static void test_rule_random(void) {
    const spec s[] = {{"w.weight", DT_F8_E4M3, 3, {2, 7, 10}}, {"w.weight_scale_inv", DT_F32, 3, {2, 3, 3}},
                      {"m.weight", DT_F8_E4M3, 2, {7, 10}},    {"m.weight_scale_inv", DT_F32, 1, {1}},
                      {"n.weight", DT_F8_E4M3, 3, {2, 7, 10}}, {"n.weight_scale_inv", DT_F32, 1, {2}},
                      {"o.weight", DT_F8_E4M3, 3, {2, 7, 10}}, {"o.weight_scale_inv", DT_F32, 3, {2, 1, 1}},
                      {"b.weight", DT_F8_E4M3, 3, {2, 7, 10}}, {"b.weight_scale_inv", DT_F32, 3, {2, 1, 2}}};
    void *data[10];
    st_dir d;
    if (make_dir(&d, "rule", s, 10, data)) {
        test_fail(__FILE__, __LINE__, "rule dir: %s", error_msg());
        return;
    }
    // fill the (mapped, read-only) tensors: rewrite the file with random contents instead
    safetensors_dir_close(&d);
    st_writer w;
    safetensors_writer_init(&w);
    test_rand_seed(5);
    for (int i = 0; i < 10; i++) {
        tensor t = tensor_make(s[i].dt, NULL, DEVICE_CPU, s[i].ndim, s[i].shape);
        int64_t n = tensor_numel(&t);
        data[i] = malloc(tensor_bytes(&t));
        for (int64_t j = 0; j < n; j++) {
            if (s[i].dt == DT_F8_E4M3) {
                uint8_t c = (uint8_t)test_rand_u32();
                if ((c & 0x7f) == 0x7f) c ^= 1; // no NaN codes in a weight
                ((uint8_t *)data[i])[j] = c;
            } else {
                ((float *)data[i])[j] = (float)(test_rand_uniform() * 0.01 + 1e-4);
            }
        }
        t.data = data[i];
        safetensors_writer_add(&w, s[i].name, t);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", test_path("rule"));
    CHECK(safetensors_writer_write(&w, path) == 0);
    safetensors_writer_free(&w);
    CHECK(safetensors_dir_open(&d, test_path("rule")) == 0);
    const uint8_t *wq = data[0];
    const float *ws = data[1];
    float ref[140], got[140];
    for (int m = 0; m < 2; m++)
        for (int o = 0; o < 7; o++)
            for (int i = 0; i < 10; i++)
                ref[(m * 7 + o) * 10 + i] = f32_from_f8e4m3(wq[(m * 7 + o) * 10 + i]) * ws[(m * 3 + o / 3) * 3 + i / 4];
    target_quant q = {.method = TARGET_QUANT_FP8, .block_out = 3, .block_in = 4};
    target_quant_tensor t;
    CHECK(target_quant_lookup(&q, &d, "w.weight", &t) == 0 && target_quant_dequant_rows(&t, 0, 14, got) == 0);
    CHECK_MSG(count_diff(got, ref, 140) == 0, "blocks [3, 4] over [2, 7, 10] differ from the direct loop");
    CHECK(target_quant_rows(&t) == 14 && target_quant_cols(&t) == 10 && target_quant_numel(&t) == 140);

    target_quant per = {.method = TARGET_QUANT_FP8, .block_out = 0, .block_in = 0};
    static const char *const pm[] = {"m.weight", "n.weight", "o.weight"};
    for (int k = 0; k < 3; k++) {
        int idx = 2 + 2 * k, mats = k == 0 ? 1 : 2;
        const uint8_t *pq = data[idx];
        const float *ps = data[idx + 1];
        for (int j = 0; j < mats * 70; j++) ref[j] = f32_from_f8e4m3(pq[j]) * ps[j / 70];
        CHECK(target_quant_lookup(&per, &d, pm[k], &t) == 0 && t.block_out == 7 && t.block_in == 10);
        CHECK(target_quant_dequant_rows(&t, 0, mats * 7, got) == 0);
        CHECK_MSG(count_diff(got, ref, mats * 70) == 0, "%s: one scale per matrix", pm[k]);
    }
    CHECK_ERR(target_quant_lookup(&per, &d, "b.weight", &t),
              "tensor b.weight_scale_inv has shape [2, 1, 2], want [2, 1, 1] (weight [2, 7, 10], scales one per matrix)");
    safetensors_dir_close(&d);
    for (int i = 0; i < 10; i++) free(data[i]);
}

int main(void) {
    st_file fx;
    int have = safetensors_open(&fx, test_src_path("tests/reference/data/quant_fp8.safetensors")) == 0;
    CHECK_MSG(have, "quant_fp8.safetensors: %s", error_msg());
    backend be;
    CHECK(backend_open(&be, "cpu", 0) == 0);
    if (have) test_f8_decoding(&fx);
    test_config();
    if (have) test_fp8_fixture(&fx, &be);
    test_mxfp4_fixture(&be);
    test_refusals();
    test_rule_random();
    if (have) safetensors_close(&fx);
    backend_close(&be);
    return test_finish("test_target_quant");
}
