// featfile.c: the offline feature file writer (see featfile.h). The training-set part is the
// trainset writer's; this file adds the per-token teacher datasets to the same HDF5 file.
#include "common/data/featfile.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/data/h5safe.h"
#include "common/data/identity.h"

#define FEAT_CHUNK_ROWS 256 // HDF5 chunk rows of the per-token datasets

// An empty, extensible, chunked [0, cols] dataset (cols = 0: rank 1).
static hid_t feat_create(hid_t file, const char *name, hid_t type, int64_t cols) {
    int rank = cols > 0 ? 2 : 1;
    hsize_t dims[2] = {0, (hsize_t)cols}, maxdims[2] = {H5S_UNLIMITED, (hsize_t)cols};
    hsize_t chunk[2] = {FEAT_CHUNK_ROWS, (hsize_t)cols};
    if (rank == 1) chunk[0] = 1 << 14;
    hid_t space = H5Screate_simple(rank, dims, maxdims), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    if (space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0)
        d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return d;
}

// Append rows [have, have+n) of a dataset with cols columns (cols = 0: rank 1).
static herr_t feat_append(hid_t d, hid_t mem_type, int64_t have, int64_t n, int64_t cols, const void *buf) {
    int rank = cols > 0 ? 2 : 1;
    hsize_t size[2] = {(hsize_t)(have + n), (hsize_t)cols}, start[2] = {(hsize_t)have, 0}, count[2] = {(hsize_t)n, (hsize_t)cols};
    if (H5Dset_extent(d, size) < 0) return -1;
    hid_t fspace = H5Dget_space(d), mspace = H5Screate_simple(rank, count, NULL);
    herr_t rc = -1;
    if (fspace >= 0 && mspace >= 0 && H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
        rc = H5Dwrite(d, mem_type, mspace, fspace, H5P_DEFAULT, buf);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    return rc;
}

static herr_t feat_attr_i64(hid_t obj, const char *name, const int64_t *v, hsize_t n) {
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a >= 0 ? H5Awrite(a, H5T_NATIVE_INT64, v) : -1;
    if (a >= 0) H5Aclose(a);
    H5Sclose(space);
    return rc;
}

static herr_t feat_attr_str(hid_t obj, const char *name, const char *s) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(s) + 1);
    H5Tset_strpad(type, H5T_STR_NULLTERM);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a >= 0 ? H5Awrite(a, type, s) : -1;
    if (a >= 0) H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    return rc;
}

// 0, or -1 when a close failed (its data could not be written).
static int feat_close_datasets(featfile_writer *w) {
    int64_t *d[5] = {&w->d_features, &w->d_topk_idx, &w->d_topk_val, &w->d_lse, &w->d_crc};
    int rc = 0;
    for (int i = 0; i < 5; i++)
        if (*d[i] >= 0) {
            if (H5Dclose((hid_t)*d[i]) < 0) rc = -1;
            *d[i] = -1;
        }
    return rc;
}

uint32_t *featfile_sample_crc(const int32_t *tokens, const uint8_t *mask, int64_t n, const uint16_t *features, int64_t D,
                               const int32_t *topk_idx, const float *topk_val, int64_t k, const float *lse,
                               uint32_t crc[FEATFILE_N_PARTS]) {
    const void *p[FEATFILE_N_PARTS] = {tokens, mask, features, topk_idx, topk_val, lse};
    size_t bytes[FEATFILE_N_PARTS] = {(size_t)n * 4, (size_t)n, (size_t)(n * D) * 2, (size_t)(n * k) * 4,
                                      (size_t)(n * k) * 4, (size_t)n * 4};
    for (int i = 0; i < FEATFILE_N_PARTS; i++) crc[i] = p[i] ? crc32c_update(0, p[i], bytes[i]) : 0;
    if (!mask) { // (no mask: all ones, as the training-set writer stores it)
        crc[FEATFILE_MASK] = 0;
        for (int64_t t = 0; t < n; t++) crc[FEATFILE_MASK] = crc32c_update(crc[FEATFILE_MASK], "\1", 1);
    }
    return crc;
}

int featfile_writer_open(featfile_writer *w, const char *path, const featfile_info *info) {
    memset(w, 0, sizeof *w);
    w->d_features = w->d_topk_idx = w->d_topk_val = w->d_lse = w->d_crc = -1;
    w->info = *info;
    if (trainset_writer_open(&w->ts, path, info->vocab_size, info->tokenizer)) return -1;
    hid_t f = (hid_t)w->ts.file;
    int64_t D = (int64_t)info->n_feat * info->hidden;
    w->d_features = feat_create(f, "features", H5T_STD_U16LE, D);
    w->d_topk_idx = feat_create(f, "topk_idx", H5T_STD_I32LE, info->topk);
    w->d_topk_val = feat_create(f, "topk_val", H5T_IEEE_F32LE, info->topk);
    w->d_lse = feat_create(f, "lse", H5T_IEEE_F32LE, 0);
    w->d_crc = feat_create(f, "crc32c", H5T_STD_U32LE, FEATFILE_N_PARTS);
    hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
    herr_t rc = root >= 0 ? 0 : -1;
    if (rc >= 0) rc = feat_attr_str(root, "target", info->target);
    if (rc >= 0) rc = feat_attr_str(root, "target_architecture", info->target_arch);
    if (rc >= 0) rc = feat_attr_i64(root, "target_layer_ids", info->layer_ids, (hsize_t)info->n_feat);
    int64_t h = info->hidden, k = info->topk;
    if (rc >= 0) rc = feat_attr_i64(root, "hidden_size", &h, 1);
    if (rc >= 0) rc = feat_attr_i64(root, "topk", &k, 1);
    if (rc >= 0) rc = feat_attr_str(root, "feature_dtype", "bfloat16");
    if (rc >= 0 && info->target_by_content && info->target_config_crc >= 0)
        rc = feat_attr_i64(root, "target_config_crc32c", &info->target_config_crc, 1);
    if (rc >= 0 && info->target_by_content && info->target_weights_crc >= 0)
        rc = feat_attr_i64(root, "target_weights_crc32c", &info->target_weights_crc, 1);
    if (root >= 0) H5Gclose(root);
    if (rc < 0 || w->d_features < 0 || w->d_topk_idx < 0 || w->d_topk_val < 0 || w->d_lse < 0 || w->d_crc < 0) {
        featfile_writer_abort(w);
        return error_set("feature file %s: could not create the teacher datasets", path);
    }
    return 0;
}

int featfile_writer_append(featfile_writer *w, const int32_t *tokens, const uint8_t *mask, int64_t n,
                           const uint16_t *features, const int32_t *topk_idx, const float *topk_val, const float *lse) {
    if (trainset_writer_append(&w->ts, tokens, mask, n)) return -1;
    int64_t D = (int64_t)w->info.n_feat * w->info.hidden, k = w->info.topk;
    uint32_t crc[FEATFILE_N_PARTS];
    if (feat_append((hid_t)w->d_features, H5T_NATIVE_UINT16, w->rows, n, D, features) < 0 ||
        feat_append((hid_t)w->d_topk_idx, H5T_NATIVE_INT32, w->rows, n, k, topk_idx) < 0 ||
        feat_append((hid_t)w->d_topk_val, H5T_NATIVE_FLOAT, w->rows, n, k, topk_val) < 0 ||
        feat_append((hid_t)w->d_lse, H5T_NATIVE_FLOAT, w->rows, n, 0, lse) < 0 ||
        feat_append((hid_t)w->d_crc, H5T_NATIVE_UINT32, w->samples, 1, FEATFILE_N_PARTS,
                    featfile_sample_crc(tokens, mask, n, features, D, topk_idx, topk_val, k, lse, crc)) < 0)
        return error_set("feature file %s: writing rows %lld..%lld failed (disk full?)", w->ts.path,
                         (long long)w->rows, (long long)(w->rows + n));
    w->rows += n;
    w->samples++;
    return 0;
}

// The teacher datasets' chunks are flushed first, checked (a full disk fails here, and the file is
// abandoned with its blocks freed before anything is closed), then closed, then the training-set
// part closes (its own checks, fsync, rename).
int featfile_writer_close(featfile_writer *w) {
    char e[256];
    h5safe_quiet q = h5safe_quiet_begin();
    int rc = H5Fflush((hid_t)w->ts.file, H5F_SCOPE_LOCAL) < 0 || feat_close_datasets(w) < 0 ? -1 : 0;
    if (rc < 0) error_set("feature file %s: writing the teacher datasets: %s", w->ts.path, h5safe_error(e));
    h5safe_quiet_end(q);
    if (rc < 0) {
        featfile_writer_abort(w);
        return -1;
    }
    return trainset_writer_close(&w->ts);
}

void featfile_writer_abort(featfile_writer *w) {
    h5safe_quiet q = h5safe_quiet_begin();
    trainset_writer_discard(&w->ts);
    feat_close_datasets(w);
    h5safe_quiet_end(q);
    trainset_writer_abort(&w->ts);
}

int featfile_check(const char *path, const featfile_info *info, const int64_t *lengths, int64_t n_samples,
                   uint32_t tokens_crc) {
    if (access(path, F_OK) != 0) return 0;
    trainset ts;
    if (trainset_open(&ts, path, 0)) return error_prefix("existing feature shard");
    int64_t ids[64], h = 0, k = 0;
    hid_t root = H5Gopen2((hid_t)ts.file, "/", H5P_DEFAULT);
    int n_ids = h5safe_root_attr_int(root, path, "target_layer_ids", ids, 64);
    h5safe_root_attr_int(root, path, "hidden_size", &h, 1);
    h5safe_root_attr_int(root, path, "topk", &k, 1);
    int64_t have_cfg = -1, have_w = -1; // the target by content, when the shard records it
    if (H5Aexists(root, "target_config_crc32c") > 0 && h5safe_root_attr_int(root, path, "target_config_crc32c", &have_cfg, 1) != 1)
        have_cfg = -1;
    if (H5Aexists(root, "target_weights_crc32c") > 0 && h5safe_root_attr_int(root, path, "target_weights_crc32c", &have_w, 1) != 1)
        have_w = -1;
    H5Gclose(root);
    // the shard's identity (its samples' lengths, layer ids, hidden size) against this run's part
    run_identity have, want;
    identity_init(&have);
    identity_init(&want);
    int64_t *len = xmalloc((size_t)(ts.n_raw + 1) * sizeof *len);
    for (int64_t i = 0; i < ts.n_raw; i++) len[i] = ts.offsets[i + 1] - ts.offsets[i];
    identity_set_data(&have, len, ts.n_raw);
    free(len);
    identity_set_data(&want, lengths, n_samples);
    want.data_tokens_crc = tokens_crc;
    if (have.data_samples == want.data_samples && have.data_lengths_crc == want.data_lengths_crc) { // then the tokens
        int64_t longest = 1;
        for (int64_t i = 0; i < ts.n; i++) longest = trainset_len(&ts, i) > longest ? trainset_len(&ts, i) : longest;
        int32_t *tok = xmalloc((size_t)longest * sizeof *tok);
        uint32_t c = 0;
        for (int64_t i = 0; i < ts.n && c != 0xffffffffu; i++) {
            if (trainset_read(&ts, i, tok, NULL)) c = 0xffffffffu; // (unreadable: differs, named below)
            else c = crc32c_update(c, tok, (size_t)trainset_len(&ts, i) * sizeof *tok);
        }
        free(tok);
        have.data_tokens_crc = c;
    }
    have.target_hidden = h, want.target_hidden = info->hidden;
    have.target_config_crc = have_cfg, have.target_weights_crc = have_w;
    if (info->target_by_content) want.target_config_crc = info->target_config_crc, want.target_weights_crc = info->target_weights_crc;
    have.n_layer_ids = n_ids < 0 ? -1 : n_ids, want.n_layer_ids = info->n_feat;
    for (int i = 0; i < n_ids && i < 64; i++) have.layer_ids[i] = ids[i];
    for (int i = 0; i < info->n_feat; i++) want.layer_ids[i] = info->layer_ids[i];
    char what[1100];
    snprintf(what, sizeof what, "existing feature shard %s", path);
    int rc = 1;
    if (identity_check(&have, what, &want, "remove it to redo it, or use the same target, data, shard size and layer ids"))
        rc = -1;
    else if (k != info->topk)
        rc = error_set("existing feature shard %s was made with top-%lld, this run has top-%d (remove it to redo it)", path,
                       (long long)k, info->topk);
    trainset_close(&ts);
    return rc;
}
