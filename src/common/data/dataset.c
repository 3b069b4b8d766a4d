// dataset.c: the training data, one or several training sets as one sample space (see dataset.h).
#include "common/data/dataset.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/check.h"
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

int dataset_feature_sets(const config *cfg, const featreader *fr, batchplan_set *out) {
    int n = featreader_n_sets(fr), named = config_data_count(cfg);
    if (named < 0) return -1;
    if (n > CONFIG_MAX_SETS) return error_set("data.features %s: %d training sets, more than %d", cfg->data_features, n, CONFIG_MAX_SETS);
    if (named > 0 && named != n)
        return error_set("data.features %s was dumped from %d training set(s), the configuration names %d (%s); "
                         "name the same sets in the same order, or none to use the weights recorded at dump time",
                         cfg->data_features, n, named, cfg->data_sets.n > 0 ? "data.sets" : "data.path");
    for (int i = 0; i < n; i++) {
        const char *dumped;
        double w;
        out[i].n = featreader_set(fr, i, &w, &dumped);
        int64_t nh; // the set's recorded split, when the dump had one (else data.heldout_samples applies)
        const int64_t *h = featreader_set_heldout(fr, i, &nh);
        out[i].heldout = nh >= 0 ? h : NULL;
        out[i].n_heldout = nh >= 0 ? nh : 0;
        out[i].weight = w;
        if (named > 0) {
            const char *p = config_data_path(cfg, i, &out[i].weight);
            if (dumped[0] && strcmp(p, dumped) != 0)
                log_warn("data.features: set %d is %s in the configuration, %s when the features were dumped; "
                         "using the configuration's weight %g", i, p, dumped, out[i].weight);
        }
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
