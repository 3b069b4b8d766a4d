// ops_quant.c: the de-quantisation ops (ops_quant.h): the argument checks that hold on both
// backends, then the backend's table (quant_kernels), each op timed under its ops_* name.
#include "common/quant/ops_quant.h"

#include "common/backend/backend_ops.h"
#include "common/backend/profile.h"
#include "common/core/check.h"

void ops_dequant_fp8(backend *be, void *dst, const uint8_t *codes, const float *scales, int64_t M, int64_t O, int64_t I,
                     int64_t bo, int64_t bi) {
    if (M < 0 || O < 0 || I < 0 || bo < 1 || bi < 1)
        fatal("dequant fp8: %lld matrices [%lld, %lld], blocks [%lld, %lld]", (long long)M, (long long)O, (long long)I,
              (long long)bo, (long long)bi);
    if (M == 0 || O == 0 || I == 0) return;
    BACKEND_OP(be, quant, dequant_fp8, dst, codes, scales, M, O, I, bo, bi);
}

void ops_dequant_mxfp4(backend *be, void *dst, const uint8_t *blocks, const uint8_t *scales, int64_t N, int64_t G) {
    if (N < 0 || G < 0) fatal("dequant mxfp4: %lld rows of %lld groups", (long long)N, (long long)G);
    if (N == 0 || G == 0) return;
    BACKEND_OP(be, quant, dequant_mxfp4, dst, blocks, scales, N, G);
}
