// drafter.c: parameter layout, initialisation, loading and export of the drafter (see drafter.h).
#include "student/model/drafter.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/core/run_dir.h"
#include "common/core/half.h"
#include "common/core/rng.h"
#include "common/kernels/ops.h"
#include "student/model/drafter_kind.h"
#include "teacher/target_config.h"

int64_t drafter_param_numel(const drafter_config *c) {
    int n = c->kind->param_list(c, NULL);
    drafter_param *list = xcalloc((size_t)n, sizeof *list);
    c->kind->param_list(c, list);
    int64_t total = list[n - 1].offset + (list[n - 1].numel + DRAFTER_ALIGN - 1) / DRAFTER_ALIGN * DRAFTER_ALIGN;
    free(list);
    return total;
}

// Carve the drafter's memory from a (possibly dry) arena.
static void drafter_carve(drafter *d, arena *a, int tied) {
    const drafter_config *c = &d->cfg;
    size_t e = dtype_size(ops_act_dtype(d->be));
    size_t VH = (size_t)c->vocab * (size_t)c->hidden;
    d->master = arena_alloc(a, (size_t)d->numel * sizeof(float));
    d->grad = arena_alloc(a, (size_t)d->numel * sizeof(float));
    d->compute = ops_act_dtype(d->be) == DT_F32 ? (void *)d->master : arena_alloc(a, (size_t)d->numel * e);
    d->embed = arena_alloc(a, VH * e);
    d->lm_head = tied ? d->embed : arena_alloc(a, VH * e);
    d->inv_freq = arena_alloc(a, (size_t)c->head_dim / 2 * sizeof(float));
}

size_t drafter_bytes(const drafter_config *c, const backend *be, int tied) {
    drafter d;
    memset(&d, 0, sizeof d);
    d.cfg = *c;
    d.be = (backend *)be;
    d.numel = drafter_param_numel(c);
    arena a;
    arena_init_dry(&a, "drafter (plan)");
    drafter_carve(&d, &a, tied);
    return a.used;
}

const drafter_param *drafter_find(const drafter *d, const char *name) {
    for (int i = 0; i < d->n_params; i++)
        if (strcmp(d->params[i].name, name) == 0) return &d->params[i];
    return NULL;
}

// Upload a frozen [V, H] host tensor in the compute dtype, through a bounded staging buffer.
static int drafter_upload_frozen(drafter *d, void *dst, tensor t, const char *what) {
    const drafter_config *c = &d->cfg;
    if (t.ndim != 2 || t.shape[0] != c->vocab || t.shape[1] != c->hidden) {
        char s[64];
        return error_set("%s has shape %s, the drafter needs [%lld, %lld] (vocab_size, hidden_size)", what,
                         tensor_shape_str(&t, s, sizeof s), (long long)c->vocab, (long long)c->hidden);
    }
    if (t.dt != DT_F32 && t.dt != DT_BF16 && t.dt != DT_F16)
        return error_set("%s has dtype %s (want F32, BF16 or F16)", what, dtype_name(t.dt));
    dtype act = ops_act_dtype(d->be);
    size_t e = dtype_size(act);
    int64_t n = t.shape[0] * t.shape[1], chunk = 1 << 20;
    float *tmp = xmalloc((size_t)chunk * sizeof(float));
    void *conv = xmalloc((size_t)chunk * e);
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t len = n - i < chunk ? n - i : chunk;
        convert_to_f32(tmp, (const char *)t.data + (size_t)i * dtype_size(t.dt), t.dt, len);
        convert_from_f32(conv, act, tmp, len);
        backend_copy_to_device(d->be, (char *)dst + (size_t)i * e, conv, (size_t)len * e);
    }
    free(tmp);
    free(conv);
    return 0;
}

int drafter_init(drafter *d, const drafter_config *c, backend *be, uint64_t seed, tensor embed, const tensor *lm_head) {
    memset(d, 0, sizeof *d);
    d->cfg = *c;
    d->be = be;
    d->n_params = c->kind->param_list(c, NULL);
    d->params = xcalloc((size_t)d->n_params, sizeof *d->params);
    c->kind->param_list(c, d->params);
    d->numel = drafter_param_numel(c);
    d->layers = xcalloc((size_t)c->n_layers, sizeof *d->layers);
    if (arena_init(&d->mem, "drafter", be, drafter_bytes(c, be, lm_head == NULL))) {
        drafter_free(d);
        return error_append("the drafter's size: drafter.layers %lld, drafter.intermediate %lld, drafter.heads %lld x "
                            "drafter.head_dim %lld (or drafter.config's), at the target's hidden size and vocabulary",
                            (long long)c->n_layers, (long long)c->intermediate, (long long)c->n_heads, (long long)c->head_dim);
    }
    drafter_carve(d, &d->mem, lm_head == NULL);
    d->cfg.kind->bind(d);

    // Master weights on the host first: normal(0, 0.02) matrices (transformers' initializer_range),
    // RMSNorm weights 1, padding 0; one Philox stream per tensor so the layout does not matter.
    float *host = xcalloc((size_t)d->numel, sizeof(float));
    for (int i = 0; i < d->n_params; i++) {
        const drafter_param *p = &d->params[i];
        rng r;
        rng_init(&r, seed, 0, (uint32_t)(0x7000u + (uint32_t)i));
        for (int64_t j = 0; j < p->numel; j++) host[p->offset + j] = p->is_norm    ? 1.0f
                                      : p->is_delta ? (float)(j % (p->shape[1] * p->shape[2]) < p->shape[2])
                                                    : (float)(0.02 * rng_normal(&r));
    }
    backend_copy_to_device(be, d->master, host, (size_t)d->numel * sizeof(float));
    free(host);
    backend_memset_zero(be, d->grad, (size_t)d->numel * sizeof(float));
    drafter_sync_compute(d);

    int rc = drafter_upload_frozen(d, d->embed, embed, "target embed_tokens");
    if (rc == 0 && lm_head) rc = drafter_upload_frozen(d, d->lm_head, *lm_head, "target lm_head");
    if (rc) {
        drafter_free(d);
        return -1;
    }
    // RoPE frequencies exactly as the target's default rope computes them (transformers' fp32 steps)
    int64_t half = c->head_dim / 2;
    float *inv = xmalloc((size_t)half * sizeof(float));
    target_config rope = {.head_dim = c->head_dim, .rope_dim = c->head_dim, .rope_theta = c->rope_theta};
    target_rope_inv_freq(&rope, inv);
    backend_copy_to_device(be, d->inv_freq, inv, (size_t)half * sizeof(float));
    free(inv);
    return 0;
}

void drafter_free(drafter *d) {
    if (d->mem.base) arena_free(&d->mem);
    free(d->params);
    free(d->layers);
    memset(d, 0, sizeof *d);
}

void drafter_sync_compute(drafter *d) {
    if ((void *)d->compute != (void *)d->master) ops_f32_to_act(d->be, d->compute, d->master, d->numel);
}

int drafter_load_weights(drafter *d, const st_file *f) {
    float *host = xcalloc((size_t)d->numel, sizeof(float));
    for (int i = 0; i < d->n_params; i++) {
        const drafter_param *p = &d->params[i];
        const st_entry *e = safetensors_find(f, p->name);
        if (!e) {
            free(host);
            return error_set("%s: missing drafter tensor %s", f->path, p->name);
        }
        int same = e->ndim == p->ndim;
        for (int k = 0; same && k < p->ndim; k++) same = e->shape[k] == p->shape[k];
        if (!same) {
            char have[64], want[64];
            int64_t s[3] = {p->shape[0], p->shape[1], p->shape[2]};
            free(host);
            return error_set("%s: drafter tensor %s has shape %s, the config implies %s", f->path, p->name,
                             shape_str(e->ndim, e->shape, have, sizeof have), shape_str(p->ndim, s, want, sizeof want));
        }
        if (convert_to_f32(host + p->offset, e->data, e->dt, p->numel)) {
            free(host);
            return error_set("%s: drafter tensor %s has dtype %s (want F32, BF16 or F16)", f->path, p->name,
                             dtype_name(e->dt));
        }
    }
    backend_copy_to_device(d->be, d->master, host, (size_t)d->numel * sizeof(float));
    free(host);
    drafter_sync_compute(d);
    return 0;
}

void drafter_param_push(drafter_param *list, int *n, int64_t *off, const char *name, int ndim, const int64_t *shape,
                        int is_norm, int is_delta) {
    int64_t numel = 1;
    for (int k = 0; k < ndim; k++) numel *= shape[k];
    if (list) {
        drafter_param *p = &list[*n];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = ndim;
        for (int k = 0; k < 3; k++) p->shape[k] = k < ndim ? shape[k] : 1;
        p->numel = numel;
        p->offset = *off;
        p->is_norm = is_norm;
        p->is_delta = is_delta;
    }
    *off += (numel + DRAFTER_ALIGN - 1) / DRAFTER_ALIGN * DRAFTER_ALIGN;
    (*n)++;
}

int drafter_export(const drafter *d, const char *dir, int bf16) {
    char tmp[1024], path[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", dir, (int)getpid());
    if (mkdir(tmp, 0755) != 0) return error_set("export %s: %s", tmp, strerror(errno));
    float *host = xmalloc((size_t)d->numel * sizeof(float));
    backend_copy_to_host(d->be, host, d->master, (size_t)d->numel * sizeof(float));
    uint16_t *half = bf16 ? xmalloc((size_t)d->numel * sizeof(uint16_t)) : NULL;
    if (half) convert_from_f32(half, DT_BF16, host, d->numel);
    st_writer w;
    safetensors_writer_init(&w);
    for (int i = 0; i < d->n_params; i++) {
        const drafter_param *p = &d->params[i];
        void *data = half ? (void *)(half + p->offset) : (void *)(host + p->offset);
        safetensors_writer_add(&w, p->name, tensor_make(half ? DT_BF16 : DT_F32, data, DEVICE_CPU, p->ndim, p->shape));
    }
    safetensors_writer_meta(&w, "format", "pt");
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    int rc = safetensors_writer_write(&w, path);
    safetensors_writer_free(&w);
    free(host);
    free(half);
    if (rc == 0) {
        drafter_config out = d->cfg; // the dtype of what is written, not of what was read
        snprintf(out.torch_dtype, sizeof out.torch_dtype, "%s", bf16 ? "bfloat16" : "float32");
        char *json = drafter_config_to_json(&out);
        snprintf(path, sizeof path, "%s/config.json", tmp);
        FILE *f = fopen(path, "w");
        if (!f || fputs(json, f) < 0 || fputc('\n', f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
            rc = error_set("export %s: %s", path, strerror(errno));
        }
        if (f && fclose(f) != 0 && rc == 0) rc = error_set("export %s: %s", path, strerror(errno));
        free(json);
    }
    if (rc == 0) {
        // replace an earlier export of the same name
        char old[1100];
        snprintf(old, sizeof old, "%s.old.%d", dir, (int)getpid());
        int had = rename(dir, old) == 0;
        if (rename(tmp, dir) != 0) rc = error_set("export %s: %s", dir, strerror(errno));
        if (had && !run_dir_holds_only(old, run_dir_drafter_files)) // files of someone else's: never removed
            log_warn("export %s: the earlier export held files this trainer does not write: moved to %s", dir, old);
        else if (had && fs_remove_tree(old) != 0)
            rc = rc ? rc : error_set("export: could not remove %s: %s", old, strerror(errno));
    }
    if (rc) fs_remove_tree(tmp); // best effort: the error says what failed
    return rc;
}
