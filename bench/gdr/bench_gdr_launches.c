// bench_gdr_launches.c: the launches (kernels, cuBLAS calls) of one ops_gated_delta_rule call on the
// CUDA emulator (built with DFLASH_CUDA_EMU only: it reads the emulator's counts, tests/emu/README.md).
//
//   bench_gdr_launches T n_seq Hk Hv dk dv [state]
//
// n_seq sequences of T / n_seq tokens (the remainder spread over them), zero inputs; `state` passes a
// recurrent state in and out. The counts depend on the sequences' lengths and the group size G
// only, not on the numbers, so a shape with the real head dims but small dims and DFLASH_CUDA_GDR=gemm:G
// (G as the real dims would give it) counts a real layer's launches without emulating its math
// (bench/RESULTS.md). Prints the op's work bytes and `launches: K kernels, G cuBLAS calls, N in all`.
#include <stdio.h>
#include <stdlib.h>

#include "common/backend/backend.h"
#include "common/kernels/deltanet.h"

void emu_launch_counts(long long *kernels, long long *library); // tests/emu/emu_sched.cpp

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: bench_gdr_launches T n_seq Hk Hv dk dv [state]\n");
        return 2;
    }
    int T = atoi(argv[1]), n = atoi(argv[2]), Hk = atoi(argv[3]), Hv = atoi(argv[4]), dk = atoi(argv[5]);
    int dv = atoi(argv[6]), with_state = argc > 7;
    if (T < 1 || n < 1 || n > T || Hk < 1 || Hv < 1 || Hv % Hk || dk < 1 || dv < 1) {
        fprintf(stderr, "bench_gdr_launches: T %d, n_seq %d (1..T), heads %d, %d (Hv a multiple of Hk), dims %d, %d\n",
                T, n, Hk, Hv, dk, dv);
        return 2;
    }
    backend be;
    if (backend_open(&be, "cuda", 0)) {
        fprintf(stderr, "bench_gdr_launches: no CUDA backend\n");
        return 1;
    }
    int32_t *cu = malloc(((size_t)n + 1) * sizeof(int32_t));
    if (!cu) return 1;
    for (int s = 0; s <= n; s++) cu[s] = (int32_t)((int64_t)T * s / n);
    size_t ld = 2 * (size_t)Hk * dk + (size_t)Hv * dv, nq = (size_t)T * ld * 2, ng = (size_t)T * Hv * 4;
    size_t ns = (size_t)n * Hv * dk * dv * 4, wb = ops_gated_delta_rule_work_bytes(&be, T, n, Hk, Hv, dk, dv);
    void *qkv = backend_alloc(&be, nq), *out = backend_alloc(&be, (size_t)T * Hv * dv * 2);
    void *dcu = backend_alloc(&be, ((size_t)n + 1) * 4);
    float *g = backend_alloc(&be, ng), *beta = backend_alloc(&be, ng), *st = with_state ? backend_alloc(&be, ns) : NULL;
    void *work = wb ? backend_alloc(&be, wb) : NULL;
    if (!qkv || !out || !dcu || !g || !beta || (with_state && !st) || (wb && !work)) {
        fprintf(stderr, "bench_gdr_launches: out of device memory\n");
        return 1;
    }
    backend_memset_zero(&be, qkv, nq);
    backend_memset_zero(&be, g, ng);
    backend_memset_zero(&be, beta, ng);
    if (st) backend_memset_zero(&be, st, ns);
    backend_copy_to_device(&be, dcu, cu, ((size_t)n + 1) * 4);
    long long k0, l0, k1, l1;
    emu_launch_counts(&k0, &l0);
    ops_gated_delta_rule(&be, out, qkv, g, beta, dcu, NULL, n, T, Hk, Hv, dk, dv, st, work);
    backend_sync(&be);
    emu_launch_counts(&k1, &l1);
    const char *plan = getenv("DFLASH_CUDA_GDR");
    printf("T=%d n_seq=%d Hk=%d Hv=%d dk=%d dv=%d%s DFLASH_CUDA_GDR=%s: work %zu bytes\n", T, n, Hk, Hv, dk, dv,
           with_state ? " state" : "", plan ? plan : "", wb);
    printf("launches: %lld kernels, %lld cuBLAS calls, %lld in all\n", k1 - k0, l1 - l0, k1 - k0 + l1 - l0);
    free(cu);
    backend_close(&be);
    return 0;
}
