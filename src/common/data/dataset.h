// dataset.h: the training data: one or several training sets (trainset.h), opened together, and
// sample i of the mix.
//
// The configuration names the sets: data.path (one set of weight 1) or data.sets (several, each with
// a weight; docs/config.md). Their usable samples are concatenated into one sample space, set 0's
// first: set i holds samples [first[i], first[i + 1]). What the weights do (samples drawn per epoch)
// and how the held-out samples are spread over the sets is the batch plan's business (batchplan.h);
// dataset_plan_sets gives it the sets. Every set must have the same vocab_size, and the same
// tokenizer where both files name one; a file given twice (under two names) is an error, and so is
// a set without usable samples ("training set X has no usable samples (N samples, M rejected: ...)").
#pragma once
#include <stdint.h>

#include "common/core/config.h"
#include "common/data/batchplan.h"
#include "common/data/featreader.h"
#include "common/data/trainset.h"

typedef struct {
    int n_sets;
    trainset *sets;         // [n_sets]
    double *weights;        // [n_sets]
    int64_t *first;         // [n_sets + 1]: set i's usable samples are [first[i], first[i + 1])
    int64_t n;              // usable samples of the mix (first[n_sets])
    int64_t vocab_size;     // the sets' (equal) vocab_size
    char tokenizer[256];    // the first tokenizer a set names ("" when none does)
} dataset;

// dataset_open: the sets of cfg (data.path or data.sets), each through trainset_open with
// min_loss_tokens; -1 with error_set naming the file (or both files) on any problem, and when the
// configuration names no set or both keys.
int dataset_open(dataset *d, const config *cfg, int64_t min_loss_tokens);
// dataset_open_sets: the same from n paths and weights (weights NULL: all 1).
int dataset_open_sets(dataset *d, int n, const char *const *paths, const double *weights, int64_t min_loss_tokens);
void dataset_close(dataset *d);
// dataset_set_of: the set holding sample i (0 <= i < d->n).
int dataset_set_of(const dataset *d, int64_t i);
// dataset_len: tokens of sample i.
int64_t dataset_len(const dataset *d, int64_t i);
// dataset_read: sample i into tokens[len] and mask[len] (either may be NULL); -1 on I/O error.
int dataset_read(dataset *d, int64_t i, int32_t *tokens, uint8_t *mask);
// dataset_path: the file of set i.
const char *dataset_path(const dataset *d, int i);
// dataset_plan_sets: the sets for batchplan_build (sizes, weights, and a set's recorded held-out
// split, /heldout, where it has one), into out[d->n_sets].
void dataset_plan_sets(const dataset *d, batchplan_set *out);

// dataset_feature_sets: the sets of an offline feature directory for batchplan_build, into
// out[CONFIG_MAX_SETS]; returns their count or -1 with error_set. Their sizes come from the
// directory's index (the mix it was dumped from); their weights from the configuration when it
// names the training data (data.path or data.sets: the same number of sets, in the same order),
// else the weights the index recorded at dump time.
int dataset_feature_sets(const config *cfg, const featreader *fr, batchplan_set *out);

// dataset_preflight: every set of cfg exists and is readable (no HDF5 opened): one cheap check
// for one rank to make before every rank opens the sets, so a missing file is one error line.
int dataset_preflight(const config *cfg);
