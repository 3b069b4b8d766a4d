// batchplan.h: which samples go into which packed batch, derived from the seed alone (SPEC §7), so
// every rank computes the same plan without talking.
//
// The usable samples of a training set are split into a held-out part (the last n_heldout usable
// samples, in file order) and the training part. Training batches of epoch e: the training samples
// are shuffled with the Philox stream (seed, e), cut into length buckets of bucket_size consecutive
// samples of the shuffled order, each bucket sorted by length and packed greedily into batches of at
// most max_tokens tokens, then the batches of the epoch are shuffled again (seed, e). Held-out
// batches: packed in file order, never shuffled. Batch i of the whole run (epoch-major) is
// batchplan_train_batch(i): epochs roll over transparently.
#pragma once
#include <stdint.h>

typedef struct {
    int64_t n;          // samples in the batch
    int64_t tokens;     // their total length
    int64_t *samples;   // [n] usable-sample indices (into the trainset's usable list), in packing order
} batch_ref;

typedef struct {
    uint64_t seed;
    int64_t max_tokens, bucket_size;
    int64_t n_samples;        // usable samples
    int64_t *lengths;         // [n_samples] copy
    int64_t n_train, n_heldout;
    // The current epoch's training batches, rebuilt when a batch of another epoch is asked for.
    // Their count differs between epochs (other buckets pack differently): see batchplan_epoch_size.
    int64_t epoch;            // the epoch held in batches (-1: none yet)
    int64_t n_batches;        // training batches in that epoch
    batch_ref *batches;       // [n_train] capacity; [n_batches] used, in the epoch's shuffled order
    int64_t *storage;         // [n_train] the samples of all batches (each batch a contiguous run)
    int64_t *scratch;         // [n_train] for counting another epoch's batches without touching these
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

// batchplan_build: -1 with error_set when a sample is longer than max_tokens or shorter than 1 token
// (naming it and its length), when max_tokens < 1, or when n_heldout is negative or >= n_samples
// (no training sample would be left). bucket_size <= 0: one bucket holding the whole epoch.
int batchplan_build(batchplan *p, const int64_t *lengths, int64_t n_samples, int64_t n_heldout, int64_t max_tokens,
                    int64_t bucket_size, uint64_t seed);
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
