// test_ops_quant_cuda.c: the de-quantisation ops (common/quant/ops_quant.h) on CUDA against the
// CPU twin, bit for bit (skipped, exit 77, without a GPU; runs in the emulator build): the CUDA
// kernel's bf16 output must be bf16_from_f32 (half.c, nearest even) of the twin's f32, the canonical
// NaN included, since the two settings of teacher.quant_weights on CUDA are the kernel (resident) and
// the host's de-quantisation rounded by bf16_from_f32 (dequantize). Per case one line
// `op  differing_values  0  ok|FAIL`.
//   fp8     random codes and scales on shapes with partial blocks in both dims, blocks wider than the
//           matrix, 1-wide blocks, a stack of matrices, every code (NaN ones) with inf / 0 / NaN /
//           subnormal scales, rows wider than a block of threads, more rows than one grid pass
//   mxfp4   random blocks, every scale byte (2^-127 subnormals, 2^128: infinities and zeros)
//   fixtures  the committed quant_fp8 / quant_mxfp4 weights through target_quant: kept as stored on
//           the GPU and de-quantised by the op (resident) against target_quant_upload in BF16
//           (dequantize), the whole of each tensor
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/half.h"
#include "common/data/safetensors.h"
#include "common/quant/ops_quant.h"
#include "teacher/target_quant.h"
#include "testing.h"
#include "testing_quant.h"
#include "testing_device.h"

static backend cpu, gpu;

// bf16 bits of the GPU's output against bf16_from_f32 of the CPU's f32: values that differ
static int64_t diff_bf16(const uint16_t *g, const float *c, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += g[i] != bf16_from_f32(c[i]);
    return bad;
}

static void fp8_case(const char *what, int64_t M, int64_t O, int64_t I, int64_t bo, int64_t bi, int specials) {
    int64_t so = (O + bo - 1) / bo, si = (I + bi - 1) / bi, n = M * O * I, ns = M * so * si;
    uint8_t *codes = xmalloc((size_t)n);
    float *scales = xmalloc((size_t)ns * sizeof(float));
    for (int64_t i = 0; i < n; i++) codes[i] = (uint8_t)(specials ? i : test_rand_u32());
    for (int64_t i = 0; i < ns; i++) scales[i] = (float)(test_rand_uniform() * 0.02 + 1e-5);
    if (specials && ns >= 4) {
        scales[0] = INFINITY;
        scales[1] = 0.0f;
        scales[2] = f32_from_f8e8m0(0xFF);
        scales[3] = 0x1p-127f;
    }
    float *c_out = dev_alloc(&cpu, (size_t)n * sizeof(float));
    ops_dequant_fp8(&cpu, c_out, codes, scales, M, O, I, bo, bi);
    void *g_codes = dev_up_raw(&gpu, codes, (size_t)n), *g_scales = dev_up_raw(&gpu, scales, (size_t)ns * sizeof(float));
    void *g_out = dev_alloc(&gpu, (size_t)n * 2);
    ops_dequant_fp8(&gpu, g_out, g_codes, g_scales, M, O, I, bo, bi);
    uint16_t *g = dev_down_raw(&gpu, g_out, (size_t)n * 2);
    char op[128];
    snprintf(op, sizeof op, "dequant_fp8 %s [%lld, %lld, %lld] blocks [%lld, %lld]", what, (long long)M, (long long)O,
             (long long)I, (long long)bo, (long long)bi);
    test_report(op, (double)diff_bf16(g, c_out, n), 0);
    free(g);
    backend_free(&gpu, g_out);
    backend_free(&gpu, g_codes);
    backend_free(&gpu, g_scales);
    backend_free(&cpu, c_out);
    free(codes);
    free(scales);
}

static void mxfp4_case(const char *what, int64_t N, int64_t G, int every_scale) {
    int64_t nb = N * G * 16, n = N * G * 32;
    uint8_t *blocks = xmalloc((size_t)nb), *scales = xmalloc((size_t)(N * G));
    for (int64_t i = 0; i < nb; i++) blocks[i] = (uint8_t)test_rand_u32();
    for (int64_t i = 0; i < N * G; i++) scales[i] = (uint8_t)(every_scale ? i : 100 + test_rand_below(50));
    float *c_out = dev_alloc(&cpu, (size_t)n * sizeof(float));
    ops_dequant_mxfp4(&cpu, c_out, blocks, scales, N, G);
    void *g_blocks = dev_up_raw(&gpu, blocks, (size_t)nb), *g_scales = dev_up_raw(&gpu, scales, (size_t)(N * G));
    void *g_out = dev_alloc(&gpu, (size_t)n * 2);
    ops_dequant_mxfp4(&gpu, g_out, g_blocks, g_scales, N, G);
    uint16_t *g = dev_down_raw(&gpu, g_out, (size_t)n * 2);
    char op[128];
    snprintf(op, sizeof op, "dequant_mxfp4 %s [%lld, %lld x 32]", what, (long long)N, (long long)G);
    test_report(op, (double)diff_bf16(g, c_out, n), 0);
    free(g);
    backend_free(&gpu, g_out);
    backend_free(&gpu, g_blocks);
    backend_free(&gpu, g_scales);
    backend_free(&cpu, c_out);
    free(blocks);
    free(scales);
}

// t on the GPU both ways: de-quantised at load in BF16 (target_quant_upload) and kept stored then
// de-quantised by the op (target_quant_upload_stored + a job, as target.c's resident load builds it).
static void fixture_case(const target_quant_tensor *t, const char *name) {
    int64_t rows = target_quant_rows(t), cols = target_quant_cols(t), n = rows * cols;
    void *deq = dev_alloc(&gpu, (size_t)n * 2), *res = dev_alloc(&gpu, (size_t)n * 2);
    CHECK(target_quant_upload(&gpu, deq, DT_BF16, t) == 0);
    size_t cb = target_quant_stored_codes(t), sb = target_quant_stored_scales(t);
    void *codes = dev_alloc(&gpu, cb), *scales = dev_alloc(&gpu, sb);
    target_quant_upload_stored(&gpu, t, codes, scales);
    target_quant_job j = {.kind = t->kind, .dst = res, .codes = codes, .scales = scales};
    if (t->kind == TARGET_QUANT_STORED_FP8)
        j.O = t->shape[t->ndim - 2], j.I = cols, j.M = rows / j.O, j.bo = t->block_out, j.bi = t->block_in;
    else j.M = 1, j.O = rows, j.I = cols;
    target_quant_job_run(&gpu, &j);
    uint16_t *a = dev_down_raw(&gpu, deq, (size_t)n * 2), *b = dev_down_raw(&gpu, res, (size_t)n * 2);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += a[i] != b[i];
    char op[160];
    snprintf(op, sizeof op, "resident = dequantize %s", name);
    test_report(op, (double)bad, 0);
    free(a);
    free(b);
    backend_free(&gpu, deq);
    backend_free(&gpu, res);
    backend_free(&gpu, codes);
    backend_free(&gpu, scales);
}

static void test_fixtures(void) {
    st_dir d;
    if (open_fixture_dir(&d, "tests/reference/data/quant_fp8.safetensors", "fp8dir")) {
        test_fail(__FILE__, __LINE__, "fp8 fixture: %s", error_msg());
        return;
    }
    target_quant q = {.method = TARGET_QUANT_FP8, .block_out = 16, .block_in = 32};
    static const char *const names[] = {"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.experts.gate_up_proj",
                                        "model.layers.0.self_attn.o_proj.weight"};
    for (int k = 0; k < 3; k++) {
        target_quant_tensor t;
        CHECK(target_quant_lookup(&q, &d, names[k], &t) == 0 && t.kind == TARGET_QUANT_STORED_FP8);
        if (t.kind == TARGET_QUANT_STORED_FP8) fixture_case(&t, names[k]);
    }
    safetensors_dir_close(&d);
    if (open_fixture_dir(&d, "tests/reference/data/quant_mxfp4.safetensors", "mxdir")) {
        test_fail(__FILE__, __LINE__, "mxfp4 fixture: %s", error_msg());
        return;
    }
    target_quant mq = {.method = TARGET_QUANT_MXFP4, .block_out = 0, .block_in = 0};
    static const char *const mx[] = {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"};
    for (int k = 0; k < 2; k++) {
        target_quant_tensor t;
        CHECK(target_quant_lookup(&mq, &d, mx[k], &t) == 0 && t.kind == TARGET_QUANT_STORED_MXFP4);
        if (t.kind == TARGET_QUANT_STORED_MXFP4) fixture_case(&t, mx[k]);
    }
    safetensors_dir_close(&d);
}

int main(void) {
    test_rand_seed(271828);
    int open_rc = test_open_devices(&cpu, &gpu);
    if (open_rc) return open_rc;
    printf("%s vs %s\n", gpu.name, cpu.name);
    fp8_case("partial", 1, 37, 70, 16, 32, 0);
    fp8_case("stack", 3, 7, 10, 3, 4, 0);
    fp8_case("wide block", 2, 5, 9, 128, 128, 0);
    fp8_case("1x1 blocks", 2, 5, 9, 1, 1, 0);
    fp8_case("one value", 1, 1, 1, 128, 128, 0);
    fp8_case("every code", 2, 8, 16, 8, 16, 1);
    fp8_case("every code", 1, 16, 16, 4, 4, 1);
    fp8_case("wide rows", 2, 3, TEST_EMU_SIZE(7168, 1100), 128, 128, 0); // more columns than threads
    fp8_case("many rows", 1, TEST_EMU_SIZE(1 << 21, 300), 8, 128, 128, 0); // past one grid pass on a GPU
    mxfp4_case("random", 4, 3, 0);
    mxfp4_case("every scale", 16, 16, 1);
    mxfp4_case("many", TEST_EMU_SIZE(4096, 64), TEST_EMU_SIZE(90, 5), 0);
    test_fixtures();
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_quant_cuda");
}
