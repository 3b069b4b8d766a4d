// target.c: load the target's weights and run its forward over a packed batch (see target.h).
#include "teacher/target.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/log.h"
#include "common/data/safetensors.h"
#include "common/kernels/ops.h"

// ----------------------------------------------------------------------------- loading

// The tensors of one model, in a fixed order: name and expected shape.
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
    void **dst; // where the device pointer goes
} target_tensor;

static int target_tensor_list(target_model *m, target_tensor *list) {
    const target_config *c = &m->cfg;
    int64_t H = c->hidden, I = c->intermediate, hd = c->head_dim, V = c->vocab;
    int64_t q_out = c->n_heads * hd, kv_out = c->n_kv_heads * hd;
    int n = 0;
#define ADD(nm, d, s0, s1, ptr)                                                    \
    do {                                                                           \
        target_tensor *t_ = &list[n++];                                            \
        snprintf(t_->name, sizeof t_->name, "%s", nm);                             \
        t_->ndim = d;                                                              \
        t_->shape[0] = s0;                                                         \
        t_->shape[1] = s1;                                                         \
        t_->dst = ptr;                                                             \
    } while (0)
    ADD("model.embed_tokens.weight", 2, V, H, &m->embed);
    char nm[128];
    for (int64_t l = 0; l < c->n_layers; l++) {
        target_layer *L = &m->layers[l];
#define LAYER(suffix, d, s0, s1, ptr)                                              \
    do {                                                                           \
        snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix);     \
        ADD(nm, d, s0, s1, ptr);                                                   \
    } while (0)
        LAYER("input_layernorm.weight", 1, H, 0, &L->input_norm);
        LAYER("self_attn.q_proj.weight", 2, q_out, H, &L->wq);
        LAYER("self_attn.k_proj.weight", 2, kv_out, H, &L->wk);
        LAYER("self_attn.v_proj.weight", 2, kv_out, H, &L->wv);
        LAYER("self_attn.o_proj.weight", 2, H, q_out, &L->wo);
        if (c->arch == ARCH_QWEN3) {
            LAYER("self_attn.q_norm.weight", 1, hd, 0, &L->q_norm);
            LAYER("self_attn.k_norm.weight", 1, hd, 0, &L->k_norm);
        }
        LAYER("post_attention_layernorm.weight", 1, H, 0, &L->post_norm);
        LAYER("mlp.gate_proj.weight", 2, I, H, &L->w_gate);
        LAYER("mlp.up_proj.weight", 2, I, H, &L->w_up);
        LAYER("mlp.down_proj.weight", 2, H, I, &L->w_down);
#undef LAYER
    }
    ADD("model.norm.weight", 1, H, 0, &m->final_norm);
    if (!c->tie_embeddings) ADD("lm_head.weight", 2, V, H, &m->lm_head);
#undef ADD
    return n;
}

static int target_tensor_count(const target_config *c) {
    return 1 + (int)c->n_layers * (c->arch == ARCH_QWEN3 ? 11 : 9) + 1 + (c->tie_embeddings ? 0 : 1);
}

size_t target_weight_bytes(const target_config *c, dtype dt) {
    int64_t H = c->hidden, I = c->intermediate, hd = c->head_dim, V = c->vocab;
    int64_t q_out = c->n_heads * hd, kv_out = c->n_kv_heads * hd;
    int64_t per_layer = 2 * H + 2 * q_out * H + 2 * kv_out * H + 3 * I * H + (c->arch == ARCH_QWEN3 ? 2 * hd : 0);
    int64_t n = V * H + c->n_layers * per_layer + H + (c->tie_embeddings ? 0 : V * H);
    // each tensor is carved at ARENA_ALIGN: count the padding too, plus inv_freq
    size_t pad = (size_t)(target_tensor_count(c) + 1) * ARENA_ALIGN;
    return (size_t)n * dtype_size(dt) + (size_t)hd * sizeof(float) + pad;
}

// Copy n elements of src_dt (host, mmapped) to dst (device) in dt, through a bounded staging buffer.
static void target_upload(backend *be, void *dst, dtype dt, const void *src, dtype src_dt, int64_t n) {
    if (src_dt == dt) {
        backend_copy_to_device(be, dst, src, (size_t)n * dtype_size(dt));
        return;
    }
    const int64_t chunk = 1 << 20;
    float *tmp = xmalloc((size_t)chunk * sizeof(float));
    void *conv = dt == DT_F32 ? NULL : xmalloc((size_t)chunk * dtype_size(dt));
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t len = n - i < chunk ? n - i : chunk;
        convert_to_f32(tmp, (const char *)src + (size_t)i * dtype_size(src_dt), src_dt, len);
        const void *out = tmp;
        if (conv) {
            convert_from_f32(conv, dt, tmp, len);
            out = conv;
        }
        backend_copy_to_device(be, (char *)dst + (size_t)i * dtype_size(dt), out, (size_t)len * dtype_size(dt));
    }
    free(conv);
    free(tmp);
}

int target_load(target_model *m, const char *dir, backend *be) {
    memset(m, 0, sizeof *m);
    m->be = be;
    if (target_config_load(&m->cfg, dir)) return -1;
    const target_config *c = &m->cfg;
    st_dir d;
    if (safetensors_dir_open(&d, dir)) return error_prefix("target"); // the message names the directory or the file

    // Check every tensor before allocating anything.
    m->layers = xcalloc((size_t)c->n_layers, sizeof(target_layer));
    int n = target_tensor_count(c);
    target_tensor *list = xcalloc((size_t)n, sizeof *list);
    const st_entry **found = xcalloc((size_t)n, sizeof *found);
    int got = target_tensor_list(m, list), rc = 0;
    if (got != n) fatal("target tensor list has %d entries, expected %d", got, n); // programming error
    for (int i = 0; i < n && rc == 0; i++) {
        const target_tensor *t = &list[i];
        const st_entry *e = safetensors_dir_find(&d, t->name);
        char want[64], have[64];
        if (!e) {
            rc = error_set("target %s: missing tensor %s", dir, t->name);
            break;
        }
        if (e->dt != DT_BF16 && e->dt != DT_F16 && e->dt != DT_F32) {
            rc = error_set("target %s: tensor %s has dtype %s (want BF16, F16 or F32)", dir, t->name, dtype_name(e->dt));
            break;
        }
        int same = e->ndim == t->ndim;
        for (int j = 0; same && j < t->ndim; j++) same = e->shape[j] == t->shape[j];
        if (!same) {
            rc = error_set("target %s: tensor %s has shape %s, config.json implies %s", dir, t->name,
                           shape_str(e->ndim, e->shape, have, sizeof have), shape_str(t->ndim, t->shape, want, sizeof want));
            break;
        }
        found[i] = e;
    }
    // transformers ties the head to the embedding after loading (tie_weights), whatever the files hold
    if (rc == 0 && c->tie_embeddings && safetensors_dir_find(&d, "lm_head.weight") && log_rank() == 0)
        log_warn("target %s: config.json has tie_word_embeddings true and the safetensors files also hold lm_head.weight: "
                 "the output head is the embedding (model.embed_tokens.weight), as in transformers; lm_head.weight is not used",
                 dir);
    if (rc == 0) {
        dtype dt = ops_act_dtype(be);
        size_t bytes = target_weight_bytes(c, dt);
        if (arena_init(&m->weights, "target weights", be, bytes)) {
            rc = error_prefix("target %s", dir);
        } else {
            for (int i = 0; i < n; i++) {
                int64_t numel = list[i].shape[0] * (list[i].ndim == 2 ? list[i].shape[1] : 1);
                void *p = arena_alloc(&m->weights, (size_t)numel * dtype_size(dt));
                target_upload(be, p, dt, found[i]->data, found[i]->dt, numel);
                *list[i].dst = p;
            }
            if (c->tie_embeddings) m->lm_head = m->embed;
            float *inv = xmalloc((size_t)c->head_dim / 2 * sizeof(float));
            target_rope_inv_freq(c, inv);
            m->inv_freq = arena_alloc(&m->weights, (size_t)c->head_dim / 2 * sizeof(float));
            backend_copy_to_device(be, m->inv_freq, inv, (size_t)c->head_dim / 2 * sizeof(float));
            free(inv);
            char b[32];
            log_debug("target %s: %s, %lld layers, H %lld, V %lld, weights %s on %s", dir, c->arch_name,
                      (long long)c->n_layers, (long long)c->hidden, (long long)c->vocab,
                      bytes_format(m->weights.used, b, sizeof b), be->name);
        }
    }
    free(found);
    free(list);
    safetensors_dir_close(&d);
    if (rc) {
        free(m->layers);
        m->layers = NULL;
    }
    return rc;
}

void target_free(target_model *m) {
    if (m->weights.base) arena_free(&m->weights);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

int target_outputs_check(const target_model *m, const target_outputs *o) {
    const target_config *c = &m->cfg;
    if (o->n_feat < 1 || o->n_feat > TARGET_MAX_FEAT)
        return error_set("target layer ids: %d given, need 1..%d", o->n_feat, TARGET_MAX_FEAT);
    for (int i = 0; i < o->n_feat; i++) {
        if (o->layer_ids[i] < 0 || o->layer_ids[i] >= c->n_layers)
            return error_set("target layer id %lld is outside [0, %lld) (the target has %lld layers)",
                             (long long)o->layer_ids[i], (long long)c->n_layers, (long long)c->n_layers);
    }
    int kmax = c->vocab < OPS_TOPK_MAX ? (int)c->vocab : OPS_TOPK_MAX;
    if (o->topk < 1 || o->topk > kmax) return error_set("top-k = %d is outside [1, %d]", o->topk, kmax);
    return 0;
}

// ----------------------------------------------------------------------------- work buffers

static int target_tile(const target_model *m, int vocab_tile) {
    int64_t V = m->cfg.vocab;
    int64_t t = vocab_tile > 0 ? vocab_tile : 8192;
    return (int)(t < V ? t : V);
}

void target_work_carve(target_work *w, arena *a, const target_model *m, const target_outputs *o,
                       int max_tokens, int max_seqs, int vocab_tile) {
    const target_config *c = &m->cfg;
    size_t e = dtype_size(ops_act_dtype(m->be));
    size_t T = (size_t)max_tokens, H = (size_t)c->hidden, I = (size_t)c->intermediate;
    size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    size_t k = (size_t)o->topk;
    memset(w, 0, sizeof *w);
    w->max_tokens = max_tokens;
    w->max_seqs = max_seqs;
    w->vocab_tile = target_tile(m, vocab_tile);
    w->x = arena_alloc(a, T * H * e);                   // [T, H] residual stream
    w->xn = arena_alloc(a, T * H * e);                  // [T, H] normed / projected
    w->q = arena_alloc(a, T * qd * e);                  // [T, nq, hd]
    w->k = arena_alloc(a, T * kvd * e);                 // [T, nkv, hd]
    w->v = arena_alloc(a, T * kvd * e);                 // [T, nkv, hd]
    w->att = arena_alloc(a, T * qd * e);                // [T, nq, hd]
    w->gate = arena_alloc(a, T * I * e);                // [T, I]
    w->up = arena_alloc(a, T * I * e);                  // [T, I]
    w->logits = arena_alloc(a, T * (size_t)w->vocab_tile * sizeof(float)); // [T, tile] f32
    w->tokens = arena_alloc(a, T * sizeof(int32_t));
    w->pos = arena_alloc(a, T * sizeof(int32_t));
    w->cu_seqlens = arena_alloc(a, ((size_t)max_seqs + 1) * sizeof(int32_t));
    w->m = arena_alloc(a, T * sizeof(float));
    w->s = arena_alloc(a, T * sizeof(float));
    w->features = arena_alloc(a, T * (size_t)o->n_feat * H * e); // [T, n_feat * H]
    w->topk_idx = arena_alloc(a, T * k * sizeof(int32_t));
    w->topk_val = arena_alloc(a, T * k * sizeof(float));
    w->lse = arena_alloc(a, T * sizeof(float));
}

size_t target_work_bytes(const target_model *m, const target_outputs *o, int max_tokens, int max_seqs, int vocab_tile) {
    arena a;
    arena_init_dry(&a, "target work (plan)");
    target_work w;
    target_work_carve(&w, &a, m, o, max_tokens, max_seqs, vocab_tile);
    return a.used;
}

int target_plan_tokens(const target_model *m, const target_outputs *o, size_t budget, int max_seqs, int *vocab_tile) {
    size_t weights = target_weight_bytes(&m->cfg, ops_act_dtype(m->be));
    int tile = target_tile(m, *vocab_tile);
    *vocab_tile = tile;
    if (budget <= weights) return 0;
    // work bytes are affine in the token count: two dry runs give the slope and the intercept
    size_t w1 = target_work_bytes(m, o, 1024, max_seqs, tile), w2 = target_work_bytes(m, o, 2048, max_seqs, tile);
    double per_token = (double)(w2 - w1) / 1024.0, fixed = (double)w1 - 1024.0 * per_token;
    double t = ((double)(budget - weights) - fixed) / per_token;
    if (t < 1) return 0;
    if (t > 1 << 30) t = 1 << 30;
    int T = (int)t;
    while (T > 0 && weights + target_work_bytes(m, o, T, max_seqs, tile) > budget) T--; // alignment slack
    return T;
}

// ----------------------------------------------------------------------------- forward

// y[T, out] = x[T, in] @ W[out, in]^T
static void linear(backend *be, void *y, const void *x, const void *W, int T, int in, int out) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out, dt, dt);
}

int target_forward(target_model *m, const target_outputs *o, target_work *w, const int32_t *tokens,
                   const int32_t *cu_seqlens, int n_seq, int T, const int *logits_rows, int n_logits,
                   float *logits_out) {
    const target_config *c = &m->cfg;
    backend *be = m->be;
    int H = (int)c->hidden, I = (int)c->intermediate, hd = (int)c->head_dim, V = (int)c->vocab;
    int nq = (int)c->n_heads, nkv = (int)c->n_kv_heads, nf = o->n_feat, k = o->topk;
    size_t e = dtype_size(ops_act_dtype(be));
    float eps = (float)c->rms_eps;

    // The batch: sequences in order, each non-empty, covering exactly T tokens.
    if (T < 1 || T > w->max_tokens) return error_set("batch of %d tokens: the work buffers hold 1..%d", T, w->max_tokens);
    if (n_seq < 1 || n_seq > w->max_seqs) return error_set("batch of %d sequences: the work buffers hold 1..%d", n_seq, w->max_seqs);
    if (cu_seqlens[0] != 0 || cu_seqlens[n_seq] != T) return error_set("batch boundaries must start at 0 and end at %d", T);
    int32_t *pos = xmalloc((size_t)T * sizeof(int32_t));
    for (int s = 0; s < n_seq; s++) {
        if (cu_seqlens[s + 1] <= cu_seqlens[s]) {
            free(pos);
            return error_set("batch sequence %d is empty or its boundaries decrease", s);
        }
        for (int t = cu_seqlens[s]; t < cu_seqlens[s + 1]; t++) pos[t] = t - cu_seqlens[s]; // RoPE restarts per sequence
    }
    for (int r = 0; r < n_logits; r++)
        if (logits_rows[r] < 0 || logits_rows[r] >= T) {
            free(pos);
            return error_set("logits row %d is outside the batch of %d tokens", logits_rows[r], T);
        }
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= V) {
            free(pos);
            return error_set("batch token %d has id %d, outside the target vocabulary [0, %d)", t, tokens[t], V);
        }
    backend_copy_to_device(be, w->tokens, tokens, (size_t)T * sizeof(int32_t));
    backend_copy_to_device(be, w->pos, pos, (size_t)T * sizeof(int32_t));
    backend_copy_to_device(be, w->cu_seqlens, cu_seqlens, ((size_t)n_seq + 1) * sizeof(int32_t));
    free(pos);

    ops_embed(be, w->x, m->embed, w->tokens, T, H);
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < (int)c->n_layers; l++) {
        const target_layer *L = &m->layers[l];
        // attention block
        ops_rmsnorm(be, w->xn, w->x, L->input_norm, T, H, eps);
        linear(be, w->q, w->xn, L->wq, T, H, nq * hd);
        linear(be, w->k, w->xn, L->wk, T, H, nkv * hd);
        linear(be, w->v, w->xn, L->wv, T, H, nkv * hd);
        if (c->arch == ARCH_QWEN3) { // per-head RMSNorm before RoPE
            ops_rmsnorm(be, w->q, w->q, L->q_norm, T * nq, hd, eps);
            ops_rmsnorm(be, w->k, w->k, L->k_norm, T * nkv, hd, eps);
        }
        ops_rope(be, w->q, w->pos, m->inv_freq, T, nq, hd);
        ops_rope(be, w->k, w->pos, m->inv_freq, T, nkv, hd);
        ops_attention_causal(be, w->att, w->q, w->k, w->v, w->cu_seqlens, n_seq, T, nq, nkv, hd, scale);
        linear(be, w->xn, w->att, L->wo, T, nq * hd, H);
        ops_add(be, w->x, w->xn, (int64_t)T * H);
        // MLP block
        ops_rmsnorm(be, w->xn, w->x, L->post_norm, T, H, eps);
        linear(be, w->gate, w->xn, L->w_gate, T, H, I);
        linear(be, w->up, w->xn, L->w_up, T, H, I);
        ops_swiglu(be, w->gate, w->gate, w->up, (int64_t)T * I);
        linear(be, w->xn, w->gate, L->w_down, T, I, H);
        ops_add(be, w->x, w->xn, (int64_t)T * H);
        // features: HF hidden_states[l + 1], the residual stream after this layer, into its column
        // block; the last layer's comes after the final norm, below
        for (int f = 0; f < nf; f++)
            if (o->layer_ids[f] == l && l < (int)c->n_layers - 1)
                ops_copy_2d(be, (char *)w->features + (size_t)f * H * e, (int64_t)nf * H, w->x, H, T, H);
    }

    // lm_head over vocabulary tiles: running top-k and LSE, never [T, V]
    ops_rmsnorm(be, w->xn, w->x, m->final_norm, T, H, eps);
    // features of the last layer (id L-1): HF hidden_states[L] is model.norm(h), not h (SPEC §2;
    // what the dflash package and the engines feed the drafter)
    for (int f = 0; f < nf; f++)
        if (o->layer_ids[f] == c->n_layers - 1)
            ops_copy_2d(be, (char *)w->features + (size_t)f * H * e, (int64_t)nf * H, w->xn, H, T, H);
    ops_topk_lse_init(be, w->topk_val, w->topk_idx, w->m, w->s, T, k);
    dtype dt = ops_act_dtype(be);
    for (int v0 = 0; v0 < V; v0 += w->vocab_tile) {
        int vc = V - v0 < w->vocab_tile ? V - v0 : w->vocab_tile;
        backend_gemm(be, 0, 1, T, vc, H, 1.0f, w->xn, H, (const char *)m->lm_head + (size_t)v0 * H * e, H,
                     0.0f, w->logits, vc, dt, DT_F32);
        ops_topk_lse_update(be, w->logits, vc, v0, T, vc, k, w->topk_val, w->topk_idx, w->m, w->s);
        for (int r = 0; r < n_logits; r++)
            backend_copy_to_host(be, logits_out + (size_t)r * V + v0, w->logits + (size_t)logits_rows[r] * vc,
                                 (size_t)vc * sizeof(float));
    }
    ops_topk_lse_finish(be, w->lse, w->m, w->s, T);
    backend_sync(be);
    return 0;
}
