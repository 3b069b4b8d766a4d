// nccl_nocuda.c: the NCCL calls of nccl_link_cuda.h and nccl_reduce_cuda.h (and backend/nccl_setup.h's
// test hook) in a build without CUDA, where CMake compiles this file instead of nccl_link_cuda.cu and
// nccl_reduce_cuda.cu: nccl_cuda_available says "built without CUDA", so payload_link_nccl.c and
// nccl_reduce.c decline before their first collective and never open a communicator; the others
// are never reached, and fail (or do nothing) if they are.
#include <stdio.h>

#include "common/backend/nccl_setup.h"
#include "common/comm/nccl_link_cuda.h"
#include "common/comm/nccl_reduce_cuda.h"
#include "common/core/error.h"

#define NO_NCCL "NCCL: built without CUDA"

int nccl_cuda_available(char *why, size_t n) {
    snprintf(why, n, "built without CUDA");
    return 0;
}

void nccl_cuda_test_hook(int world_rank, const char *which) { (void)world_rank, (void)which; }

int nccl_cuda_init(void **comm, const void *id, int nranks, int rank, int device, const nccl_cuda_who *who) {
    *comm = NULL;
    return error_set(NO_NCCL);
}

int nccl_cuda_split(void *comm, int member, int key, void **pair, void **stream, const nccl_cuda_who *who) {
    *pair = *stream = NULL;
    return error_set(NO_NCCL);
}

int nccl_cuda_send(void *pair, void *stream, const void *dev, size_t bytes, void *after_stream, void **event,
                   double timeout_s) {
    return error_set(NO_NCCL);
}

int nccl_cuda_recv(void *pair, void *stream, void *dev, size_t bytes, void **event, double timeout_s) {
    return error_set(NO_NCCL);
}

int nccl_cuda_event_query(void *event) { return 1; }
int nccl_cuda_event_sync(void *event) { return 0; }
void nccl_cuda_event_destroy(void *event) {}
int nccl_cuda_async_error(void *comm, char *msg, size_t n) { return 0; }
int nccl_cuda_destroy(void *comm, void *stream, int abort, const nccl_cuda_who *who) { return 0; }

int nccl_reduce_cuda_init(nccl_reduce_cuda *c, const void *id, int nranks, int rank, int device,
                          const nccl_cuda_who *who) {
    *c = (nccl_reduce_cuda){0};
    return error_set(NO_NCCL);
}

int nccl_reduce_cuda_after(nccl_reduce_cuda *c, backend *be) { return error_set(NO_NCCL); }
int nccl_reduce_cuda_group(nccl_reduce_cuda *c, int begin) { return error_set(NO_NCCL); }
int nccl_reduce_cuda_sum_f32(nccl_reduce_cuda *c, float *dev, size_t count) { return error_set(NO_NCCL); }
int nccl_reduce_cuda_join(nccl_reduce_cuda *c, backend *be) { return error_set(NO_NCCL); }
int nccl_reduce_cuda_sync(nccl_reduce_cuda *c) { return error_set(NO_NCCL); }
void nccl_reduce_cuda_destroy(nccl_reduce_cuda *c, int abort) { *c = (nccl_reduce_cuda){0}; }
