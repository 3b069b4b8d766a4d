// cpu_kernel.h: what the CPU kernels (the *_cpu.c files of this folder) share: the size below which
// a loop stays on one thread, and the sigmoid and SiLU on vexpf (vexp.h). Included by .c files only.
#pragma once
#include "common/kernels/vexp.h"

// Threads only pay off past a few thousand elements: below that, starting an OpenMP team costs
// more than the loop (and on a busy machine much more). Every parallel loop uses this test.
#define OPS_PAR_MIN 16384

static inline float sigmoidf(float x) { return 1.0f / (1.0f + vexpf(-x)); }
static inline float siluf(float x) { return x / (1.0f + vexpf(-x)); }
