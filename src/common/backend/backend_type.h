// backend_type.h: the backend struct itself (what backend_open fills), apart from backend.h's
// calls, so that the CPU and CUDA implementations (backend_cpu.c, backend_cuda.cu), which
// backend.c dispatches to, take it without including the dispatcher's header (no include circle).
#pragma once
#include "common/core/tensor.h"

typedef enum { BACKEND_CPU = 0, BACKEND_CUDA = 1 } backend_kind;

struct backend;

// pinned host memory and async copies: where an async copy or an event record goes (backend.h): the
// backend's stream (in order with its kernels); its copy stream (beside it; a copy there starts
// after all the work queued on the backend's stream when it was posted: a payload or a gradient
// bucket the forward or backward has just written); or its stream of copies to the device (beside
// it, in order only with each other: a piece going back to the device never queues behind a copy
// to the host that waits for the backward; its destination must be one the queued work no longer uses).
enum { BACKEND_STREAM_MAIN = 0, BACKEND_STREAM_COPY = 1, BACKEND_STREAM_TO_DEVICE = 2 };

// A timer around each backend_gemm on a backend (NULL: none): what profile.h's prof_enable installs,
// so the backend times its GEMMs without knowing the profiler. begin returns a token for end (-1:
// not timed).
typedef struct {
    int (*begin)(struct backend *be);
    void (*end)(struct backend *be, int token, const char *name, double flops);
} backend_timer;

// backend_caps: what the code above asks a backend instead of which one it is (filled by
// backend_open, or by backend_describe for a plan of a machine this process does not open).
typedef struct {
    int device;              // 1: backend_alloc'd memory is a device's, the host does not address it
                             // (copies by DMA, a runtime context and library workspaces to reserve)
    int pinned_transfers;    // 1: transfer buffers are page-locked (backend_host_alloc), 0: plain memory
    int device_links;        // 1: payloads and gradients can move device to device (NCCL links)
    dtype act_dtype;         // activations, features, the drafter's compute weights: BF16 or F32
    size_t compute_weight_bytes; // bytes per parameter of the compute copy of the weights (0: none,
                             // the master fp32 copy is used)
    size_t library_workspace;    // bytes a GEMM library keeps per handle (cuBLAS's workspace)
    // rates for the planners' estimates: GEMM flop/s at large sizes and the row count that halves
    // it, attention flop/s, the loss scan's logits/s, the fixed cost of one op (seconds)
    double rate_gemm, rate_gemm_half_rows, rate_attn, rate_scan, rate_op;
    // the device (0 on the CPU): its compute capability, shared memory per block, total memory
    int sm_major, sm_minor;
    size_t smem_per_block, mem_total;
} backend_caps;

typedef struct backend_ops backend_ops; // backend_ops.h

typedef struct backend {
    const struct backend_ops *ops; // the backend's table (backend_ops.h)
    backend_caps caps;
    backend_kind kind;             // for the backend's own files and the tests: code above asks caps
    device_kind device;  // where backend_alloc'd memory lives
    int device_id;       // CUDA device ordinal (0 on CPU)
    int threads;         // CPU threads used (OpenMP / OpenBLAS)
    char name[128];      // "cpu (2 threads)" or "cuda:0 NVIDIA H200 (139 GiB)"
    void *impl;          // backend-private state (CUDA stream, cuBLAS handle)
    const backend_timer *timer; // set while profile.h collects on this backend
} backend;
