// testing_device.h: the op tests' devices (a CPU test's main: test_run_cpu; the CUDA tests: opening
// the CPU reference and the GPU, the attention path they force) and moving test data to and from a
// backend's device: allocation that stops the test on failure, bf16, act (bf16 or f32) and raw
// uploads, bf16/f32/act/raw downloads (host copies the caller frees); count_off, the values off by
// more than a tolerance of the reference's scale. The error measure and the report line: testing.h.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/kernels/attn_tc.h"
#endif
#include "testing.h"

// count_off: the values of got off ref by more than tol * max |ref|
static inline size_t count_off(const float *got, const float *ref, size_t n, double tol) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !(fabs((double)got[i] - ref[i]) <= tol * mx);
    return bad;
}

// test_open_devices: the CPU reference and the CUDA device the test compares it with. 77 (the test
// is skipped, said in one line) without a CUDA device, 1 (the reason printed) when either fails to
// open, else 0.
static inline int test_open_devices(backend *cpu, backend *gpu) {
    if (backend_cuda_devices() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (backend_open(cpu, "cpu", 0) != 0 || backend_open(gpu, "cuda", 0) != 0) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    return 0;
}

// test_run_cpu: the main of a test on the CPU backend: starts the test's random stream at seed, opens
// the CPU backend into be (1, the reason printed, when it fails), runs the n tests in order, closes
// be and returns test_finish(name).
static inline int test_run_cpu(const char *name, uint64_t seed, backend *be, void (*const *tests)(void), size_t n) {
    test_rand_seed(seed);
    if (backend_open(be, "cpu", 0) != 0) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    for (size_t i = 0; i < n; i++) tests[i]();
    backend_close(be);
    return test_finish(name);
}

// test_attn_path: the CUDA attention path of the cases that follow (DFLASH_CUDA_ATTN = path: "tiled",
// "tiled-BQxBK" to force a tile shape, or "scalar"). 0, and a line naming what and hd, when a forced
// shape needs more shared memory at head_dim hd than this card gives (sm_120: 99 KiB; backward: its
// tiles too): the case is skipped. 1 when set.
static inline int test_attn_path(const char *what, const char *path, int hd, int backward) {
#ifdef DFLASH_HAVE_CUDA
    if (!attn_tc_path_fits(path, hd, backward)) {
        printf("%s hd=%d %s: skipped, more shared memory than the device's\n", what, hd, path);
        return 0;
    }
#else
    (void)what, (void)hd, (void)backward;
#endif
    setenv("DFLASH_CUDA_ATTN", path, 1);
    return 1;
}

static inline void *dev_alloc(backend *be, size_t bytes) {
    void *d = backend_alloc(be, bytes ? bytes : 1);
    if (!d) {
        fprintf(stderr, "%s\n", error_msg());
        exit(1);
    }
    return d;
}

static inline void *dev_up_raw(backend *be, const void *x, size_t bytes) {
    void *d = dev_alloc(be, bytes);
    backend_copy_to_device(be, d, x, bytes);
    return d;
}

static inline void *dev_up_bf16(backend *be, const float *x, size_t n) {
    uint16_t *h = xmalloc((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = bf16_from_f32(x[i]);
    void *d = dev_up_raw(be, h, n * sizeof(uint16_t));
    free(h);
    return d;
}

static inline void *dev_down_raw(backend *be, const void *d, size_t bytes) {
    void *h = xmalloc(bytes ? bytes : 1);
    backend_copy_to_host(be, h, d, bytes);
    return h;
}

static inline float *dev_down_f32(backend *be, const void *d, size_t n) { return dev_down_raw(be, d, n * sizeof(float)); }

static inline float *dev_down_bf16(backend *be, const void *d, size_t n) {
    uint16_t *h = dev_down_raw(be, d, n * sizeof(uint16_t));
    float *x = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = f32_from_bf16(h[i]);
    free(h);
    return x;
}

// dev_up_act / dev_down_act: floats as a device's activations: bf16 when bf16, else f32.
static inline void *dev_up_act(backend *be, const float *x, size_t n, int bf16) {
    return bf16 ? dev_up_bf16(be, x, n) : dev_up_raw(be, x, n * sizeof(float));
}

static inline float *dev_down_act(backend *be, const void *d, size_t n, int bf16) {
    return bf16 ? dev_down_bf16(be, d, n) : dev_down_f32(be, d, n);
}

