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
// family; backend.c's backend_open picks it. Adding an op family: its struct and its list of ops
// (OP_FILL below), its instances, and one line in BACKEND_OP_FAMILIES.
#pragma once
#include <stddef.h>

#include "common/backend/backend_type.h"

#ifdef __cplusplus
extern "C" {
#endif

// BACKEND_OP_FAMILIES(X, b): the op families, X(b, family) each (b: passed through, e.g. the backend).
// For each: struct family_kernels, its table (defined by the header named beside it); the member
// `family` of backend_ops below; each backend's instance family_kernels_<backend> (foo_cpu.c:
// foo_kernels_cpu, foo_cuda.cu: foo_kernels_cuda), which backend_cpu.c and backend_cuda.cu declare
// and point at from this list (BACKEND_TABLE_DECLARE, BACKEND_TABLE_FILL).
#define BACKEND_OP_FAMILIES(X, b)                                                                        \
    X(b, norm)        /* common/kernels/norm.h: RMSNorm (plain, zero-centred, gated), fwd + bwd */       \
    X(b, rope)        /* common/kernels/rope.h: RoPE (full, partial), fwd + bwd */                       \
    X(b, attention)   /* common/kernels/attention.h: causal attention, DFlash's block attention */       \
    X(b, activation)  /* common/kernels/activation.h: SwiGLU, GeGLU, clamped SwiGLU, gates, softcap */   \
    X(b, elementwise) /* common/kernels/elementwise.h: embed, add, scale, bias, copies, casts */          \
    X(b, topk_lse)    /* common/kernels/topk_lse.h: the streaming top-k and log-sum-exp */               \
    X(b, dynconv)     /* common/kernels/dynconv.h: DFlash2's dynamic convolution, fwd + bwd */           \
    X(b, deltanet)    /* common/kernels/deltanet.h: the hybrid's conv1d, gates, delta rule */            \
    X(b, decode)      /* common/decode/ops_decode.h: KV cache, decode attention, sampling */             \
    X(b, moe)         /* common/moe/ops_moe.h: routing, grouped GEMM, combine */                         \
    X(b, quant)       /* common/quant/ops_quant.h: FP8 and MXFP4 de-quantisation */                      \
    X(b, optim)       /* student/train/optim.h: AdamW, Muon, EMA, norms */                               \
    X(b, loss)        /* student/loss/loss.h: the fused vocabulary loss, the selector's term */

#define BACKEND_TABLE_STRUCT(b, family) struct family##_kernels;
#define BACKEND_TABLE_MEMBER(b, family) const struct family##_kernels *family;
#define BACKEND_TABLE_DECLARE(b, family) extern const struct family##_kernels family##_kernels_##b;
#define BACKEND_TABLE_FILL(b, family) .family = &family##_kernels_##b,

// the op tables' structs (incomplete here: no include goes up)
BACKEND_OP_FAMILIES(BACKEND_TABLE_STRUCT, _)

// BACKEND_OPS(X, p): the members of backend_ops from close to stream_wait, once, in order; and
// BACKEND_TIMER_OPS(X, p), the timer members (NULL where the host clock times the ops). A backend
// fills them in one line from its functions <p><member> (OP_FILL below), as the op tables are.
#define BACKEND_OPS(X, p)                                                                                     \
    X(p, close) X(p, alloc) X(p, free) X(p, copy_to_device) X(p, copy_to_host) X(p, memset_zero) X(p, sync)   \
    X(p, mem_info) X(p, gemm) X(p, host_alloc) X(p, host_pinned) X(p, host_free) X(p, copy_async)            \
    X(p, event_new) X(p, event_free) X(p, event_record) X(p, event_done) X(p, event_sync) X(p, stream_wait)
#define BACKEND_TIMER_OPS(X, p) X(p, timer_new) X(p, timer_record) X(p, timer_seconds) X(p, timer_free)

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

    // the op tables of the layers above, one per BACKEND_OP_FAMILIES (NULL: this backend has none;
    // a call is fatal): const struct norm_kernels *norm; ... const struct loss_kernels *loss;
    BACKEND_OP_FAMILIES(BACKEND_TABLE_MEMBER, _)
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

// An op family's list: its header lists the table's members once, in the struct's order, as
// FOO_OPS(X, p) (X(p, op) per op); each backend fills its table from it in one line,
//     const struct foo_kernels foo_kernels_cpu = {FOO_OPS(OP_FILL, cpu_)};
// (OP_FILL(p, op): `.op = p##op,`, so the backend's function for op is named <prefix><op>), and
// OPS_LISTED beside the struct checks at compile time that the list names every member.
#define OP_FILL(p, op) .op = p##op,
#define OP_COUNT(p, op) +1
#ifdef __cplusplus
#define OPS_STATIC_ASSERT static_assert
#else
#define OPS_STATIC_ASSERT _Static_assert
#endif
// OPS_LISTED(type, LIST, extra): LIST counts every member of the table `type`: function pointers,
// plus `extra` pointer-sized members that are not ops (filled by hand).
#define OPS_LISTED(type, LIST, extra)                                                        \
    OPS_STATIC_ASSERT(sizeof(type) == (0 LIST(OP_COUNT, _) + (extra)) * sizeof(void (*)(void)), \
                      #LIST " names every member of " #type)

// backend_ops: its name, BACKEND_OPS, the timers and one pointer per op family
OPS_LISTED(struct backend_ops, BACKEND_OPS,
           1 + (0 BACKEND_TIMER_OPS(OP_COUNT, _)) + (0 BACKEND_OP_FAMILIES(OP_COUNT, _)));

#ifdef __cplusplus
}
#endif
