// ops_dynconv.c: dispatch of the grouped dynamic causal convolution (ops_dynconv.h) to the CPU
// reference or the CUDA kernels, with the shape checks both rely on.
#include "common/kernels/ops_dynconv.h"

#include "common/core/check.h"
#include "common/kernels/ops_dynconv_cpu.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/kernels/ops_dynconv_cuda.h"
#endif
#include "common/kernels/ops_dispatch.h"

// Shapes the convolution relies on: whole blocks, groups that divide H, a kernel inside the block,
// dyn rows wide enough for the K*H/G values a row reads.
static void check_dynconv_shape(int T, int B, int H, int K, int G, int ld) {
    if (B < 1 || T < 0 || T % B || G < 1 || H % G || K < 1 || K > B || ld < K * (H / G))
        fatal("dynamic conv: bad shape T %d, B %d, H %d, K %d, G %d, ld %d", T, B, H, K, G, ld);
}

void ops_dynconv_forward(backend *be, void *out, const void *x, const void *dyn, int ld, const void *base, int T, int B,
                         int H, int K, int G) {
    check_dynconv_shape(T, B, H, K, G, ld);
    DISPATCH(be, cuda_dynconv_forward(be, out, x, dyn, ld, base, T, B, H, K, G),
             cpu_dynconv_forward(out, x, dyn, ld, base, T, B, H, K, G));
}

void ops_dynconv_backward(backend *be, void *dx, void *ddyn, float *dbase, const void *dout, const void *x,
                          const void *dyn, int ld, const void *base, int T, int B, int H, int K, int G) {
    check_dynconv_shape(T, B, H, K, G, ld);
    DISPATCH(be, cuda_dynconv_backward(be, dx, ddyn, dbase, dout, x, dyn, ld, base, T, B, H, K, G),
             cpu_dynconv_backward(dx, ddyn, dbase, dout, x, dyn, ld, base, T, B, H, K, G));
}
