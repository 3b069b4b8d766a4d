// test_ops_quant.c: the de-quantisation ops' CPU twin (common/quant/ops_quant.h) and what
// teacher.quant_weights resident builds on it (teacher/target_quant.h, target.h).
//
//   fixtures      the committed weights of tests/reference/data/quant_fp8.safetensors (partial last
//                 blocks in both dims; F32, BF16 and F8_E8M0 scales; a 3-D stack of experts) and
//                 quant_mxfp4.safetensors (gpt-oss experts, scales 0 / 254 / 255 among them): kept as
//                 stored on a CPU backend (target_quant_upload_stored: codes as in the file, scales
//                 f32 / e8m0) and de-quantised by the op, bit for bit equal to target_quant's
//                 load-time path (target_quant_dequant_rows) and to the fixture's torch reference
//   random        ops_dequant_fp8 against a direct loop of the rule (f32_from_f8e4m3 x scale) on
//                 shapes with partial blocks, blocks wider than the matrix, 1-wide blocks, all 256
//                 codes (the NaN codes give the canonical NaN 0x7FC00000, as do 0 x an infinite scale
//                 and an F8_E8M0 NaN scale); ops_dequant_mxfp4 against ldexp on every scale byte
//   plans         target_quant_planned on the published layouts (DeepSeek-V3 / Qwen3 FP8, gpt-oss
//                 MXFP4), modules_to_not_convert (transformers 4's substring and 5's re.match), the
//                 stored bytes, and target_stage_weight_bytes / _scratch of the FP8 fixtures' configs
//                 resident against dequantize; teacher.quant_weights and DFLASH_QUANT_WEIGHTS
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
#include "common/kernels/ops.h"
#include "common/quant/ops_quant.h"
#include "common/quant/ops_quant_cpu.h"
#include "teacher/target.h"
#include "teacher/target_config.h"
#include "teacher/target_quant.h"
#include "testing.h"
#include "testing_quant.h"

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

// values that differ in their bits (NaN payloads included: the canonical NaN is part of the rule)
static int count_diff_bits(const float *a, const float *b, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += bits(a[i]) != bits(b[i]);
    return bad;
}

// same, or both NaN (torch's NaN payloads are not ours)
static int count_diff_nan(const float *a, const float *b, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += isnan(a[i]) || isnan(b[i]) ? !(isnan(a[i]) && isnan(b[i])) : bits(a[i]) != bits(b[i]);
    return bad;
}

static float canon_nan(float v) {
    if (v == v) return v;
    uint32_t u = 0x7FC00000u;
    memcpy(&v, &u, 4);
    return v;
}

// t kept as stored on be (a CPU backend) and de-quantised by the op, as target.c's resident load does
// (one job for the whole tensor), into out (f32).
static void resident_dequant(backend *be, const target_quant_tensor *t, float *out) {
    size_t cb = target_quant_stored_codes(t), sb = target_quant_stored_scales(t);
    void *codes = backend_alloc(be, cb ? cb : 1), *scales = backend_alloc(be, sb ? sb : 1);
    target_quant_upload_stored(be, t, codes, scales);
    int64_t rows = target_quant_rows(t), cols = target_quant_cols(t);
    float *dst = backend_alloc(be, (size_t)(rows * cols) * sizeof(float));
    target_quant_job j = {.kind = t->kind, .dst = dst, .codes = codes, .scales = scales};
    if (t->kind == TARGET_QUANT_STORED_FP8)
        j.O = t->shape[t->ndim - 2], j.I = cols, j.M = rows / j.O, j.bo = t->block_out, j.bi = t->block_in;
    else j.M = 1, j.O = rows, j.I = cols;
    target_quant_job_run(be, &j);
    backend_copy_to_host(be, out, dst, (size_t)(rows * cols) * sizeof(float));
    backend_free(be, dst);
    backend_free(be, codes);
    backend_free(be, scales);
}

static void check_resident(const char *what, const target_quant_tensor *t, const float *ref, backend *be) {
    int64_t n = target_quant_numel(t);
    float *host = calloc((size_t)n, sizeof(float)), *res = calloc((size_t)n, sizeof(float));
    CHECK(target_quant_dequant_rows(t, 0, target_quant_rows(t), host) == 0);
    resident_dequant(be, t, res);
    int bad = count_diff_bits(res, host, n), bad_ref = ref ? count_diff_nan(res, ref, n) : 0;
    CHECK_MSG(bad == 0, "%s: %d of %lld values of the resident op differ from the load-time path", what, bad, (long long)n);
    CHECK_MSG(bad_ref == 0, "%s: %d of %lld values differ from the fixture's reference", what, bad_ref, (long long)n);
    printf("  %-44s %6lld values: resident op = load-time path = reference (%d, %d differ)\n", what, (long long)n, bad,
           bad_ref);
    free(host);
    free(res);
}

static void test_fixtures(backend *be) {
    st_file fx;
    st_dir d;
    if (safetensors_open(&fx, test_src_path("tests/reference/data/quant_fp8.safetensors")) ||
        open_fixture_dir(&d, "tests/reference/data/quant_fp8.safetensors", "fp8dir")) {
        test_fail(__FILE__, __LINE__, "fp8 fixture: %s", error_msg());
        return;
    }
    target_quant q = {.method = TARGET_QUANT_FP8, .block_out = 16, .block_in = 32};
    static const char *const names[] = {"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.experts.gate_up_proj",
                                        "model.layers.0.self_attn.o_proj.weight"};
    for (int k = 0; k < 3; k++) {
        target_quant_tensor t;
        CHECK(target_quant_lookup(&q, &d, names[k], &t) == 0 && t.kind == TARGET_QUANT_STORED_FP8);
        if (t.kind != TARGET_QUANT_STORED_FP8) continue;
        CHECK(target_quant_stored_codes(&t) == t.w->nbytes);
        CHECK(target_quant_stored_scales(&t) == t.scale->nbytes / dtype_size(t.scale->dt) * sizeof(float));
        char rn[160];
        snprintf(rn, sizeof rn, "ref.%s", names[k]);
        const st_entry *ref = safetensors_find(&fx, rn);
        CHECK_MSG(ref != NULL, "fixture tensor %s missing", rn);
        check_resident(names[k], &t, ref ? ref->data : NULL, be);
    }
    safetensors_dir_close(&d);
    safetensors_close(&fx);

    if (safetensors_open(&fx, test_src_path("tests/reference/data/quant_mxfp4.safetensors")) ||
        open_fixture_dir(&d, "tests/reference/data/quant_mxfp4.safetensors", "mxdir")) {
        test_fail(__FILE__, __LINE__, "mxfp4 fixture: %s", error_msg());
        return;
    }
    target_quant mq = {.method = TARGET_QUANT_MXFP4, .block_out = 0, .block_in = 0};
    static const char *const mx[] = {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"};
    for (int k = 0; k < 2; k++) {
        target_quant_tensor t;
        CHECK(target_quant_lookup(&mq, &d, mx[k], &t) == 0 && t.kind == TARGET_QUANT_STORED_MXFP4);
        if (t.kind != TARGET_QUANT_STORED_MXFP4) continue;
        CHECK(target_quant_stored_codes(&t) == (size_t)target_quant_numel(&t) / 2);
        CHECK(target_quant_stored_scales(&t) == (size_t)target_quant_numel(&t) / 32);
        char rn[160];
        snprintf(rn, sizeof rn, "ref.%s.f32", mx[k]);
        const st_entry *ref = safetensors_find(&fx, rn);
        CHECK_MSG(ref != NULL, "fixture tensor %s missing", rn);
        check_resident(mx[k], &t, ref ? ref->data : NULL, be);
    }
    safetensors_dir_close(&d);
    safetensors_close(&fx);
}

// ops_dequant_fp8 on the CPU backend against the rule written out, on M matrices [O, I], blocks [bo, bi].
static void fp8_case(backend *be, int64_t M, int64_t O, int64_t I, int64_t bo, int64_t bi, int specials) {
    int64_t so = (O + bo - 1) / bo, si = (I + bi - 1) / bi, n = M * O * I, ns = M * so * si;
    uint8_t *codes = malloc((size_t)n);
    float *scales = malloc((size_t)ns * sizeof(float)), *ref = malloc((size_t)n * sizeof(float));
    float *out = backend_alloc(be, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) codes[i] = (uint8_t)(specials ? i : test_rand_u32()); // specials: every code in turn
    for (int64_t i = 0; i < ns; i++) scales[i] = (float)(test_rand_uniform() * 0.01 + 1e-4);
    if (specials && ns >= 4) {
        scales[0] = INFINITY;           // 0 x inf = NaN, the others inf
        scales[1] = 0.0f;
        scales[2] = f32_from_f8e8m0(0xFF); // an F8_E8M0 NaN scale
        scales[3] = 0x1p-127f;          // subnormal products
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++) {
                int64_t e = (m * O + o) * I + i;
                ref[e] = canon_nan(f32_from_f8e4m3(codes[e]) * scales[(m * so + o / bo) * si + i / bi]);
            }
    ops_dequant_fp8(be, out, codes, scales, M, O, I, bo, bi);
    int bad = count_diff_bits(out, ref, n), nan = 0;
    for (int64_t i = 0; i < n; i++) nan += isnan(out[i]) != 0;
    CHECK_MSG(bad == 0, "fp8 [%lld, %lld, %lld] blocks [%lld, %lld]: %d of %lld values differ from the rule", (long long)M,
              (long long)O, (long long)I, (long long)bo, (long long)bi, bad, (long long)n);
    CHECK(!specials || nan > 0);
    // the rows one by one, as the load-time path runs them
    float *row = malloc((size_t)I * sizeof(float));
    int bad_rows = 0;
    for (int64_t r = 0; r < M * O; r++) {
        int64_t m = r / O, o = r % O;
        cpu_dequant_fp8_row(row, codes + r * I, scales + (m * so + o / bo) * si, I, bi);
        bad_rows += count_diff_bits(row, ref + r * I, I);
    }
    CHECK_MSG(bad_rows == 0, "fp8 rows: %d values differ", bad_rows);
    free(row);
    backend_free(be, out);
    free(codes);
    free(scales);
    free(ref);
}

static void mxfp4_case(backend *be, int64_t N, int64_t G, int every_scale) {
    static const float fp4[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    int64_t nb = N * G * 16, n = N * G * 32;
    uint8_t *blocks = malloc((size_t)nb), *scales = malloc((size_t)(N * G));
    float *ref = malloc((size_t)n * sizeof(float)), *out = backend_alloc(be, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < nb; i++) blocks[i] = (uint8_t)test_rand_u32();
    for (int64_t i = 0; i < N * G; i++) scales[i] = (uint8_t)(every_scale ? i : 110 + test_rand_below(30));
    for (int64_t g = 0; g < N * G; g++)
        for (int j = 0; j < 32; j++) {
            int code = (blocks[g * 16 + j / 2] >> (j % 2 ? 4 : 0)) & 0xF;
            double v = (code & 8 ? -1.0 : 1.0) * fp4[code & 7] * ldexp(1.0, scales[g] - 127); // exact in double
            ref[g * 32 + j] = (float)v; // one rounding (to inf past the range)
        }
    ops_dequant_mxfp4(be, out, blocks, scales, N, G);
    int bad = count_diff_bits(out, ref, n);
    CHECK_MSG(bad == 0, "mxfp4 [%lld, %lld x 32]: %d of %lld values differ from ldexp", (long long)N, (long long)G, bad,
              (long long)n);
    backend_free(be, out);
    free(blocks);
    free(scales);
    free(ref);
}

static void test_random(backend *be) {
    test_rand_seed(7);
    fp8_case(be, 1, 37, 70, 16, 32, 0); // partial last blocks in both dims
    fp8_case(be, 3, 7, 10, 3, 4, 0);    // a stack, partial blocks
    fp8_case(be, 2, 5, 9, 128, 128, 0); // one block wider than the matrix
    fp8_case(be, 2, 5, 9, 1, 1, 0);     // a scale per element
    fp8_case(be, 1, 1, 1, 128, 128, 0); // one element
    fp8_case(be, 2, 8, 16, 8, 16, 1);   // every code (NaN ones included), inf / 0 / NaN / tiny scales
    fp8_case(be, 1, 16, 16, 4, 4, 1);
    fp8_case(be, 4, 128, 300, 128, 128, 0); // big enough for the threads
    mxfp4_case(be, 4, 3, 0);
    mxfp4_case(be, 16, 16, 1); // every scale byte 0..255 (2^-127, 2^128: infinities, zeros stay 0)
    mxfp4_case(be, 300, 9, 0);
    printf("  random: fp8 on 8 shapes and mxfp4 on 3, = the rule bit for bit\n");
}

// ------------------------------------------------------------------------------------ plans

static void test_planned(void) {
    target_quant q;
    CHECK(target_quant_weights_set("resident", "test") == 0);
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}") == 0);
    CHECK(q.resident == 1 && q.skip == NULL && q.n_skip == 0);
    // DeepSeek-V3: every linear of the attention and the MLPs, never the router, norms or embeddings
    static const char *const fp8_yes[] = {
        "model.layers.3.self_attn.q_a_proj.weight", "model.layers.3.self_attn.q_b_proj.weight",
        "model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "model.layers.3.self_attn.kv_b_proj.weight",
        "model.layers.3.self_attn.o_proj.weight", "model.layers.3.mlp.experts.17.gate_proj.weight",
        "model.layers.3.mlp.experts.17.down_proj.weight", "model.layers.3.mlp.shared_experts.up_proj.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.1.linear_attn.in_proj_qkv.weight"};
    for (size_t i = 0; i < sizeof fp8_yes / sizeof fp8_yes[0]; i++)
        CHECK_MSG(target_quant_planned(&q, fp8_yes[i], 2, 1) == TARGET_QUANT_STORED_FP8, "%s: want fp8", fp8_yes[i]);
    CHECK(target_quant_planned(&q, "model.layers.3.mlp.experts.gate_up_proj", 3, 1) == TARGET_QUANT_STORED_FP8);
    static const char *const fp8_no[] = {"model.layers.3.mlp.gate.weight", "model.layers.3.mlp.router.weight",
                                         "model.layers.3.mlp.shared_expert_gate.weight",
                                         "model.layers.3.self_attn.q_a_layernorm.weight"};
    for (size_t i = 0; i < sizeof fp8_no / sizeof fp8_no[0]; i++)
        CHECK_MSG(target_quant_planned(&q, fp8_no[i], i == 3 ? 1 : 2, 1) == TARGET_QUANT_PLAIN, "%s: want plain", fp8_no[i]);
    CHECK(target_quant_planned(&q, "model.embed_tokens.weight", 2, 0) == TARGET_QUANT_PLAIN);
    CHECK(target_quant_planned(&q, "lm_head.weight", 2, 0) == TARGET_QUANT_PLAIN);
    CHECK(target_quant_planned(&q, "model.layers.1.linear_attn.conv1d.weight", 3, 1) == TARGET_QUANT_PLAIN);
    // stored bytes: codes 1 a value, f32 scales per block; fused gate_up as the per-expert files hold it
    size_t cb, sb;
    int64_t s2[2] = {300, 200}, s3[3] = {4, 2 * 24, 72};
    target_quant_planned_bytes(&q, TARGET_QUANT_STORED_FP8, "x.weight", 2, s2, &cb, &sb);
    CHECK(cb == 60000 && sb == 3 * 2 * 4);
    target_quant b16 = q;
    b16.block_out = b16.block_in = 16;
    target_quant_planned_bytes(&b16, TARGET_QUANT_STORED_FP8, "m.experts.gate_up_proj", 3, s3, &cb, &sb);
    CHECK(cb == 4 * 48 * 72 && sb == (size_t)(4 * (2 * 2) * 5) * 4); // 2 x ceil(24/16) rows, not ceil(48/16)
    target_quant_planned_bytes(&b16, TARGET_QUANT_STORED_FP8, "m.experts.down_proj", 3, s3, &cb, &sb);
    CHECK(sb == (size_t)(4 * 3 * 5) * 4);

    // modules_to_not_convert: gpt-oss's list (re.match with '*'), a substring, an anchored pattern
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"modules_to_not_convert\": "
                       "[\"model.layers.*.self_attn\", \"lm_head\", \"mlp.shared_experts\", \"^model\\\\.layers\\\\.2\\\\.\"]}}") == 0);
    CHECK(q.n_skip == 4 && q.skip && strcmp(q.skip, "model.layers.*.self_attn") == 0);
    CHECK(target_quant_planned(&q, "model.layers.7.self_attn.o_proj.weight", 2, 1) == TARGET_QUANT_PLAIN);
    CHECK(target_quant_planned(&q, "model.layers.7.mlp.shared_experts.up_proj.weight", 2, 1) == TARGET_QUANT_PLAIN);
    CHECK(target_quant_planned(&q, "model.layers.2.mlp.down_proj.weight", 2, 1) == TARGET_QUANT_PLAIN);
    CHECK(target_quant_planned(&q, "model.layers.20.mlp.down_proj.weight", 2, 1) == TARGET_QUANT_STORED_FP8);
    CHECK(target_quant_planned(&q, "model.layers.7.mlp.experts.3.up_proj.weight", 2, 1) == TARGET_QUANT_STORED_FP8);
    const char *first = q.skip;
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"modules_to_not_convert\": "
                       "[\"model.layers.*.self_attn\", \"lm_head\", \"mlp.shared_experts\", \"^model\\\\.layers\\\\.2\\\\.\"]}}") == 0);
    CHECK(q.skip == first); // interned: one copy a list
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"modules_to_not_convert\": \"lm_head\"}}"),
              "'quantization_config.modules_to_not_convert' is \"lm_head\": want a list of module names");
    CHECK_ERR(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\", \"modules_to_not_convert\": [3]}}"),
              "'quantization_config.modules_to_not_convert' holds 3");

    // mxfp4 (gpt-oss as published): the experts only
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"mxfp4\", \"modules_to_not_convert\": "
                       "[\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", \"model.embed_tokens\", \"lm_head\"]}}") == 0);
    CHECK(target_quant_planned(&q, "model.layers.4.mlp.experts.gate_up_proj", 3, 1) == TARGET_QUANT_STORED_MXFP4);
    CHECK(target_quant_planned(&q, "model.layers.4.mlp.experts.down_proj", 3, 1) == TARGET_QUANT_STORED_MXFP4);
    CHECK(target_quant_planned(&q, "model.layers.4.self_attn.q_proj.weight", 2, 1) == TARGET_QUANT_PLAIN);
    CHECK(target_quant_planned(&q, "model.layers.4.mlp.router.weight", 2, 1) == TARGET_QUANT_PLAIN);
    target_quant_planned_bytes(&q, TARGET_QUANT_STORED_MXFP4, "e.gate_up_proj", 3, s3, &cb, &sb);
    CHECK(cb == 4 * 48 * 72 / 2 && sb == 4 * 48 * 72 / 32);
    // an experts module left out: its fused parameters too
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"mxfp4\", \"modules_to_not_convert\": "
                       "[\"model.layers.4.mlp.experts\"]}}") == 0);
    CHECK(target_quant_planned(&q, "model.layers.4.mlp.experts.gate_up_proj", 3, 1) == TARGET_QUANT_PLAIN);
    CHECK(target_quant_planned(&q, "model.layers.5.mlp.experts.gate_up_proj", 3, 1) == TARGET_QUANT_STORED_MXFP4);

    // the setting: dequantize parses to not resident; the environment is the default until set
    CHECK(target_quant_weights_set("dequantize", "test") == 0 && target_quant_weights_mode() == TARGET_QUANT_WEIGHTS_DEQUANTIZE);
    CHECK(parse_qc(&q, "{\"quantization_config\": {\"quant_method\": \"fp8\"}}") == 0 && q.resident == 0);
    CHECK_ERR(target_quant_weights_set("bf16", "teacher.quant_weights"),
              "teacher.quant_weights is \"bf16\": want resident (quantised weights kept as stored on the device");
    CHECK(target_quant_weights_set("resident", "test") == 0);
    CHECK(parse_qc(&q, "{\"hidden_size\": 8}") == 0 && q.resident == 0); // nothing quantised: nothing resident
}

// The plans: the fixtures' configs and the published shapes (examples/), resident against dequantize.
// Resident counts each quantised tensor at its stored size (codes + f32 / e8m0 scales, each buffer
// aligned) and adds one layer scratch, the largest layer's quantised tensors at compute size; on the
// tiny fixtures in bf16 the alignment of many small buffers can outweigh the saving (it is shown), on
// the published models it is about half (FP8) of the bf16 weights.
static void test_plan_bytes(void) {
    static const char *const models[] = {"tests/reference/data/hf/qwen3_fp8", "tests/reference/data/hf/deepseek_v3_fp8",
                                         "tests/reference/data/hf/gpt_oss_mxfp4", "examples/deepseek-v3",
                                         "examples/kimi-k2"};
    for (int k = 0; k < 5; k++) {
        target_config res, deq;
        CHECK(target_quant_weights_set("resident", "test") == 0);
        int ok = target_config_load(&res, test_src_path(models[k])) == 0;
        CHECK(target_quant_weights_set("dequantize", "test") == 0);
        ok = ok && target_config_load(&deq, test_src_path(models[k])) == 0;
        CHECK_MSG(ok, "%s: %s", models[k], error_msg());
        if (!ok) continue;
        CHECK(res.quant.resident == 1 && deq.quant.resident == 0);
        for (int bf = 0; bf < 2; bf++) {
            dtype dt = bf ? DT_BF16 : DT_F32;
            int64_t L = res.n_layers;
            size_t r = target_stage_weight_bytes(&res, dt, 0, L), d = target_stage_weight_bytes(&deq, dt, 0, L);
            size_t rs = target_stage_weight_scratch(&res, dt, 0, L), ds = target_stage_weight_scratch(&deq, dt, 0, L);
            CHECK_MSG(rs > 0 && ds == 0 && (bf ? k < 3 || (double)r < 0.55 * (double)d : r < d),
                      "%s %s: resident %zu (scratch %zu) vs dequantize %zu", models[k], dtype_name(dt), r, rs, d);
            // each layer alone: its scratch is its own quantised tensors; the stages' sum covers the whole
            size_t sum = 0, top = 0;
            for (int64_t l = 0; l < L; l++) {
                size_t s = target_stage_weight_scratch(&res, dt, l, l + 1);
                if (s > top) top = s;
                sum += target_stage_weight_bytes(&res, dt, l, l + 1) - s;
            }
            CHECK(top == rs);
            CHECK(sum + rs >= r); // every layer's fixed buffers (inv_freq) counted again per stage
            if (bf)
                printf("  %-40s bf16: resident %zu bytes (layer scratch %zu) vs dequantize %zu (%.3fx)\n", models[k], r, rs,
                       d, (double)r / (double)d);
            int64_t b[8];
            int G = L >= 7 ? 7 : 2;
            CHECK(target_stage_split(&res, dt, G, b) == 0 && b[0] == 0 && b[1] > 0 && b[G] == L);
        }
    }
    CHECK(target_quant_weights_set("resident", "test") == 0);
}

int main(void) {
    backend be;
    CHECK(backend_open(&be, "cpu", 0) == 0);
    printf("ops_dequant_fp8 / ops_dequant_mxfp4 (CPU twin)\n");
    test_fixtures(&be);
    test_random(&be);
    test_planned();
    test_plan_bytes();
    backend_close(&be);
    return test_finish("test_ops_quant");
}
