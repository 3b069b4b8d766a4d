// target_decode.c: KV-cached greedy decoding over the target's weights (see target_decode.h).
//
// The layer code mirrors target_forward (target.c) op for op, so a prefilled prompt gives the same
// numbers as the packed forward, and a decode step gives the same numbers for its one new row up to
// the rounding of GEMMs over a different number of rows.
#include "teacher/target_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/kernels/ops.h"
#include "common/kernels/ops_cpu.h"

// ----------------------------------------------------------------------------- memory

static int decoder_tile(const target_model *m, int vocab_tile) {
    int64_t V = m->cfg.vocab, t = vocab_tile > 0 ? vocab_tile : 8192;
    return (int)(t < V ? t : V);
}

// Carve every buffer from a (possibly dry) arena; the same code sizes and allocates.
static void decoder_carve(target_decoder *d, arena *a, const target_model *m, int max_seqs, int max_len, int vocab_tile) {
    const target_config *c = &m->cfg;
    size_t e = dtype_size(ops_act_dtype(m->be));
    size_t S = (size_t)max_seqs, L = (size_t)c->n_layers, H = (size_t)c->hidden, I = (size_t)c->intermediate;
    size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    d->max_seqs = max_seqs;
    d->max_len = max_len;
    d->rows = max_len > max_seqs ? max_len : max_seqs;
    d->vocab_tile = decoder_tile(m, vocab_tile);
    size_t R = (size_t)d->rows;
    d->k_cache = arena_alloc(a, L * S * (size_t)max_len * kvd * e);
    d->v_cache = arena_alloc(a, L * S * (size_t)max_len * kvd * e);
    d->x = arena_alloc(a, R * H * e);
    d->xn = arena_alloc(a, R * H * e);
    d->q = arena_alloc(a, R * qd * e);
    d->k = arena_alloc(a, R * kvd * e);
    d->v = arena_alloc(a, R * kvd * e);
    d->att = arena_alloc(a, R * qd * e);
    d->gate = arena_alloc(a, R * I * e);
    d->up = arena_alloc(a, R * I * e);
    d->last = arena_alloc(a, S * H * e);
    d->scores = arena_alloc(a, S * (size_t)c->n_heads * (size_t)max_len * sizeof(float));
    d->logits = arena_alloc(a, S * (size_t)d->vocab_tile * sizeof(float));
    d->tokens = arena_alloc(a, R * sizeof(int32_t));
    d->pos = arena_alloc(a, R * sizeof(int32_t));
    d->cu = arena_alloc(a, 2 * sizeof(int32_t));
    d->top_val = arena_alloc(a, S * sizeof(float));
    d->run_m = arena_alloc(a, S * sizeof(float));
    d->run_s = arena_alloc(a, S * sizeof(float));
    d->lse = arena_alloc(a, S * sizeof(float));
    d->top_idx = arena_alloc(a, S * sizeof(int32_t));
}

size_t target_decoder_bytes(const target_model *m, int max_seqs, int max_len, int vocab_tile) {
    arena a;
    arena_init_dry(&a, "decoder (plan)");
    target_decoder d;
    decoder_carve(&d, &a, m, max_seqs, max_len, vocab_tile);
    return a.used;
}

int target_decoder_init(target_decoder *d, target_model *m, int max_seqs, int max_len, int vocab_tile) {
    memset(d, 0, sizeof *d);
    if (m->be->kind != BACKEND_CPU)
        return error_set("the KV-cached greedy decode runs on the CPU backend only (no %s attention over the cache "
                         "yet): use --device cpu", m->be->name);
    if (max_seqs < 1 || max_len < 1)
        return error_set("decoder sizes: %d sequences of %d positions (both must be >= 1)", max_seqs, max_len);
    size_t bytes = target_decoder_bytes(m, max_seqs, max_len, vocab_tile);
    if (arena_init(&d->mem, "decoder cache + work", m->be, bytes)) return -1;
    decoder_carve(d, &d->mem, m, max_seqs, max_len, vocab_tile);
    d->m = m;
    d->len = xcalloc((size_t)max_seqs, sizeof(int));
    d->pos_host = xmalloc((size_t)d->rows * sizeof(int32_t));
    return 0;
}

void target_decoder_free(target_decoder *d) {
    if (d->mem.base) arena_free(&d->mem);
    free(d->len);
    free(d->pos_host);
    memset(d, 0, sizeof *d);
}

// ----------------------------------------------------------------------------- compute

// y[T, out] = x[T, in] @ W[out, in]^T
static void decoder_linear(backend *be, void *y, const void *x, const void *W, int T, int in, int out) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out, dt, dt);
}

// Cached keys (or values) of layer l, sequence s, from position p: [max_len, kvd] rows.
static float *decoder_cache_at(const target_decoder *d, void *cache, int l, int s, int p) {
    const target_config *c = &d->m->cfg;
    size_t kvd = (size_t)(c->n_kv_heads * c->head_dim);
    return (float *)cache + (((size_t)l * d->max_seqs + s) * d->max_len + (size_t)p) * kvd;
}

// Single-query attention over the cache, the CPU twin style of cpu_attention_causal (same
// arithmetic: fp32 dot products, exact softmax with a running max, normalised weighted sum):
// row s (the new token of sequence s, at position len[s], its key and value already in the cache)
// attends to cached positions 0 .. len[s] of sequence s. out, q [n, nq, hd]; GQA: query head h
// uses kv head h / (nq/nkv). Threads only when there is enough work to pay for them (a tiny model's
// step is microseconds, and a parallel region on a busy machine can cost milliseconds).
static void decoder_attention_cpu(target_decoder *d, int l, float *out, const float *q, int n, float scale) {
    const target_config *c = &d->m->cfg;
    int nq = (int)c->n_heads, nkv = (int)c->n_kv_heads, hd = (int)c->head_dim, group = nq / nkv;
    float *scores = d->scores;
    int max_len = d->max_len;
    int64_t work = (int64_t)n * nq * hd * (d->len[0] + 1);
#pragma omp parallel for collapse(2) schedule(dynamic, 4) if (work >= 65536)
    for (int s = 0; s < n; s++) {
        for (int h = 0; h < nq; h++) {
            const float *qv = q + ((size_t)s * nq + h) * hd;
            float *o = out + ((size_t)s * nq + h) * hd;
            float *p = scores + ((size_t)s * nq + h) * max_len;
            const float *kc = decoder_cache_at(d, d->k_cache, l, s, 0), *vc = decoder_cache_at(d, d->v_cache, l, s, 0);
            int kh = h / group, len = d->len[s] + 1;
            cpu_attend_row(o, qv, kc + (size_t)kh * hd, vc + (size_t)kh * hd, len, (int64_t)nkv * hd, hd, scale, p);
        }
    }
}

// The decoder layers over R rows already embedded in d->x, positions in d->pos.
//   seq >= 0: a prefill of sequence seq (R = its prompt length, rows = positions 0..R-1): keys and
//             values go to the cache at positions 0..R-1, causal attention over the prompt.
//   seq < 0:  a decode step (R = n_seq, row s = sequence s's new token at position len[s]): its key
//             and value go to the cache at position len[s], one query over positions 0..len[s]
//             (the caller then counts the position: len[s] += 1).
static void decoder_layers(target_decoder *d, int seq, int R) {
    target_model *m = d->m;
    const target_config *c = &m->cfg;
    backend *be = m->be;
    int H = (int)c->hidden, I = (int)c->intermediate, hd = (int)c->head_dim;
    int nq = (int)c->n_heads, nkv = (int)c->n_kv_heads, kvd = nkv * hd;
    size_t e = dtype_size(ops_act_dtype(be));
    float eps = (float)c->rms_eps, scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < (int)c->n_layers; l++) {
        const target_layer *L = &m->layers[l];
        // attention block
        ops_rmsnorm(be, d->xn, d->x, L->input_norm, R, H, eps);
        decoder_linear(be, d->q, d->xn, L->wq, R, H, nq * hd);
        decoder_linear(be, d->k, d->xn, L->wk, R, H, kvd);
        decoder_linear(be, d->v, d->xn, L->wv, R, H, kvd);
        if (c->arch == ARCH_QWEN3) { // per-head RMSNorm before RoPE
            ops_rmsnorm(be, d->q, d->q, L->q_norm, R * nq, hd, eps);
            ops_rmsnorm(be, d->k, d->k, L->k_norm, R * nkv, hd, eps);
        }
        ops_rope(be, d->q, d->pos, m->inv_freq, R, nq, hd);
        ops_rope(be, d->k, d->pos, m->inv_freq, R, nkv, hd);
        if (seq >= 0) {
            ops_copy_2d(be, decoder_cache_at(d, d->k_cache, l, seq, 0), kvd, d->k, kvd, R, kvd);
            ops_copy_2d(be, decoder_cache_at(d, d->v_cache, l, seq, 0), kvd, d->v, kvd, R, kvd);
            ops_attention_causal(be, d->att, d->q, d->k, d->v, d->cu, 1, R, nq, nkv, hd, scale);
        } else {
            for (int s = 0; s < R; s++) {
                ops_copy_2d(be, decoder_cache_at(d, d->k_cache, l, s, d->len[s]), kvd, (char *)d->k + (size_t)s * kvd * e,
                            kvd, 1, kvd);
                ops_copy_2d(be, decoder_cache_at(d, d->v_cache, l, s, d->len[s]), kvd, (char *)d->v + (size_t)s * kvd * e,
                            kvd, 1, kvd);
            }
            decoder_attention_cpu(d, l, d->att, d->q, R, scale);
        }
        decoder_linear(be, d->xn, d->att, L->wo, R, nq * hd, H);
        ops_add(be, d->x, d->xn, (int64_t)R * H);
        // MLP block
        ops_rmsnorm(be, d->xn, d->x, L->post_norm, R, H, eps);
        decoder_linear(be, d->gate, d->xn, L->w_gate, R, H, I);
        decoder_linear(be, d->up, d->xn, L->w_up, R, H, I);
        ops_swiglu(be, d->gate, d->gate, d->up, (int64_t)R * I);
        decoder_linear(be, d->xn, d->gate, L->w_down, R, I, H);
        ops_add(be, d->x, d->xn, (int64_t)R * H);
    }
}

// next[s] = argmax of lm_head(norm(h[s])) for the n rows of h [n, H] (act), over vocabulary tiles:
// the teacher's running top-k with k = 1 (largest logit, lowest id among equal ones).
static void decoder_argmax(target_decoder *d, const void *h, int n, int32_t *next) {
    target_model *m = d->m;
    backend *be = m->be;
    int H = (int)m->cfg.hidden, V = (int)m->cfg.vocab;
    dtype dt = ops_act_dtype(be);
    size_t e = dtype_size(dt);
    ops_rmsnorm(be, d->xn, h, m->final_norm, n, H, (float)m->cfg.rms_eps);
    ops_topk_lse_init(be, d->top_val, d->top_idx, d->run_m, d->run_s, n, 1);
    for (int v0 = 0; v0 < V; v0 += d->vocab_tile) {
        int vc = V - v0 < d->vocab_tile ? V - v0 : d->vocab_tile;
        backend_gemm(be, 0, 1, n, vc, H, 1.0f, d->xn, H, (const char *)m->lm_head + (size_t)v0 * H * e, H, 0.0f,
                     d->logits, vc, dt, DT_F32);
        ops_topk_lse_update(be, d->logits, vc, v0, n, vc, 1, d->top_val, d->top_idx, d->run_m, d->run_s);
    }
    backend_copy_to_host(be, next, d->top_idx, (size_t)n * sizeof(int32_t));
}

static int decoder_check_ids(const target_decoder *d, const int32_t *ids, int n, const char *what, int seq) {
    int64_t V = d->m->cfg.vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return error_set("%s %d: token %d has id %d, outside the target vocabulary [0, %lld)", what, seq, i, ids[i],
                             (long long)V);
    return 0;
}

int target_decoder_prefill(target_decoder *d, int n_seq, const int32_t *const *prompts, const int *plen,
                           int32_t *next) {
    backend *be = d->m->be;
    int H = (int)d->m->cfg.hidden;
    size_t e = dtype_size(ops_act_dtype(be));
    if (n_seq < 1 || n_seq > d->max_seqs)
        return error_set("decoder: %d sequences given, it holds 1..%d", n_seq, d->max_seqs);
    for (int s = 0; s < n_seq; s++) {
        if (plen[s] < 1 || plen[s] > d->max_len)
            return error_set("prompt %d has %d tokens: the decoder caches 1..%d positions", s, plen[s], d->max_len);
        if (decoder_check_ids(d, prompts[s], plen[s], "prompt", s)) return -1;
    }
    d->n_seq = n_seq;
    for (int s = 0; s < n_seq; s++) {
        int P = plen[s];
        int32_t cu[2] = {0, P};
        for (int t = 0; t < P; t++) d->pos_host[t] = t;
        backend_copy_to_device(be, d->tokens, prompts[s], (size_t)P * sizeof(int32_t));
        backend_copy_to_device(be, d->pos, d->pos_host, (size_t)P * sizeof(int32_t));
        backend_copy_to_device(be, d->cu, cu, sizeof cu);
        ops_embed(be, d->x, d->m->embed, d->tokens, P, H);
        decoder_layers(d, s, P);
        d->len[s] = P;
        ops_copy_2d(be, (char *)d->last + (size_t)s * H * e, H, (char *)d->x + (size_t)(P - 1) * H * e, H, 1, H);
    }
    decoder_argmax(d, d->last, n_seq, next);
    return 0;
}

int target_decoder_step(target_decoder *d, const int32_t *tokens, int32_t *next) {
    backend *be = d->m->be;
    int n = d->n_seq, H = (int)d->m->cfg.hidden;
    if (n < 1) return error_set("decoder: a step before any prefill");
    for (int s = 0; s < n; s++)
        if (d->len[s] >= d->max_len)
            return error_set("decoder: sequence %d already holds %d positions, the cache's capacity", s, d->max_len);
    if (decoder_check_ids(d, tokens, n, "decode step, sequence", 0)) return -1;
    for (int s = 0; s < n; s++) d->pos_host[s] = d->len[s]; // positions continue from the prompt
    backend_copy_to_device(be, d->tokens, tokens, (size_t)n * sizeof(int32_t));
    backend_copy_to_device(be, d->pos, d->pos_host, (size_t)n * sizeof(int32_t));
    ops_embed(be, d->x, d->m->embed, d->tokens, n, H);
    decoder_layers(d, -1, n);
    for (int s = 0; s < n; s++) d->len[s]++;
    decoder_argmax(d, d->x, n, next);
    return 0;
}

int target_decoder_generate(target_decoder *d, int n_seq, const int32_t *const *prompts, const int *plen,
                            int gen_len, int32_t *out) {
    if (gen_len < 1) return error_set("decoder: %d tokens to generate (want >= 1)", gen_len);
    for (int s = 0; s < n_seq; s++)
        if (plen[s] + gen_len - 1 > d->max_len)
            return error_set("prompt %d (%d tokens) + %d generated needs %d cached positions, the decoder holds %d", s,
                             plen[s], gen_len, plen[s] + gen_len - 1, d->max_len);
    int32_t *cur = xmalloc((size_t)n_seq * sizeof(int32_t)), *nxt = xmalloc((size_t)n_seq * sizeof(int32_t));
    int rc = target_decoder_prefill(d, n_seq, prompts, plen, cur);
    for (int j = 0; rc == 0 && j < gen_len; j++) {
        for (int s = 0; s < n_seq; s++) out[(size_t)s * gen_len + j] = cur[s];
        if (j + 1 == gen_len) break; // the last token is never fed back
        rc = target_decoder_step(d, cur, nxt);
        int32_t *t = cur;
        cur = nxt;
        nxt = t;
    }
    free(cur);
    free(nxt);
    return rc;
}
