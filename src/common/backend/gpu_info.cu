// gpu_info.cu: gpu_info.h with the CUDA runtime and NCCL (C linkage; CPU builds use gpu_info.c).
//
// Every failure is returned (error_set), never fatal: the preflight reports it as a row and goes on.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/backend/gpu_info.h"
#include "common/backend/nccl_setup_cuda.cuh"

extern "C" {
#include "common/core/error.h"
}

static_assert(sizeof(ncclUniqueId) == GPU_NCCL_ID_BYTES, "GPU_NCCL_ID_BYTES must be sizeof(ncclUniqueId)");

static double gpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void gpu_pause(void) {
    struct timespec t = {0, 1000000}; // 1 ms
    nanosleep(&t, NULL);
}

static int gpu_cuda_fail(const char *what, cudaError_t e) {
    (void)cudaGetLastError(); // clear it: the preflight carries on
    return error_set("%s: %s", what, cudaGetErrorString(e));
}

extern "C" int gpu_pci_bus_id(int dev, char *buf, size_t n) {
    if (n) buf[0] = '\0';
    cudaError_t e = cudaDeviceGetPCIBusId(buf, (int)n, dev);
    return e == cudaSuccess ? 0 : gpu_cuda_fail("cudaDeviceGetPCIBusId", e);
}

extern "C" int gpu_peer_access(int dev, const char *peer_bus) {
    int peer = -1;
    cudaError_t e = cudaDeviceGetByPCIBusId(&peer, peer_bus);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return error_set("GPU %s is not visible to this process (CUDA_VISIBLE_DEVICES?)", peer_bus);
    }
    if (peer == dev) return 1;
    int can = 0;
    e = cudaDeviceCanAccessPeer(&can, dev, peer);
    if (e != cudaSuccess) return gpu_cuda_fail("cudaDeviceCanAccessPeer", e);
    return can ? 1 : 0;
}

extern "C" void gpu_nccl_version(char *buf, size_t n) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = NCCL_VERSION_CODE;
    snprintf(buf, n, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
}

extern "C" int gpu_nccl_unique_id(void *id) {
    ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);
    return r == ncclSuccess ? 0 : error_set("ncclGetUniqueId: %s", ncclGetErrorString(r));
}

extern "C" int gpu_nccl_check(const void *id, int nranks, int rank, int dev, double timeout_s) {
    double deadline = gpu_now() + timeout_s;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) return gpu_cuda_fail("cudaSetDevice", e);
    cudaStream_t stream = NULL;
    float *buf = NULL;
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) return gpu_cuda_fail("cudaStreamCreate", e);
    if ((e = cudaMalloc(&buf, 2 * sizeof(float))) != cudaSuccess) {
        cudaStreamDestroy(stream);
        return gpu_cuda_fail("cudaMalloc", e);
    }
    float value = (float)(rank + 1), sum = 0;
    cudaMemcpy(buf, &value, sizeof value, cudaMemcpyHostToDevice);

    // non-blocking, so that a rank that never joins ends in a timeout, not a hang (nccl_setup_cuda.cuh)
    nccl_cuda_who who = {"the communicator", "one of the GPU ranks", -1, -1, -1, "", timeout_s, NULL};
    ncclComm_t comm = NULL;
    int rc = nccl_setup_init(&comm, id, nranks, rank, &who);
    if (rc == 0) {
        ncclResult_t r = ncclAllReduce(buf, buf + 1, 1, ncclFloat, ncclSum, comm, stream);
        if (r != ncclSuccess && r != ncclInProgress) rc = error_set("ncclAllReduce: %s", ncclGetErrorString(r));
        if (rc == 0) rc = nccl_setup_wait(comm, "ncclAllReduce", &who, deadline) ? -1 : 0;
    }
    while (rc == 0) { // the all-reduce on the stream
        e = cudaStreamQuery(stream);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) rc = gpu_cuda_fail("ncclAllReduce on the stream", e);
        else if (gpu_now() > deadline) rc = error_set("ncclAllReduce: not finished within the timeout");
        else if (nccl_setup_wait(comm, "ncclAllReduce", &who, deadline)) rc = -1;
        else gpu_pause();
    }
    if (rc == 0) {
        cudaMemcpy(&sum, buf + 1, sizeof sum, cudaMemcpyDeviceToHost);
        float want = (float)nranks * (float)(nranks + 1) / 2;
        if (sum != want) rc = error_set("ncclAllReduce: the sum over %d ranks is %g, expected %g", nranks, sum, want);
    }
    if (nccl_setup_end(comm, rc != 0, &who)) rc = -1; // finalized on success, else aborted
    cudaFree(buf);
    cudaStreamDestroy(stream);
    return rc;
}
