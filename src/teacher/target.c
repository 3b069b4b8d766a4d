// target.c: load the target's weights and run its forward over a packed batch (see target.h): the
// parts every architecture shares; the architecture's own come through its table (target_arch.h,
// m->cfg.table), the SwiGLU MLP of dense layers is here (target_mlp_swiglu).
#include "teacher/target.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/log.h"
#include "common/data/safetensors.h"
#include "common/kernels/ops.h"
#include "teacher/target_arch.h"
#include "teacher/target_quant.h"

// ----------------------------------------------------------------------------- loading

int target_tensor_add(target_tensor_list *l, void **dst, int f32, int ndim, int64_t s0, int64_t s1, int64_t s2,
                      const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    target_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = s0;
    t->shape[1] = s1;
    t->shape[2] = s2;
    t->f32 = f32;
    t->dst = dst;
    t->parent = -1;
    t->layer = -1;
    return l->n - 1;
}

void target_tensor_part(target_tensor_list *l, int i, int parent, int64_t offset) {
    l->t[i].parent = parent;
    l->t[i].offset = offset;
}

// target_tensor_list_build: every tensor of the model, in a fixed order, with the shape config.json
// implies; m->layers must be allocated (the list holds pointers into it).
static void target_tensor_list_build(target_model *m, target_tensor_list *list, const st_dir *d) {
    const target_config *c = &m->cfg;
    int64_t H = c->hidden, V = c->vocab;
    const char *P = target_tensor_prefix(c);
    int64_t l0, l1; // a stage holds its layers only: the embedding on the first, the head on the last
    target_stage_range(m, &l0, &l1);
    int last = l1 == c->n_layers;
    memset(list, 0, sizeof *list);
    if (l0 == 0 || (last && c->tie_embeddings)) target_tensor_add(list, &m->embed, 0, 2, V, H, 0, "%sembed_tokens.weight", P);
    for (int64_t l = l0; l < l1; l++) {
        target_layer *L = &m->layers[l];
        long long ll = (long long)l;
        int first = list->n;
        target_tensor_add(list, &L->input_norm, 0, 1, H, 0, 0, "%slayers.%lld.input_layernorm.weight", P, ll);
        c->table->mixer->layer_tensors(m, l, P, list);
        if (c->sandwich_norms) { // Gemma: a norm on the mixer's output, and one on each side of the MLP
            target_tensor_add(list, &L->post_mixer_norm, 0, 1, H, 0, 0, "%slayers.%lld.post_attention_layernorm.weight",
                              P, ll);
            target_tensor_add(list, &L->post_norm, 0, 1, H, 0, 0, "%slayers.%lld.pre_feedforward_layernorm.weight", P, ll);
            target_tensor_add(list, &L->post_mlp_norm, 0, 1, H, 0, 0, "%slayers.%lld.post_feedforward_layernorm.weight",
                              P, ll);
        } else {
            target_tensor_add(list, &L->post_norm, 0, 1, H, 0, 0, "%slayers.%lld.post_attention_layernorm.weight", P, ll);
        }
        c->table->mlp->layer_tensors(m, l, P, list, d);
        if (c->layer_scalar) target_tensor_add(list, (void **)&L->layer_scalar_dev, 1, 1, 1, 0, 0, "%slayers.%lld.layer_scalar", P, ll);
        for (int i = first; i < list->n; i++) list->t[i].layer = l;
    }
    if (!last) return;
    target_tensor_add(list, &m->final_norm, 0, 1, H, 0, 0, "%snorm.weight", P);
    if (!c->tie_embeddings) target_tensor_add(list, &m->lm_head, 0, 2, V, H, 0, "%s", target_head_name(c));
    for (int i = list->n - (c->tie_embeddings ? 1 : 2); i < list->n; i++) list->t[i].layer = -2;
}

void target_tensor_names(const target_config *c, const st_dir *d, void (*fn)(void *ctx, const target_tensor *t),
                         void *ctx) {
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    m.layers = xcalloc((size_t)c->n_layers, sizeof(target_layer));
    target_tensor_list list;
    target_tensor_list_build(&m, &list, d);
    for (int i = 0; i < list.n; i++) fn(ctx, &list.t[i]);
    free(list.t);
    free(m.layers);
}

void target_stage_range(const target_model *m, int64_t *l0, int64_t *l1) {
    *l0 = m->layer_begin;
    *l1 = m->layer_end > 0 ? m->layer_end : m->cfg.n_layers;
}

int target_stage_is_last(const target_model *m) { return m->layer_end <= 0 || m->layer_end >= m->cfg.n_layers; }

// target_check_layer_count: the files hold no decoder layer past num_hidden_layers (a config.json
// that says fewer layers than the weights have would run a truncated model silently; transformers
// warns of unused weights). -1 with error_set naming the tensor.
static int target_check_layer_count(const target_config *c, const st_dir *d, const char *dir) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%slayers.", target_tensor_prefix(c));
    size_t n = strlen(prefix);
    long long top = -1;
    const char *name = NULL;
    for (int i = 0; i < d->n; i++) {
        const char *s = d->entries[i]->name;
        if (strncmp(s, prefix, n) != 0 || s[n] < '0' || s[n] > '9') continue;
        long long l = strtoll(s + n, NULL, 10);
        if (l > top) top = l, name = s;
    }
    // the multi-token-prediction layers DeepSeek-V3 and GLM-4.5 publish after the last one
    // (num_nextn_predict_layers; transformers does not load them, nor does the teacher)
    if (top >= c->n_layers + c->mtp_layers)
        return error_set("target %s: the weights hold layer %lld (tensor %s) but config.json's 'num_hidden_layers' is %lld%s:"
                         " the config and the weights disagree", dir, top, name, (long long)c->n_layers,
                         c->mtp_layers ? " (plus 'num_nextn_predict_layers')" : "");
    return 0;
}

static int64_t target_tensor_numel(const target_tensor *t) {
    int64_t n = 1;
    for (int j = 0; j < t->ndim; j++) n *= t->shape[j];
    return n;
}

static size_t target_tensor_bytes(const target_tensor *t, dtype dt) {
    return (size_t)target_tensor_numel(t) * (t->f32 ? sizeof(float) : dtype_size(dt));
}

size_t target_weight_bytes(const target_config *c, dtype dt) { return target_stage_weight_bytes(c, dt, 0, c->n_layers); }

// How t is kept on the device: the kind it stays stored in (teacher.quant_weights resident and
// config.json says it is quantised: target_quant_planned), or PLAIN (at compute size).
// A buffer of experts stacked from per-expert files ("X (stacked)", alloc_only) is decided by X, the
// fused tensor the plans (which read no files) count in its place.
static target_quant_kind target_tensor_kept(const target_config *c, const target_tensor *t) {
    if (!c->quant.resident || t->f32 || t->layer < 0 || t->parent >= 0) return TARGET_QUANT_PLAIN;
    char name[sizeof t->name];
    snprintf(name, sizeof name, "%s", t->name);
    size_t n = strlen(name), k = strlen(" (stacked)");
    if (t->alloc_only && n > k && strcmp(name + n - k, " (stacked)") == 0) name[n - k] = '\0';
    return target_quant_planned(&c->quant, name, t->ndim, 1);
}

// The device bytes of t (a buffer of its own, parent < 0) as the plans count it: at compute size, or
// kept stored (its codes and scales) with *scratch its compute size in the layer scratch.
static size_t target_tensor_plan_bytes(const target_config *c, const target_tensor *t, dtype dt, size_t *scratch) {
    target_quant_kind kind = target_tensor_kept(c, t);
    *scratch = 0;
    if (kind == TARGET_QUANT_PLAIN) return target_tensor_bytes(t, dt) + ARENA_ALIGN;
    size_t codes, scales;
    target_quant_planned_bytes(&c->quant, kind, t->name, t->ndim, t->shape, &codes, &scales);
    *scratch = target_tensor_bytes(t, dt) + ARENA_ALIGN;
    return codes + ARENA_ALIGN + scales + ARENA_ALIGN;
}

// target_stage_weight_bytes and its layer scratch (*scratch; 0 when nothing is kept stored).
static size_t stage_weight_bytes(const target_config *c, dtype dt, int64_t l0, int64_t l1, size_t *scratch) {
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    m.layer_begin = l0, m.layer_end = l1;
    m.layers = xcalloc((size_t)c->n_layers, sizeof(target_layer));
    target_tensor_list list;
    target_tensor_list_build(&m, &list, NULL);
    // each buffer is carved at ARENA_ALIGN: count the padding too, plus inv_freq and the sliding
    // layers' inv_freq_local when they have a base of their own (parts live in their parent's buffer)
    size_t bytes = (size_t)c->rope_dim / 2 * sizeof(float) + ARENA_ALIGN;
    if (c->rope_theta_local > 0) bytes += (size_t)c->head_dim / 2 * sizeof(float) + ARENA_ALIGN;
    int64_t q_width, kv_width; // v_norm's unit weight (Gemma 4), as wide as the widest head
    target_attn_max(c, &q_width, &kv_width);
    if (c->v_norm) bytes += (size_t)q_width * sizeof(float) + ARENA_ALIGN;
    size_t top = 0, cur = 0; // the layer scratch: the largest layer's kept tensors at compute size
    int64_t cur_layer = -1;
    for (int i = 0; i < list.n; i++) {
        const target_tensor *t = &list.t[i];
        if (t->parent >= 0) continue;
        size_t scr;
        bytes += target_tensor_plan_bytes(c, t, dt, &scr);
        if (t->layer != cur_layer) cur_layer = t->layer, cur = 0;
        cur += scr;
        if (cur > top) top = cur;
    }
    free(list.t);
    free(m.layers);
    *scratch = top;
    return bytes + top;
}

size_t target_stage_weight_bytes(const target_config *c, dtype dt, int64_t l0, int64_t l1) {
    size_t scratch;
    return stage_weight_bytes(c, dt, l0, l1, &scratch);
}

size_t target_stage_weight_scratch(const target_config *c, dtype dt, int64_t l0, int64_t l1) {
    size_t scratch;
    stage_weight_bytes(c, dt, l0, l1, &scratch);
    return scratch;
}

// The stages' weight bytes at capacity cap: greedy from the first layer, each stage as long as it
// fits (the embedding counts on the first stage, the head with the last layer; a stage's layer
// scratch is its largest layer's, scr[l]: 0 without resident quantised weights). 1 when at most G
// stages cover every layer within cap (bounds filled; with fewer, the longest are halved until
// there are G), else 0. A stage's bytes only grow as it takes a layer, so greedy-longest puts each
// boundary as late as any cover can: it finds a cover whenever one exists.
static int stage_cover(const size_t *layer, const size_t *scr, size_t embed, size_t head, int64_t L, int G, size_t cap,
                       int64_t *bounds) {
    int s = 0;
    size_t used = embed, smax = 0; // the stage's bytes are used + smax
    bounds[0] = 0;
    for (int64_t l = 0; l < L; l++) {
        size_t b = layer[l] + (l == L - 1 ? head : 0); // the head goes with the last layer
        int empty = bounds[s] == l;
        size_t m = scr[l] > smax ? scr[l] : smax;
        if (!empty && used + b + m > cap) { // close stage s, start s + 1 at l
            if (++s >= G) return 0;
            bounds[s] = l;
            used = 0;
            m = scr[l];
        }
        used += b;
        smax = m;
        if (used + smax > cap) return 0;
    }
    int n = s + 1;
    bounds[n] = L;
    while (n < G) { // fewer stages than G: halve the longest (no stage grows)
        int best = 0;
        for (int i = 1; i < n; i++)
            if (bounds[i + 1] - bounds[i] > bounds[best + 1] - bounds[best]) best = i;
        for (int i = n; i > best; i--) bounds[i + 1] = bounds[i];
        bounds[best + 1] = bounds[best] + (bounds[best + 2] - bounds[best]) / 2;
        n++;
    }
    return 1;
}

int target_stage_split(const target_config *c, dtype dt, int G, int64_t *bounds) {
    int64_t L = c->n_layers;
    if (G < 1 || G > L)
        return error_set("world.teacher_group_size = %d: a teacher group splits the target's %lld layers into that many "
                         "stages, so it must be between 1 and %lld", G, (long long)L, (long long)L);
    // each tensor's bytes to its layer, the embedding to the first stage, the head to the last (with
    // tied embeddings the last stage holds the embedding again as its lm_head)
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    m.layers = xcalloc((size_t)L, sizeof(target_layer));
    target_tensor_list list;
    target_tensor_list_build(&m, &list, NULL);
    size_t *layer = xcalloc((size_t)L, sizeof(size_t)), *scr = xcalloc((size_t)L, sizeof(size_t)), embed = 0, head = 0;
    for (int i = 0; i < list.n; i++) {
        const target_tensor *t = &list.t[i];
        if (t->parent >= 0) continue; // in its parent's buffer
        size_t s_bytes, b = target_tensor_plan_bytes(c, t, dt, &s_bytes);
        if (t->layer >= 0) layer[t->layer] += b, scr[t->layer] += s_bytes;
        else if (t->layer == -1) embed += b;
        else head += b;
    }
    if (c->tie_embeddings && G > 1) head += embed;
    size_t lo = 1, hi = embed + head; // the smallest capacity that covers (hi always does)
    for (int64_t l = 0; l < L; l++) hi += layer[l] + scr[l];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (stage_cover(layer, scr, embed, head, L, G, mid, bounds)) hi = mid;
        else lo = mid + 1;
    }
    stage_cover(layer, scr, embed, head, L, G, hi, bounds);
    free(scr);
    free(layer);
    free(list.t);
    free(m.layers);
    return 0;
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

// target_upload_transposed: src [batch, rows, cols] (host, src_dt) into dst [batch, cols, rows] (device, dt):
// each matrix transposed (a file tensor stored [..., in, out]), a block of destination rows at a time
// through a bounded staging buffer.
static void target_upload_transposed(backend *be, void *dst, dtype dt, const void *src, dtype src_dt, int64_t batch,
                                     int64_t rows, int64_t cols) {
    const int64_t chunk = 1 << 20;
    int64_t nb = chunk / rows > 0 ? chunk / rows : 1; // destination rows (source columns) per block
    if (nb > cols) nb = cols;
    float *tmp = xmalloc((size_t)(nb * rows) * sizeof(float)), *seg = xmalloc((size_t)nb * sizeof(float));
    void *conv = dt == DT_F32 ? NULL : xmalloc((size_t)(nb * rows) * dtype_size(dt));
    size_t se = dtype_size(src_dt), de = dtype_size(dt);
    for (int64_t b = 0; b < batch; b++) {
        const char *s = (const char *)src + (size_t)(b * rows * cols) * se;
        char *d = (char *)dst + (size_t)(b * rows * cols) * de;
        for (int64_t c0 = 0; c0 < cols; c0 += nb) {
            int64_t n = cols - c0 < nb ? cols - c0 : nb;
            for (int64_t r = 0; r < rows; r++) { // source row r, columns c0 .. c0+n: destination column r
                convert_to_f32(seg, s + (size_t)(r * cols + c0) * se, src_dt, n);
                for (int64_t j = 0; j < n; j++) tmp[j * rows + r] = seg[j];
            }
            const void *out = tmp;
            if (conv) {
                convert_from_f32(conv, dt, tmp, n * rows);
                out = conv;
            }
            backend_copy_to_device(be, d + (size_t)(c0 * rows) * de, out, (size_t)(n * rows) * de);
        }
    }
    free(conv);
    free(seg);
    free(tmp);
}

// ----------------------------------------------------------------------------- resident quantised weights

// A stage's de-quantisations (teacher.quant_weights resident), by layer.
struct target_quant_job_list {
    target_quant_job *jobs;
    int n, cap;
    int64_t l0, l1;
    int *first; // [l1 - l0 + 1]: layer l's jobs are [first[l - l0], first[l - l0 + 1])
};

// What target_load_stage keeps stored, per entry of its tensor list.
typedef struct {
    target_quant_kind *kept;  // parent-level entries: PLAIN, or the kind it stays stored in (its parts too)
    size_t *off;              // a kept entry's buffer in the layer scratch
    size_t *ctot, *stot;      // a kept stacked entry's parts' codes and scales bytes
    char **codes, **scales;   // a kept entry's stored buffers (device)
    size_t *ccur, *scur;      // where its next part goes in them
    int *last;                // the last job of a kept entry (its parts merge into it), -1
    char *scratch;
    size_t scratch_bytes;
} target_resident;

static void target_resident_free(target_resident *rs) {
    free(rs->kept), free(rs->off), free(rs->ctot), free(rs->stot), free(rs->codes), free(rs->scales);
    free(rs->ccur), free(rs->scur), free(rs->last);
    memset(rs, 0, sizeof *rs);
}

static size_t align_up_bytes(size_t b) { return (b + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

// Which entries stay stored, as the plans decided from config.json (target_tensor_kept), checked
// against the files (found): a kept tensor the files hold plain is refused (the plan counted it at
// its stored size); a tensor the plan counted at compute size is de-quantised at load whatever its
// storage. The layer scratch: each layer's kept buffers at compute size, one after another.
static int target_resident_plan(const target_model *m, const target_tensor_list *list, const target_quant_tensor *found,
                                dtype dt, const char *dir, target_resident *rs) {
    const target_config *c = &m->cfg;
    int n = list->n;
    memset(rs, 0, sizeof *rs);
    rs->kept = xcalloc((size_t)n, sizeof *rs->kept);
    rs->off = xcalloc((size_t)n, sizeof *rs->off);
    rs->ctot = xcalloc((size_t)n, sizeof *rs->ctot);
    rs->stot = xcalloc((size_t)n, sizeof *rs->stot);
    rs->codes = xcalloc((size_t)n, sizeof *rs->codes);
    rs->scales = xcalloc((size_t)n, sizeof *rs->scales);
    rs->ccur = xcalloc((size_t)n, sizeof *rs->ccur);
    rs->scur = xcalloc((size_t)n, sizeof *rs->scur);
    rs->last = xmalloc((size_t)n * sizeof *rs->last);
    size_t cur = 0;
    int64_t cur_layer = -1;
    for (int i = 0; i < n; i++) {
        const target_tensor *t = &list->t[i];
        rs->last[i] = -1;
        if (t->parent < 0) {
            rs->kept[i] = target_tensor_kept(c, t);
            if (rs->kept[i] != TARGET_QUANT_PLAIN) { // its buffer in the scratch
                if (t->layer != cur_layer) cur_layer = t->layer, cur = 0;
                rs->off[i] = cur;
                cur += align_up_bytes(target_tensor_bytes(t, dt));
                if (cur > rs->scratch_bytes) rs->scratch_bytes = cur;
            }
        }
        int pk = t->parent >= 0 ? t->parent : i;
        target_quant_kind want = rs->kept[pk];
        if (want == TARGET_QUANT_PLAIN || t->alloc_only) continue;
        const target_quant_tensor *q = &found[i];
        if (q->kind != want) {
            char qd[64];
            const char *have = q->kind == TARGET_QUANT_PLAIN ? dtype_name(q->w->dt)
                               : q->kind == TARGET_QUANT_STORED_FP8 ? "F8_E4M3" : "MXFP4";
            return error_set("target %s: tensor %s is stored %s, but config.json's quantization_config (%s) makes it a "
                             "quantised weight, which teacher.quant_weights resident keeps as stored and the memory plans "
                             "count so: name its module in quantization_config.modules_to_not_convert, or set "
                             "teacher.quant_weights dequantize", dir, t->name, have,
                             target_quant_describe(&c->quant, qd, sizeof qd));
        }
        if (t->parent >= 0) {
            rs->ctot[pk] += target_quant_stored_codes(q);
            rs->stot[pk] += target_quant_stored_scales(q);
        }
    }
    return 0;
}

// Entry i of a kept buffer: the stored buffers carved (a parent-level entry), its codes and scales
// uploaded and its de-quantisation into the scratch added to m->quant_jobs (a stacked tensor's
// consecutive parts of one shape merged into one job).
static void target_resident_carve(target_model *m, target_resident *rs, const target_tensor_list *list,
                                  const target_quant_tensor *found, int i, dtype dt) {
    const target_tensor *t = &list->t[i];
    if (t->parent < 0) {
        rs->codes[i] = arena_alloc(&m->weights, t->alloc_only ? rs->ctot[i] : target_quant_stored_codes(&found[i]));
        rs->scales[i] = arena_alloc(&m->weights, t->alloc_only ? rs->stot[i] : target_quant_stored_scales(&found[i]));
        if (t->dst) *t->dst = rs->scratch + rs->off[i];
        if (t->alloc_only) return;
    }
    int pk = t->parent >= 0 ? t->parent : i;
    const target_quant_tensor *q = &found[i];
    char *codes = rs->codes[pk] + rs->ccur[pk], *scales = rs->scales[pk] + rs->scur[pk];
    rs->ccur[pk] += target_quant_stored_codes(q);
    rs->scur[pk] += target_quant_stored_scales(q);
    target_quant_upload_stored(m->be, q, codes, scales);
    target_quant_job j = {.layer = t->layer, .kind = q->kind, .codes = (const uint8_t *)codes, .scales = scales};
    j.dst = rs->scratch + rs->off[pk] + (t->parent >= 0 ? (size_t)t->offset * dtype_size(dt) : 0);
    int64_t rows = target_quant_rows(q), cols = target_quant_cols(q);
    if (rows == 0 || cols == 0) return;
    if (q->kind == TARGET_QUANT_STORED_FP8) {
        j.O = q->shape[q->ndim - 2], j.I = cols, j.M = rows / j.O, j.bo = q->block_out, j.bi = q->block_in;
    } else {
        j.M = 1, j.O = rows, j.I = cols;
    }
    struct target_quant_job_list *jl = m->quant_jobs;
    target_quant_job *p = rs->last[pk] >= 0 ? &jl->jobs[rs->last[pk]] : NULL;
    if (p && p->kind == j.kind && j.kind == TARGET_QUANT_STORED_FP8 && p->O == j.O && p->I == j.I && p->bo == j.bo &&
        p->bi == j.bi) {
        size_t mat = (size_t)(p->O * p->I), sc = (size_t)(((p->O + p->bo - 1) / p->bo) * ((p->I + p->bi - 1) / p->bi));
        if ((char *)p->dst + (size_t)p->M * mat * dtype_size(dt) == (char *)j.dst &&
            p->codes + (size_t)p->M * mat == j.codes && (const char *)p->scales + (size_t)p->M * sc * sizeof(float) == scales) {
            p->M += j.M; // the next matrices of the same stack
            return;
        }
    }
    if (jl->n == jl->cap) {
        jl->cap = jl->cap ? 2 * jl->cap : 64;
        jl->jobs = xrealloc(jl->jobs, (size_t)jl->cap * sizeof *jl->jobs);
    }
    rs->last[pk] = jl->n;
    jl->jobs[jl->n++] = j;
}

// The jobs by layer (they come in the list's order, layer by layer).
static void target_resident_index(struct target_quant_job_list *jl) {
    int64_t L = jl->l1 - jl->l0;
    jl->first = xcalloc((size_t)L + 1, sizeof *jl->first);
    int j = 0;
    for (int64_t l = 0; l < L; l++) {
        jl->first[l] = j;
        while (j < jl->n && jl->jobs[j].layer == jl->l0 + l) j++;
    }
    jl->first[L] = j;
    if (j != jl->n) fatal("target: the de-quantisation jobs are not in layer order (%d of %d indexed)", j, jl->n);
}

void target_layer_materialize(target_model *m, int64_t l) {
    struct target_quant_job_list *jl = m->quant_jobs;
    if (!jl || m->scratch_layer == l || l < jl->l0 || l >= jl->l1) return;
    for (int j = jl->first[l - jl->l0]; j < jl->first[l - jl->l0 + 1]; j++) target_quant_job_run(m->be, &jl->jobs[j]);
    m->scratch_layer = l;
}

int target_load(target_model *m, const char *dir, backend *be) { return target_load_stage(m, dir, be, 0, -1); }

int target_load_stage(target_model *m, const char *dir, backend *be, int64_t l0, int64_t l1) {
    memset(m, 0, sizeof *m);
    m->be = be;
    if (target_config_load(&m->cfg, dir)) return -1;
    const target_config *c = &m->cfg;
    if (l1 < 0) l1 = c->n_layers;
    if (l0 < 0 || l0 >= l1 || l1 > c->n_layers)
        return error_set("target %s: stage layers [%lld, %lld) are not a range of its %lld layers", dir, (long long)l0,
                         (long long)l1, (long long)c->n_layers);
    m->layer_begin = l0, m->layer_end = l1;
    st_dir d;
    if (safetensors_dir_open(&d, dir)) return error_prefix("target"); // the message names the directory or the file
    target_names_resolve(&m->cfg, &d); // a multimodal wrapper's layout (target_tensor_prefix)

    // Check every tensor before allocating anything.
    m->layers = xcalloc((size_t)c->n_layers, sizeof(target_layer));
    target_tensor_list list;
    target_tensor_list_build(m, &list, &d);
    int n = list.n, rc = 0;
    target_quant_tensor *found = xcalloc((size_t)n, sizeof *found); // how each is stored (target_quant.h)
    size_t quant_disk = 0;
    int n_quant = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const target_tensor *t = &list.t[i];
        if (t->alloc_only) continue; // a buffer its parts fill
        // as it is, or quantised (fp8 + its weight_scale_inv, mxfp4 NAME_blocks + NAME_scales; companions checked)
        target_quant_tensor *q = &found[i];
        if (target_quant_lookup(&c->quant, &d, t->name, q)) {
            rc = error_prefix("target %s", dir);
            break;
        }
        const st_entry *e = q->w;
        char want[64], have[64];
        if (!e) {
            rc = error_set("target %s: missing tensor %s", dir, t->name);
            break;
        }
        if (q->kind != TARGET_QUANT_PLAIN) quant_disk += target_quant_disk_bytes(q), n_quant++;
        else if (e->dt != DT_BF16 && e->dt != DT_F16 && e->dt != DT_F32) {
            rc = error_set("target %s: tensor %s has dtype %s (want BF16, F16 or F32)", dir, t->name, dtype_name(e->dt));
            break;
        }
        int64_t expect[3] = {t->shape[0], t->shape[1], t->shape[2]};
        if (t->transpose && q->kind == TARGET_QUANT_PLAIN && t->ndim >= 2) { // stored [..., in, out]
            expect[t->ndim - 2] = t->shape[t->ndim - 1];
            expect[t->ndim - 1] = t->shape[t->ndim - 2];
        }
        int same = q->ndim == t->ndim; // the de-quantised shape
        for (int j = 0; same && j < t->ndim; j++) same = q->shape[j] == expect[j];
        if (!same) {
            rc = error_set("target %s: tensor %s has shape %s, config.json implies %s", dir, t->name,
                           shape_str(q->ndim, q->shape, have, sizeof have), shape_str(t->ndim, expect, want, sizeof want));
            break;
        }
    }
    // teacher.quant_weights resident: the tensors kept stored, as the plans count them
    target_resident rs;
    memset(&rs, 0, sizeof rs);
    if (rc == 0) rc = target_resident_plan(m, &list, found, ops_act_dtype(be), dir, &rs);
    if (rc == 0) rc = target_check_layer_count(c, &d, dir);
    // transformers ties the head to the embedding after loading (tie_weights), whatever the files hold
    if (rc == 0 && c->tie_embeddings && safetensors_dir_find(&d, target_head_name(c)) && log_rank() == 0)
        log_warn("target %s: config.json has tie_word_embeddings true and the safetensors files also hold lm_head.weight: "
                 "the output head is the embedding (model.embed_tokens.weight), as in transformers; lm_head.weight is not used",
                 dir);
    if (rc == 0) {
        dtype dt = ops_act_dtype(be);
        size_t bytes = target_stage_weight_bytes(c, dt, l0, l1);
        if (arena_init(&m->weights, "target weights", be, bytes)) {
            error_prefix("target %s", dir);
            rc = error_append("world.teacher_group_size splits the target's layers over more teacher ranks");
        } else {
            if (rs.scratch_bytes > 0) { // the layer scratch, and the de-quantisations that fill it
                rs.scratch = arena_alloc(&m->weights, rs.scratch_bytes);
                m->quant_jobs = xcalloc(1, sizeof *m->quant_jobs);
                m->quant_jobs->l0 = l0, m->quant_jobs->l1 = l1;
                m->scratch_bytes = rs.scratch_bytes;
                m->scratch_layer = -1;
            }
            for (int i = 0; i < n; i++) {
                const target_tensor *t = &list.t[i];
                dtype tdt = t->f32 ? DT_F32 : dt;
                if (rs.kept[t->parent >= 0 ? t->parent : i] != TARGET_QUANT_PLAIN) { // kept stored (resident)
                    target_resident_carve(m, &rs, &list, found, i, dt);
                    continue;
                }
                void *p = t->parent >= 0 ? (char *)*list.t[t->parent].dst + (size_t)t->offset * dtype_size(tdt)
                                         : arena_alloc(&m->weights, target_tensor_bytes(t, dt));
                if (t->alloc_only) {
                } else if (found[i].kind == TARGET_QUANT_PLAIN && t->transpose && t->ndim >= 2) { // [..., in, out] in the file
                    int64_t out = t->shape[t->ndim - 2], in = t->shape[t->ndim - 1];
                    target_upload_transposed(be, p, tdt, found[i].w->data, found[i].w->dt,
                                             target_tensor_numel(t) / (out * in), in, out);
                } else if (found[i].kind == TARGET_QUANT_PLAIN) {
                    target_upload(be, p, tdt, found[i].w->data, found[i].w->dt, target_tensor_numel(t));
                } else if (target_quant_upload(be, p, tdt, &found[i])) { // de-quantised a chunk of rows at a time
                    fatal("target %s: %s", dir, error_msg());
                }
                if (t->dst) *t->dst = p;
            }
            if (c->tie_embeddings) m->lm_head = m->embed;
            size_t inv_bytes = (size_t)c->rope_dim / 2 * sizeof(float);
            float *inv = xmalloc(inv_bytes);
            target_rope_inv_freq(c, inv);
            m->inv_freq = arena_alloc(&m->weights, inv_bytes);
            backend_copy_to_device(be, m->inv_freq, inv, inv_bytes);
            m->inv_freq_local = m->inv_freq;
            free(inv);
            if (c->rope_theta_local > 0) { // the sliding layers' base and head size, default RoPE (no scaling)
                target_config lc = *c;
                lc.rope_theta = c->rope_theta_local;
                lc.rope_dim = c->head_dim;
                lc.rope_llama3 = lc.rope_linear = lc.rope_yarn = lc.rope_proportional = 0;
                size_t local_bytes = (size_t)lc.rope_dim / 2 * sizeof(float);
                inv = xmalloc(local_bytes);
                target_rope_inv_freq(&lc, inv);
                m->inv_freq_local = arena_alloc(&m->weights, local_bytes);
                backend_copy_to_device(be, m->inv_freq_local, inv, local_bytes);
                free(inv);
            }
            if (c->v_norm) { // an RMSNorm without a weight: the weight 1 (Gemma 4's v_norm)
                int64_t q_width, kv_width;
                target_attn_max(c, &q_width, &kv_width);
                dtype adt = ops_act_dtype(be);
                float *one = xmalloc((size_t)q_width * sizeof(float));
                for (int64_t i = 0; i < q_width; i++) one[i] = 1.0f;
                m->ones = arena_alloc(&m->weights, (size_t)q_width * dtype_size(adt));
                target_upload(be, m->ones, adt, one, DT_F32, q_width);
                free(one);
            }
            for (int64_t l = l0; c->layer_scalar && l < l1; l++) // the layer scalars, read once to the host
                backend_copy_to_host(be, &m->layers[l].layer_scalar, m->layers[l].layer_scalar_dev, sizeof(float));
            if (m->quant_jobs) target_resident_index(m->quant_jobs);
            char b[32];
            log_debug("target %s: %s, %lld layers, H %lld, V %lld, weights %s on %s", dir, c->arch_name,
                      (long long)c->n_layers, (long long)c->hidden, (long long)c->vocab,
                      bytes_format(m->weights.used, b, sizeof b), be->name);
            if (n_quant > 0 && log_rank() == 0) {
                char qd[64], b1[32], b2[32];
                if (m->quant_jobs)
                    log_info("target %s: %s checkpoint: %d tensors stored quantised (%s on disk), kept so on the device "
                             "and de-quantised a layer at a time (teacher.quant_weights resident): weights %s (quantised, "
                             "resident) + layer scratch %s", dir, target_quant_describe(&c->quant, qd, sizeof qd), n_quant,
                             bytes_format(quant_disk, b, sizeof b), bytes_format(m->weights.used - m->scratch_bytes, b1, sizeof b1),
                             bytes_format(m->scratch_bytes, b2, sizeof b2));
                else
                    log_info("target %s: %s checkpoint: %d tensors stored quantised (%s on disk), de-quantised at load "
                             "(teacher.quant_weights %s)", dir, target_quant_describe(&c->quant, qd, sizeof qd), n_quant,
                             bytes_format(quant_disk, b, sizeof b), c->quant.resident ? "resident, none planned quantised"
                                                                                      : "dequantize");
            }
        }
    }
    free(found);
    free(list.t);
    target_resident_free(&rs);
    safetensors_dir_close(&d);
    if (rc) {
        free(m->layers);
        m->layers = NULL;
    }
    return rc;
}

void target_free(target_model *m) {
    if (m->weights.base) arena_free(&m->weights);
    if (m->quant_jobs) {
        free(m->quant_jobs->jobs);
        free(m->quant_jobs->first);
        free(m->quant_jobs);
    }
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
    size_t T = (size_t)max_tokens, H = (size_t)c->hidden, I = (size_t)target_mlp_width(c);
    int64_t q_width, kv_width; // the widest layer's (Gemma 4's full layers have heads of their own)
    target_attn_max(c, &q_width, &kv_width);
    size_t qd = (size_t)q_width, kvd = (size_t)kv_width;
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
    // [T, tile] f32: the lm_head's tile, on the last stage only
    w->logits = target_stage_is_last(m) ? arena_alloc(a, T * (size_t)w->vocab_tile * sizeof(float)) : NULL;
    w->tokens = arena_alloc(a, T * sizeof(int32_t));
    w->pos = arena_alloc(a, T * sizeof(int32_t));
    w->cu_seqlens = arena_alloc(a, ((size_t)max_seqs + 1) * sizeof(int32_t));
    w->m = arena_alloc(a, T * sizeof(float));
    w->s = arena_alloc(a, T * sizeof(float));
    w->features = arena_alloc(a, T * (size_t)o->n_feat * H * e); // [T, n_feat * H]
    w->topk_idx = arena_alloc(a, T * k * sizeof(int32_t));
    w->topk_val = arena_alloc(a, T * k * sizeof(float));
    w->lse = arena_alloc(a, T * sizeof(float));
    target_arch_work_carve(w, a, m, max_tokens, max_seqs);
}

void target_arch_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens, int max_seqs) {
    const target_arch *A = m->cfg.table;
    if (A->mixer->work_carve) A->mixer->work_carve(w, a, m, max_tokens, max_seqs);
    if (A->mlp->work_carve) A->mlp->work_carve(w, a, m, max_tokens);
}

int64_t target_mlp_width(const target_config *c) {
    return c->intermediate > c->shared_intermediate ? c->intermediate : c->shared_intermediate;
}

size_t target_work_bytes(const target_model *m, const target_outputs *o, int max_tokens, int max_seqs, int vocab_tile) {
    arena a;
    arena_init_dry(&a, "target work (plan)");
    target_work w;
    target_work_carve(&w, &a, m, o, max_tokens, max_seqs, vocab_tile);
    return a.used;
}

size_t target_model_weight_bytes(const target_model *m) {
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1);
    return target_stage_weight_bytes(&m->cfg, ops_act_dtype(m->be), l0, l1);
}

int target_plan_tokens(const target_model *m, const target_outputs *o, size_t budget, int max_seqs, int *vocab_tile) {
    size_t weights = target_model_weight_bytes(m);
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

void target_linear(backend *be, void *y, const void *x, const void *W, int T, int in, int out) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out, dt, dt);
}

void target_norm(const target_model *m, void *out, const void *in, const void *w, int R, int D) {
    if (m->cfg.norm_zero_centred) ops_rmsnorm_zc(m->be, out, in, w, R, D, (float)m->cfg.rms_eps);
    else ops_rmsnorm(m->be, out, in, w, R, D, (float)m->cfg.rms_eps);
}

void target_swiglu_mlp(const target_model *m, const void *w_gate, const void *w_up, const void *w_down, int I,
                       target_work *w, int T, void *out) {
    backend *be = m->be;
    int H = (int)m->cfg.hidden;
    target_linear(be, w->gate, w->xn, w_gate, T, H, I);
    target_linear(be, w->up, w->xn, w_up, T, H, I);
    if (m->cfg.mlp_act == TARGET_ACT_GELU_TANH) ops_geglu_tanh(be, w->gate, w->gate, w->up, (int64_t)T * I);
    else ops_swiglu(be, w->gate, w->gate, w->up, (int64_t)T * I);
    target_linear(be, out, w->gate, w_down, T, I, H);
}

void target_swiglu_tensors(target_model *m, int64_t l, int64_t I, target_tensor_list *list, const char *mlp) {
    target_layer *L = &m->layers[l];
    int64_t H = m->cfg.hidden;
    target_tensor_add(list, &L->w_gate, 0, 2, I, H, 0, "%s.%s", mlp, "gate_proj.weight");
    target_tensor_add(list, &L->w_up, 0, 2, I, H, 0, "%s.%s", mlp, "up_proj.weight");
    target_tensor_add(list, &L->w_down, 0, 2, H, I, 0, "%s.%s", mlp, "down_proj.weight");
}

// The SwiGLU MLP of a dense layer: mlp.{gate,up,down}_proj of width intermediate_size.
static void swiglu_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list,
                                 const st_dir *d) {
    (void)d;
    char mlp[128];
    snprintf(mlp, sizeof mlp, "%slayers.%lld.mlp", prefix, (long long)l);
    target_swiglu_tensors(m, l, m->cfg.intermediate, list, mlp);
}

static void swiglu_forward(const target_model *m, int l, target_work *w, int T) {
    const target_layer *L = &m->layers[l];
    target_swiglu_mlp(m, L->w_gate, L->w_up, L->w_down, (int)m->cfg.intermediate, w, T, w->xn);
}

static void swiglu_to_json(cJSON *o, const target_config *c) {
    cJSON_AddNumberToObject(o, "intermediate_size", (double)c->intermediate);
}

const target_mlp target_mlp_swiglu = {
    .layer_tensors = swiglu_layer_tensors,
    .forward = swiglu_forward,
    .to_json = swiglu_to_json,
};

void target_mlp_block(const target_model *m, int l, target_work *w, int T) {
    const target_layer *L = &m->layers[l];
    int H = (int)m->cfg.hidden;
    target_norm(m, w->xn, w->x, L->post_norm, T, H);
    m->cfg.table->mlp->forward(m, l, w, T);
    if (L->post_mlp_norm) target_norm(m, w->xn, w->xn, L->post_mlp_norm, T, H); // Gemma's sandwich
    ops_add(m->be, w->x, w->xn, (int64_t)T * H);
    if (L->layer_scalar_dev && L->layer_scalar != 1.0f) ops_scale(m->be, w->x, L->layer_scalar, (int64_t)T * H); // Gemma 4
}

void target_mixer_residual(const target_model *m, int l, target_work *w, int T) {
    int H = (int)m->cfg.hidden;
    const void *post = m->layers[l].post_mixer_norm;
    if (post) target_norm(m, w->xn, w->xn, post, T, H); // Gemma's sandwich
    ops_add(m->be, w->x, w->xn, (int64_t)T * H);
}

void target_mixer_block(const target_model *m, int l, target_work *w, int T, int n_seq) {
    int H = (int)m->cfg.hidden;
    target_norm(m, w->xn, w->x, m->layers[l].input_norm, T, H);
    m->cfg.table->mixer->forward(m, l, w, T, n_seq, NULL, NULL);
    target_mixer_residual(m, l, w, T);
}

float target_attn_scale(const target_config *c) {
    double s = c->attn_scale > 0 ? c->attn_scale : 1.0 / sqrt((double)c->head_dim);
    // YaRN's factor multiplies cos and sin: with RoPE on the whole head, q.k by its square
    // (target_config_parse refuses a factor other than 1 with partial RoPE)
    double af = c->rope_attention_factor > 0 ? c->rope_attention_factor : 1.0;
    return (float)(s * af * af);
}

const float *target_layer_inv_freq(const target_model *m, int l) {
    return m->cfg.layer_window[l] > 0 && m->inv_freq_local ? m->inv_freq_local : m->inv_freq;
}

void target_attention(const target_model *m, int l, target_work *w, int T, int n_seq) {
    const target_config *c = &m->cfg;
    ops_attention_ext(m->be, w->att, w->q, w->k, w->v, w->cu_seqlens, n_seq, T, (int)c->n_heads,
                      (int)target_layer_kv_heads(c, l), (int)target_layer_head_dim(c, l), target_attn_scale(c),
                      c->layer_window[l], m->layers[l].sinks);
}

void target_embed(const target_model *m, void *x, const int32_t *tokens, int T) {
    const target_config *c = &m->cfg;
    ops_embed(m->be, x, m->embed, tokens, T, (int)c->hidden);
    if (c->embed_scale > 0) { // Gemma: times sqrt(H) in the weights' dtype (transformers casts the scale)
        float s = (float)c->embed_scale;
        if (ops_act_dtype(m->be) == DT_BF16) s = f32_from_bf16(bf16_from_f32(s));
        ops_scale(m->be, x, s, (int64_t)T * c->hidden);
    }
}

void target_logits_cap(const target_model *m, float *logits, int ld, int R, int C) {
    if (m->cfg.final_softcap > 0) ops_softcap_f32(m->be, logits, ld, R, C, (float)m->cfg.final_softcap);
}

int target_forward(target_model *m, const target_outputs *o, target_work *w, const int32_t *tokens,
                   const int32_t *cu_seqlens, int n_seq, int T, const int *logits_rows, int n_logits,
                   float *logits_out) {
    const target_config *c = &m->cfg;
    backend *be = m->be;
    int H = (int)c->hidden, V = (int)c->vocab, nf = o->n_feat, k = o->topk;
    size_t e = dtype_size(ops_act_dtype(be));

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
    w->cu_host = cu_seqlens;
    free(pos);

    int64_t l0, l1; // a stage of a group: its layers only (target.h)
    target_stage_range(m, &l0, &l1);
    if (l0 == 0) target_embed(m, w->x, w->tokens, T); // else w->x holds the previous stage's stream
    for (int l = (int)l0; l < (int)l1; l++) {
        target_layer_materialize(m, l); // resident quantised weights: this layer's, de-quantised
        // the token mixer block (the architecture's attention, or a hybrid's mixers), then the MLP block
        target_mixer_block(m, l, w, T, n_seq);
        target_mlp_block(m, l, w, T);
        // features: HF hidden_states[l + 1], the residual stream after this layer, into its column
        // block; the last layer's comes after the final norm, below
        for (int f = 0; f < nf; f++)
            if (o->layer_ids[f] == l && l < (int)c->n_layers - 1)
                ops_copy_2d(be, (char *)w->features + (size_t)f * H * e, (int64_t)nf * H, w->x, H, T, H);
    }

    if (l1 < c->n_layers) { // w->x and w->features go on to the next stage
        backend_sync(be);
        return 0;
    }
    // lm_head over vocabulary tiles: running top-k and LSE, never [T, V]
    target_norm(m, w->xn, w->x, m->final_norm, T, H);
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
        target_logits_cap(m, w->logits, vc, T, vc);
        ops_topk_lse_update(be, w->logits, vc, v0, T, vc, k, w->topk_val, w->topk_idx, w->m, w->s);
        for (int r = 0; r < n_logits; r++)
            backend_copy_to_host(be, logits_out + (size_t)r * V + v0, w->logits + (size_t)logits_rows[r] * vc,
                                 (size_t)vc * sizeof(float));
    }
    ops_topk_lse_finish(be, w->lse, w->m, w->s, T);
    backend_sync(be);
    return 0;
}
