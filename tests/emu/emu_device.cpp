// emu_device.cpp: the emulated devices, for the CPU emulator (tests/emu/README.md): how many,
// their properties and attributes after a device profile (DFLASH_EMU_PROFILE: sm_80, sm_90, sm_120),
// peers, the PCI bus ids, and the dynamic shared memory a kernel may opt into (emu_smem_limit, which
// the launcher in emu_sched.cpp checks).
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

// ---------------------------------------------------------------------------- device profiles

// What a kernel's launch choices may depend on, per architecture (the CUDA programming guide's table
// of compute capabilities, and cudaGetDeviceProperties on each card). The SM count is the card's
// (A100 108, H100 SXM 132, RTX PRO 6000 Blackwell 188); the emulator runs a grid's blocks one after
// another whatever it says.
struct emu_profile {
    const char *arch, *card;
    int major, minor;
    size_t smem_block, smem_optin, smem_sm; // bytes: default per block, opt-in per block, per SM
    int sms, threads_sm, blocks_sm;
};
static const emu_profile PROFILES[] = {
    {"sm_80", "A100", 8, 0, 48 * 1024, 163 * 1024, 164 * 1024, 108, 2048, 32},
    {"sm_90", "H100", 9, 0, 48 * 1024, 227 * 1024, 228 * 1024, 132, 2048, 32},
    {"sm_120", "RTX PRO 6000 Blackwell", 12, 0, 48 * 1024, 99 * 1024, 100 * 1024, 188, 1536, 32},
};

// The profile named by DFLASH_EMU_PROFILE (default sm_90); an unknown name stops the program in one
// line, as a device that cannot be opened would.
static const emu_profile &profile(void) {
    static const emu_profile *p = [] {
        const char *s = getenv("DFLASH_EMU_PROFILE");
        if (!s || !*s) s = "sm_90";
        for (const emu_profile &q : PROFILES)
            if (strcmp(s, q.arch) == 0) return &q;
        fprintf(stderr, "cuda emulator: DFLASH_EMU_PROFILE=%s: unknown device profile (sm_80, sm_90 or sm_120)\n", s);
        fflush(stderr);
        _exit(2);
        return (const emu_profile *)nullptr;
    }();
    return *p;
}

static std::mutex smem_mu;
static std::map<const void *, size_t> smem_optin;
size_t emu_smem_limit(const void *kernel) {
    std::lock_guard<std::mutex> g(smem_mu);
    auto it = smem_optin.find(kernel);
    return it == smem_optin.end() ? profile().smem_block : it->second;
}

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
    (void)profile(); // an unknown profile stops the program before any device is used
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
    const emu_profile &P = profile();
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulator (CPU) as %s", P.arch);
    p->totalGlobalMem = emu_device_capacity();
    p->sharedMemPerBlock = P.smem_block;
    p->sharedMemPerBlockOptin = P.smem_optin;
    p->sharedMemPerMultiprocessor = P.smem_sm;
    p->regsPerBlock = p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsPerMultiProcessor = P.threads_sm;
    p->maxBlocksPerMultiProcessor = P.blocks_sm;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = P.major;
    p->minor = P.minor;
    p->multiProcessorCount = P.sms;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d) {
    if (!valid_device(d)) return emu_fail(cudaErrorInvalidDevice);
    const emu_profile &P = profile();
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)P.smem_optin; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)P.smem_block; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)P.smem_sm; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *v = P.sms; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *v = P.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = P.minor; return cudaSuccess;
    case cudaDevAttrWarpSize: *v = 32; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = P.threads_sm; return cudaSuccess;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = P.blocks_sm; return cudaSuccess;
    case cudaDevAttrMaxRegistersPerBlock: *v = 65536; return cudaSuccess;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *v = 65536; return cudaSuccess;
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
        if (value < 0 || (size_t)value > profile().smem_optin) return emu_fail(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> g(smem_mu);
        smem_optin[kernel] = (size_t)value;
    }
    return cudaSuccess;
}
