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
#include <type_traits>
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
// Per-warp scratch of 256 floats (the WMMA emulation's result tile); fail: report and abort.
float *warp_scratch();
[[noreturn]] void fail(const char *msg);

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
static inline double __dmul_rn(double a, double b) { return a * b; } // one rounded product (no FMA contraction)
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

// nvcuda::wmma at the level of its API (load_matrix_sync, store_matrix_sync, fill_fragment,
// mma_sync): a fragment holds its whole tile in every lane (the real one spreads it over the lanes
// in an unspecified layout, so code must not touch fragment elements and ours does not: there is no
// x[] or num_elements here). Every operation is warp-collective as on the GPU: mma_sync computes
// once per warp, in fp32 over bf16/half inputs, and hands every lane the result. The documented
// requirements are checked: a 256-bit aligned pointer and ldm a multiple of 16 bytes.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int m, int n, int k> struct frag_shape;
template <int m, int n, int k> struct frag_shape<matrix_a, m, n, k> {
    static const int rows = m, cols = k;
};
template <int m, int n, int k> struct frag_shape<matrix_b, m, n, k> {
    static const int rows = k, cols = n;
};
template <int m, int n, int k> struct frag_shape<accumulator, m, n, k> {
    static const int rows = m, cols = n;
};

// v: the tile, row-major [rows][cols], as fp32 (bf16 and half values are exact in fp32)
template <class Use, int m, int n, int k, class T, class Layout = void> struct fragment {
    static const int rows = frag_shape<Use, m, n, k>::rows, cols = frag_shape<Use, m, n, k>::cols;
    float v[rows * cols];
};

static inline float to_f32(float x) { return x; }
static inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline float to_f32(__half x) { return __half2float(x); }

template <class T> static inline void check_ptr(const T *p, unsigned ldm) {
    if ((uintptr_t)p % 32 != 0) emu::fail("WMMA load/store pointer not 256-bit aligned");
    if ((ldm * sizeof(T)) % 16 != 0) emu::fail("WMMA ldm not a multiple of 16 bytes");
}

template <class Use, int m, int n, int k, class T, class L, class P>
static inline void load_matrix_sync(fragment<Use, m, n, k, T, L> &f, const P *p, unsigned ldm) {
    check_ptr(p, ldm);
    (void)emu::warp_scratch(); // a full warp
    const bool col = std::is_same<L, col_major>::value;
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++) f.v[r * f.cols + c] = to_f32(col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]);
    __syncwarp();
}
template <int m, int n, int k, class T, class P>
static inline void load_matrix_sync(fragment<accumulator, m, n, k, T> &f, const P *p, unsigned ldm, layout_t lay) {
    check_ptr(p, ldm);
    (void)emu::warp_scratch();
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) f.v[r * n + c] = to_f32(lay == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]);
    __syncwarp();
}
template <int m, int n, int k, class T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, m, n, k, T> &f, unsigned ldm, layout_t lay) {
    check_ptr(p, ldm);
    (void)emu::warp_scratch();
    __syncwarp(); // every lane has the same tile: one lane writes it
    if (emu::cur_thread->lane == 0)
        for (int r = 0; r < m; r++)
            for (int c = 0; c < n; c++) (lay == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.v[r * n + c];
    __syncwarp();
}
template <class Use, int m, int n, int k, class T, class L, class V>
static inline void fill_fragment(fragment<Use, m, n, k, T, L> &f, const V &x) {
    for (int i = 0; i < f.rows * f.cols; i++) f.v[i] = to_f32(x);
}
template <int m, int n, int k, class TA, class LA, class TB, class LB, class TC>
static inline void mma_sync(fragment<accumulator, m, n, k, TC> &d, const fragment<matrix_a, m, n, k, TA, LA> &a,
                            const fragment<matrix_b, m, n, k, TB, LB> &b, const fragment<accumulator, m, n, k, TC> &c) {
    float *out = emu::warp_scratch();
    if (emu::cur_thread->lane == 0)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float s = c.v[i * n + j];
                for (int l = 0; l < k; l++) s += a.v[i * k + l] * b.v[l * n + j];
                out[i * n + j] = s;
            }
    __syncwarp(); // lane 0 has written the tile
    for (int i = 0; i < m * n; i++) d.v[i] = out[i];
    __syncwarp(); // every lane has read it before the next operation overwrites it
}
} // namespace wmma
} // namespace nvcuda
