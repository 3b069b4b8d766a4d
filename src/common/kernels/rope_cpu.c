// rope_cpu.c: RoPE (rope.h) on the CPU, forward and backward: the fp32 reference, threaded with
// OpenMP, and rope_kernels_cpu, the CPU backend's table. One rotation (rope_turn) serves all three
// ops: the full and the partial RoPE turn by the angle, the backward by minus it.
#include <math.h>

#include "common/kernels/cpu_kernel.h"
#include "common/kernels/rope.h"

// rope_turn: the pairs (v[i], v[i + rot/2]), i < rot/2, of every head (hd values each, nh of them)
// of every token t turned by sign * pos[t] * inv_freq[i]: sign 1 the forward, -1 its transpose (a
// rotation's transpose is the rotation by minus the angle). The angle in float, as transformers
// forms it ((inv_freq @ position) in fp32); sin(-angle) = -sin(angle), so the sign goes on the
// sine's terms, exactly (x - -y is x + y), and both directions use the same cosine and sine. Dims
// rot .. hd-1 are left as they are.
static void rope_turn(float *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd, int rot, float sign) {
    int half = rot / 2;
#pragma omp parallel for if ((int64_t)T * nh * rot >= OPS_PAR_MIN)
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            float c = cosf(angle), s = sinf(angle);
            for (float *v = x + (size_t)t * nh * hd, *end = v + (size_t)nh * hd; v < end; v += hd) {
                float a = v[i], b = v[i + half];
                v[i] = a * c - sign * (b * s);
                v[i + half] = b * c + sign * (a * s);
            }
        }
    }
}

static void cpu_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    (void)be;
    rope_turn(x, pos, inv_freq, T, nh, hd, hd, 1.0f);
}

static void cpu_rope_partial(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                             int rot) {
    (void)be;
    rope_turn(x, pos, inv_freq, T, nh, hd, rot, 1.0f);
}

static void cpu_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    (void)be;
    rope_turn(dx, pos, inv_freq, T, nh, hd, hd, -1.0f);
}

const struct rope_kernels rope_kernels_cpu = {ROPE_OPS(OP_FILL, cpu_)};
