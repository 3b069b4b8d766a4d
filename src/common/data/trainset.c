// trainset.c: the HDF5 training set of SPEC §7, read and written (see trainset.h).
//
// Reader: open the file (HDF5's own error printing is off, a failure becomes one error_set line),
// check the three datasets (stored in the file, not virtual or external; integer class, element
// size, signedness, rank 1) and the integer root attributes, read /offsets whole (offsets[0] = 0,
// the last = the length of /tokens), then stream /tokens and /loss_mask once in bounded chunks to
// find, for every sample, whether it holds an id outside [0, vocab_size) and how many loss tokens
// it has. Samples may overlap or come in any order in the file, so the pass records running
// counts (bad ids, loss tokens) at every offset position, in sorted order; a sample's counts are
// then the difference of the counts at its two ends. The tokenizer string comes last, through
// h5safe_attr_str (a corrupt legacy variable-length string is an error, not a crash).
//
// Writer: three extensible chunked datasets in "<path>.tmp.<pid>", appends buffered in memory and
// flushed in fixed-size pieces (memory does not grow with the number of samples; no chunk cache, so
// each piece reaches the file in its own write), attributes written, the file's blocks allocated,
// flushed, every close checked, fsynced and renamed over path at close; any failure frees the
// temporary's blocks, closes every handle and removes it.
#define _GNU_SOURCE // fallocate, on_exit
#include "common/data/trainset.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/core/rng.h"
#include "common/data/h5safe.h"

#define TS_READ_CHUNK ((int64_t)1 << 20)  // elements per read in the validation pass
#define TS_H5_CHUNK ((hsize_t)1 << 16)    // HDF5 chunk size (elements) of the written datasets
#define TS_WRITE_BUF ((int64_t)1 << 18)   // tokens buffered by the writer before a flush
#define TS_WRITE_BUF_OFF ((int64_t)1 << 16) // offsets buffered by the writer before a flush

// ---------------------------------------------------------------- HDF5 helpers

// Every public function turns HDF5's error printing off on entry and restores the caller's
// setting on exit (h5safe_quiet_begin / _end).

static void h5_close_dataset(int64_t *d) {
    if (*d > 0) H5Dclose((hid_t)*d);
    *d = -1;
}

static void h5_close_file(int64_t *f) {
    if (*f > 0) H5Fclose((hid_t)*f);
    *f = -1;
}

// Read elements [start, start + count) of a rank-1 dataset as mem_type into buf.
static herr_t h5_read_range(hid_t d, hid_t mem_type, int64_t start, int64_t count, void *buf) {
    if (count == 0) return 0;
    hid_t fspace = H5Dget_space(d);
    if (fspace < 0) return -1;
    hsize_t s = (hsize_t)start, c = (hsize_t)count;
    hid_t mspace = H5Screate_simple(1, &c, NULL);
    herr_t rc = mspace < 0 ? -1 : H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &s, NULL, &c, NULL);
    if (rc >= 0) rc = H5Dread(d, mem_type, mspace, fspace, H5P_DEFAULT, buf);
    if (mspace >= 0) H5Sclose(mspace);
    H5Sclose(fspace);
    return rc;
}

// ---------------------------------------------------------------- reader

// Does the file start with the HDF5 signature? (for the message when H5Fopen fails)
static int file_has_hdf5_signature(const char *path) {
    unsigned char sig[8] = {0};
    FILE *f = fs_fopen_regular(path, NULL);
    if (!f) return 0;
    size_t got = fread(sig, 1, 8, f);
    fclose(f);
    return got == 8 && memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
}

// Open a rank-1 integer dataset of the given element size and signedness; its length in *len.
static int ts_open_dataset(trainset *ts, const char *name, size_t size, H5T_sign_t sign, int64_t *d,
                           int64_t *len) {
    char e[256], tn[64];
    hid_t did = -1;
    int rc = h5safe_open_dataset((hid_t)ts->file, ts->path, name, NULL, &did);
    if (did >= 0) *d = did;
    if (rc < 0) return -1;
    hid_t type = H5Dget_type(did);
    if (type < 0) return error_set("%s: %s: %s", ts->path, name, h5safe_error(e));
    int ok = H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == size && H5Tget_sign(type) == sign;
    h5safe_type_name(type, tn, sizeof tn);
    H5Tclose(type);
    if (!ok)
        return error_set("%s: dataset %s has type %s, expected %s%zu", ts->path, name, tn,
                         sign == H5T_SGN_NONE ? "uint" : "int", 8 * size);
    hid_t space = H5Dget_space(did);
    if (space < 0) return error_set("%s: %s: %s", ts->path, name, h5safe_error(e));
    int ndim = H5Sget_simple_extent_ndims(space);
    hsize_t dims[H5S_MAX_RANK];
    if (ndim == 1) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    if (ndim != 1) return error_set("%s: dataset %s has rank %d, expected 1", ts->path, name, ndim);
    *len = (int64_t)dims[0];
    return 0;
}

// Open attribute name of the root group: 0 with *a = -1 when it is absent.
static int ts_open_attr(trainset *ts, hid_t root, const char *name, hid_t *a) {
    char e[256];
    *a = -1;
    htri_t exists = H5Aexists(root, name);
    if (exists < 0) return error_set("%s: attribute '%s': %s", ts->path, name, h5safe_error(e));
    if (exists == 0) return 0;
    *a = H5Aopen(root, name, H5P_DEFAULT);
    if (*a < 0) return error_set("%s: attribute '%s': %s", ts->path, name, h5safe_error(e));
    return 0;
}

// The attributes the validation needs: vocab_size and format_version (stored in the root group's
// header; no global heap is touched).
static int ts_read_attrs(trainset *ts) {
    char e[256];
    hid_t root = H5Gopen2((hid_t)ts->file, "/", H5P_DEFAULT);
    if (root < 0) return error_set("%s: cannot open the root group: %s", ts->path, h5safe_error(e));
    int rc = h5safe_root_attr_int(root, ts->path, "vocab_size", &ts->vocab_size, 1) < 0 ||
                     h5safe_root_attr_int(root, ts->path, "format_version", &ts->format_version, 1) < 0
                 ? -1
                 : 0;
    H5Gclose(root);
    if (rc < 0) return -1;
    if (ts->format_version != TRAINSET_FORMAT_VERSION)
        return error_set("%s: attribute format_version = %lld, this program reads version %d", ts->path,
                         (long long)ts->format_version, TRAINSET_FORMAT_VERSION);
    if (ts->vocab_size < 0 || (ts->vocab_size == 0 && ts->n_tokens > 0))
        return error_set("%s: attribute vocab_size = %lld, expected a positive number", ts->path,
                         (long long)ts->vocab_size);
    return 0;
}

// The optional tokenizer string, read last, once the rest of the file validated: a fixed-length
// string from the attribute itself, a legacy variable-length one in a child process (h5safe.h).
static int ts_read_tokenizer(trainset *ts) {
    char e[256];
    hid_t root = H5Gopen2((hid_t)ts->file, "/", H5P_DEFAULT), a = -1;
    if (root < 0) return error_set("%s: cannot open the root group: %s", ts->path, h5safe_error(e));
    int rc = ts_open_attr(ts, root, "tokenizer", &a);
    if (rc == 0 && a >= 0) rc = h5safe_attr_str(a, ts->path, "tokenizer", ts->tokenizer, sizeof ts->tokenizer);
    if (a >= 0) H5Aclose(a);
    H5Gclose(root);
    return rc;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// First index j in sorted pos[0..n) with pos[j] == v (v is known to be there).
static int64_t sorted_find(const int64_t *pos, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pos[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// "A whose offsets do not increase, B with ids outside [0, V), C with no valid anchor or fewer than M loss tokens",
// naming only the reasons that occur.
const char *trainset_rejected_str(const trainset *ts, int64_t min_loss_tokens, char *buf, size_t n) {
    int m = 0;
    const char *sep = "";
    buf[0] = '\0';
    if (ts->rejected_offsets > 0 && m < (int)n) {
        m += snprintf(buf + m, n - (size_t)m, "%s%lld whose offsets do not increase", sep, (long long)ts->rejected_offsets);
        sep = ", ";
    }
    if (ts->rejected_ids > 0 && m < (int)n) {
        m += snprintf(buf + m, n - (size_t)m, "%s%lld with ids outside [0, %lld)", sep, (long long)ts->rejected_ids,
                      (long long)ts->vocab_size);
        sep = ", ";
    }
    if (ts->rejected_short > 0 && m < (int)n)
        snprintf(buf + m, n - (size_t)m, "%s%lld with no valid anchor or fewer than %lld loss tokens", sep,
                 (long long)ts->rejected_short, (long long)min_loss_tokens);
    return buf;
}

// ts_first_warning: 1 the first time this process warns about path's rejected samples (rank 0 opens
// a set more than once: the start-up check, then its role), so the warning is one line per run.
static int ts_first_warning(const char *path) {
    static char warned[16][256];
    static int n_warned;
    for (int i = 0; i < n_warned; i++)
        if (strncmp(warned[i], path, sizeof warned[i] - 1) == 0) return 0;
    if (n_warned < 16) snprintf(warned[n_warned++], sizeof warned[0], "%s", path);
    return 1;
}

// The validation pass: stream /tokens and /loss_mask once, then classify every sample.
static int ts_validate(trainset *ts, int64_t min_loss_tokens) {
    char e[256];
    int64_t np = ts->n_raw + 1;
    int64_t *pos = malloc((size_t)np * sizeof *pos);
    int64_t *cum_bad = malloc((size_t)np * sizeof *cum_bad);
    int64_t *cum_loss = malloc((size_t)np * sizeof *cum_loss);
    // anchors (SPEC §4: p with loss_mask[p] = loss_mask[p+1] = 1) counted at p+1; cross[j]: the pair
    // ending at pos[j] straddles the sample boundary there (it belongs to no sample)
    int64_t *cum_pair = malloc((size_t)np * sizeof *cum_pair);
    uint8_t *cross = malloc((size_t)np);
    int32_t *tok = malloc((size_t)TS_READ_CHUNK * sizeof *tok);
    uint8_t *msk = malloc((size_t)TS_READ_CHUNK);
    int rc = 0;
    if (!pos || !cum_bad || !cum_loss || !cum_pair || !cross || !tok || !msk) {
        rc = error_set("%s: out of memory validating %lld samples", ts->path, (long long)ts->n_raw);
        goto done;
    }
    memcpy(pos, ts->offsets, (size_t)np * sizeof *pos);
    qsort(pos, (size_t)np, sizeof *pos, cmp_i64);

    // running counts of bad ids and loss tokens before position k, recorded at each pos[j] == k
    int64_t bad = 0, loss = 0, pairs = 0, j = 0, vocab = ts->vocab_size;
    int prev = 0; // loss_mask at the position before k
    for (int64_t c0 = 0; c0 < ts->n_tokens; c0 += TS_READ_CHUNK) {
        int64_t len = ts->n_tokens - c0 < TS_READ_CHUNK ? ts->n_tokens - c0 : TS_READ_CHUNK;
        if (h5_read_range((hid_t)ts->d_tokens, H5T_NATIVE_INT32, c0, len, tok) < 0) {
            rc = error_set("%s: reading /tokens [%lld, %lld): %s", ts->path, (long long)c0,
                           (long long)(c0 + len), h5safe_error(e));
            goto done;
        }
        if (h5_read_range((hid_t)ts->d_mask, H5T_NATIVE_UINT8, c0, len, msk) < 0) {
            rc = error_set("%s: reading /loss_mask [%lld, %lld): %s", ts->path, (long long)c0,
                           (long long)(c0 + len), h5safe_error(e));
            goto done;
        }
        for (int64_t k = 0; k < len; k++) {
            int pair = prev && msk[k] != 0;
            while (j < np && pos[j] == c0 + k) {
                cum_bad[j] = bad;
                cum_loss[j] = loss;
                cum_pair[j] = pairs;
                cross[j] = (uint8_t)pair;
                j++;
            }
            bad += tok[k] < 0 || tok[k] >= vocab;
            loss += msk[k] != 0;
            pairs += pair;
            prev = msk[k] != 0;
        }
        for (int64_t k = 0; k < len; k++)
            if (msk[k] > 1) {
                rc = error_set("%s: dataset /loss_mask: element %lld is %d, a loss mask is 0 or 1", ts->path,
                               (long long)(c0 + k), msk[k]);
                goto done;
            }
    }
    for (; j < np; j++) { // offsets equal to N
        cum_bad[j] = bad;
        cum_loss[j] = loss;
        cum_pair[j] = pairs;
        cross[j] = 0;
    }

    ts->index = malloc((size_t)(ts->n_raw > 0 ? ts->n_raw : 1) * sizeof *ts->index);
    if (!ts->index) {
        rc = error_set("%s: out of memory indexing %lld samples", ts->path, (long long)ts->n_raw);
        goto done;
    }
    for (int64_t i = 0; i < ts->n_raw; i++) {
        int64_t a = ts->offsets[i], b = ts->offsets[i + 1];
        if (b <= a) {
            ts->rejected_offsets++;
            continue;
        }
        int64_t ja = sorted_find(pos, np, a), jb = sorted_find(pos, np, b);
        if (cum_bad[jb] - cum_bad[ja] > 0) {
            ts->rejected_ids++;
            continue;
        }
        int64_t l = cum_loss[jb] - cum_loss[ja];
        int64_t anchors = cum_pair[jb] - cum_pair[ja] - cross[ja]; // pairs ending in (a, b)
        if (min_loss_tokens > 0 && (l < min_loss_tokens || anchors < 1)) {
            ts->rejected_short++;
            continue;
        }
        ts->index[ts->n++] = i;
        ts->loss_tokens += l;
    }
    if (ts->rejected_offsets + ts->rejected_ids + ts->rejected_short > 0 && log_rank() == 0 && ts_first_warning(ts->path)) {
        char why[512];
        log_warn("%s: %lld of %lld samples rejected (not used): %s%s", ts->path,
                 (long long)(ts->rejected_offsets + ts->rejected_ids + ts->rejected_short), (long long)ts->n_raw,
                 trainset_rejected_str(ts, min_loss_tokens, why, sizeof why), ts->n == 0 ? "; no sample is usable" : "");
    }
done:
    free(pos);
    free(cum_bad);
    free(cum_loss);
    free(cum_pair);
    free(cross);
    free(tok);
    free(msk);
    return rc;
}

// The optional /heldout (int64 [m], distinct raw sample indices in [0, n_raw)) and its rule, the
// root attribute heldout_rule.
static int ts_read_heldout(trainset *ts) {
    char e[256];
    ts->n_heldout = -1;
    htri_t has = H5Lexists((hid_t)ts->file, "/heldout", H5P_DEFAULT);
    if (has < 0) return error_set("%s: /heldout: %s", ts->path, h5safe_error(e));
    if (has == 0) return 0;
    int64_t d = -1, n = 0;
    if (ts_open_dataset(ts, "/heldout", 8, H5T_SGN_2, &d, &n) < 0) return -1;
    ts->heldout = malloc((size_t)(n > 0 ? n : 1) * sizeof *ts->heldout);
    int rc = ts->heldout ? 0 : error_set("%s: out of memory reading /heldout", ts->path);
    if (rc == 0 && h5_read_range((hid_t)d, H5T_NATIVE_INT64, 0, n, ts->heldout) < 0)
        rc = error_set("%s: reading /heldout: %s", ts->path, h5safe_error(e));
    h5_close_dataset(&d);
    if (rc < 0) return -1;
    ts->n_heldout = n;
    for (int64_t i = 0; i < n; i++)
        if (ts->heldout[i] < 0 || ts->heldout[i] >= ts->n_raw || (i > 0 && ts->heldout[i] <= ts->heldout[i - 1]))
            return error_set("%s: dataset /heldout: element %lld = %lld; held-out indices increase and lie in [0, %lld)",
                             ts->path, (long long)i, (long long)ts->heldout[i], (long long)ts->n_raw);
    // the held-out samples among the usable ones (a rejected one is counted and left out)
    ts->heldout_usable = malloc((size_t)(n > 0 ? n : 1) * sizeof *ts->heldout_usable);
    if (!ts->heldout_usable) return error_set("%s: out of memory reading /heldout", ts->path);
    for (int64_t i = 0; i < n; i++) {
        int64_t u = trainset_usable_of_raw(ts, ts->heldout[i]);
        if (u >= 0) ts->heldout_usable[ts->n_heldout_usable++] = u;
        else ts->heldout_rejected++;
    }
    if (ts->heldout_rejected > 0 && log_rank() == 0)
        log_warn("%s: %lld of its %lld held-out samples (/heldout) are rejected samples: %lld are held out", ts->path,
                 (long long)ts->heldout_rejected, (long long)n, (long long)ts->n_heldout_usable);
    return trainset_attr_str(ts, "heldout_rule", ts->heldout_rule, sizeof ts->heldout_rule) < 0 ? -1 : 0;
}

int trainset_attr_str(trainset *ts, const char *name, char *out, size_t n) {
    char e[256];
    out[0] = '\0';
    h5safe_quiet q = h5safe_quiet_begin();
    hid_t root = H5Gopen2((hid_t)ts->file, "/", H5P_DEFAULT), a = -1;
    int rc = root < 0 ? error_set("%s: cannot open the root group: %s", ts->path, h5safe_error(e)) : 0;
    if (rc == 0) rc = ts_open_attr(ts, root, name, &a);
    if (rc == 0 && a >= 0) rc = h5safe_attr_str(a, ts->path, name, out, n) < 0 ? -1 : 1;
    if (a >= 0) H5Aclose(a);
    if (root >= 0) H5Gclose(root);
    h5safe_quiet_end(q);
    return rc;
}

int trainset_read_u8(trainset *ts, const char *name, uint8_t *out) {
    char e[256];
    h5safe_quiet q = h5safe_quiet_begin();
    int64_t d = -1, n = 0;
    int rc = ts_open_dataset(ts, name, 1, H5T_SGN_NONE, &d, &n);
    if (rc == 0 && n != ts->n_raw)
        rc = error_set("%s: dataset %s has %lld elements, the file has %lld samples", ts->path, name, (long long)n,
                       (long long)ts->n_raw);
    if (rc == 0 && h5_read_range((hid_t)d, H5T_NATIVE_UINT8, 0, n, out) < 0)
        rc = error_set("%s: reading %s: %s", ts->path, name, h5safe_error(e));
    h5_close_dataset(&d);
    h5safe_quiet_end(q);
    return rc < 0 ? -1 : 0;
}

int64_t trainset_heldout_draw(int64_t n, double spec, uint64_t seed, int64_t *idx, char *rule, size_t rule_n) {
    int64_t m = spec >= 1 ? (int64_t)spec : spec > 0 ? (int64_t)(spec * (double)n) : 0;
    if (spec > 0 && spec < 1 && m < 1) m = 1;
    if (m > n) m = n;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    rng r;
    rng_init(&r, seed, 0, TRAINSET_HELDOUT_RNG);
    rng_shuffle(&r, idx, n);
    qsort(idx, (size_t)m, sizeof *idx, cmp_i64);
    snprintf(rule, rule_n, "seeded random %lld of %lld samples (Philox seed %llu, stream id 0x%x: the first %lld of a "
             "Fisher-Yates shuffle of 0..%lld, sorted)", (long long)m, (long long)n, (unsigned long long)seed,
             TRAINSET_HELDOUT_RNG, (long long)m, (long long)n - 1);
    return m;
}

int64_t trainset_usable_of_raw(const trainset *ts, int64_t raw) {
    int64_t lo = 0, hi = ts->n; // index[] increases
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (ts->index[mid] < raw) lo = mid + 1;
        else hi = mid;
    }
    return lo < ts->n && ts->index[lo] == raw ? lo : -1;
}

static int ts_open_quiet(trainset *ts, const char *path, int64_t min_loss_tokens) {
    char e[256];
    // a regular file, readable (a FIFO or a device is refused: HDF5 would block or read forever)
    FILE *probe = fs_fopen_regular(path, NULL);
    if (!probe) return -1;
    fclose(probe);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        if (!file_has_hdf5_signature(path)) return error_set("%s: not an HDF5 file", path);
        return error_set("%s: cannot open as HDF5: %s", path, h5safe_error(e));
    }
    ts->file = f;

    int64_t n_mask = 0, n_off = 0;
    if (ts_open_dataset(ts, "/tokens", 4, H5T_SGN_2, &ts->d_tokens, &ts->n_tokens) < 0) return -1;
    if (ts_open_dataset(ts, "/loss_mask", 1, H5T_SGN_NONE, &ts->d_mask, &n_mask) < 0) return -1;
    int64_t d_off = -1;
    int rc = ts_open_dataset(ts, "/offsets", 8, H5T_SGN_2, &d_off, &n_off);
    if (rc == 0 && n_mask != ts->n_tokens)
        rc = error_set("%s: dataset /loss_mask has %lld elements, /tokens has %lld", path,
                       (long long)n_mask, (long long)ts->n_tokens);
    if (rc == 0 && n_off < 1)
        rc = error_set("%s: dataset /offsets is empty (it needs n + 1 >= 1 elements)", path);
    if (rc == 0) {
        ts->n_raw = n_off - 1;
        ts->offsets = malloc((size_t)n_off * sizeof *ts->offsets);
        if (!ts->offsets)
            rc = error_set("%s: out of memory reading /offsets (%lld elements)", path, (long long)n_off);
        else if (h5_read_range((hid_t)d_off, H5T_NATIVE_INT64, 0, n_off, ts->offsets) < 0)
            rc = error_set("%s: reading /offsets: %s", path, h5safe_error(e));
    }
    h5_close_dataset(&d_off);
    if (rc < 0) return -1;
    for (int64_t i = 0; i < n_off; i++)
        if (ts->offsets[i] < 0 || ts->offsets[i] > ts->n_tokens)
            return error_set("%s: dataset /offsets: offsets[%lld] = %lld is outside [0, %lld] (the "
                             "length of /tokens)", path, (long long)i, (long long)ts->offsets[i],
                             (long long)ts->n_tokens);
    // every token belongs to the sample space: none before the first offset or after the last
    if (ts->offsets[0] != 0)
        return error_set("%s: dataset /offsets: offsets[0] = %lld, expected 0 (tokens before it would belong "
                         "to no sample)", path, (long long)ts->offsets[0]);
    if (ts->offsets[n_off - 1] != ts->n_tokens)
        return error_set("%s: dataset /offsets: the last offset, offsets[%lld] = %lld, is not the length of "
                         "/tokens (%lld): the tokens after it would belong to no sample", path,
                         (long long)(n_off - 1), (long long)ts->offsets[n_off - 1], (long long)ts->n_tokens);
    if (ts_read_attrs(ts) < 0 || ts_validate(ts, min_loss_tokens) < 0) return -1;
    if (ts_read_tokenizer(ts) < 0) return -1;
    return ts_read_heldout(ts);
}

int trainset_open(trainset *ts, const char *path, int64_t min_loss_tokens) {
    memset(ts, 0, sizeof *ts);
    ts->file = ts->d_tokens = ts->d_mask = -1;
    ts->path = xstrdup(path);
    h5safe_quiet q = h5safe_quiet_begin();
    int rc = ts_open_quiet(ts, path, min_loss_tokens);
    h5safe_quiet_end(q);
    if (rc < 0) trainset_close(ts);
    return rc;
}

int64_t trainset_len(const trainset *ts, int64_t i) {
    int64_t r = ts->index[i];
    return ts->offsets[r + 1] - ts->offsets[r];
}

int trainset_read(trainset *ts, int64_t i, int32_t *tokens, uint8_t *mask) {
    char e[256];
    if (i < 0 || i >= ts->n)
        return error_set("%s: sample %lld out of range [0, %lld)", ts->path, (long long)i, (long long)ts->n);
    int64_t r = ts->index[i], a = ts->offsets[r], len = ts->offsets[r + 1] - a;
    h5safe_quiet q = h5safe_quiet_begin();
    int rc = 0;
    if (tokens && h5_read_range((hid_t)ts->d_tokens, H5T_NATIVE_INT32, a, len, tokens) < 0)
        rc = error_set("%s: reading sample %lld from /tokens: %s", ts->path, (long long)r, h5safe_error(e));
    if (rc == 0 && mask && h5_read_range((hid_t)ts->d_mask, H5T_NATIVE_UINT8, a, len, mask) < 0)
        rc = error_set("%s: reading sample %lld from /loss_mask: %s", ts->path, (long long)r,
                       h5safe_error(e));
    h5safe_quiet_end(q);
    if (rc == 0 && mask)
        for (int64_t k = 0; k < len; k++) mask[k] = mask[k] != 0;
    return rc;
}

void trainset_close(trainset *ts) {
    h5safe_quiet q = h5safe_quiet_begin();
    h5_close_dataset(&ts->d_tokens);
    h5_close_dataset(&ts->d_mask);
    h5_close_file(&ts->file);
    h5safe_quiet_end(q);
    free(ts->path);
    free(ts->offsets);
    free(ts->index);
    free(ts->heldout);
    free(ts->heldout_usable);
    memset(ts, 0, sizeof *ts);
    ts->file = ts->d_tokens = ts->d_mask = -1;
    ts->n_heldout = -1;
}

// ---------------------------------------------------------------- writer

// Set once a write failed: HDF5's failed writes leave memory it can no longer free (its error paths
// leak), and its clean-up at exit would then print "HDF5: infinite loop closing library" after the
// one error line, unless its error printing is off, which it stays from then on.
static int tw_hdf5_leaked;

// After a close that failed, HDF5 holds a file it cannot close (a failed flush leaves its metadata
// cache half-flushed): its clean-up at exit would retry and crash (SIGSEGV in H5F__close_cb). The
// process then leaves without that clean-up: a handler registered now runs before HDF5's (they run
// in reverse order) and ends the process with its exit status, standard streams flushed.
static void tw_exit_skipping_hdf5(int status, void *arg) {
    (void)arg;
    fflush(NULL);
    _exit(status);
}

static void tw_hdf5_cannot_close(void) {
    static int registered;
    if (!registered && on_exit(tw_exit_skipping_hdf5, NULL) == 0) registered = 1;
}

static void tw_quiet_end(h5safe_quiet q) {
    h5safe_quiet_end(q);
    if (tw_hdf5_leaked) H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

// An empty, extensible, chunked rank-1 dataset.
static hid_t tw_create_dataset(hid_t file, const char *name, hid_t type) {
    hsize_t dim = 0, maxdim = H5S_UNLIMITED, chunk = TS_H5_CHUNK;
    hid_t space = H5Screate_simple(1, &dim, &maxdim);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), dapl = H5Pcreate(H5P_DATASET_ACCESS);
    hid_t d = -1;
    // no modification times in the object headers: the same samples give the same bytes; no chunk
    // cache: every write reaches the file in its H5Dwrite (the appends are whole chunks but the
    // last), so a full disk fails that call, not a close, and no chunk is left waiting in memory
    if (space >= 0 && dcpl >= 0 && dapl >= 0 && H5Pset_chunk(dcpl, 1, &chunk) >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0 &&
        H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT) >= 0)
        d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, dapl);
    if (dapl >= 0) H5Pclose(dapl);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return d;
}

// Append count elements of buf (mem_type) at the end of d, which holds `have` elements now. On a
// failure, HDF5's reason in e (taken before the clean-up calls, which clear HDF5's error stack).
static herr_t tw_append_dataset(hid_t d, hid_t mem_type, int64_t have, int64_t count, const void *buf, char e[256]) {
    if (count == 0) return 0;
    hsize_t size = (hsize_t)(have + count), start = (hsize_t)have, c = (hsize_t)count;
    if (H5Dset_extent(d, &size) < 0) return h5safe_error(e), -1;
    hid_t fspace = H5Dget_space(d);
    if (fspace < 0) return h5safe_error(e), -1;
    hid_t mspace = H5Screate_simple(1, &c, NULL);
    herr_t rc = mspace < 0 ? -1 : H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &c, NULL);
    if (rc >= 0) rc = H5Dwrite(d, mem_type, mspace, fspace, H5P_DEFAULT, buf);
    if (rc < 0) h5safe_error(e);
    if (mspace >= 0) H5Sclose(mspace);
    H5Sclose(fspace);
    return rc;
}

// Flush the buffered tokens and mask (w->n_tokens counts them already).
static int tw_flush_tokens(trainset_writer *w) {
    char e[256];
    int64_t have = w->n_tokens - w->buf_n;
    if (tw_append_dataset((hid_t)w->d_tokens, H5T_NATIVE_INT32, have, w->buf_n, w->buf_tokens, e) < 0 ||
        tw_append_dataset((hid_t)w->d_mask, H5T_NATIVE_UINT8, have, w->buf_n, w->buf_mask, e) < 0)
        return error_set("%s: writing tokens: %s", w->tmp_path, e);
    w->buf_n = 0;
    return 0;
}

// Flush the buffered offsets (the file has n_samples + 1 - buf_noff of them).
static int tw_flush_offsets(trainset_writer *w) {
    char e[256];
    int64_t have = w->n_samples + 1 - w->buf_noff;
    if (tw_append_dataset((hid_t)w->d_offsets, H5T_NATIVE_INT64, have, w->buf_noff, w->buf_offsets, e) < 0)
        return error_set("%s: writing offsets: %s", w->tmp_path, e);
    w->buf_noff = 0;
    return 0;
}

static herr_t tw_write_ints_attr(hid_t root, const char *name, const int64_t *v, int64_t n);
static herr_t tw_write_int_attr(hid_t root, const char *name, int64_t v) { return tw_write_ints_attr(root, name, &v, -1); }

// A fixed-length UTF-8 string (null-padded, at least one byte): stored in the attribute itself, so
// reading it never touches the file's global heap (h5safe.h; h5py reads it as bytes).
static herr_t tw_write_str_attr(hid_t root, const char *name, const char *s) {
    size_t len = strlen(s);
    hid_t type = H5Tcopy(H5T_C_S1);
    herr_t rc = type < 0 ? -1 : 0;
    if (rc == 0 && (H5Tset_size(type, len > 0 ? len : 1) < 0 || H5Tset_strpad(type, H5T_STR_NULLPAD) < 0 ||
                    H5Tset_cset(type, H5T_CSET_UTF8) < 0))
        rc = -1;
    hid_t space = rc < 0 ? -1 : H5Screate(H5S_SCALAR);
    hid_t a = space < 0 ? -1 : H5Acreate2(root, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    char *buf = xcalloc(len + 1, 1);
    memcpy(buf, s, len);
    rc = a < 0 ? -1 : H5Awrite(a, type, buf);
    free(buf);
    if (a >= 0) H5Aclose(a);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return rc;
}

static void tw_cleanup(trainset_writer *w, int remove_tmp);

static herr_t tw_write_f64_attr(hid_t root, const char *name, double v) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = space < 0 ? -1 : H5Acreate2(root, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
    if (a >= 0) H5Aclose(a);
    if (space >= 0) H5Sclose(space);
    return rc;
}

static herr_t tw_write_ints_attr(hid_t root, const char *name, const int64_t *v, int64_t n) {
    hsize_t dim = (hsize_t)(n > 0 ? n : 1);
    hid_t space = n < 0 ? H5Screate(H5S_SCALAR) : n > 0 ? H5Screate_simple(1, &dim, NULL) : H5Screate(H5S_NULL);
    hid_t a = space < 0 ? -1 : H5Acreate2(root, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : n != 0 ? H5Awrite(a, H5T_NATIVE_INT64, v) : 0;
    if (a >= 0) H5Aclose(a);
    if (space >= 0) H5Sclose(space);
    return rc;
}

int trainset_writer_attr(trainset_writer *w, const char *name, const char *str, const int64_t *ints, int64_t n_ints,
                         const double *f64) {
    char e[256];
    if (w->file <= 0) return error_set("trainset writer: attribute after close or a failed call");
    h5safe_quiet q = h5safe_quiet_begin();
    hid_t root = H5Gopen2((hid_t)w->file, "/", H5P_DEFAULT);
    herr_t rc = root < 0 ? -1 : str ? tw_write_str_attr(root, name, str)
                                : f64 ? tw_write_f64_attr(root, name, *f64)
                                      : tw_write_ints_attr(root, name, ints, n_ints);
    if (root >= 0) H5Gclose(root);
    int out = rc < 0 ? error_set("%s: writing attribute %s: %s", w->tmp_path, name, h5safe_error(e)) : 0;
    if (out < 0) tw_cleanup(w, 1);
    tw_quiet_end(q);
    return out;
}

int trainset_writer_dataset(trainset_writer *w, const char *name, int is_u8, const void *v, int64_t n) {
    char e[256];
    if (w->file <= 0) return error_set("trainset writer: dataset after close or a failed call");
    h5safe_quiet q = h5safe_quiet_begin();
    hid_t d = tw_create_dataset((hid_t)w->file, name, is_u8 ? H5T_STD_U8LE : H5T_STD_I64LE);
    if (d < 0) h5safe_error(e);
    herr_t rc = d < 0 ? -1 : tw_append_dataset(d, is_u8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_INT64, 0, n, v, e);
    if (d >= 0 && H5Dclose(d) < 0 && rc >= 0) rc = -1, h5safe_error(e);
    int out = rc < 0 ? error_set("%s: writing dataset %s: %s", w->tmp_path, name, e) : 0;
    if (out < 0) tw_cleanup(w, 1);
    tw_quiet_end(q);
    return out;
}

// Close every handle still open: 0, or -1 when a close failed (that handle stays open, its id kept).
static int tw_close_handles(trainset_writer *w) {
    int64_t *d[] = {&w->d_tokens, &w->d_mask, &w->d_offsets};
    int rc = 0;
    for (int i = 0; i < 3; i++)
        if (*d[i] > 0) {
            if (H5Dclose((hid_t)*d[i]) < 0) rc = -1;
            else *d[i] = -1;
        }
    if (rc == 0 && w->file > 0) {
        if (H5Fclose((hid_t)w->file) < 0) rc = -1;
        else w->file = -1;
    }
    return rc;
}

// Close every handle, remove the temporary file, free the buffers. Safe to call twice.
// When the file is abandoned its blocks are freed first (truncated to 0: the contents no longer
// matter), so that HDF5's closes, which flush what it still holds, find space on a full disk: a
// close that fails leaves the dataset or the file half-open inside HDF5, whose clean-up at exit
// then crashes retrying the flush.
void trainset_writer_discard(trainset_writer *w) {
    if (!w->tmp_path || w->file <= 0) return;
    int fd = open(w->tmp_path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (ftruncate(fd, 0) != 0) { /* nothing to free then */ }
        close(fd);
    }
}

static void tw_cleanup(trainset_writer *w, int remove_tmp) {
    if (remove_tmp) trainset_writer_discard(w);
    if (remove_tmp) tw_hdf5_leaked = 1;
    if (tw_close_handles(w) < 0) {
        char e[256];
        log_warn("%s: HDF5 cannot close it after the failed write (%s): the process ends without HDF5's clean-up",
                 w->tmp_path ? w->tmp_path : w->path, h5safe_error(e));
        tw_hdf5_cannot_close();
    }
    if (remove_tmp && w->tmp_path) unlink(w->tmp_path);
    free(w->path);
    free(w->tmp_path);
    free(w->buf_tokens);
    free(w->buf_mask);
    free(w->buf_offsets);
    memset(w, 0, sizeof *w);
    w->file = w->d_tokens = w->d_mask = w->d_offsets = -1;
}

int trainset_writer_open(trainset_writer *w, const char *path, int64_t vocab_size, const char *tokenizer) {
    char e[256];
    memset(w, 0, sizeof *w);
    w->file = w->d_tokens = w->d_mask = w->d_offsets = -1;
    w->path = xstrdup(path);
    size_t n = strlen(path) + 32;
    w->tmp_path = xmalloc(n);
    snprintf(w->tmp_path, n, "%s.tmp.%d", path, (int)getpid());
    w->vocab_size = vocab_size;
    w->max_id = -1;
    snprintf(w->tokenizer, sizeof w->tokenizer, "%s", tokenizer ? tokenizer : "");

    h5safe_quiet q = h5safe_quiet_begin();
    int rc = 0;
    // H5F_CLOSE_SEMI: H5Fclose fails while a dataset is open (the default, weak, would return
    // success and leave the file unwritten behind a dataset whose close failed)
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t f = fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_SEMI) >= 0
                  ? H5Fcreate(w->tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)
                  : -1;
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        rc = error_set("%s: cannot create: %s", w->tmp_path, h5safe_error(e));
        free(w->tmp_path); // nothing was created: do not unlink a file of that name
        w->tmp_path = NULL;
    } else {
        w->file = f;
        w->d_tokens = tw_create_dataset(f, "/tokens", H5T_STD_I32LE);
        w->d_mask = w->d_tokens < 0 ? -1 : tw_create_dataset(f, "/loss_mask", H5T_STD_U8LE);
        w->d_offsets = w->d_mask < 0 ? -1 : tw_create_dataset(f, "/offsets", H5T_STD_I64LE);
        if (w->d_offsets < 0) rc = error_set("%s: creating datasets: %s", w->tmp_path, h5safe_error(e));
    }
    if (rc < 0) tw_cleanup(w, 1);
    tw_quiet_end(q);
    if (rc < 0) return -1;
    w->buf_cap = TS_WRITE_BUF;
    w->buf_cap_off = TS_WRITE_BUF_OFF;
    w->buf_tokens = xmalloc((size_t)w->buf_cap * sizeof *w->buf_tokens);
    w->buf_mask = xmalloc((size_t)w->buf_cap);
    w->buf_offsets = xmalloc((size_t)w->buf_cap_off * sizeof *w->buf_offsets);
    w->buf_offsets[0] = 0; // offsets[0]
    w->buf_noff = 1;
    return 0;
}

static int tw_append(trainset_writer *w, const int32_t *tokens, const uint8_t *mask, int64_t n) {
    if (n <= 0) return error_set("%s: sample %lld is empty", w->path, (long long)w->n_samples);
    // check the whole sample before buffering any of it
    for (int64_t k = 0; k < n; k++) {
        if (tokens[k] < 0 || (w->vocab_size > 0 && tokens[k] >= w->vocab_size)) {
            if (w->vocab_size > 0)
                return error_set("%s: sample %lld: token %lld has id %d, outside [0, %lld)", w->path,
                                 (long long)w->n_samples, (long long)k, tokens[k], (long long)w->vocab_size);
            return error_set("%s: sample %lld: token %lld has negative id %d", w->path,
                             (long long)w->n_samples, (long long)k, tokens[k]);
        }
        if (mask && mask[k] > 1)
            return error_set("%s: sample %lld: loss mask %lld is %d, expected 0 or 1", w->path,
                             (long long)w->n_samples, (long long)k, mask[k]);
        if (tokens[k] > w->max_id) w->max_id = tokens[k];
    }
    for (int64_t done = 0; done < n;) {
        int64_t m = n - done < w->buf_cap - w->buf_n ? n - done : w->buf_cap - w->buf_n;
        memcpy(w->buf_tokens + w->buf_n, tokens + done, (size_t)m * sizeof *tokens);
        if (mask) memcpy(w->buf_mask + w->buf_n, mask + done, (size_t)m);
        else memset(w->buf_mask + w->buf_n, 1, (size_t)m);
        w->buf_n += m;
        w->n_tokens += m;
        done += m;
        if (w->buf_n == w->buf_cap && tw_flush_tokens(w) < 0) return -1;
    }
    w->buf_offsets[w->buf_noff++] = w->n_tokens;
    w->n_samples++;
    if (w->buf_noff == w->buf_cap_off && tw_flush_offsets(w) < 0) return -1;
    return 0;
}

int trainset_writer_append(trainset_writer *w, const int32_t *tokens, const uint8_t *mask, int64_t n) {
    if (w->file <= 0) return error_set("trainset writer: append after close or a failed call");
    h5safe_quiet q = h5safe_quiet_begin();
    int rc = tw_append(w, tokens, mask, n);
    if (rc < 0) tw_cleanup(w, 1);
    tw_quiet_end(q);
    return rc;
}

// The file's blocks up to its current end, allocated before the final flush writes the metadata
// there, so that a full disk shows here (ENOSPC, nothing half-flushed) rather than inside HDF5's
// flush, which leaves the file impossible to close. Best effort where fallocate is unsupported.
static int tw_reserve(trainset_writer *w) {
    hsize_t size = 0;
    if (H5Fget_filesize((hid_t)w->file, &size) < 0 || size == 0) return 0;
    int fd = open(w->tmp_path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return error_set("%s: cannot open: %s", w->tmp_path, strerror(errno));
    int rc = fallocate(fd, 0, 0, (off_t)size) == 0 || errno == EOPNOTSUPP || errno == ENOSYS ? 0 : -1;
    int err = errno;
    close(fd);
    return rc < 0 ? error_set("%s: writing: %s", w->tmp_path, strerror(err)) : 0;
}

static int tw_close(trainset_writer *w) {
    char e[256];
    if (tw_flush_tokens(w) < 0 || tw_flush_offsets(w) < 0) return -1;
    int64_t vocab = w->vocab_size > 0 ? w->vocab_size : w->max_id + 1;
    hid_t root = H5Gopen2((hid_t)w->file, "/", H5P_DEFAULT);
    int rc = root < 0 ? -1 : 0;
    if (rc == 0 && (tw_write_int_attr(root, "vocab_size", vocab) < 0 ||
                    tw_write_int_attr(root, "format_version", TRAINSET_FORMAT_VERSION) < 0 ||
                    tw_write_str_attr(root, "tokenizer", w->tokenizer) < 0))
        rc = -1;
    if (rc < 0) error_set("%s: writing attributes: %s", w->tmp_path, h5safe_error(e));
    if (root >= 0 && H5Gclose(root) < 0 && rc == 0) rc = error_set("%s: writing attributes: %s", w->tmp_path, h5safe_error(e));
    if (rc < 0) return -1;
    // Every dataset's chunks and every object header reach the file here, each status checked: a
    // failed flush (a full disk) fails the close, and nothing is renamed.
    if (tw_reserve(w) < 0) return -1;
    if (H5Fflush((hid_t)w->file, H5F_SCOPE_LOCAL) < 0) return error_set("%s: writing: %s", w->tmp_path, h5safe_error(e));
    if (tw_close_handles(w) < 0) return error_set("%s: closing: %s", w->tmp_path, h5safe_error(e));
    int fd = open(w->tmp_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return error_set("%s: fsync: %s", w->tmp_path, strerror(err));
    }
    if (close(fd) != 0) return error_set("%s: close: %s", w->tmp_path, strerror(errno));
    if (rename(w->tmp_path, w->path) != 0)
        return error_set("%s: cannot rename to %s: %s", w->tmp_path, w->path, strerror(errno));
    // make the rename durable too (best effort: not every file system can fsync a directory)
    char *dir = xstrdup(w->path), *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(dir);
    w->vocab_size = vocab;
    return 0;
}

int trainset_writer_close(trainset_writer *w) {
    if (w->file <= 0) return error_set("trainset writer: close after close or a failed call");
    h5safe_quiet q = h5safe_quiet_begin();
    int rc = tw_close(w);
    int64_t n_samples = w->n_samples, n_tokens = w->n_tokens, vocab = w->vocab_size;
    tw_cleanup(w, rc < 0);
    tw_quiet_end(q);
    if (rc == 0) { // the summary stays readable
        w->n_samples = n_samples;
        w->n_tokens = n_tokens;
        w->vocab_size = vocab;
    }
    return rc;
}

void trainset_writer_abort(trainset_writer *w) {
    h5safe_quiet q = h5safe_quiet_begin();
    tw_cleanup(w, 1);
    tw_quiet_end(q);
}
