// target_decode.c: KV-cached greedy decoding over the target's weights (see target_decode.h).
//
// The layer code is the packed forward's own, through the architecture's table (target_arch.h: the
// mixer's forward for recurrent layers, its attention halves around the cached attention), run on
// a target_work view of the decoder's buffers,
// so a prefilled prompt gives the same numbers as the packed forward, and a decode step gives the
// same numbers for its one new row up to the rounding of GEMMs over a different number of rows (and,
// in a Gated DeltaNet layer, of the delta rule's chunk over one token instead of many).
#include "teacher/target_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/kernels/ops.h"
#include "common/decode/ops_decode.h"
#include "teacher/target_arch.h"

// ----------------------------------------------------------------------------- memory

static int decoder_tile(const target_model *m, int vocab_tile) {
    int64_t V = m->cfg.vocab, t = vocab_tile > 0 ? vocab_tile : 8192;
    return (int)(t < V ? t : V);
}

// Carve every buffer from a (possibly dry) arena; the same code sizes and allocates.
static void decoder_carve(target_decoder *d, arena *a, const target_model *m, int max_seqs, int max_len, int vocab_tile,
                          const decode_sampling *smp) {
    const target_config *c = &m->cfg;
    size_t e = dtype_size(ops_act_dtype(m->be));
    size_t S = (size_t)max_seqs, H = (size_t)c->hidden, I = (size_t)target_mlp_width(c);
    int64_t q_width, kv_width; // the widest layer's (Gemma 4's full layers have heads of their own)
    target_attn_max(c, &q_width, &kv_width);
    size_t qd = (size_t)q_width, kvd = (size_t)kv_width;
    d->kvd_max = kvd;
    d->max_seqs = max_seqs;
    d->max_len = max_len;
    d->rows = max_len > max_seqs ? max_len : max_seqs;
    d->vocab_tile = decoder_tile(m, vocab_tile);
    d->n_att = d->n_lin = 0;
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1); // a stage of a teacher group caches its own layers only
    for (int64_t l = l0; l < l1; l++) {
        if (target_layer_is_linear(c, l)) d->n_lin++;
        else d->n_att++;
    }
    size_t R = (size_t)d->rows, NA = (size_t)d->n_att, NL = (size_t)d->n_lin;
    size_t C = (size_t)(2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim);
    size_t Kc = c->lin_conv_kernel > 1 ? (size_t)c->lin_conv_kernel - 1 : 0;
    size_t rec = (size_t)(c->lin_v_heads * c->lin_k_dim * c->lin_v_dim);
    d->k_cache = arena_alloc(a, NA * S * (size_t)max_len * kvd * e);
    d->v_cache = arena_alloc(a, NA * S * (size_t)max_len * kvd * e);
    d->conv_state = NL ? arena_alloc(a, NL * S * Kc * C * e) : NULL;
    d->rec_state = NL ? arena_alloc(a, NL * S * rec * sizeof(float)) : NULL;
    target_work *w = &d->w;
    memset(w, 0, sizeof *w);
    w->max_tokens = d->rows;
    w->max_seqs = max_seqs;
    w->vocab_tile = d->vocab_tile;
    w->x = arena_alloc(a, R * H * e);
    w->xn = arena_alloc(a, R * H * e);
    w->q = arena_alloc(a, R * qd * e);
    w->k = arena_alloc(a, R * kvd * e);
    w->v = arena_alloc(a, R * kvd * e);
    w->att = arena_alloc(a, R * qd * e);
    w->gate = arena_alloc(a, R * I * e);
    w->up = arena_alloc(a, R * I * e);
    w->tokens = arena_alloc(a, R * sizeof(int32_t));
    w->pos = arena_alloc(a, R * sizeof(int32_t));
    w->cu_seqlens = arena_alloc(a, (S + 1) * sizeof(int32_t));
    target_arch_work_carve(w, a, m, d->rows, max_seqs);
    d->last = arena_alloc(a, S * H * e);
    d->att_work = arena_alloc(a, ops_attention_decode_work_bytes(m->be, max_seqs, (int)c->n_heads, max_len));
    d->sampling = smp && smp->temperature > 0.0f;
    if (d->sampling) d->smp = *smp;
    else memset(&d->smp, 0, sizeof d->smp);
    // sampling: every row's full logits [S, V] (the tiles' GEMMs write their columns), else one tile
    d->logits_ld = d->sampling ? (int)c->vocab : d->vocab_tile;
    d->logits = arena_alloc(a, S * (size_t)d->logits_ld * sizeof(float));
    d->smp_work = d->sampling ? arena_alloc(a, ops_sample_work_bytes(m->be, max_seqs, (int)c->vocab)) : NULL;
    d->u = arena_alloc(a, S * sizeof(double));
    d->top_val = arena_alloc(a, S * sizeof(float));
    d->run_m = arena_alloc(a, S * sizeof(float));
    d->run_s = arena_alloc(a, S * sizeof(float));
    d->lse = arena_alloc(a, S * sizeof(float));
    d->top_idx = arena_alloc(a, S * sizeof(int32_t));
}

size_t target_decoder_bytes(const target_model *m, int max_seqs, int max_len, int vocab_tile,
                            const decode_sampling *smp) {
    arena a;
    arena_init_dry(&a, "decoder (plan)");
    target_decoder d;
    decoder_carve(&d, &a, m, max_seqs, max_len, vocab_tile, smp);
    return a.used;
}

int target_decoder_init(target_decoder *d, target_model *m, int max_seqs, int max_len, int vocab_tile,
                        const decode_sampling *smp) {
    memset(d, 0, sizeof *d);
    if (max_seqs < 1 || max_len < 1)
        return error_set("decoder sizes: %d sequences of %d positions (both must be >= 1)", max_seqs, max_len);
    int64_t q_width, kv_width, hd_max; // the widest head over the layers
    target_attn_max(&m->cfg, &q_width, &kv_width);
    hd_max = q_width / m->cfg.n_heads;
    int hd_limit = ops_attention_decode_head_dim_max(m->be);
    if (hd_limit > 0 && hd_max > hd_limit)
        return error_set("the decode attention on %s takes head_dim up to %d; the target has %lld",
                         m->be->caps.device ? "CUDA" : "this backend", hd_limit, (long long)hd_max);
    size_t bytes = target_decoder_bytes(m, max_seqs, max_len, vocab_tile, smp);
    if (arena_init(&d->mem, "decoder cache + work", m->be, bytes))
        return error_append("%d sequences of %d positions: lower regenerate.max_seqs or regenerate.max_len (or set "
                            "teacher.mem_budget, which sizes regenerate.max_seqs 0)", max_seqs, max_len);
    decoder_carve(d, &d->mem, m, max_seqs, max_len, vocab_tile, smp);
    d->m = m;
    d->slot = xmalloc((size_t)m->cfg.n_layers * sizeof(int));
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1);
    d->slot_kvd = xcalloc((size_t)(d->n_att > 0 ? d->n_att : 1), sizeof(int));
    for (int l = 0, na = 0, nl = 0; l < (int)m->cfg.n_layers; l++) {
        d->slot[l] = l < l0 || l >= l1 ? -1 : target_layer_is_linear(&m->cfg, l) ? nl++ : na++;
        if (d->slot[l] >= 0 && !target_layer_is_linear(&m->cfg, l))
            d->slot_kvd[d->slot[l]] = (int)(target_layer_kv_heads(&m->cfg, l) * target_layer_head_dim(&m->cfg, l));
    }
    d->len = xcalloc((size_t)max_seqs, sizeof(int));
    d->pos_host = xmalloc((size_t)d->rows * sizeof(int32_t));
    d->cu_host = xmalloc(((size_t)max_seqs + 1) * sizeof(int32_t));
    return 0;
}

void target_decoder_free(target_decoder *d) {
    if (d->mem.base) arena_free(&d->mem);
    free(d->slot);
    free(d->slot_kvd);
    free(d->len);
    free(d->pos_host);
    free(d->cu_host);
    memset(d, 0, sizeof *d);
}

// ----------------------------------------------------------------------------- compute

// Cached keys (or values) of attention slot a, sequence s, from position p: [max_len, kvd] rows (act).
static void *decoder_cache_at(const target_decoder *d, void *cache, int a, int s, int p) {
    size_t kvd = (size_t)d->slot_kvd[a], e = dtype_size(ops_act_dtype(d->m->be));
    size_t slot = (size_t)a * d->max_seqs * (size_t)d->max_len * d->kvd_max; // elements before slot a
    return (char *)cache + (slot + ((size_t)s * d->max_len + (size_t)p) * kvd) * e;
}

// The decoding state of linear slot i from sequence s on: conv [K-1, C] act, recurrent [Hv, dk, dv] f32
// per sequence (sequences s, s+1, ... follow contiguously).
static size_t decoder_conv_elems(const target_config *c) {
    size_t Kc = c->lin_conv_kernel > 1 ? (size_t)c->lin_conv_kernel - 1 : 0;
    return Kc * (size_t)(2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim);
}
static size_t decoder_rec_elems(const target_config *c) {
    return (size_t)(c->lin_v_heads * c->lin_k_dim * c->lin_v_dim);
}
static void *decoder_conv_at(const target_decoder *d, int i, int s) {
    size_t e = dtype_size(ops_act_dtype(d->m->be));
    return (char *)d->conv_state + ((size_t)i * d->max_seqs + s) * decoder_conv_elems(&d->m->cfg) * e;
}
static float *decoder_rec_at(const target_decoder *d, int i, int s) {
    return d->rec_state + ((size_t)i * d->max_seqs + s) * decoder_rec_elems(&d->m->cfg);
}

// Attention of cache slot a over w->q, w->k, w->v (after RoPE) into w->att, storing the new keys and
// values in the cache: a prefill (n_pre >= 1) of n_pre packed sequences into slots s0.. (sequence i
// at rows cu_host[i]..cu_host[i+1]-1, positions from 0) with causal attention over each prompt, or a
// step (n_pre = 0) of R = n_seq rows, row s at position len[s].
static void decoder_attend(target_decoder *d, int l, int a, int s0, int n_pre, int R) {
    const target_config *c = &d->m->cfg;
    backend *be = d->m->be;
    target_work *w = &d->w;
    int hd = (int)target_layer_head_dim(c, l), nq = (int)c->n_heads, nkv = (int)target_layer_kv_heads(c, l);
    int kvd = nkv * hd;
    size_t row = (size_t)kvd * dtype_size(ops_act_dtype(be));
    float scale = target_attn_scale(c);
    int window = c->layer_window[l];
    const float *sinks = d->m->layers[l].sinks;
    if (n_pre > 0) {
        for (int i = 0; i < n_pre; i++) { // each prompt's keys and values to its slot's positions 0..
            int r0 = d->cu_host[i], P = d->cu_host[i + 1] - r0;
            ops_copy_2d(be, decoder_cache_at(d, d->k_cache, a, s0 + i, 0), kvd, (char *)w->k + (size_t)r0 * row, kvd, P,
                        kvd);
            ops_copy_2d(be, decoder_cache_at(d, d->v_cache, a, s0 + i, 0), kvd, (char *)w->v + (size_t)r0 * row, kvd, P,
                        kvd);
        }
        target_attention(d->m, l, w, R, n_pre);
        return;
    }
    // w->pos holds len[s], the new token's position: its key and value go there, its query attends to 0..len[s]
    void *kc = decoder_cache_at(d, d->k_cache, a, 0, 0), *vc = decoder_cache_at(d, d->v_cache, a, 0, 0);
    ops_kv_append(be, kc, vc, w->k, w->v, w->pos, R, d->max_len, kvd);
    ops_attention_decode_ext(be, w->att, w->q, kc, vc, w->pos, R, nq, nkv, hd, d->max_len, scale, window, sinks,
                             d->att_work);
}

// The decoder layers over R rows already embedded in w->x, positions in w->pos, boundaries in
// w->cu_seqlens (and d->cu_host).
//   n_pre >= 1: a prefill of n_pre packed prompts into slots s0 .. s0+n_pre-1 (R = their tokens;
//             prompt i's rows are positions 0..plen-1): keys and values go to each slot's cache at
//             positions 0..plen-1, causal attention within each prompt; a linear layer runs each
//             prompt from its slot's (zeroed) state and leaves the prompt's final state there (the
//             slots' states are contiguous, as the mixer takes them).
//   n_pre = 0: a decode step (R = n_seq, row s = sequence s's new token at position len[s], each row
//             its own sequence): its key and value go to the cache at position len[s], one query
//             over positions 0..len[s]; a linear layer advances the states of sequences 0..R-1 by
//             one token (the caller then counts the position: len[s] += 1).
static void decoder_layers(target_decoder *d, int s0, int n_pre, int R) {
    target_model *m = d->m;
    const target_config *c = &m->cfg;
    target_work *w = &d->w;
    const target_mixer *mix = c->table->mixer; // the architecture's layer code (target_arch.h)
    int H = (int)c->hidden;
    int n_seq = n_pre > 0 ? n_pre : R;
    if (n_pre == 0) s0 = 0;
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1);
    for (int l = (int)l0; l < (int)l1; l++) {
        target_layer_materialize(m, l); // resident quantised weights: this layer's, de-quantised
        const target_layer *L = &m->layers[l];
        // token mixer block
        target_norm(m, w->xn, w->x, L->input_norm, R, H);
        if (target_layer_is_linear(c, l)) { // a recurrent layer: its state per sequence
            mix->forward(m, l, w, R, n_seq, decoder_conv_at(d, d->slot[l], s0), decoder_rec_at(d, d->slot[l], s0));
        } else { // attention: the architecture's halves around the attention over the cache
            mix->attn_project(m, l, w, R);
            decoder_attend(d, l, d->slot[l], s0, n_pre, R);
            mix->attn_finish(m, l, w, R);
        }
        target_mixer_residual(m, l, w, R);
        target_mlp_block(m, l, w, R);
    }
}

// next[s] (host) = the token after each of the n rows of h [n, H] (act): lm_head(norm(h[s])) over
// vocabulary tiles, then either the teacher's running top-k with k = 1 (u NULL: the greedy token,
// largest logit, lowest id among equal ones) or, when the decoder samples, ops_sample over every
// row's full logits with the draws u[s] (host). Only the n chosen ids come back to the host.
static void decoder_head(target_decoder *d, const void *h, int n, const double *u, int32_t *next) {
    target_model *m = d->m;
    if (!target_stage_is_last(m)) return; // a stage before the last: its output is d->w.x
    backend *be = m->be;
    int H = (int)m->cfg.hidden, V = (int)m->cfg.vocab, ld = d->logits_ld;
    int full = u != NULL; // the logits of every tile kept, at columns v0.. of [n, V]
    dtype dt = ops_act_dtype(be);
    size_t e = dtype_size(dt);
    target_norm(m, d->w.xn, h, m->final_norm, n, H);
    if (!full) ops_topk_lse_init(be, d->top_val, d->top_idx, d->run_m, d->run_s, n, 1);
    for (int v0 = 0; v0 < V; v0 += d->vocab_tile) {
        int vc = V - v0 < d->vocab_tile ? V - v0 : d->vocab_tile;
        float *lg = full ? d->logits + v0 : d->logits;
        backend_gemm(be, 0, 1, n, vc, H, 1.0f, d->w.xn, H, (const char *)m->lm_head + (size_t)v0 * H * e, H, 0.0f, lg,
                     ld, dt, DT_F32);
        target_logits_cap(m, lg, ld, n, vc);
        if (!full) ops_topk_lse_update(be, lg, ld, v0, n, vc, 1, d->top_val, d->top_idx, d->run_m, d->run_s);
    }
    if (full) {
        backend_copy_to_device(be, d->u, u, (size_t)n * sizeof(double));
        ops_sample(be, d->top_idx, d->logits, ld, n, V, d->smp.temperature, d->smp.top_k, d->smp.top_p, d->u,
                   d->smp_work);
    }
    backend_copy_to_host(be, next, d->top_idx, (size_t)n * sizeof(int32_t));
}

// The batch of the next layers call on the device: tokens[R], pos_host[R] and cu_host[n_seq + 1].
static void decoder_upload(target_decoder *d, const int32_t *tokens, int R, int n_seq) {
    backend *be = d->m->be;
    backend_copy_to_device(be, d->w.tokens, tokens, (size_t)R * sizeof(int32_t));
    backend_copy_to_device(be, d->w.pos, d->pos_host, (size_t)R * sizeof(int32_t));
    backend_copy_to_device(be, d->w.cu_seqlens, d->cu_host, ((size_t)n_seq + 1) * sizeof(int32_t));
    d->w.cu_host = d->cu_host;
    if (target_stage_is_first(d->m)) target_embed(d->m, d->w.x, d->w.tokens, R);
}

static int decoder_check_ids(const target_decoder *d, const int32_t *ids, int n, const char *what, int seq) {
    int64_t V = d->m->cfg.vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return error_set("%s %d: token %d has id %d, outside the target vocabulary [0, %lld)", what, seq, i, ids[i],
                             (long long)V);
    return 0;
}

// Prefill slots s0 .. s0+k-1 with k packed prompts (checked by the caller): ids[0:T] (host), prompt i
// plen[i] tokens, T <= rows. One pass of the layers over the T rows (each weight read once for the
// pack): the slots' linear states zeroed, keys and values at positions 0..plen[i]-1 of slot s0+i,
// each prompt's last hidden state in d->last row s0+i.
static void decoder_prefill_pack(target_decoder *d, int s0, int k, const int32_t *ids, const int *plen) {
    backend *be = d->m->be;
    const target_config *c = &d->m->cfg;
    int H = (int)c->hidden;
    size_t e = dtype_size(ops_act_dtype(be));
    for (int i = 0; i < d->n_lin; i++) { // every linear layer starts the sequences from zero (slots contiguous)
        backend_memset_zero(be, decoder_conv_at(d, i, s0), (size_t)k * decoder_conv_elems(c) * e);
        backend_memset_zero(be, decoder_rec_at(d, i, s0), (size_t)k * decoder_rec_elems(c) * sizeof(float));
    }
    d->cu_host[0] = 0;
    for (int i = 0; i < k; i++) {
        for (int t = 0; t < plen[i]; t++) d->pos_host[d->cu_host[i] + t] = t;
        d->cu_host[i + 1] = d->cu_host[i] + plen[i];
    }
    int T = d->cu_host[k];
    decoder_upload(d, ids, T, k);
    decoder_layers(d, s0, k, T);
    for (int i = 0; i < k; i++) {
        d->len[s0 + i] = plen[i];
        ops_copy_2d(be, (char *)d->last + (size_t)(s0 + i) * H * e, H,
                    (char *)d->w.x + (size_t)(d->cu_host[i + 1] - 1) * H * e, H, 1, H);
    }
}

// Prefill prompts[0..n_seq-1] into slots 0.. in packs of at most rows tokens (consecutive prompts);
// the ids are packed in pack (host [rows]).
static void decoder_prefill_all(target_decoder *d, int n_seq, const int32_t *const *prompts, const int *plen,
                                int32_t *pack) {
    for (int s = 0; s < n_seq;) {
        int k = 0, T = 0;
        while (s + k < n_seq && T + plen[s + k] <= d->rows) {
            memcpy(pack + T, prompts[s + k], (size_t)plen[s + k] * sizeof(int32_t));
            T += plen[s + k++];
        }
        decoder_prefill_pack(d, s, k, pack, plen + s);
        s += k;
    }
}

int target_decoder_prefill(target_decoder *d, int n_seq, const int32_t *const *prompts, const int *plen,
                           int32_t *next) {
    if (n_seq < 1 || n_seq > d->max_seqs)
        return error_set("decoder: %d sequences given, it holds 1..%d", n_seq, d->max_seqs);
    for (int s = 0; s < n_seq; s++) {
        if (plen[s] < 1 || plen[s] > d->max_len)
            return error_set("prompt %d has %d tokens: the decoder caches 1..%d positions", s, plen[s], d->max_len);
        if (decoder_check_ids(d, prompts[s], plen[s], "prompt", s)) return -1;
    }
    int32_t *pack = xmalloc((size_t)d->rows * sizeof(int32_t));
    decoder_prefill_all(d, n_seq, prompts, plen, pack);
    free(pack);
    d->n_seq = n_seq;
    decoder_head(d, d->last, n_seq, NULL, next);
    return 0;
}

int target_decoder_step(target_decoder *d, const int32_t *tokens, int32_t *next) {
    return target_decoder_step_sample(d, tokens, NULL, next);
}

int target_decoder_step_sample(target_decoder *d, const int32_t *tokens, const double *u, int32_t *next) {
    int n = d->n_seq;
    if (n < 1) return error_set("decoder: a step before any prefill");
    if (u && !d->sampling) return error_set("decoder: a sampling step on a decoder made for greedy decoding");
    for (int s = 0; s < n; s++)
        if (d->len[s] >= d->max_len)
            return error_set("decoder: sequence %d already holds %d positions, the cache's capacity", s, d->max_len);
    if (decoder_check_ids(d, tokens, n, "decode step, sequence", 0)) return -1;
    for (int s = 0; s <= n; s++) d->cu_host[s] = s; // every row its own sequence of one token
    for (int s = 0; s < n; s++) d->pos_host[s] = d->len[s]; // positions continue from the prompt
    decoder_upload(d, tokens, n, n);
    decoder_layers(d, 0, 0, n);
    for (int s = 0; s < n; s++) d->len[s]++;
    decoder_head(d, d->w.x, n, u, next);
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

// ----------------------------------------------------------------------------- continuous batching

int target_decoder_add_batch(target_decoder *d, int k, const int32_t *ids, const int *plen, const double *u,
                             int32_t *next) {
    int s0 = d->n_seq;
    if (u && !d->sampling) return error_set("decoder: a sampled prompt on a decoder made for greedy decoding");
    if (s0 >= d->max_seqs) return error_set("decoder: all %d slots hold a sequence", d->max_seqs);
    if (k < 1 || s0 + k > d->max_seqs)
        return error_set("decoder: %d prompts to add, %d of its %d slots are free", k, d->max_seqs - s0, d->max_seqs);
    int64_t T = 0;
    for (int i = 0; i < k; i++) {
        if (plen[i] < 1 || plen[i] > d->max_len)
            return error_set("a prompt of %d tokens: the decoder caches 1..%d positions per sequence", plen[i],
                             d->max_len);
        if (decoder_check_ids(d, ids + T, plen[i], "prompt of slot", s0 + i)) return -1;
        T += plen[i];
    }
    if (T > d->rows)
        return error_set("decoder: a prefill pack of %lld tokens, its work buffers hold %d", (long long)T, d->rows);
    decoder_prefill_pack(d, s0, k, ids, plen);
    d->n_seq = s0 + k;
    size_t e = dtype_size(ops_act_dtype(d->m->be));
    decoder_head(d, (char *)d->last + (size_t)s0 * (size_t)d->m->cfg.hidden * e, k, u, next);
    return s0;
}

int target_decoder_add(target_decoder *d, const int32_t *prompt, int plen, const double *u, int32_t *next) {
    return target_decoder_add_batch(d, 1, prompt, &plen, u, next);
}

// bytes of device memory from src to dst, through the act-dtype copy (every size here is a whole
// number of act elements: f32 states are 2 bf16 or 1 f32 element each)
static void decoder_move(backend *be, void *dst, const void *src, size_t bytes) {
    size_t e = dtype_size(ops_act_dtype(be));
    int64_t n = (int64_t)(bytes / e);
    if (n) ops_copy_2d(be, dst, n, src, n, 1, n);
}

void target_decoder_remove(target_decoder *d, int s) {
    int last = d->n_seq - 1;
    if (s < 0 || s > last) return;
    if (s != last) { // the last sequence moves into slot s: its cached positions and linear states
        const target_config *c = &d->m->cfg;
        backend *be = d->m->be;
        size_t e = dtype_size(ops_act_dtype(be));
        for (int a = 0; a < d->n_att; a++) {
            size_t kv_bytes = (size_t)d->len[last] * (size_t)d->slot_kvd[a] * e;
            decoder_move(be, decoder_cache_at(d, d->k_cache, a, s, 0), decoder_cache_at(d, d->k_cache, a, last, 0), kv_bytes);
            decoder_move(be, decoder_cache_at(d, d->v_cache, a, s, 0), decoder_cache_at(d, d->v_cache, a, last, 0), kv_bytes);
        }
        for (int i = 0; i < d->n_lin; i++) {
            decoder_move(be, decoder_conv_at(d, i, s), decoder_conv_at(d, i, last), decoder_conv_elems(c) * e);
            decoder_move(be, decoder_rec_at(d, i, s), decoder_rec_at(d, i, last), decoder_rec_elems(c) * sizeof(float));
        }
        d->len[s] = d->len[last];
    }
    d->len[last] = 0;
    d->n_seq = last;
}
