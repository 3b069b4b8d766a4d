// gpu_info_nocuda.c: the CPU-only build's gpu_info (see gpu_info.h); CUDA builds compile gpu_info.cu
// instead (CMake's choice).
#include "common/backend/gpu_info.h"

#include <stdio.h>

#include "common/core/error.h"

int gpu_pci_bus_id(int dev, char *buf, size_t n) {
    if (n) buf[0] = '\0';
    return error_set("this binary was built without CUDA");
}

int gpu_peer_access(int dev, const char *peer_bus) { return error_set("this binary was built without CUDA"); }

void gpu_nccl_version(char *buf, size_t n) {
    if (n) buf[0] = '\0';
}

int gpu_nccl_unique_id(void *id) { return error_set("this binary was built without CUDA (no NCCL)"); }

int gpu_nccl_check(const void *id, int nranks, int rank, int dev, double timeout_s) {
    return error_set("this binary was built without CUDA (no NCCL)");
}
