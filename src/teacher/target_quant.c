// target_quant.c: quantised target checkpoints (fp8 block-quantised, mxfp4), parsed, looked up and
// de-quantised at load a chunk of rows at a time (see target_quant.h for the rules and the API).
#include "teacher/target_quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/json_util.h"
#include "common/quant/ops_quant.h"
#include "common/quant/ops_quant_cpu.h"

// ------------------------------------------------------------------------------------ config.json

// A string member of the quantization_config object: *out = its value, or def when absent/null; -1
// (error_set) for another JSON type.
static int tq_string(const cJSON *qc, const char *key, const char *where, const char *src, const char *def,
                     const char **out) {
    *out = def;
    char name[96];
    snprintf(name, sizeof name, "%s.%s", where, key);
    return json_get_string(qc, key, name, src, out);
}

// A refusal naming the key and its value (a user's text: one line, cut).
static int tq_refuse(const char *src, const char *where, const char *key, const char *value, const char *why) {
    char v[96];
    text_one_line(value, v, sizeof v);
    return error_set("%s: '%s.%s' is \"%s\": %s", src, where, key, v, why);
}

// weight_block_size: absent -> [128, 128] (FineGrainedFP8Config's default), null -> one scale per
// matrix, else two positive integers.
static int tq_block_size(target_quant *q, const cJSON *qc, const char *where, const char *src) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(qc, "weight_block_size");
    if (!b) {
        q->block_out = q->block_in = 128;
        return 0;
    }
    if (cJSON_IsNull(b)) return 0; // per matrix
    char s[96];
    json_value_str(b, s, sizeof s);
    int ok = cJSON_IsArray(b) && cJSON_GetArraySize(b) == 2;
    int64_t v[2] = {0, 0};
    for (int i = 0; ok && i < 2; i++) {
        const cJSON *x = cJSON_GetArrayItem(b, i);
        double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
        ok = d >= 1 && d <= (double)(1 << 24) && d == floor(d);
        v[i] = (int64_t)d;
    }
    if (!ok)
        return error_set("%s: '%s.weight_block_size' is %s: want [block_out, block_in], two positive integers", src,
                         where, s);
    q->block_out = v[0], q->block_in = v[1];
    return 0;
}

// ------------------------------------------------------------------------------------ teacher.quant_weights

static int tq_weights = -1; // -1: not set (the environment's default)

static int tq_weights_parse(const char *value, const char *what, int *mode) {
    if (value && strcmp(value, "resident") == 0) *mode = TARGET_QUANT_WEIGHTS_RESIDENT;
    else if (value && strcmp(value, "dequantize") == 0) *mode = TARGET_QUANT_WEIGHTS_DEQUANTIZE;
    else {
        char v[64];
        text_one_line(value ? value : "", v, sizeof v);
        return error_set("%s is \"%s\": want resident (quantised weights kept as stored on the device, a layer "
                         "de-quantised at a time) or dequantize (de-quantised at load)", what, v);
    }
    return 0;
}

int target_quant_weights_set(const char *value, const char *what) { return tq_weights_parse(value, what, &tq_weights); }

int target_quant_weights_mode(void) {
    if (tq_weights >= 0) return tq_weights;
    const char *env = getenv("DFLASH_QUANT_WEIGHTS");
    int mode = TARGET_QUANT_WEIGHTS_RESIDENT;
    if (env && *env && tq_weights_parse(env, "the environment variable DFLASH_QUANT_WEIGHTS", &mode)) return -1;
    return mode;
}

const char *target_quant_weights_name(int mode) {
    return mode == TARGET_QUANT_WEIGHTS_DEQUANTIZE ? "dequantize" : "resident";
}

// modules_to_not_convert, interned: one copy of each distinct list for the process (the configs that
// hold it are copied by value and never freed; the pool stays reachable)
typedef struct tq_pool {
    struct tq_pool *next;
    size_t len;
    char text[];
} tq_pool;
static tq_pool *tq_pool_head;
static pthread_mutex_t tq_pool_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *tq_intern(const char *text, size_t len) {
    pthread_mutex_lock(&tq_pool_mu);
    tq_pool *p = tq_pool_head;
    while (p && !(p->len == len && memcmp(p->text, text, len) == 0)) p = p->next;
    if (!p) {
        p = xmalloc(sizeof *p + len);
        p->len = len;
        memcpy(p->text, text, len);
        p->next = tq_pool_head;
        tq_pool_head = p;
    }
    pthread_mutex_unlock(&tq_pool_mu);
    return p->text;
}

// modules_to_not_convert: absent or null, or a list of strings
static int tq_skip_parse(target_quant *q, const cJSON *qc, const char *where, const char *src) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(qc, "modules_to_not_convert");
    if (!a || cJSON_IsNull(a)) return 0;
    char s[96];
    if (!cJSON_IsArray(a)) {
        json_value_str(a, s, sizeof s);
        return error_set("%s: '%s.modules_to_not_convert' is %s: want a list of module names", src, where, s);
    }
    size_t len = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsString(x) || !x->valuestring[0]) {
            json_value_str(x, s, sizeof s);
            return error_set("%s: '%s.modules_to_not_convert' holds %s: want module names (non-empty strings)", src,
                             where, s);
        }
        len += strlen(x->valuestring) + 1;
    }
    if (len == 0) return 0;
    char *buf = xmalloc(len), *p = buf;
    cJSON_ArrayForEach(x, a) {
        size_t n = strlen(x->valuestring) + 1;
        memcpy(p, x->valuestring, n);
        p += n;
        q->n_skip++;
    }
    q->skip = tq_intern(buf, len);
    free(buf);
    return 0;
}

int target_quant_parse(target_quant *q, const cJSON *root, const char *src) {
    memset(q, 0, sizeof *q);
    const char *where = "quantization_config";
    const cJSON *qc = json_field(root, "quantization_config");
    if (!qc) { // the multimodal wrappers may keep it with the text model's keys
        const cJSON *tc = json_field(root, "text_config");
        qc = cJSON_IsObject(tc) ? json_field(tc, "quantization_config") : NULL;
        where = "text_config.quantization_config";
    }
    if (!qc) return 0;
    char s[96];
    if (!cJSON_IsObject(qc)) {
        json_value_str(qc, s, sizeof s);
        return error_set("%s: '%s' is %s: want an object with a \"quant_method\"", src, where, s);
    }
    const char *method = NULL;
    if (tq_string(qc, "quant_method", where, src, NULL, &method)) return -1;
    if (!method) return error_set("%s: '%s' has no \"quant_method\"", src, where);
    int mode = target_quant_weights_mode();
    if (mode < 0) return -1;
    if (strcmp(method, "mxfp4") == 0) {
        q->method = TARGET_QUANT_MXFP4;
        q->resident = mode == TARGET_QUANT_WEIGHTS_RESIDENT;
        return tq_skip_parse(q, qc, where, src);
    }
    if (strcmp(method, "fp8") != 0)
        return tq_refuse(src, where, "quant_method", method, "not supported (supported: fp8 block-quantised, mxfp4)");
    q->method = TARGET_QUANT_FP8;
    const char *fmt, *act, *scale_fmt;
    if (tq_string(qc, "fmt", where, src, "e4m3", &fmt) || tq_string(qc, "activation_scheme", where, src, "dynamic", &act) ||
        tq_string(qc, "scale_fmt", where, src, "float", &scale_fmt))
        return -1;
    if (strcmp(fmt, "e4m3") != 0)
        return tq_refuse(src, where, "fmt", fmt, "not supported (fp8 weights must be e4m3, float8_e4m3fn)");
    if (strcasecmp(act, "dynamic") != 0) // FineGrainedFP8Config lower-cases it
        return tq_refuse(src, where, "activation_scheme", act,
                         "not supported (only dynamic: the teacher de-quantises the weights and runs in its compute "
                         "dtype, so static activation scales would be ignored)");
    if (strcmp(scale_fmt, "float") != 0 && strcmp(scale_fmt, "ue8m0") != 0)
        return tq_refuse(src, where, "scale_fmt", scale_fmt, "not supported (float or ue8m0)");
    q->resident = mode == TARGET_QUANT_WEIGHTS_RESIDENT;
    if (tq_skip_parse(q, qc, where, src)) return -1;
    return tq_block_size(q, qc, where, src);
}

const char *target_quant_describe(const target_quant *q, char *buf, size_t n) {
    if (q->method == TARGET_QUANT_MXFP4) snprintf(buf, n, "mxfp4");
    else if (q->method != TARGET_QUANT_FP8) snprintf(buf, n, "none");
    else if (q->block_out > 0)
        snprintf(buf, n, "fp8 (e4m3, blocks [%lld, %lld])", (long long)q->block_out, (long long)q->block_in);
    else snprintf(buf, n, "fp8 (e4m3, one scale per matrix)");
    return buf;
}

// ------------------------------------------------------------------------------------ lookup

static const st_entry *tq_find_suffix(const st_dir *d, const char *name, const char *suffix) {
    size_t a = strlen(name), b = strlen(suffix);
    char *s = xmalloc(a + b + 1);
    memcpy(s, name, a);
    memcpy(s + a, suffix, b + 1);
    const st_entry *e = safetensors_dir_find(d, s);
    free(s);
    return e;
}

int target_quant_present(const st_dir *d, const char *name) {
    return safetensors_dir_find(d, name) || tq_find_suffix(d, name, "_blocks");
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static const char *method_phrase(const target_quant *q) {
    return q->method == TARGET_QUANT_FP8 ? "declares fp8" : q->method == TARGET_QUANT_MXFP4 ? "declares mxfp4"
                                                                                            : "has no quantization_config";
}

// fp8: the F8_E4M3 weight w, its NAME_scale_inv, the block in effect; the scale's shape checked.
static int tq_lookup_fp8(const target_quant *q, const st_dir *d, const char *name, const st_entry *w,
                         target_quant_tensor *out) {
    char have[192], want[192];
    if (q->method != TARGET_QUANT_FP8)
        return error_set("tensor %s is F8_E4M3 but config.json %s (an fp8 checkpoint has \"quantization_config\": "
                         "{\"quant_method\": \"fp8\", ...})", name, method_phrase(q));
    if (w->ndim < 2)
        return error_set("tensor %s is F8_E4M3 of shape %s: an fp8 weight is a matrix [out, in] (or a stack of them)",
                         name, shape_str(w->ndim, w->shape, have, sizeof have));
    const st_entry *s = tq_find_suffix(d, name, "_scale_inv");
    if (!s) return error_set("tensor %s is F8_E4M3 but its scale %s_scale_inv is missing", name, name);
    if (s->dt != DT_F32 && s->dt != DT_BF16 && s->dt != DT_F16 && s->dt != DT_F8_E8M0)
        return error_set("tensor %s_scale_inv has dtype %s (want F32, BF16, F16 or F8_E8M0)", name, dtype_name(s->dt));
    int nd = w->ndim;
    int64_t O = w->shape[nd - 2], I = w->shape[nd - 1];
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, w->shape, sizeof shape);
    int ok;
    if (q->block_out > 0) {
        shape[nd - 2] = cdiv(O, q->block_out), shape[nd - 1] = cdiv(I, q->block_in);
        ok = s->ndim == nd;
        for (int j = 0; ok && j < nd; j++) ok = s->shape[j] == shape[j];
        out->block_out = q->block_out, out->block_in = q->block_in;
    } else { // one scale per matrix: [...], [..., 1, 1] (or [1] for a single matrix)
        shape[nd - 2] = shape[nd - 1] = 1;
        int64_t lead = 1, numel = 1;
        for (int j = 0; j < nd - 2; j++) lead *= w->shape[j];
        for (int j = 0; j < s->ndim; j++) numel *= s->shape[j];
        ok = numel == lead && s->ndim <= nd;
        for (int j = 0; ok && j < s->ndim && j < nd - 2; j++) ok = s->shape[j] == w->shape[j];
        out->block_out = O > 0 ? O : 1, out->block_in = I > 0 ? I : 1;
    }
    if (!ok) {
        char blk[64];
        if (q->block_out > 0)
            snprintf(blk, sizeof blk, "ceil(out/%lld) x ceil(in/%lld)", (long long)q->block_out, (long long)q->block_in);
        else snprintf(blk, sizeof blk, "one per matrix");
        char ws[192];
        return error_set("tensor %s_scale_inv has shape %s, want %s (weight %s, scales %s)", name,
                         shape_str(s->ndim, s->shape, have, sizeof have), shape_str(nd, shape, want, sizeof want),
                         shape_str(nd, w->shape, ws, sizeof ws), blk);
    }
    out->kind = TARGET_QUANT_STORED_FP8;
    out->w = w, out->scale = s;
    out->ndim = nd;
    memcpy(out->shape, w->shape, sizeof out->shape);
    return 0;
}

// mxfp4: NAME_blocks [..., N, G, 16] U8 and NAME_scales [..., N, G] U8 (either may be the one found).
static int tq_lookup_mxfp4(const target_quant *q, const char *name, const st_entry *b, const st_entry *s,
                           target_quant_tensor *out) {
    char have[192], want[192];
    if (q->method != TARGET_QUANT_MXFP4)
        return error_set("tensor %s is stored as MXFP4 (%s_%s) but config.json %s (an mxfp4 checkpoint has "
                         "\"quantization_config\": {\"quant_method\": \"mxfp4\", ...})",
                         name, name, b ? "blocks" : "scales", method_phrase(q));
    if (!b || !s)
        return error_set("tensor %s: %s_%s is missing (MXFP4 stores %s_blocks and %s_scales)", name, name,
                         b ? "scales" : "blocks", name, name);
    if (b->dt != DT_U8 || s->dt != DT_U8)
        return error_set("tensor %s_%s has dtype %s (MXFP4 blocks and scales are U8)", name,
                         b->dt != DT_U8 ? "blocks" : "scales", dtype_name(b->dt != DT_U8 ? b->dt : s->dt));
    int nd = b->ndim;
    if (nd < 3 || b->shape[nd - 1] != 16)
        return error_set("tensor %s_blocks has shape %s: want [..., rows, groups, 16] (32 e2m1 values in 16 bytes "
                         "per group)", name, shape_str(nd, b->shape, have, sizeof have));
    int ok = s->ndim == nd - 1;
    for (int j = 0; ok && j < nd - 1; j++) ok = s->shape[j] == b->shape[j];
    if (!ok) {
        char bs[192];
        return error_set("tensor %s_scales has shape %s, want %s (one scale per group of %s_blocks %s)", name,
                         shape_str(s->ndim, s->shape, have, sizeof have), shape_str(nd - 1, b->shape, want, sizeof want),
                         name, shape_str(nd, b->shape, bs, sizeof bs));
    }
    out->kind = TARGET_QUANT_STORED_MXFP4;
    out->w = b, out->scale = s;
    out->ndim = nd - 1;
    memcpy(out->shape, b->shape, sizeof out->shape);
    out->shape[nd - 2] = b->shape[nd - 2] * 32;
    out->shape[nd - 1] = 0;
    return 0;
}

int target_quant_lookup(const target_quant *q, const st_dir *d, const char *name, target_quant_tensor *out) {
    memset(out, 0, sizeof *out);
    const st_entry *e = safetensors_dir_find(d, name);
    if (e) {
        if (e->dt == DT_F8_E4M3) return tq_lookup_fp8(q, d, name, e, out);
        if (e->dt == DT_F8_E5M2)
            return error_set("tensor %s is F8_E5M2 (float8_e5m2): not supported (fp8 weights must be F8_E4M3, "
                             "quantization_config fmt e4m3)", name);
        out->kind = TARGET_QUANT_PLAIN;
        out->w = e;
        out->ndim = e->ndim;
        memcpy(out->shape, e->shape, sizeof out->shape);
        return 0;
    }
    const st_entry *b = tq_find_suffix(d, name, "_blocks"), *s = tq_find_suffix(d, name, "_scales");
    if (!b && !s) return 0; // absent
    return tq_lookup_mxfp4(q, name, b, s, out);
}

int64_t target_quant_numel(const target_quant_tensor *t) {
    int64_t n = 1;
    for (int j = 0; j < t->ndim; j++) n *= t->shape[j];
    return n;
}

int64_t target_quant_cols(const target_quant_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 1; }

int64_t target_quant_rows(const target_quant_tensor *t) {
    int64_t n = 1;
    for (int j = 0; j + 1 < t->ndim; j++) n *= t->shape[j];
    return n;
}

size_t target_quant_disk_bytes(const target_quant_tensor *t) {
    return (t->w ? t->w->nbytes : 0) + (t->scale ? t->scale->nbytes : 0);
}

// ------------------------------------------------------------------------------------ de-quantisation

// One scale value of an fp8 weight's scale tensor (any alignment: memcpy).
static float tq_scale(const st_entry *s, int64_t i) {
    const unsigned char *p = s->data;
    switch (s->dt) {
    case DT_F32: {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case DT_BF16:
    case DT_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return s->dt == DT_BF16 ? f32_from_bf16(h) : f32_from_f16(h);
    }
    case DT_F8_E8M0: return f32_from_f8e8m0(p[i]);
    default: fatal("tq_scale: dtype %s", dtype_name(s->dt)); // lookup admits only the four above
    }
}

// fp8 rows [r0, r0 + nrows) of [rows, I]: row r is output o = r % O of matrix r / O; each row's
// scales converted to f32 (exact), then the ops' row decode (ops_quant_cpu.h: the rule the resident
// weights' op runs too).
static void tq_dequant_fp8(const target_quant_tensor *t, int64_t r0, int64_t nrows, float *dst) {
    int nd = t->ndim;
    int64_t O = t->shape[nd - 2], I = t->shape[nd - 1], bo = t->block_out, bi = t->block_in;
    int64_t so = cdiv(O, bo), si = cdiv(I, bi);
    const uint8_t *w = t->w->data;
#pragma omp parallel if (nrows * I > (1 << 16))
    {
        float *srow = xmalloc((size_t)si * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t k = 0; k < nrows; k++) {
            int64_t r = r0 + k, m = r / O, o = r % O;
            int64_t sbase = (m * so + o / bo) * si;
            for (int64_t b = 0; b < si; b++) srow[b] = tq_scale(t->scale, sbase + b);
            cpu_dequant_fp8_row(dst + (size_t)k * (size_t)I, w + (size_t)r * (size_t)I, srow, I, bi);
        }
        free(srow);
    }
}

// mxfp4 rows: row r holds G groups of 16 bytes (32 values) and G scale bytes.
static void tq_dequant_mxfp4(const target_quant_tensor *t, int64_t r0, int64_t nrows, float *dst) {
    int64_t K = target_quant_cols(t), G = K / 32;
    const uint8_t *blocks = t->w->data, *scales = t->scale->data;
#pragma omp parallel for schedule(static) if (nrows * K > (1 << 16))
    for (int64_t k = 0; k < nrows; k++) {
        int64_t r = r0 + k;
        cpu_dequant_mxfp4_row(dst + (size_t)k * (size_t)K, blocks + (size_t)r * (size_t)G * 16, scales + r * G, G);
    }
}

int target_quant_dequant_rows(const target_quant_tensor *t, int64_t r0, int64_t nrows, float *dst) {
    int64_t cols = target_quant_cols(t);
    if (r0 < 0 || nrows < 0 || r0 + nrows > target_quant_rows(t))
        fatal("target_quant_dequant_rows: rows [%lld, %lld) of %lld", (long long)r0, (long long)(r0 + nrows),
              (long long)target_quant_rows(t));
    if (nrows == 0 || cols == 0) return 0;
    switch (t->kind) {
    case TARGET_QUANT_PLAIN: {
        const char *src = (const char *)t->w->data + (size_t)r0 * (size_t)cols * dtype_size(t->w->dt);
        if (convert_to_f32(dst, src, t->w->dt, nrows * cols)) return error_prefix("tensor %s", t->w->name);
        return 0;
    }
    case TARGET_QUANT_STORED_FP8: tq_dequant_fp8(t, r0, nrows, dst); return 0;
    case TARGET_QUANT_STORED_MXFP4: tq_dequant_mxfp4(t, r0, nrows, dst); return 0;
    default: return error_set("target_quant_dequant_rows: no tensor");
    }
}

int64_t target_quant_chunk = TARGET_QUANT_CHUNK;

int target_quant_upload(backend *be, void *dst, dtype dt, const target_quant_tensor *t) {
    if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16)
        return error_set("target_quant_upload: compute dtype %s (want F32, BF16 or F16)", dtype_name(dt));
    size_t es = dtype_size(dt);
    if (t->kind == TARGET_QUANT_PLAIN && t->w->dt == dt) { // as it is, straight from the mapping
        backend_copy_to_device(be, dst, t->w->data, t->w->nbytes);
        return 0;
    }
    int64_t rows = target_quant_rows(t), cols = target_quant_cols(t);
    if (rows == 0 || cols == 0) return 0;
    int64_t per = target_quant_chunk / cols;
    if (per < 1) per = 1;
    if (per > rows) per = rows;
    float *tmp = xmalloc((size_t)(per * cols) * sizeof(float));
    void *conv = dt == DT_F32 ? NULL : xmalloc((size_t)(per * cols) * es);
    int rc = 0;
    for (int64_t r = 0; r < rows && rc == 0; r += per) {
        int64_t n = rows - r < per ? rows - r : per;
        rc = target_quant_dequant_rows(t, r, n, tmp);
        if (rc) break;
        const void *out = tmp;
        if (conv) {
            convert_from_f32(conv, dt, tmp, n * cols);
            out = conv;
        }
        backend_copy_to_device(be, (char *)dst + (size_t)(r * cols) * es, out, (size_t)(n * cols) * es);
    }
    free(conv);
    free(tmp);
    return rc;
}

// ------------------------------------------------------------------------------------ resident weights

static int tq_ends(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// re.match(P, s) for the patterns of modules_to_not_convert: P matches a prefix of s; '.' any
// character, '*' / '+' / '?' after an atom, '\\' escapes the next character, '^' and a final '$'
// anchor; anything else is literal.
static int re_atom_len(const char *p) { return p[0] == '\\' && p[1] ? 2 : 1; }
static int re_atom(const char *p, char c) {
    if (!c) return 0;
    if (p[0] == '\\' && p[1]) return p[1] == c;
    return p[0] == '.' || p[0] == c;
}
static int re_here(const char *p, const char *s) {
    if (!*p) return 1;
    if (p[0] == '$' && !p[1]) return !*s;
    int n = re_atom_len(p);
    char op = p[n];
    if (op == '*' || op == '+' || op == '?') {
        size_t k = 0, lo = op == '+' ? 1 : 0, hi = op == '?' ? 1 : SIZE_MAX;
        while (k < hi && re_atom(p, s[k])) k++;
        for (;; k--) { // greedy, then back off
            if (k < lo) return 0;
            if (re_here(p + n + 1, s + k)) return 1;
            if (k == 0) return 0;
        }
    }
    return re_atom(p, *s) && re_here(p + n, s + 1);
}

// module (a tensor's module, or the experts module of fused experts) left out by a pattern of q
static int tq_skipped_module(const target_quant *q, const char *module) {
    const char *p = q->skip;
    for (int i = 0; p && i < q->n_skip; i++, p += strlen(p) + 1) {
        if (strstr(module, p)) return 1; // transformers 4: the pattern in the module's name
        if (re_here(p[0] == '^' ? p + 1 : p, module)) return 1; // transformers 5: re.match
    }
    return 0;
}

static int tq_skipped(const target_quant *q, const char *name) {
    if (!q->skip) return 0;
    char module[256];
    snprintf(module, sizeof module, "%s", name);
    size_t n = strlen(module);
    if (tq_ends(module, ".weight")) module[n - 7] = '\0';
    if (tq_skipped_module(q, module)) return 1;
    char *dot = strrchr(module, '.'); // fused experts: the parameter of the experts module
    if (dot && (tq_ends(module, "experts.gate_up_proj") || tq_ends(module, "experts.down_proj"))) {
        *dot = '\0';
        return tq_skipped_module(q, module);
    }
    return 0;
}

static int tq_fused_experts(const char *name, int ndim) {
    return ndim == 3 && (tq_ends(name, "experts.gate_up_proj") || tq_ends(name, "experts.down_proj"));
}

target_quant_kind target_quant_planned(const target_quant *q, const char *name, int ndim, int in_layer) {
    if (!in_layer || ndim < 2 || q->method == TARGET_QUANT_NONE) return TARGET_QUANT_PLAIN;
    if (q->method == TARGET_QUANT_MXFP4) // gpt-oss: the experts only
        return tq_fused_experts(name, ndim) && !tq_skipped(q, name) ? TARGET_QUANT_STORED_MXFP4 : TARGET_QUANT_PLAIN;
    static const char *const not_linear[] = {"mlp.gate.weight", "mlp.router.weight", "shared_expert_gate.weight",
                                             "conv1d.weight"};
    for (size_t i = 0; i < sizeof not_linear / sizeof not_linear[0]; i++)
        if (tq_ends(name, not_linear[i])) return TARGET_QUANT_PLAIN;
    int linear = (ndim == 2 && tq_ends(name, ".weight")) || tq_fused_experts(name, ndim);
    return linear && !tq_skipped(q, name) ? TARGET_QUANT_STORED_FP8 : TARGET_QUANT_PLAIN;
}

void target_quant_planned_bytes(const target_quant *q, target_quant_kind kind, const char *name, int ndim,
                                const int64_t *shape, size_t *codes, size_t *scales) {
    int64_t numel = 1, M = 1;
    for (int j = 0; j < ndim; j++) numel *= shape[j];
    for (int j = 0; j + 2 < ndim; j++) M *= shape[j];
    if (kind == TARGET_QUANT_STORED_MXFP4) {
        *codes = (size_t)numel / 2;
        *scales = (size_t)numel / 32;
        return;
    }
    int64_t O = ndim >= 2 ? shape[ndim - 2] : 1, I = ndim >= 1 ? shape[ndim - 1] : 1;
    int64_t bo = q->block_out > 0 ? q->block_out : (O > 0 ? O : 1), bi = q->block_in > 0 ? q->block_in : (I > 0 ? I : 1);
    int64_t rows = cdiv(O, bo);
    if (ndim == 3 && tq_ends(name, "gate_up_proj") && O % 2 == 0 && O > 0) { // gate and up may be stored apart
        int64_t half_bo = q->block_out > 0 ? q->block_out : O / 2, split = 2 * cdiv(O / 2, half_bo);
        if (split > rows) rows = split;
    }
    *codes = (size_t)numel;
    *scales = (size_t)(M * rows * cdiv(I, bi)) * sizeof(float);
}

size_t target_quant_stored_codes(const target_quant_tensor *t) { return t->w->nbytes; }

size_t target_quant_stored_scales(const target_quant_tensor *t) {
    if (t->kind == TARGET_QUANT_STORED_MXFP4) return t->scale->nbytes;
    return t->scale->nbytes / dtype_size(t->scale->dt) * sizeof(float);
}

void target_quant_upload_stored(backend *be, const target_quant_tensor *t, void *codes_dst, void *scales_dst) {
    backend_copy_to_device(be, codes_dst, t->w->data, t->w->nbytes);
    if (t->kind == TARGET_QUANT_STORED_MXFP4) { // the e8m0 bytes as they are
        backend_copy_to_device(be, scales_dst, t->scale->data, t->scale->nbytes);
        return;
    }
    int64_t n = (int64_t)(t->scale->nbytes / dtype_size(t->scale->dt)), chunk = target_quant_chunk;
    float *tmp = xmalloc((size_t)(n < chunk ? (n > 0 ? n : 1) : chunk) * sizeof(float));
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t len = n - i < chunk ? n - i : chunk;
        for (int64_t k = 0; k < len; k++) tmp[k] = tq_scale(t->scale, i + k);
        backend_copy_to_device(be, (float *)scales_dst + i, tmp, (size_t)len * sizeof(float));
    }
    free(tmp);
}

void target_quant_job_run(backend *be, const target_quant_job *j) {
    if (j->kind == TARGET_QUANT_STORED_FP8)
        ops_dequant_fp8(be, j->dst, j->codes, j->scales, j->M, j->O, j->I, j->bo, j->bi);
    else ops_dequant_mxfp4(be, j->dst, j->codes, j->scales, j->M * j->O, j->I / 32);
}

