// ops_decode_cpu.h: the CPU (fp32, OpenMP) twins of the ops in ops_decode.h; the reference.
// Same arguments as the ops_* functions without the backend; every act buffer is float.
#pragma once
#include <stddef.h>
#include <stdint.h>

void cpu_kv_append(float *k_cache, float *v_cache, const float *k, const float *v, const int32_t *pos, int n,
                   int max_len, int kvd);
// ops_attention_decode_ext (window 0: none; sinks NULL: none); scores: [n*nq, max_len] f32 scratch
void cpu_attention_decode(float *out, const float *q, const float *k_cache, const float *v_cache, const int32_t *pos,
                          int n, int nq, int nkv, int hd, int max_len, float scale, int window, const float *sinks,
                          float *scores);
// cpu_sample_row: ops_sample's rule for one row of V logits and the draw u; scratch:
// cpu_sample_scratch_bytes(V) bytes.
size_t cpu_sample_scratch_bytes(int V);
int32_t cpu_sample_row(const float *logits, int V, float temperature, int top_k, float top_p, double u, void *scratch);
