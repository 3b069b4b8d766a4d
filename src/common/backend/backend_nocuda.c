// backend_nocuda.c: the CUDA backend's entry points in a build without CUDA (CMake compiles this
// file instead of backend_cuda.cu): no device, and the reason backend_open gives.
#include "common/backend/backend.h"
#include "common/backend/backend_cuda.h"
#include "common/core/error.h"

int backend_compiled_cuda(void) { return 0; }

int cuda_device_count(const char **why) {
    if (why) *why = "this binary was built without CUDA";
    return 0;
}

const struct backend_ops *cuda_ops(void) { return NULL; }

int cuda_open(backend *be, int local_rank) {
    (void)be, (void)local_rank;
    return error_set("internal: CUDA devices counted in a build without CUDA");
}
