// attention_cpu.h: the CPU attention's pieces other CPU kernels reuse (attention_cpu.c): one query,
// or one GQA group of queries, against a run of keys and values with an exact fp32 softmax. The
// decode's attention (common/decode) is made of them.
#pragma once
#include <stdint.h>

// cpu_attend_row: one query against n consecutive keys/values with row stride `stride` (floats),
// exact fp32 softmax of the scaled scores; p[n] scratch. The decode's attention (one query at a time).
void cpu_attend_row(float *o, const float *q, const float *k, const float *v, int n, int64_t stride, int hd,
                    float scale, float *p);
// cpu_attend_group: g query rows q[g, hd] of one GQA group against the same n keys/values, outputs
// o[g, hd]; sinks: NULL or [g] logits that join each row's softmax denominator (gpt-oss's sinks);
// p: g scratch rows of ldp (>= n) floats.
void cpu_attend_group(float *o, const float *q, const float *k, const float *v, int g, int n, int64_t stride, int hd,
                      float scale, const float *sinks, float *p, int ldp);
