// ops_decode_cpu.h: the piece of the CPU twins of ops_decode.h (ops_decode_cpu.c, whose table
// decode_kernels_cpu holds the twins) that the host decoder also runs (teacher/decode_sample.c):
// the sampling rule of one row.
#pragma once
#include <stddef.h>
#include <stdint.h>

// cpu_sample_row: ops_sample's rule for one row of V logits and the draw u; scratch:
// cpu_sample_scratch_bytes(V) bytes.
size_t cpu_sample_scratch_bytes(int V);
int32_t cpu_sample_row(const float *logits, int V, float temperature, int top_k, float top_p, double u, void *scratch);
