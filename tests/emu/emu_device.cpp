// emu_device.cpp: the emulated devices, for the CPU emulator (tests/emu/README.md): how many,
// their properties and attributes, peers, the PCI bus ids, and the dynamic shared memory a kernel
// may opt into (emu_smem_limit, which the launcher in emu_sched.cpp checks).
#include "cuda_emu.h"
#undef warpSize // the cudaDeviceProp field
#include "emu_internal.h"

#undef warpSize // the cudaDeviceProp field

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <mutex>
#include <vector>

static std::mutex smem_mu;
static std::map<const void *, size_t> smem_optin;
size_t emu_smem_limit(const void *kernel) {
    std::lock_guard<std::mutex> g(smem_mu);
    auto it = smem_optin.find(kernel);
    return it == smem_optin.end() ? 48 * 1024 : it->second;
}

static const size_t SMEM_OPTIN_MAX = 227 * 1024; // sm_90: 227 KiB per block

// ---------------------------------------------------------------------------- device

size_t emu_device_capacity(void) {
    static size_t cap = [] {
        const char *s = getenv("DFLASH_EMU_GPU_BYTES");
        return s && *s ? (size_t)strtoull(s, nullptr, 10) : (size_t)16 << 30;
    }();
    return cap;
}

// DFLASH_EMU_DEVICES (1 to 8, default 1): how many devices a process sees. Device d has the PCI bus
// id 0000:0d:00.0 and reaches every other one as a peer, so ranks on devices of their own can take
// dflash_rank's NCCL path (NCCL emulated below); the memory capacity is the process's, on any device.
static int device_count(void) {
    static int n = [] {
        const char *s = getenv("DFLASH_EMU_DEVICES");
        int v = s && *s ? atoi(s) : 1;
        return v < 1 ? 1 : v > 8 ? 8 : v;
    }();
    return n;
}
static bool valid_device(int d) { return d >= 0 && d < device_count(); }
static thread_local int current_device = 0;

cudaError_t cudaGetDeviceCount(int *n) {
    *n = device_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (!valid_device(d)) return emu_fail(cudaErrorInvalidDevice);
    current_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = current_device;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    emu_copy_log_waited(nullptr, true);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    if (!valid_device(d)) return emu_fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulator (CPU)");
    p->totalGlobalMem = emu_device_capacity();
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = SMEM_OPTIN_MAX;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d) {
    if (!valid_device(d)) return emu_fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)SMEM_OPTIN_MAX; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *v = 1; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; return cudaSuccess;
    default: return emu_fail(cudaErrorInvalidValue);
    }
}

cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int d) {
    if (!valid_device(d)) return emu_fail(cudaErrorInvalidDevice);
    snprintf(buf, (size_t)len, "0000:%02x:00.0", d);
    return cudaSuccess;
}
cudaError_t cudaDeviceGetByPCIBusId(int *d, const char *bus) {
    for (int i = 0; i < device_count(); i++) {
        char b[32];
        snprintf(b, sizeof b, "0000:%02x:00.0", i);
        if (strcasecmp(bus, b) == 0) {
            *d = i;
            return cudaSuccess;
        }
    }
    return emu_fail(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer) {
    if (!valid_device(d) || !valid_device(peer)) return emu_fail(cudaErrorInvalidDevice);
    *can = d != peer;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *kernel, enum cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > SMEM_OPTIN_MAX) return emu_fail(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> g(smem_mu);
        smem_optin[kernel] = (size_t)value;
    }
    return cudaSuccess;
}
