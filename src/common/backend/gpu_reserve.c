// gpu_reserve.c: the device memory besides the plan (see gpu_reserve.h).
#include "common/backend/gpu_reserve.h"

#include <stdio.h>

#include "common/backend/backend_cuda.h"
#include "common/core/bytes.h"
#include "common/core/error.h"
#include "common/core/log.h"

void gpu_reserve_make(gpu_reserve *r, int cuda, int comms, int cublas) {
    *r = (gpu_reserve){0};
    if (!cuda) return;
    r->context = GPU_RESERVE_CONTEXT;
    r->cublas = cublas ? CUDA_CUBLAS_WORKSPACE_BYTES : 0;
    r->comms = comms;
    r->nccl = (size_t)comms * GPU_RESERVE_NCCL_COMM;
    r->total = r->context + r->cublas + r->nccl;
}

int gpu_reserve_teacher_comms(int nccl, int G, int s, int students) {
    if (!nccl) return 0;
    int last = G <= 1 || s == G - 1;
    return 1 + (last ? students : 0) + (G > 1 && s > 0) + (G > 1 && s < G - 1);
}

int gpu_reserve_student_comms(int nccl, int groups, int grad_nccl) { return (nccl ? 1 + groups : 0) + (grad_nccl ? 1 : 0); }

size_t gpu_reserve_usable(size_t budget, const gpu_reserve *r) {
    if (budget == 0) return 0;
    return budget > r->total ? budget - r->total : 1;
}

const char *gpu_reserve_describe(const gpu_reserve *r, char *buf, size_t n) {
    char a[32], b[32], c[32], t[32];
    if (r->total == 0) {
        snprintf(buf, n, "0 B (CPU)");
        return buf;
    }
    int m = snprintf(buf, n, "%s CUDA context", bytes_format(r->context, a, sizeof a));
    if (r->cublas && m > 0 && (size_t)m < n) m += snprintf(buf + m, n - (size_t)m, " + %s cuBLAS", bytes_format(r->cublas, b, sizeof b));
    if (r->comms && m > 0 && (size_t)m < n)
        m += snprintf(buf + m, n - (size_t)m, " + %d x %s NCCL", r->comms, bytes_format(GPU_RESERVE_NCCL_COMM, c, sizeof c));
    if (m > 0 && (size_t)m < n) snprintf(buf + m, n - (size_t)m, " = %s", bytes_format(r->total, t, sizeof t));
    return buf;
}

int gpu_reserve_check(backend *be, size_t need, int later, const char *who, const char *key) {
    if (be->kind != BACKEND_CUDA) return 0;
    size_t free_b = 0, total_b = 0;
    backend_mem_info(be, &free_b, &total_b);
    size_t want = need + (size_t)later * GPU_RESERVE_NCCL_COMM;
    char a[32], b[32], c[32];
    log_info("%s: %s of %s free on %s after the CUDA context, handles and communicators (%s taken)", who,
              bytes_format(free_b, a, sizeof a), bytes_format(total_b, b, sizeof b), be->name,
              bytes_format(total_b - free_b, c, sizeof c));
    if (free_b >= want) return 0;
    return error_set("%s: %s needs %s on %s but %s of its %s are free after the CUDA context, handles and NCCL "
                     "communicators: lower %s (docs/distributed.md, Memory that fits the card)",
                     who, later ? "the plan and the communicators still to open" : "the memory plan",
                     bytes_format(want, a, sizeof a), be->name, bytes_format(free_b, b, sizeof b),
                     bytes_format(total_b, c, sizeof c), key);
}
