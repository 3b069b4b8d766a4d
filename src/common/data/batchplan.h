// batchplan.h: which samples go into which packed batch, derived from the seed alone (SPEC §7), so
// every rank computes the same plan without talking.
//
// The samples are the usable samples of one or several training sets, concatenated (set 0's
// first; see dataset.h), each set with a weight. The held-out part: a set that records its
// own split (batchplan_set.heldout: the set's /heldout, chosen when it was made) holds out exactly
// those samples; the other sets share n_heldout samples in proportion to their sizes (largest
// remainder, ties to the lower set): the last h_i usable samples of set i, in file order. The rest
// of each set is its training part. Training
// batches of epoch e: set i contributes c_i = round(weight_i × n_train_i) samples (n_train_i: its
// training samples; round half away from zero): each of its training samples c_i / n_train_i times
// (integer division), plus c_i mod n_train_i of them drawn without repeats from the Philox stream
// (seed, e, set), so weight 1 = each sample once, 2 = each twice, 0.5 = a different random half
// every epoch, 1.5 = each once plus a random half. Those samples are shuffled with the Philox
// stream (seed, e), cut into length buckets of bucket_size consecutive samples of the shuffled
// order, each bucket sorted by length (ties by sample index) and packed greedily into batches of at
// most max_tokens tokens, then the batches of the epoch are shuffled again (seed, e). With one set of weight 1 this is exactly a plain shuffle of the training samples.
// Held-out batches: packed in sample order, never shuffled, each held-out sample once whatever the
// weights. Batch i of the whole run (epoch-major) is batchplan_train_batch(i): epochs roll over
// transparently.
#pragma once
#include <stdint.h>

typedef struct {
    int64_t n;          // samples in the batch
    int64_t tokens;     // their total length
    int64_t *samples;   // [n] sample indices (into the sample space of the sets), in packing order; a
                        // sample drawn twice in an epoch may appear twice in one batch
} batch_ref;

// One training set of the sample space, as given to batchplan_build.
typedef struct {
    int64_t n;          // its usable samples (the next n of the sample space)
    double weight;      // > 0 and finite
    // The set's own held-out split (its /heldout, trainset.h), or NULL for the rule above:
    // heldout[n_heldout] are indices among its n samples, increasing.
    const int64_t *heldout;
    int64_t n_heldout;
} batchplan_set;

// What the plan made of a set.
typedef struct {
    int64_t first, n;           // its samples: [first, first + n) of the sample space
    int64_t n_train, n_heldout; // its training and held-out samples
    int64_t *train;             // [n_train] its training samples (sample-space indices, increasing)
    int recorded;               // its held-out samples are the set's own (batchplan_set.heldout)
    int64_t per_epoch;          // training samples drawn from it per epoch: round(weight * n_train)
    double weight;
} batchplan_set_info;

typedef struct {
    uint64_t seed;
    int64_t max_tokens, bucket_size;
    int64_t n_samples;        // usable samples
    int64_t *lengths;         // [n_samples] copy
    int64_t n_train, n_heldout; // distinct training samples, held-out samples (all sets)
    int n_sets;
    batchplan_set_info *sets; // [n_sets]
    int64_t n_epoch;          // training samples drawn per epoch (with repeats): the sum of per_epoch
    int64_t *pick;            // [largest n_train of a set] scratch for the random part of a set
    int64_t *train_storage;   // [n_train] the sets' training samples (batchplan_set_info.train)
    // The current epoch's training batches, rebuilt when a batch of another epoch is asked for.
    // Their count differs between epochs (other buckets pack differently): see batchplan_epoch_size.
    int64_t epoch;            // the epoch held in batches (-1: none yet)
    int64_t n_batches;        // training batches in that epoch
    batch_ref *batches;       // [n_epoch] capacity; [n_batches] used, in the epoch's shuffled order
    int64_t *storage;         // [n_epoch] the samples of all batches (each batch a contiguous run)
    int64_t *scratch;         // [n_epoch] for counting another epoch's batches without touching these
    // Batch counts of the epochs met so far, so batch i of the run maps to its epoch without
    // repacking every earlier epoch on each call: epoch_end[e] = batches in epochs 0..e together.
    int64_t n_epochs_known;
    int64_t cap_epochs_known;
    int64_t *epoch_end;
    // held-out batches
    int64_t n_heldout_batches;
    batch_ref *heldout;
    int64_t *heldout_storage;
} batchplan;

// batchplan_build: sets[n_sets] partition the n_samples samples (sets NULL, n_sets 0: one set of
// weight 1). -1 with error_set when a sample is longer than max_tokens or shorter than 1 token
// (naming it and its length), when max_tokens < 1, when n_heldout is negative or >= the samples of the
// sets without a recorded split (no training sample would be left), when a recorded split is not
// increasing indices of its set, when the sets' sizes do not add up to n_samples, a weight is not
// finite and > 0, the held-out share of a set takes all its samples, or a set's weight draws no
// sample per epoch (naming the set by its index). bucket_size <= 0: one bucket holding the whole epoch.
// n_heldout = BATCHPLAN_ALL_HELDOUT: every sample is held out (an evaluation of the whole data,
// --mode eval), except in a set that records its split, where its held-out samples are: the
// held-out batches cover each such sample once, and there are no training batches.
#define BATCHPLAN_ALL_HELDOUT (-1)
int batchplan_build(batchplan *p, const int64_t *lengths, int64_t n_samples, const batchplan_set *sets, int n_sets,
                    int64_t n_heldout, int64_t max_tokens, int64_t bucket_size, uint64_t seed);
void batchplan_free(batchplan *p);
// batchplan_epoch_size: training batches in epoch e >= 0 (packing may differ slightly between
// epochs). Does not change the current epoch, so pointers from batchplan_train_batch stay valid.
int64_t batchplan_epoch_size(batchplan *p, int64_t epoch);
// batchplan_train_batch: the i-th training batch of the run (0-based, epoch-major); *epoch gets its
// epoch (epoch may be NULL). The returned pointer is valid until a batch of another epoch is asked
// for; NULL when i < 0.
const batch_ref *batchplan_train_batch(batchplan *p, int64_t i, int64_t *epoch);
// batchplan_heldout_batch: held-out batch i (0 <= i < n_heldout_batches; NULL otherwise).
const batch_ref *batchplan_heldout_batch(const batchplan *p, int64_t i);
