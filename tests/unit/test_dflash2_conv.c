// test_dflash2_conv.c: the DFlash2 convolution module as this trainer computes it (kernel_projection
// as a matrix product, then ops_dynconv_forward / _backward for prepare and finish, on the CPU
// backend) against the dflash package's GroupedDynamicCausalConv with PyTorch autograd
// (tests/reference/make_dflash2_conv_fixture.py: hidden 60, kernel 3, group 4, 2 blocks of 5 slots,
// a fixed linear map M between prepare and finish, loss sum(z * Gz)). It pins the facts the op
// takes from the package: which projection columns are prepare's and finish's ([2, K, H/G] per
// row), the group broadcast, base_kernel[0] / [1], the causal direction and the zeros before a
// block's first slot.
//
// Tolerance: max |ours - ref| / max |ref| <= 1e-5 per tensor. The reference is float64 rounded to
// fp32; ours is fp32 with sums of at most 60 terms of O(10) values (relative rounding ~1e-6); a
// wrong column, tap or group errs by O(1).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/data/safetensors.h"
#include "common/kernels/dynconv.h"
#include "testing.h"

#define TOL 1e-5

enum { H = 60, K = 3, G = 4, C = 2, B = 5, T = C * B, NG = H / G, LD = 2 * K * NG };

static st_file fx;

static const float *get(const char *name, int64_t numel) {
    const st_entry *e = safetensors_find(&fx, name);
    if (!e || e->dt != DT_F32 || e->nbytes != (size_t)numel * sizeof(float)) {
        fprintf(stderr, "fixture: tensor %s missing or not %lld fp32 values\n", name, (long long)numel);
        exit(1);
    }
    return e->data;
}

// c[m, n] (+)= sum_k a[m, k] * b[k, n] with strides; plain loops (tiny shapes)
static void matmul(float *c, const float *a, int64_t sam, int64_t sak, const float *b, int64_t sbk, int64_t sbn, int m,
                   int n, int k, int add) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = add ? c[(int64_t)i * n + j] : 0.0;
            for (int l = 0; l < k; l++) s += (double)a[i * sam + l * sak] * b[l * sbk + j * sbn];
            c[(int64_t)i * n + j] = (float)s;
        }
}

int main(void) {
    backend be;
    if (backend_open(&be, "cpu", 0) != 0 || safetensors_open(&fx, test_src_path("tests/reference/data/dflash2_conv.safetensors"))) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    const float *x = get("x", T * H), *M = get("M", H * H), *Gz = get("Gz", T * H);
    const float *base = get("base_kernel", 2 * K * H), *W = get("kernel_projection.weight", LD * H);
    static float dyn[T * LD], prep[T * H], y[T * H], z[T * H], dy[T * H], dprep[T * H], dxc[T * H], dx[T * H];
    static float ddyn[T * LD], dW[LD * H], dbase[2 * K * H];

    // forward: dyn = x W^T; prepared = conv(x, dyn[:, :K*NG], base[0]); y = prepared M; z = conv(y, dyn[:, K*NG:], base[1])
    matmul(dyn, x, H, 1, W, 1, H, T, LD, H, 0);
    ops_dynconv_forward(&be, prep, x, dyn, LD, base, T, B, H, K, G);
    matmul(y, prep, H, 1, M, H, 1, T, H, H, 0);
    ops_dynconv_forward(&be, z, y, dyn + K * NG, LD, base + K * H, T, B, H, K, G);
    test_report("prepared", test_rel_err(prep, get("prepared", T * H), T * H), TOL);
    test_report("z (finish)", test_rel_err(z, get("z", T * H), T * H), TOL);

    // backward from dz = Gz
    ops_dynconv_backward(&be, dy, ddyn + K * NG, dbase + K * H, Gz, y, dyn + K * NG, LD, base + K * H, T, B, H, K, G);
    matmul(dprep, dy, H, 1, M, 1, H, T, H, H, 0); // dprepared = dy M^T
    ops_dynconv_backward(&be, dxc, ddyn, dbase, dprep, x, dyn, LD, base, T, B, H, K, G);
    matmul(dW, ddyn, 1, LD, x, H, 1, LD, H, T, 0); // dW = ddyn^T x
    memcpy(dx, dxc, sizeof dx);
    matmul(dx, ddyn, LD, 1, W, H, 1, T, H, LD, 1); // dx = conv's dx + ddyn W
    test_report("dx", test_rel_err(dx, get("dx", T * H), T * H), TOL);
    test_report("d base_kernel", test_rel_err(dbase, get("d_base_kernel", 2 * K * H), 2 * K * H), TOL);
    test_report("d kernel_projection", test_rel_err(dW, get("d_kernel_projection.weight", LD * H), LD * H), TOL);
    safetensors_close(&fx);
    backend_close(&be);
    return test_finish("test_dflash2_conv");
}
