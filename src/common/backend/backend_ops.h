// backend_ops.h: the backend as one object: what each backend fills (struct backend_ops) and what
// the code above asks of it (backend_caps, in backend_type.h, and the op tables).
//
// A backend is a table: backend_cpu.c fills backend_cpu_ops, backend_cuda.cu backend_cuda_ops
// (compiled only in CUDA builds; CMake chooses the files, backend_nocuda.c says "none" otherwise).
// backend.c's backend_* calls go through be->ops and never ask which backend it is; neither does
// any code above (the planners ask be->caps, the kernels' dispatchers call the op tables below).
//
// The op tables: every op family of the layers above (kernels, decode, moe, quant, the optimizer,
// the loss) declares its table's struct in its own header, fills one instance per backend in its
// device files (foo_cpu.c: foo_kernels_cpu; foo_cuda.cu: foo_kernels_cuda), and its dispatcher
// calls it through BACKEND_OP. The backend only holds the pointers (incomplete types here: no
// include goes up), so a third backend is one more backend_ops and one more instance per family.
//
// Adding a backend: a backend_foo.c (or .cu) filling backend_ops, its caps, and one table per op
// family; backend.c's backend_open picks it. Adding an op family: its struct, its instances, a
// pointer below and one line in each backend's backend_ops.
#pragma once
#include <stddef.h>

#include "common/backend/backend_type.h"

#ifdef __cplusplus
extern "C" {
#endif

// the op tables (each defined by the header named beside it)
struct norm_kernels;        // common/kernels/norm.h: RMSNorm (plain, zero-centred, gated), fwd + bwd
struct rope_kernels;        // common/kernels/rope.h: RoPE (full, partial), fwd + bwd
struct attention_kernels;   // common/kernels/attention.h: causal attention, DFlash's block attention
struct activation_kernels;  // common/kernels/activation.h: SwiGLU, GeGLU, clamped SwiGLU, gates, softcap
struct elementwise_kernels; // common/kernels/elementwise.h: embed, add, scale, bias, copies, casts
struct topk_lse_kernels;    // common/kernels/topk_lse.h: the streaming top-k and log-sum-exp
struct dynconv_kernels;     // common/kernels/dynconv.h: DFlash2's dynamic convolution, fwd + bwd
struct deltanet_kernels;    // common/kernels/deltanet.h: the hybrid's conv1d, gates, delta rule
struct decode_kernels;      // common/decode/ops_decode.h: KV cache, decode attention, sampling
struct moe_kernels;         // common/moe/ops_moe.h: routing, grouped GEMM, combine
struct quant_kernels;       // common/quant/ops_quant.h: FP8 and MXFP4 de-quantisation
struct optim_kernels;       // student/train/optim.h: AdamW, Muon, EMA, norms
struct loss_kernels;        // student/loss/loss.h: the fused vocabulary loss, the selector's term

struct backend_ops {
    const char *name; // "cpu", "cuda": what --version and the logs call it

    void (*close)(backend *be);
    // memory (backend.h): device memory, or host memory on the CPU
    void *(*alloc)(backend *be, size_t bytes);
    void (*free)(backend *be, void *p);
    void (*copy_to_device)(backend *be, void *dst, const void *src_host, size_t bytes);
    void (*copy_to_host)(backend *be, void *dst_host, const void *src, size_t bytes);
    void (*memset_zero)(backend *be, void *p, size_t bytes);
    void (*sync)(backend *be);
    void (*mem_info)(backend *be, size_t *free_bytes, size_t *total_bytes);
    void (*gemm)(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a,
                 int lda, const void *b, int ldb, float beta, void *c, int ldc, dtype ab_dt, dtype c_dt);
    // transfer buffers, async copies, events (backend.h's "pinned host memory and async copies");
    // host_alloc: fallback 1 gives pageable memory when pinning is refused, 0 gives NULL
    void *(*host_alloc)(backend *be, size_t bytes, int fallback);
    int (*host_pinned)(backend *be, const void *p);
    void (*host_free)(backend *be, void *p);
    void (*copy_async)(backend *be, int stream, void *dst, const void *src, size_t bytes);
    void *(*event_new)(backend *be);
    void (*event_free)(backend *be, void *ev);
    void (*event_record)(backend *be, void *ev, int stream);
    int (*event_done)(backend *be, void *ev);
    void (*event_sync)(backend *be, void *ev);
    void (*stream_wait)(backend *be, void *ev);
    // timing events for profile.h (NULL: ops are timed by the host clock, the work being synchronous)
    void *(*timer_new)(void);
    void (*timer_record)(backend *be, void *t);
    double (*timer_seconds)(void *start, void *end);
    void (*timer_free)(void *t);

    // the op tables of the layers above (NULL: this backend has none; a call is fatal)
    const struct norm_kernels *norm;
    const struct rope_kernels *rope;
    const struct attention_kernels *attention;
    const struct activation_kernels *activation;
    const struct elementwise_kernels *elementwise;
    const struct topk_lse_kernels *topk_lse;
    const struct dynconv_kernels *dynconv;
    const struct deltanet_kernels *deltanet;
    const struct decode_kernels *decode;
    const struct moe_kernels *moe;
    const struct quant_kernels *quant;
    const struct optim_kernels *optim;
    const struct loss_kernels *loss;
};

// backend_table_missing: fatal "backend <name> has no <table> ops" (returns int for the macros).
int backend_table_missing(const backend *be, const char *table);

// BACKEND_TABLE(be, table): the backend's op table `table` (a member above), fatal when absent.
#define BACKEND_TABLE(be, table) \
    ((void)(((be)->ops && (be)->ops->table) || backend_table_missing((be), #table)), (be)->ops->table)

// BACKEND_OP(be, table, op, args...): runs op `op` of the table with (be, args...), timed under the
// calling function's name while profile.h collects (the ops_* dispatchers use it: one line each).
#define BACKEND_OP(be, table, op, ...)                          \
    do {                                                        \
        int prof_ = prof_begin(be);                             \
        BACKEND_TABLE(be, table)->op((be), __VA_ARGS__);        \
        prof_end((be), prof_, __func__, 0);                     \
    } while (0)

#ifdef __cplusplus
}
#endif
