// cuda_emu.h: what a CUDA kernel sees when its .cu file is built for the CPU emulator.
//
// The emulator build (cmake -DDFLASH_CUDA_EMU=ON, see tests/emu/README.md) compiles every
// src/**/*.cu file as ordinary C++ with this header included first, after a textual rewrite
// (rewrite_cu.cmake) of the two constructs C++ cannot parse:
//     kernel<<<grid, block, smem, stream>>>(args)   ->  emu_launcher(kernel, grid, block, smem, stream)(args)
//     extern __shared__ T name[];                   ->  T *name = (T *)emu::dynamic_smem();
// Each CUDA thread of a block becomes a fiber (its own stack, emu_sched.cpp); __syncthreads and the
// warp shuffles are barriers between those fibers, so barriers, shuffles, shared memory, atomics
// and the index arithmetic behave as on a GPU. Blocks run one after another on the launching host
// thread. What it cannot show: data races between threads (fibers only switch at barriers),
// performance, and the rounding of real tensor-core or fast-math instructions.
#pragma once

// The real toolkit headers first, read by the host compiler: types, enums and API declarations.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>

// Execution-space and launch attributes mean nothing on the host.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Shared memory: one instance per host thread, shared by every fiber of the running block.
#define __shared__ static thread_local

namespace emu {

// One CUDA thread (a fiber) and the launch it belongs to.
struct thread_ctx {
    uint3 tid;
    int linear, lane, warp;
};
struct launch_ctx {
    dim3 grid, block;
    uint3 bid;
    void *smem;
    const char *kernel;
};
extern thread_local thread_ctx *cur_thread;
extern thread_local launch_ctx *cur_launch;

// Block barrier (__syncthreads) and a warp exchange: every live lane of the warp publishes v, and
// gets the value lane `src` published (its own when src is out of range or has exited).
void sync_block();
uint64_t warp_exchange(uint64_t v, int src);
void *dynamic_smem();

// Runs body once per thread of every block of the grid; returns the launch error (cudaSuccess,
// cudaErrorInvalidConfiguration, ...), which the runtime keeps for cudaGetLastError.
typedef void (*body_fn)(void *);
void run_kernel(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, body_fn body, void *arg);

template <class T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> static inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}

} // namespace emu

#define threadIdx (emu::cur_thread->tid)
#define blockIdx (emu::cur_launch->bid)
#define blockDim (emu::cur_launch->block)
#define gridDim (emu::cur_launch->grid)
#define warpSize 32 // (emu_runtime.cpp #undefs it to fill cudaDeviceProp)

static inline void __syncthreads() { emu::sync_block(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    (void)emu::warp_exchange(0, 0);
}

template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    (void)mask, (void)width;
    return emu::from_bits<T>(emu::warp_exchange(emu::to_bits(v), src & 31));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    (void)mask, (void)width;
    return emu::from_bits<T>(emu::warp_exchange(emu::to_bits(v), emu::cur_thread->lane ^ m));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    (void)mask, (void)width;
    int src = emu::cur_thread->lane + (int)d;
    return emu::from_bits<T>(emu::warp_exchange(emu::to_bits(v), src < 32 ? src : emu::cur_thread->lane));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    (void)mask, (void)width;
    int src = emu::cur_thread->lane - (int)d;
    return emu::from_bits<T>(emu::warp_exchange(emu::to_bits(v), src >= 0 ? src : emu::cur_thread->lane));
}

// Atomics: fibers never switch inside one, so a plain read-modify-write is atomic.
template <class T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <class T> static inline T atomicMax(T *p, T v) {
    T old = *p;
    if (v > old) *p = v;
    return old;
}
template <class T> static inline T atomicMin(T *p, T v) {
    T old = *p;
    if (v < old) *p = v;
    return old;
}
template <class T> static inline T atomicExch(T *p, T v) {
    T old = *p;
    *p = v;
    return old;
}
template <class T> static inline T atomicCAS(T *p, T cmp, T v) {
    T old = *p;
    if (old == cmp) *p = v;
    return old;
}

// Device intrinsics with host meanings.
static inline unsigned __float_as_uint(float x) { return emu::from_bits<unsigned>(emu::to_bits(x)); }
static inline float __uint_as_float(unsigned x) { return emu::from_bits<float>(emu::to_bits(x)); }
static inline int __float_as_int(float x) { return emu::from_bits<int>(emu::to_bits(x)); }
static inline float __int_as_float(int x) { return emu::from_bits<float>(emu::to_bits(x)); }
#define __expf(x) expf(x) // glibc declares its own __expf/__logf
#define __logf(x) logf(x)
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }

// The runtime's C++ overload for kernel pointers (cuda_runtime.h declares it only for nvcc).
template <class... P>
static inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)kernel, attr, value);
}

// kernel<<<grid, block, smem, stream>>>(args): the arguments are converted to the kernel's parameter
// types once, as a launch does, and every thread calls the kernel with (copies of) them.
template <class... P> struct emu_call {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    size_t smem;
    template <class... A> void operator()(A &&...a) const {
        std::tuple<typename std::decay<P>::type...> args(std::forward<A>(a)...);
        struct pack {
            void (*k)(P...);
            std::tuple<typename std::decay<P>::type...> *args;
        } p = {kernel, &args};
        emu::run_kernel((const void *)kernel, name, grid, block, smem,
                        [](void *v) {
                            pack *q = (pack *)v;
                            std::apply(q->k, *q->args);
                        },
                        &p);
    }
};
template <class... P>
static inline emu_call<P...> emu_launch_config(void (*kernel)(P...), const char *name, dim3 grid, dim3 block,
                                               size_t smem = 0, cudaStream_t stream = 0) {
    (void)stream; // one in-order queue: the launch runs to completion here
    return emu_call<P...>{kernel, name, grid, block, smem};
}
#define emu_launcher(kernel, ...) emu_launch_config(kernel, #kernel, __VA_ARGS__)
