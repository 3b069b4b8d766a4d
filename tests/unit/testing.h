// testing.h: the tiny harness every tests/unit/test_*.c uses.
//
//   CHECK(cond)                       counts a failure (with file:line) when cond is false
//   CHECK_MSG(cond, fmt, ...)         same, with a message
//   CHECK_CLOSE(a, b, tol)            |a - b| <= tol
//   CHECK_ERR(expr, "substring")      expr returns < 0 (or NULL) and error_msg() contains substring
//   return test_finish("name");       prints "name: N passed, M failed" and the exit code
//   test_report(op, err, tol)         one line "op  err  tol  ok|FAIL" (what tests/gpu/check_lib.py
//                                     reads), and a check that err <= tol
//   test_rel_err(a, ref, n)           max |a - ref| / max |ref| (1 when ref is all zero); NaN anywhere:
//                                     infinity, so a NaN never passes; test_rel_err_d: ref in double
//
// The tests' random inputs, one generator for all (the program's own, rng.h's Philox, is what
// some tests check, never their input source): a 64-bit LCG (Knuth's MMIX constants), one step
// per draw, one stream per test process.
//   test_rand_seed(seed)              starts the stream (a test's main, or a case that wants its own)
//   test_rand_u32()                   the state's high 32 bits
//   test_rand_pm1()                   uniform in [-1, 1), 24 bits (a float holds it exactly)
//   test_rand_uniform()               uniform in [0, 1), 53 bits
//   test_rand_below(n)                in [0, n), n > 0 (the modulo of 31 bits: biased by < n / 2^31)
//   test_rand_vec(n, amp)             n floats amp * pm1 (caller frees)
//   test_rand_bf16(n, amp)            the same rounded to bf16, the values a bf16 device sees
// test_copy_floats(x, n): a copy of n floats (caller frees), e.g. an input an op overwrites.
//
// Nothing here can make a test pass that did not run its checks: test_finish fails when no CHECK ran.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/core/error.h"

extern int test_passed, test_failed;

void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int test_finish(const char *name);
// test_tmpdir: a fresh directory under $TMPDIR (or /tmp) for this test process; removed by
// test_finish when every check passed.
const char *test_tmpdir(void);
// test_path: test_tmpdir()/name, in a static rotating buffer (valid for a few calls).
const char *test_path(const char *name);
// test_src_path: $DFLASH_SRC/rel (the repository), for committed fixtures.
const char *test_src_path(const char *rel);
// test_write_file: write bytes to path; returns 0 on success.
int test_write_file(const char *path, const void *data, size_t n);
void test_report(const char *op, double err, double tol);
double test_rel_err(const float *a, const float *ref, size_t n);
double test_rel_err_d(const float *a, const double *ref, size_t n);

void test_rand_seed(uint64_t seed);
uint64_t test_rand_next(void);
static inline uint32_t test_rand_u32(void) { return (uint32_t)(test_rand_next() >> 32); }
static inline double test_rand_pm1(void) { return (double)(test_rand_next() >> 40) / (double)(1ull << 24) * 2.0 - 1.0; }
static inline double test_rand_uniform(void) { return (double)(test_rand_next() >> 11) / (double)(1ull << 53); }
static inline int test_rand_below(int n) { return (int)((test_rand_next() >> 33) % (uint64_t)n); }
float *test_rand_vec(size_t n, float amp);
float *test_rand_bf16(size_t n, float amp);
float *test_copy_floats(const float *x, size_t n);

// TEST_EMULATED: 1 in the CUDA emulator build (DFLASH_CUDA_EMU, tests/emu/README.md), where a kernel
// runs some 10^3-10^5 times slower than on a GPU. TEST_EMU_SIZE(gpu_n, emu_n): gpu_n, or emu_n there.
// Only a size whose point is a real model's scale shrinks there; every case that checks a shape
// feature (partial tiles, grid limits, odd head_dim) runs as it is.
#ifdef DFLASH_CUDA_EMU
#define TEST_EMULATED 1
#else
#define TEST_EMULATED 0
#endif
#define TEST_EMU_SIZE(gpu_n, emu_n) (TEST_EMULATED ? (emu_n) : (gpu_n))

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (cond) test_passed++;                                                              \
        else test_fail(__FILE__, __LINE__, "%s", #cond);                                      \
    } while (0)
#define CHECK_MSG(cond, ...)                                                                  \
    do {                                                                                      \
        if (cond) test_passed++;                                                              \
        else test_fail(__FILE__, __LINE__, __VA_ARGS__);                                      \
    } while (0)
#define CHECK_CLOSE(a, b, tol)                                                                \
    do {                                                                                      \
        double a_ = (double)(a), b_ = (double)(b);                                            \
        if (a_ - b_ <= (tol) && b_ - a_ <= (tol)) test_passed++;                              \
        else test_fail(__FILE__, __LINE__, "%s = %.9g vs %s = %.9g (tol %g)", #a, a_, #b, b_, \
                       (double)(tol));                                                        \
    } while (0)
// CHECK_ERR(expr, "substring"): expr (an int) must be < 0 with error_msg() containing substring.
#define CHECK_ERR(expr, substr)                                                               \
    do {                                                                                      \
        error_clear();                                                                        \
        int r_ = (expr);                                                                      \
        if (r_ < 0 && strstr(error_msg(), (substr))) test_passed++;                           \
        else test_fail(__FILE__, __LINE__, "%s returned %d with message '%s', wanted < 0 and '%s'", \
                       #expr, r_, error_msg(), (substr));                                     \
    } while (0)
