// blas_kernel.h: which kernel ("core type") OpenBLAS runs on this processor, and the project's
// choice when the library does not know the processor (issue "Every CPU at full speed").
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels once, when the library loads, from
// OPENBLAS_CORETYPE or its own detection by processor model. 0.3.21 does not know newer processors
// (Sapphire / Emerald / Granite Rapids: family 6 models 143, 207, 173) and falls back to Prescott,
// its SSE3 kernels: sgemm at a fifth of the AVX-512 kernels' speed (bench/RESULTS.md). The project
// therefore compares the library's kernel with the best one the processor's features allow (cpuid,
// with the OS's register support, as __builtin_cpu_supports reads them) and, when the library's is
// weaker and the user set no OPENBLAS_CORETYPE, has the process re-executed with it set
// (threads_exec_policy in threads.h does the one re-exec). The kernels, weakest first, and what each
// needs: Prescott (SSE3), Core2 (SSSE3), Nehalem (SSE4.2), Sandybridge (AVX), Haswell (AVX2, FMA),
// SkylakeX (AVX-512 F/CD/BW/DQ/VL), Cooperlake (SkylakeX + AVX-512 BF16). The choice is the
// strongest the features allow, measured on Emerald Rapids (bench/gemm/bench_gemm_kernels.c).
// Other architectures (aarch64) and libraries are left as they are.
#pragma once
#include <stddef.h>

// blas_kernel_count, blas_kernel_name: the x86-64 kernels above, weakest first (0 elsewhere).
int blas_kernel_count(void);
const char *blas_kernel_name(int i);
// blas_kernel_runs_here: 1 when this processor (and OS) has every instruction kernel i needs.
int blas_kernel_runs_here(int i);
// blas_kernel_rank: the index of a kernel's name (any case), or -1 when it is not in the table
// (another architecture's, or Zen: counted as Haswell, whose instructions it uses).
int blas_kernel_rank(const char *name);

// blas_kernel_choose: the kernel this process should run, decided before the library is used
// (the library has loaded: its own choice is known). Writes the kernel to set into out ("" when
// nothing is to be set: the user's OPENBLAS_CORETYPE wins, the library's choice is already the
// best, or the library/architecture is not one this knows) and one reason into why. Returns 1 when
// out is set.
int blas_kernel_choose(char *out, size_t n, char *why, size_t why_n);

// blas_kernel_describe: the start line's text: the library, its version and threading, the kernel
// it runs, and who chose it and why (the user, the library, or the project: read from
// DFLASH_BLAS_CHOSE, which the re-exec sets beside OPENBLAS_CORETYPE).
void blas_kernel_describe(char *out, size_t n);

// blas_cpu_model: "<model name> (family F model M)" from /proc/cpuinfo ("unknown" without it).
const char *blas_cpu_model(void);
int blas_cpu_has_avx512(void);
