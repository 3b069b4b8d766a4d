// featreader.c: reading the offline feature set (see featreader.h and featfile.h).
//
// Opening reads dir/features.json (the index dump-features writes last, so it only exists when
// every shard is whole), then validates every shard once: the training-set part through
// trainset_open (datasets, offsets, attributes, ids), the per-token teacher datasets by type and
// shape, and the root attributes against the index. What is kept per sample is where its rows
// start in its shard and how many there are (O(samples) memory); global sample i lives in the
// shard whose prefix sum of sample counts covers i.
//
// Reading a sample reads only its rows (hyperslabs), from a shard opened on demand. Shards stay
// open between reads, but at most FR_MAX_OPEN at a time (least recently used closed first): a
// feature set of thousands of shards would otherwise run out of file descriptors, and reopening
// costs little next to the megabytes of features a sample carries.
#include "common/data/featreader.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/log.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/json_util.h"
#include "common/data/featfile.h"
#include "common/data/h5safe.h"
#include "common/data/identity.h"
#include "common/data/trainset.h"

#define FR_FORMAT_VERSION 1 // features.json "format_version"
#define FR_MAX_OPEN 32      // shards held open at once
#define FR_MAX_LAYERS 64    // target_layer_ids entries (as featfile_info.layer_ids)

// The per-token teacher datasets, in this order everywhere below.
enum { FR_FEATURES, FR_TOPK_IDX, FR_TOPK_VAL, FR_LSE, FR_N_TEACHER };
static const char *const fr_teacher_names[FR_N_TEACHER] = {"/features", "/topk_idx", "/topk_val", "/lse"};

typedef struct {
    char *path;
    int64_t first, n;         // global samples [first, first + n)
    hid_t file;               // < 0: closed
    hid_t d_tokens, d_mask;
    hid_t d_teacher[FR_N_TEACHER];
    hid_t d_crc;              // /crc32c [n, 6] (featfile.h); < 0 when the shard has none (older)
    int has_crc;
    uint64_t last_use;        // r->clock at the last read (for closing the least recently used)
} fr_shard;

struct featreader {
    char *index_path;         // dir/features.json, for messages
    int64_t n_samples;
    int64_t n_shards;
    fr_shard *shards;
    int64_t *row;             // [n_samples] first row of sample i in its shard's per-token datasets
    int64_t *len;             // [n_samples] its tokens
    int64_t hidden, vocab;
    int topk, n_feat;
    int64_t layer_ids[FR_MAX_LAYERS];
    run_identity identity;    // what the index records (identity.h)
    int sealed;               // the index carries its checksum (crc32c.h)
    int post_norm_last;       // features.json says "feature_convention": "hidden_states[id+1]"
    int64_t min_loss_tokens;  // features.json "min_loss_tokens" (data.min_loss_tokens of the dump); -1: not recorded
    int n_open;               // shards open now
    uint64_t clock;
    // the training sets dumped (the index's "sets"; one set of every sample when it has none)
    int n_sets;
    int64_t *set_n;           // [n_sets] samples
    double *set_weight;       // [n_sets]
    char **set_path;          // [n_sets]
    int64_t **set_heldout;    // [n_sets] the set's recorded held-out split (usable indices, increasing)
    int64_t *n_set_heldout;   // [n_sets] its length; -1 = the set records none ("heldout" absent)
};

// ---------------------------------------------------------------- HDF5 helpers

// Every public function turns HDF5's error printing off on entry and restores the caller's setting
// on exit (h5safe_quiet_begin / _end).

// What a teacher dataset must be: "uint16" etc. and its column count (0: rank 1).
typedef struct {
    const char *type;
    H5T_class_t cls;
    size_t size;
    H5T_sign_t sign; // integers only
    int64_t cols;
} fr_spec;

// Check dataset name of an open shard file against spec and rows; its handle in *out.
static int fr_check_dataset(hid_t file, const char *path, const char *name, const fr_spec *spec, int64_t rows,
                            hid_t *out) {
    char e[256], tn[64];
    if (h5safe_open_dataset(file, path, name, " (not a feature file?)", out) < 0) return -1;
    hid_t d = *out;
    hid_t type = H5Dget_type(d);
    if (type < 0) return error_set("%s: dataset %s: %s", path, name, h5safe_error(e));
    int ok = H5Tget_class(type) == spec->cls && H5Tget_size(type) == spec->size &&
             (spec->cls != H5T_INTEGER || H5Tget_sign(type) == spec->sign);
    h5safe_type_name(type, tn, sizeof tn);
    H5Tclose(type);
    if (!ok) return error_set("%s: dataset %s has type %s, expected %s", path, name, tn, spec->type);
    hid_t space = H5Dget_space(d);
    if (space < 0) return error_set("%s: dataset %s: %s", path, name, h5safe_error(e));
    int rank = H5Sget_simple_extent_ndims(space), want = spec->cols > 0 ? 2 : 1;
    hsize_t dims[H5S_MAX_RANK] = {0};
    if (rank >= 1 && rank <= H5S_MAX_RANK) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    if (rank != want || (int64_t)dims[0] != rows || (want == 2 && (int64_t)dims[1] != spec->cols)) {
        char have[96], expect[64];
        if (rank == 1) snprintf(have, sizeof have, "[%llu]", (unsigned long long)dims[0]);
        else if (rank == 2) snprintf(have, sizeof have, "[%llu, %llu]", (unsigned long long)dims[0], (unsigned long long)dims[1]);
        else snprintf(have, sizeof have, "rank %d", rank);
        if (want == 1) snprintf(expect, sizeof expect, "[%lld]", (long long)rows);
        else snprintf(expect, sizeof expect, "[%lld, %lld]", (long long)rows, (long long)spec->cols);
        return error_set("%s: dataset %s has shape %s, expected %s (rows = the tokens of /tokens)", path, name, have, expect);
    }
    return 0;
}

// Read rows [row, row + n) of a dataset with cols columns (0: rank 1) as mem_type into buf.
static herr_t fr_read_rows(hid_t d, hid_t mem_type, int64_t row, int64_t n, int64_t cols, void *buf) {
    if (n == 0) return 0;
    int rank = cols > 0 ? 2 : 1;
    hsize_t start[2] = {(hsize_t)row, 0}, count[2] = {(hsize_t)n, (hsize_t)cols};
    hid_t fspace = H5Dget_space(d);
    if (fspace < 0) return -1;
    hid_t mspace = H5Screate_simple(rank, count, NULL);
    herr_t rc = mspace < 0 ? -1 : H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
    if (rc >= 0) rc = H5Dread(d, mem_type, mspace, fspace, H5P_DEFAULT, buf);
    if (mspace >= 0) H5Sclose(mspace);
    H5Sclose(fspace);
    return rc;
}

// ---------------------------------------------------------------- shards

static void fr_shard_close(featreader *r, fr_shard *sh) {
    hid_t *d[2 + FR_N_TEACHER] = {&sh->d_tokens, &sh->d_mask, &sh->d_teacher[0], &sh->d_teacher[1],
                                  &sh->d_teacher[2], &sh->d_teacher[3]};
    for (int k = 0; k < 2 + FR_N_TEACHER; k++) {
        if (*d[k] >= 0) H5Dclose(*d[k]);
        *d[k] = -1;
    }
    if (sh->d_crc >= 0) H5Dclose(sh->d_crc);
    sh->d_crc = -1;
    if (sh->file >= 0) {
        H5Fclose(sh->file);
        r->n_open--;
    }
    sh->file = -1;
}

// The datasets' specs for this feature set (columns from the index).
static void fr_specs(const featreader *r, fr_spec spec[FR_N_TEACHER]) {
    spec[FR_FEATURES] = (fr_spec){"uint16", H5T_INTEGER, 2, H5T_SGN_NONE, (int64_t)r->n_feat * r->hidden};
    spec[FR_TOPK_IDX] = (fr_spec){"int32", H5T_INTEGER, 4, H5T_SGN_2, r->topk};
    spec[FR_TOPK_VAL] = (fr_spec){"float32", H5T_FLOAT, 4, H5T_SGN_ERROR, r->topk};
    spec[FR_LSE] = (fr_spec){"float32", H5T_FLOAT, 4, H5T_SGN_ERROR, 0};
}

// Validate shard s once at open (its samples go to global indices from *next on), recording each
// sample's rows and length. Everything is closed again afterwards.
static int fr_shard_validate(featreader *r, int64_t s, int64_t *next) {
    fr_shard *sh = &r->shards[s];
    if (access(sh->path, F_OK) != 0)
        return error_set("%s lists shard %s, which is missing: %s", r->index_path, sh->path, strerror(errno));
    trainset ts;
    if (trainset_open(&ts, sh->path, 0)) return -1;
    int rc = 0;
    if (ts.n != ts.n_raw)
        rc = error_set("%s: %lld of %lld samples are unusable (offsets or ids); a feature shard has none", sh->path,
                       (long long)(ts.n_raw - ts.n), (long long)ts.n_raw);
    else if (*next + ts.n > r->n_samples)
        rc = error_set("%s: the shards up to this one hold %lld samples, more than the %lld of %s", sh->path,
                       (long long)(*next + ts.n), (long long)r->n_samples, r->index_path);
    else if (r->identity.target_vocab > 0 && ts.vocab_size > r->identity.target_vocab) // as for a live run's set
        rc = error_set("%s: attribute vocab_size = %lld, larger than the vocabulary of the target %s records (%lld)",
                       sh->path, (long long)ts.vocab_size, r->index_path, (long long)r->identity.target_vocab);
    else if (s > 0 && ts.vocab_size != r->vocab)
        rc = error_set("%s: attribute vocab_size = %lld, the first shard has %lld", sh->path, (long long)ts.vocab_size,
                       (long long)r->vocab);

    // the teacher's attributes, as the index says
    hid_t file = (hid_t)ts.file;
    int64_t ids[FR_MAX_LAYERS], h = 0, k = 0;
    int n_ids = 0;
    if (rc == 0 && (h5safe_root_attr_int(file, sh->path, "hidden_size", &h, 1) < 0 || h5safe_root_attr_int(file, sh->path, "topk", &k, 1) < 0 ||
                    (n_ids = h5safe_root_attr_int(file, sh->path, "target_layer_ids", ids, FR_MAX_LAYERS)) < 0))
        rc = -1;
    if (rc == 0 && (h != r->hidden || k != r->topk))
        rc = error_set("%s: attributes hidden_size = %lld, topk = %lld; %s says %lld and %d", sh->path, (long long)h,
                       (long long)k, r->index_path, (long long)r->hidden, r->topk);
    int same_ids = n_ids == r->n_feat;
    for (int j = 0; same_ids && j < n_ids; j++) same_ids = ids[j] == r->layer_ids[j];
    if (rc == 0 && !same_ids)
        rc = error_set("%s: attribute target_layer_ids differs from %s's", sh->path, r->index_path);
    // /features holds 16-bit words read as bfloat16: a shard that says otherwise (float16) is refused,
    // never reinterpreted (every dump-features wrote "bfloat16")
    char fdt[64] = "";
    int has_fdt = rc == 0 ? trainset_attr_str(&ts, "feature_dtype", fdt, sizeof fdt) : 1;
    if (rc == 0 && has_fdt < 0) rc = -1;
    else if (rc == 0 && (has_fdt == 0 || strcmp(fdt, "bfloat16") != 0))
        rc = error_set("%s: attribute feature_dtype is %s%s%s: the features are read as bfloat16, the only dtype "
                       "dump-features writes (dump them again)", sh->path, has_fdt ? "\"" : "missing", has_fdt ? fdt : "",
                       has_fdt ? "\"" : "");

    // the per-token datasets: one row per token of /tokens
    fr_spec spec[FR_N_TEACHER];
    fr_specs(r, spec);
    for (int t = 0; t < FR_N_TEACHER && rc == 0; t++) {
        hid_t d = -1;
        rc = fr_check_dataset(file, sh->path, fr_teacher_names[t], &spec[t], ts.n_tokens, &d);
        if (d >= 0) H5Dclose(d);
    }
    // the per-sample checksums: required when the index is sealed (written with them)
    if (rc == 0) {
        htri_t has = H5Lexists(file, "/crc32c", H5P_DEFAULT);
        fr_spec cs = {"uint32", H5T_INTEGER, 4, H5T_SGN_NONE, FEATFILE_N_PARTS};
        hid_t d = -1;
        if (has > 0) rc = fr_check_dataset(file, sh->path, "/crc32c", &cs, ts.n_raw, &d);
        else if (r->sealed)
            rc = error_set("%s: no dataset /crc32c, which every shard of a sealed index has: the shard is corrupt or "
                           "not this dump's", sh->path);
        if (d >= 0) H5Dclose(d);
        sh->has_crc = has > 0;
    }
    if (rc == 0) {
        if (s == 0) r->vocab = ts.vocab_size;
        sh->first = *next;
        sh->n = ts.n;
        for (int64_t i = 0; i < ts.n; i++) {
            r->row[*next + i] = ts.offsets[ts.index[i]];
            r->len[*next + i] = trainset_len(&ts, i);
        }
        *next += ts.n;
    }
    trainset_close(&ts);
    return rc;
}

// Make shard sh readable: open it (closing the least recently used shard when FR_MAX_OPEN are).
static int fr_shard_acquire(featreader *r, fr_shard *sh) {
    sh->last_use = ++r->clock;
    if (sh->file >= 0) return 0;
    if (r->n_open >= FR_MAX_OPEN) {
        fr_shard *old = NULL;
        for (int64_t s = 0; s < r->n_shards; s++)
            if (r->shards[s].file >= 0 && (!old || r->shards[s].last_use < old->last_use)) old = &r->shards[s];
        if (old) fr_shard_close(r, old);
    }
    char e[256];
    if (fs_check_regular(sh->path, NULL)) return -1;
    sh->file = H5Fopen(sh->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (sh->file < 0) return error_set("%s: cannot open: %s", sh->path, h5safe_error(e));
    r->n_open++;
    static const char *const ts_names[2] = {"/tokens", "/loss_mask"};
    hid_t *d[2 + FR_N_TEACHER] = {&sh->d_tokens, &sh->d_mask, &sh->d_teacher[0], &sh->d_teacher[1],
                                  &sh->d_teacher[2], &sh->d_teacher[3]};
    for (int k = 0; k < 2 + FR_N_TEACHER; k++) {
        const char *name = k < 2 ? ts_names[k] : fr_teacher_names[k - 2];
        *d[k] = H5Dopen2(sh->file, name, H5P_DEFAULT);
        if (*d[k] < 0) {
            int rc = error_set("%s: cannot open dataset %s: %s", sh->path, name, h5safe_error(e));
            fr_shard_close(r, sh);
            return rc;
        }
    }
    if (sh->has_crc && (sh->d_crc = H5Dopen2(sh->file, "/crc32c", H5P_DEFAULT)) < 0) {
        int rc = error_set("%s: cannot open dataset /crc32c: %s", sh->path, h5safe_error(e));
        fr_shard_close(r, sh);
        return rc;
    }
    return 0;
}

// ---------------------------------------------------------------- the index

// fr_read_text: the index (64 MiB at most; a FIFO or a device refused, file_read_text).
static char *fr_read_text(const char *path) {
    char *text = file_read_text(path, 64u << 20);
    if (!text && errno == ENOENT)
        error_set("%s: cannot open: %s (not a dump-features output directory?)", path, strerror(ENOENT));
    return text;
}

// An integral JSON number under key, >= min.
static int fr_json_int(const cJSON *root, const char *key, const char *path, int64_t min, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) return error_set("%s: missing key \"%s\"", path, key);
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d != floor(d) || fabs(d) > 9.0e15 || d < (double)min)
        return error_set("%s: \"%s\" must be an integer >= %lld", path, key, (long long)min);
    *out = (int64_t)d;
    return 0;
}

// A set's "heldout": its recorded held-out split, usable indices of that set, increasing, each in
// [0, samples). Absent: the set records none (n_set_heldout -1).
static int fr_parse_heldout(featreader *r, const cJSON *h, int j, const char *path) {
    if (!h) return 0;
    int n = cJSON_IsArray(h) ? cJSON_GetArraySize(h) : -1;
    if (n < 0) return error_set("%s: \"sets\"[%d]: \"heldout\" must be an array of sample indices", path, j);
    r->set_heldout[j] = xmalloc(((size_t)n + 1) * sizeof(int64_t));
    r->n_set_heldout[j] = n;
    int64_t prev = -1, k = 0;
    for (const cJSON *e = h->child; e; e = e->next, k++) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(v == (double)(int64_t)v) || (int64_t)v <= prev || (int64_t)v >= r->set_n[j])
            return error_set("%s: \"sets\"[%d]: \"heldout\"[%lld] must be a sample index above the previous one and "
                             "below the set's %lld samples", path, j, (long long)k, (long long)r->set_n[j]);
        r->set_heldout[j][k] = prev = (int64_t)v;
    }
    return 0;
}

// Parse the index into r (everything but the shards' contents).
static int fr_parse_index(featreader *r, const char *dir, const char *text) {
    const char *path = r->index_path;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) return error_set("%s: not valid JSON (at byte %lld)", path, end ? (long long)(end - text) : -1LL);
    int rc = 0;
    int64_t version = 0, topk = 0;
    if (!cJSON_IsObject(root)) rc = error_set("%s: expected a JSON object", path);
    if (rc == 0) rc = fr_json_int(root, "format_version", path, 0, &version);
    if (rc == 0 && version != FR_FORMAT_VERSION)
        rc = error_set("%s: format_version = %lld, this program reads %d", path, (long long)version, FR_FORMAT_VERSION);
    if (rc == 0) rc = fr_json_int(root, "hidden_size", path, 1, &r->hidden);
    if (rc == 0) rc = fr_json_int(root, "topk", path, 1, &topk);
    if (rc == 0) rc = fr_json_int(root, "samples", path, 0, &r->n_samples);
    r->topk = (int)topk;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "target_layer_ids");
    int n_ids = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
    if (rc == 0 && (n_ids < 1 || n_ids > FR_MAX_LAYERS))
        rc = error_set("%s: \"target_layer_ids\" must be an array of 1 to %d layer ids", path, FR_MAX_LAYERS);
    for (int j = 0; rc == 0 && j < n_ids; j++) {
        const cJSON *v = cJSON_GetArrayItem(ids, j);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0)
            rc = error_set("%s: \"target_layer_ids\"[%d] is not a layer id", path, j);
        else r->layer_ids[j] = (int64_t)v->valuedouble;
    }
    r->n_feat = n_ids;
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(root, "feature_convention");
    r->post_norm_last = cJSON_IsString(conv) && strcmp(conv->valuestring, "hidden_states[id+1]") == 0;
    r->min_loss_tokens = -1; // dumps before 2026-12 record none
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(root, "min_loss_tokens"))
        rc = fr_json_int(root, "min_loss_tokens", path, 2, &r->min_loss_tokens);
    // the recorded identity: the index's "identity" (dumps since issue 27), else what older ones hold
    const cJSON *idj = cJSON_GetObjectItemCaseSensitive(root, "identity");
    if (rc == 0 && idj) rc = identity_from_json(idj, path, &r->identity);
    if (rc == 0 && !idj) {
        identity_init(&r->identity);
        const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "target_architecture");
        if (cJSON_IsString(arch)) snprintf(r->identity.target_arch, sizeof r->identity.target_arch, "%s", arch->valuestring);
        r->identity.target_hidden = r->hidden;
        r->identity.n_layer_ids = n_ids;
        for (int j = 0; j < n_ids; j++) r->identity.layer_ids[j] = r->layer_ids[j];
        if (cJSON_IsString(conv)) snprintf(r->identity.feature_convention, sizeof r->identity.feature_convention, "%s", conv->valuestring);
        r->identity.data_samples = r->n_samples;
    }
    if (rc == 0 && (int64_t)r->n_feat * r->hidden > 0x7fffffff)
        rc = error_set("%s: %d layers of hidden_size %lld are too many feature columns", path, r->n_feat, (long long)r->hidden);

    // "sets": [{"path": ..., "samples": n, "weight": w}, ...], the samples adding up to "samples"
    const cJSON *sets = cJSON_GetObjectItemCaseSensitive(root, "sets"), *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (rc == 0 && sets && (!cJSON_IsArray(sets) || cJSON_GetArraySize(sets) < 1))
        rc = error_set("%s: \"sets\" must be an array of at least one training set", path);
    if (rc == 0) {
        r->n_sets = sets ? cJSON_GetArraySize(sets) : 1;
        r->set_n = xcalloc((size_t)r->n_sets, sizeof *r->set_n);
        r->set_weight = xcalloc((size_t)r->n_sets, sizeof *r->set_weight);
        r->set_path = xcalloc((size_t)r->n_sets, sizeof *r->set_path);
        r->set_heldout = xcalloc((size_t)r->n_sets, sizeof *r->set_heldout);
        r->n_set_heldout = xmalloc((size_t)r->n_sets * sizeof *r->n_set_heldout);
        for (int j = 0; j < r->n_sets; j++) r->n_set_heldout[j] = -1;
        if (!sets) {
            r->set_n[0] = r->n_samples;
            r->set_weight[0] = 1;
            r->set_path[0] = xstrdup(cJSON_IsString(data) ? data->valuestring : "");
        }
    }
    int64_t in_sets = 0;
    for (int j = 0; rc == 0 && sets && j < r->n_sets; j++) {
        const cJSON *e = cJSON_GetArrayItem(sets, j);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "path"), *w = cJSON_GetObjectItemCaseSensitive(e, "weight");
        if (!cJSON_IsObject(e) || !cJSON_IsString(p) || !cJSON_IsNumber(w) || !(w->valuedouble > 0) ||
            !isfinite(w->valuedouble))
            rc = error_set("%s: \"sets\"[%d] must be {\"path\": string, \"samples\": integer, \"weight\": number > 0}", path, j);
        else if (fr_json_int(e, "samples", path, 0, &r->set_n[j]) == 0) {
            r->set_weight[j] = w->valuedouble;
            r->set_path[j] = xstrdup(p->valuestring);
            in_sets += r->set_n[j];
            rc = fr_parse_heldout(r, cJSON_GetObjectItemCaseSensitive(e, "heldout"), j, path);
        } else {
            rc = error_set("%s: \"sets\"[%d]: \"samples\" must be an integer >= 0", path, j);
        }
    }
    if (rc == 0 && sets && in_sets != r->n_samples)
        rc = error_set("%s: \"sets\" hold %lld samples, \"samples\" says %lld", path, (long long)in_sets,
                       (long long)r->n_samples);

    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(root, "shards");
    if (rc == 0 && !cJSON_IsArray(shards)) rc = error_set("%s: missing array \"shards\"", path);
    if (rc == 0) {
        r->n_shards = cJSON_GetArraySize(shards);
        r->shards = xcalloc((size_t)(r->n_shards > 0 ? r->n_shards : 1), sizeof *r->shards);
        for (int64_t s = 0; s < r->n_shards; s++) {
            fr_shard *sh = &r->shards[s];
            sh->file = sh->d_tokens = sh->d_mask = sh->d_crc = -1;
            for (int t = 0; t < FR_N_TEACHER; t++) sh->d_teacher[t] = -1;
        }
        for (int64_t s = 0; s < r->n_shards && rc == 0; s++) {
            const cJSON *v = cJSON_GetArrayItem(shards, (int)s);
            if (!cJSON_IsString(v) || !v->valuestring[0]) {
                rc = error_set("%s: \"shards\"[%lld] is not a file name", path, (long long)s);
                break;
            }
            // names are relative to the directory of the index (dump_index writes them so)
            const char *name = v->valuestring;
            size_t n = strlen(dir) + strlen(name) + 2;
            r->shards[s].path = xmalloc(n);
            if (name[0] == '/') snprintf(r->shards[s].path, n, "%s", name);
            else snprintf(r->shards[s].path, n, "%s/%s", dir, name);
        }
    }
    cJSON_Delete(root);
    return rc;
}

// ---------------------------------------------------------------- public

static int fr_open_quiet(featreader *r, const char *dir) {
    char *text = fr_read_text(r->index_path);
    if (!text) return -1;
    uint32_t want = 0, got = 0; // the index's seal (crc32c.h); an index written before it: one warning
    int seal = crc32c_check_seal(text, &want, &got);
    if (seal < 0) {
        free(text);
        return error_set("%s fails its checksum (CRC32C recorded %08x, computed %08x): the index is corrupt (dump the "
                         "features again)", r->index_path, want, got);
    }
    if (seal == 0 && strstr(text, "\"identity\"")) { // only sealed indexes record one: its seal was damaged
        free(text);
        return error_set("%s records an identity but has no seal of its own: the index is corrupt (dump the features "
                         "again)", r->index_path);
    }
    r->sealed = seal == 1;
    if (!r->sealed && log_rank() == 0)
        log_warn("%s carries no checksum (written before checksums): the index and its shards are read unverified", r->index_path);
    int rc = fr_parse_index(r, dir, text);
    free(text);
    if (rc) return -1;
    r->row = xmalloc((size_t)(r->n_samples > 0 ? r->n_samples : 1) * sizeof *r->row);
    r->len = xmalloc((size_t)(r->n_samples > 0 ? r->n_samples : 1) * sizeof *r->len);
    int64_t next = 0;
    for (int64_t s = 0; s < r->n_shards; s++)
        if (fr_shard_validate(r, s, &next)) return -1;
    if (next != r->n_samples)
        return error_set("%s lists %lld samples, its %lld shard(s) hold %lld", r->index_path, (long long)r->n_samples,
                         (long long)r->n_shards, (long long)next);
    return 0;
}

int featreader_open(featreader **out, const char *dir) {
    *out = NULL;
    featreader *r = xcalloc(1, sizeof *r);
    size_t n = strlen(dir) + sizeof "/features.json";
    r->index_path = xmalloc(n);
    snprintf(r->index_path, n, "%s/features.json", dir);
    h5safe_quiet q = h5safe_quiet_begin();
    int rc = fr_open_quiet(r, dir);
    h5safe_quiet_end(q);
    if (rc) {
        featreader_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

void featreader_close(featreader *r) {
    if (!r) return;
    h5safe_quiet q = h5safe_quiet_begin();
    for (int64_t s = 0; s < r->n_shards; s++) {
        fr_shard_close(r, &r->shards[s]);
        free(r->shards[s].path);
    }
    h5safe_quiet_end(q);
    free(r->shards);
    for (int j = 0; j < r->n_sets && r->set_path; j++) free(r->set_path[j]);
    free(r->set_path);
    for (int j = 0; j < r->n_sets && r->set_heldout; j++) free(r->set_heldout[j]);
    free(r->set_heldout);
    free(r->n_set_heldout);
    free(r->set_n);
    free(r->set_weight);
    free(r->row);
    free(r->len);
    free(r->index_path);
    free(r);
}

int64_t featreader_samples(const featreader *r) { return r->n_samples; }
int64_t featreader_len(const featreader *r, int64_t i) { return r->len[i]; }
int featreader_topk(const featreader *r) { return r->topk; }
int featreader_feat_dim(const featreader *r) { return (int)((int64_t)r->n_feat * r->hidden); }
int featreader_vocab(const featreader *r) { return (int)r->vocab; }
int featreader_n_sets(const featreader *r) { return r->n_sets; }

int64_t featreader_set(const featreader *r, int i, double *weight, const char **path) {
    if (weight) *weight = r->set_weight[i];
    if (path) *path = r->set_path[i] ? r->set_path[i] : "";
    return r->set_n[i];
}

const int64_t *featreader_set_heldout(const featreader *r, int i, int64_t *n) {
    *n = r->n_set_heldout ? r->n_set_heldout[i] : -1;
    return r->set_heldout ? r->set_heldout[i] : NULL;
}

int featreader_read(featreader *r, int64_t i, int32_t *tokens, uint8_t *mask, uint16_t *features, int32_t *topk_idx,
                    float *topk_val, float *lse) {
    if (i < 0 || i >= r->n_samples)
        return error_set("%s: sample %lld out of range [0, %lld)", r->index_path, (long long)i, (long long)r->n_samples);
    // the shard: the last one starting at or before i (shards are in sample order)
    int64_t lo = 0, hi = r->n_shards - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (r->shards[mid].first <= i) lo = mid;
        else hi = mid - 1;
    }
    fr_shard *sh = &r->shards[lo];
    int64_t row = r->row[i], n = r->len[i], D = (int64_t)r->n_feat * r->hidden, k = r->topk;
    char e[256];
    h5safe_quiet q = h5safe_quiet_begin();
    int rc = fr_shard_acquire(r, sh);
    struct {
        hid_t d, type;
        int64_t cols;
        void *buf;
        const char *name;
    } parts[2 + FR_N_TEACHER] = {
        {sh->d_tokens, H5T_NATIVE_INT32, 0, tokens, "/tokens"},
        {sh->d_mask, H5T_NATIVE_UINT8, 0, mask, "/loss_mask"},
        {sh->d_teacher[FR_FEATURES], H5T_NATIVE_UINT16, D, features, fr_teacher_names[FR_FEATURES]},
        {sh->d_teacher[FR_TOPK_IDX], H5T_NATIVE_INT32, k, topk_idx, fr_teacher_names[FR_TOPK_IDX]},
        {sh->d_teacher[FR_TOPK_VAL], H5T_NATIVE_FLOAT, k, topk_val, fr_teacher_names[FR_TOPK_VAL]},
        {sh->d_teacher[FR_LSE], H5T_NATIVE_FLOAT, 0, lse, fr_teacher_names[FR_LSE]},
    };
    for (int p = 0; p < 2 + FR_N_TEACHER && rc == 0; p++)
        if (parts[p].buf && fr_read_rows(parts[p].d, parts[p].type, row, n, parts[p].cols, parts[p].buf) < 0)
            rc = error_set("%s: reading sample %lld (rows %lld..%lld) from %s: %s", sh->path, (long long)(i - sh->first),
                           (long long)row, (long long)(row + n), parts[p].name, h5safe_error(e));
    // the sample's checksums (featfile.h), over what was read, before anything uses it
    uint32_t rec[FEATFILE_N_PARTS], got[FEATFILE_N_PARTS];
    if (rc == 0 && sh->has_crc && fr_read_rows(sh->d_crc, H5T_NATIVE_UINT32, i - sh->first, 1, FEATFILE_N_PARTS, rec) < 0)
        rc = error_set("%s: reading /crc32c of sample %lld: %s", sh->path, (long long)(i - sh->first), h5safe_error(e));
    if (rc == 0 && sh->has_crc) {
        featfile_sample_crc(tokens, mask, n, features, D, topk_idx, topk_val, k, lse, got);
        static const char *const part[FEATFILE_N_PARTS] = {"/tokens", "/loss_mask", "/features", "/topk_idx", "/topk_val", "/lse"};
        const void *buf[FEATFILE_N_PARTS] = {tokens, mask, features, topk_idx, topk_val, lse};
        for (int p = 0; p < FEATFILE_N_PARTS && rc == 0; p++)
            if (buf[p] && rec[p] != got[p])
                rc = error_set("%s: sample %lld: %s fails its checksum (CRC32C recorded %08x, computed %08x): the shard is "
                               "corrupt (dump it again)", sh->path, (long long)(i - sh->first), part[p], rec[p], got[p]);
    }
    h5safe_quiet_end(q);
    // as trainset_read: any nonzero mask value counts as 1
    if (rc == 0 && mask)
        for (int64_t t = 0; t < n; t++) mask[t] = mask[t] != 0;
    return rc;
}

const int64_t *featreader_layer_ids(const featreader *r, int *n) {
    *n = r->n_feat;
    return r->layer_ids;
}

int featreader_post_norm_last(const featreader *r) { return r->post_norm_last; }
int64_t featreader_min_loss_tokens(const featreader *r) { return r->min_loss_tokens; }

const run_identity *featreader_identity(const featreader *r) { return &r->identity; }

int featreader_verified(const featreader *r) {
    if (!r->sealed) return 0;
    for (int64_t s = 0; s < r->n_shards; s++)
        if (!r->shards[s].has_crc) return 0;
    return 1;
}
