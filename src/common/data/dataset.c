// dataset.c: the training data, one or several training sets as one sample space (see dataset.h).
#include "common/data/dataset.h"
#include "common/core/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/core/log.h"

int dataset_open_sets(dataset *d, int n, const char *const *paths, const double *weights, int64_t min_loss_tokens) {
    memset(d, 0, sizeof *d);
    if (n < 1) return error_set("no training data: set data.path (one training set) or data.sets (several)");
    d->sets = xcalloc((size_t)n, sizeof *d->sets);
    d->weights = xmalloc((size_t)n * sizeof *d->weights);
    d->first = xcalloc((size_t)n + 1, sizeof *d->first);
    struct stat *st = xcalloc((size_t)n, sizeof *st);
    int rc = 0, tok_from = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        double w = weights ? weights[i] : 1;
        if (!(w > 0) || !isfinite(w)) {
            rc = error_set("training set %s has weight %g; a weight must be a finite number > 0", paths[i], w);
            break;
        }
        // the same file under two names would count its samples twice over
        if (stat(paths[i], &st[i]) == 0)
            for (int j = 0; j < i && rc == 0; j++)
                if (st[j].st_dev == st[i].st_dev && st[j].st_ino == st[i].st_ino)
                    rc = error_set("training sets %s and %s are the same file", paths[j], paths[i]);
        if (rc || trainset_open(&d->sets[i], paths[i], min_loss_tokens)) {
            rc = -1;
            break;
        }
        d->n_sets = i + 1; // opened so far (for dataset_close)
        const trainset *t = &d->sets[i], *t0 = &d->sets[0];
        if (i > 0 && t->vocab_size != t0->vocab_size)
            rc = error_set("training sets %s and %s have different vocab_size (%lld and %lld)", t0->path, t->path,
                           (long long)t0->vocab_size, (long long)t->vocab_size);
        else if (i > 0 && d->tokenizer[0] && t->tokenizer[0] && strcmp(d->tokenizer, t->tokenizer) != 0)
            rc = error_set("training sets %s and %s were made with different tokenizers (\"%s\" and \"%s\")",
                           d->sets[tok_from].path, t->path, d->tokenizer, t->tokenizer);
        else if (t->n == 0) {
            char why[512];
            int64_t rejected = t->rejected_offsets + t->rejected_ids + t->rejected_short;
            rc = error_set("training set %s has no usable samples (%lld samples, %lld rejected%s%s)", t->path,
                           (long long)t->n_raw, (long long)rejected, rejected > 0 ? ": " : "",
                           trainset_rejected_str(t, min_loss_tokens, why, sizeof why));
        }
        if (rc) break;
        d->weights[i] = w;
        d->first[i + 1] = d->first[i] + t->n;
        if (!d->tokenizer[0]) {
            snprintf(d->tokenizer, sizeof d->tokenizer, "%s", t->tokenizer);
            tok_from = i;
        }
    }
    free(st);
    if (rc) {
        dataset_close(d);
        return -1;
    }
    d->n = d->first[n];
    d->vocab_size = d->sets[0].vocab_size;
    return 0;
}

int dataset_open(dataset *d, const config *cfg, int64_t min_loss_tokens) {
    memset(d, 0, sizeof *d);
    int n = config_data_count(cfg);
    if (n < 0) return -1;
    const char *paths[CONFIG_MAX_SETS];
    double weights[CONFIG_MAX_SETS];
    for (int i = 0; i < n; i++) paths[i] = config_data_path(cfg, i, &weights[i]);
    return dataset_open_sets(d, n, paths, weights, min_loss_tokens);
}

void dataset_close(dataset *d) {
    for (int i = 0; i < d->n_sets; i++) trainset_close(&d->sets[i]);
    free(d->sets);
    free(d->weights);
    free(d->first);
    memset(d, 0, sizeof *d);
}

int dataset_set_of(const dataset *d, int64_t i) {
    // the last set starting at or before i (so a set without samples is never the answer)
    int lo = 0, hi = d->n_sets - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (d->first[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int64_t dataset_len(const dataset *d, int64_t i) {
    int s = dataset_set_of(d, i);
    return trainset_len(&d->sets[s], i - d->first[s]);
}

int dataset_read(dataset *d, int64_t i, int32_t *tokens, uint8_t *mask) {
    if (i < 0 || i >= d->n) return error_set("training data: sample %lld out of range [0, %lld)", (long long)i, (long long)d->n);
    int s = dataset_set_of(d, i);
    return trainset_read(&d->sets[s], i - d->first[s], tokens, mask);
}

const char *dataset_path(const dataset *d, int i) { return d->sets[i].path; }

void dataset_plan_sets(const dataset *d, batchplan_set *out) {
    for (int i = 0; i < d->n_sets; i++) { // a set with /heldout brings its own held-out split
        const trainset *t = &d->sets[i];
        out[i] = (batchplan_set){d->first[i + 1] - d->first[i], d->weights[i], t->n_heldout >= 0 ? t->heldout_usable : NULL,
                                 t->n_heldout >= 0 ? t->n_heldout_usable : 0};
    }
}

// The CRC32C of n sample lengths as little-endian int64 (identity.h's data_lengths_crc).
static uint32_t lengths_crc(uint32_t c, int64_t len) {
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)((uint64_t)len >> (8 * b));
    return crc32c_update(c, le, 8);
}

// Set i named by the configuration (path p) against set i the features were dumped from (path
// dumped, samples [first, first + n) of the features): the same file, or a file holding the same
// usable samples (count and lengths: a copy or a move); another order of the dumped sets, or another
// set, refused naming both.
static int dataset_feature_set_check(const config *cfg, const featreader *fr, int i, const char *p, const char *dumped,
                                     int64_t first, int64_t n) {
    struct stat a, b;
    if (!dumped[0] || strcmp(p, dumped) == 0) return 0;
    if (stat(p, &a) == 0 && stat(dumped, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return 0;
    for (int j = 0; j < featreader_n_sets(fr); j++) {
        const char *other;
        featreader_set(fr, j, NULL, &other);
        if (j != i && strcmp(p, other) == 0)
            return error_set("%s: set %d is %s, but data.features %s was dumped with it as set %d (set %d was %s): "
                             "name the sets in the order they were dumped (the weights apply by position)",
                             cfg->data_sets.n > 0 ? "data.sets" : "data.path", i, p, cfg->data_features, j, i, dumped);
    }
    trainset ts;
    if (trainset_open(&ts, p, cfg->min_loss_tokens))
        return error_set("%s: set %d is %s, but data.features %s was dumped from %s (and %s cannot be read to compare): "
                         "name the same sets in the same order, or none", cfg->data_sets.n > 0 ? "data.sets" : "data.path",
                         i, p, cfg->data_features, dumped, p);
    uint32_t mine = 0, theirs = 0;
    for (int64_t k = 0; k < ts.n; k++) mine = lengths_crc(mine, trainset_len(&ts, k));
    for (int64_t k = 0; k < n; k++) theirs = lengths_crc(theirs, featreader_len(fr, first + k));
    int64_t have = ts.n;
    trainset_close(&ts);
    if (have != n || mine != theirs)
        return error_set("%s: set %d is %s (%lld usable samples, lengths CRC32C %08x), but data.features %s was dumped from "
                         "%s (%lld samples, %08x): name the sets the features were dumped from, in that order",
                         cfg->data_sets.n > 0 ? "data.sets" : "data.path", i, p, (long long)have, mine,
                         cfg->data_features, dumped, (long long)n, theirs);
    log_info("data.features: set %d is %s, which holds the samples dumped from %s", i, p, dumped);
    return 0;
}

int dataset_feature_sets(const config *cfg, const featreader *fr, batchplan_set *out) {
    int n = featreader_n_sets(fr), named = config_data_count(cfg);
    if (named < 0) return -1;
    if (n > CONFIG_MAX_SETS) return error_set("data.features %s: %d training sets, more than %d", cfg->data_features, n, CONFIG_MAX_SETS);
    if (named > 0 && named != n)
        return error_set("data.features %s was dumped from %d training set(s), the configuration names %d (%s); "
                         "name the same sets in the same order, or none to use the weights recorded at dump time",
                         cfg->data_features, n, named, cfg->data_sets.n > 0 ? "data.sets" : "data.path");
    int64_t first = 0; // the set's first sample in the features
    for (int i = 0; i < n; i++) {
        const char *dumped;
        double w;
        out[i].n = featreader_set(fr, i, &w, &dumped);
        int64_t nh; // the set's recorded split, when the dump had one (else data.heldout_samples applies)
        const int64_t *h = featreader_set_heldout(fr, i, &nh);
        out[i].heldout = nh >= 0 ? h : NULL;
        out[i].n_heldout = nh >= 0 ? nh : 0;
        out[i].weight = w;
        if (named > 0 && dataset_feature_set_check(cfg, fr, i, config_data_path(cfg, i, &out[i].weight), dumped, first, out[i].n))
            return -1;
        first += out[i].n;
    }
    return n;
}

int dataset_preflight(const config *cfg) {
    int n = config_data_count(cfg);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        const char *p = config_data_path(cfg, i, NULL);
        if (access(p, R_OK) != 0) return error_set("training set %s: cannot open: %s", p, strerror(errno));
    }
    return 0;
}

// data.path and data.sets are one or the other.
static int data_config_check(const config *c) { return config_data_count(c) < 0 ? -1 : 0; }

// Settings: the keys of the training sets and their batches (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key data_keys[] = {
    {"data.path", CFG_STRING, CONFIG_F(data_path), "", "HDF5 training set (dflash_tool convert-jsonl makes one)", NULL, CONFIG_NOLIM},
    {"data.sets", CFG_DATA_SETS, CONFIG_F(data_sets), "", "several training sets mixed by weight, instead of data.path: [{\"path\": \"a.h5\", \"weight\": 2}, ...] in a file, a.h5:2,b.h5:0.5 on the command line (weight 1 when left out; > 0); each epoch draws round(weight x its training samples) samples of each set", NULL, CONFIG_NOLIM},
    {"data.features", CFG_STRING, CONFIG_F(data_features), "", "offline feature directory (dump-features); set: students train from it with no teacher ranks", NULL, CONFIG_NOLIM},
    {"data.max_tokens_per_batch", CFG_INT, CONFIG_F(max_tokens_per_batch), "2048", "tokens per packed batch", NULL, 1, 1073741824},
    {"data.min_loss_tokens", CFG_INT, CONFIG_F(min_loss_tokens), "2", "a sample is used when it has a valid anchor (two consecutive loss tokens) and at least this many loss tokens (2: every reply with an anchor; before 2026-12 the rule was 2 x drafter.block_size)", NULL, 2, 1e12},
    {"data.heldout_samples", CFG_INT, CONFIG_F(heldout_samples), "16", "samples held out for evaluation (the last usable ones) from the sets that record no split of their own (/heldout: then exactly those)", NULL, 0, 1e12},
    {"data.bucket_size", CFG_INT, CONFIG_F(bucket_size), "256", "samples per length bucket when packing", NULL, 1, 1e12},
};
const config_key_set data_settings = CONFIG_KEY_SET(data_keys, data_config_check);
