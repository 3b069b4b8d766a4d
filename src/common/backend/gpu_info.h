// gpu_info.h: questions about the GPUs that the preflight asks (peer access, NCCL), in plain C.
//
// gpu_info.cu implements them with the CUDA runtime and NCCL (CUDA builds);
// gpu_info_nocuda.c is the stub of CPU-only builds, where every function fails with error_set (callers
// only ask on a CUDA backend). MPI stays out of the CUDA file: the caller broadcasts the NCCL id.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_NCCL_ID_BYTES 128 // sizeof(ncclUniqueId)

// gpu_pci_bus_id: the PCI bus id ("0000:3B:00.0") of CUDA device dev; -1 (error_set) on failure.
int gpu_pci_bus_id(int dev, char *buf, size_t n);
// gpu_peer_access: 1 when device dev (this process's ordinal) can read and write the memory of
// the GPU with PCI bus id peer_bus directly (cudaDeviceCanAccessPeer; the same GPU counts as 1),
// 0 when it cannot, -1 (error_set) when that GPU is not visible to this process.
int gpu_peer_access(int dev, const char *peer_bus);
// gpu_nccl_version: NCCL's version as "2.21.5" (or "" in a CPU build).
void gpu_nccl_version(char *buf, size_t n);
// gpu_nccl_unique_id: ncclGetUniqueId into id[GPU_NCCL_ID_BYTES]; -1 (error_set) on failure.
int gpu_nccl_unique_id(void *id);
// gpu_nccl_check: joins the NCCL communicator (id, nranks, rank) on device dev, all-reduces one
// value and checks the sum, then destroys it. Gives up after timeout_s seconds (a peer that never
// joins): the communicator is aborted and -1 returned with error_set, as on any NCCL error.
int gpu_nccl_check(const void *id, int nranks, int rank, int dev, double timeout_s);

#ifdef __cplusplus
}
#endif
