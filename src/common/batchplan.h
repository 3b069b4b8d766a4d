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
    // the current epoch's batches (rebuilt when another epoch is asked for)
    int64_t epoch;
    int64_t n_batches;        // training batches per epoch (the same every epoch? no: see batchplan_epoch_size)
    batch_ref *batches;
    int64_t *storage;
    // held-out batches
    int64_t n_heldout_batches;
    batch_ref *heldout;
    int64_t *heldout_storage;
} batchplan;

// batchplan_build: -1 with error_set when a sample is longer than max_tokens (naming it) or when
// n_heldout >= n_samples.
int batchplan_build(batchplan *p, const int64_t *lengths, int64_t n_samples, int64_t n_heldout, int64_t max_tokens,
                    int64_t bucket_size, uint64_t seed);
void batchplan_free(batchplan *p);
// batchplan_epoch_size: training batches in epoch e (packing may differ slightly between epochs).
int64_t batchplan_epoch_size(batchplan *p, int64_t epoch);
// batchplan_train_batch: the i-th training batch of the run (0-based, epoch-major); *epoch gets its
// epoch. The returned pointer is valid until a batch of another epoch is asked for.
const batch_ref *batchplan_train_batch(batchplan *p, int64_t i, int64_t *epoch);
// batchplan_heldout_batch: held-out batch i (0 <= i < n_heldout_batches).
const batch_ref *batchplan_heldout_batch(const batchplan *p, int64_t i);
