// batchplan.c: the batch plan of SPEC §7 (see batchplan.h).
//
// Everything is a pure function of (lengths, n_heldout, max_tokens, bucket_size, seed, epoch): the
// randomness comes from Philox streams keyed by (seed, epoch), one stream id for the sample shuffle
// and one for the batch shuffle, and ties in the length sort are broken by sample index, so every
// rank (and a resumed run) packs the same batches in the same order, whatever order epochs are
// asked for in. Memory is O(samples): one epoch's batches are held at a time, the others are
// repacked on demand (a sort per bucket, cheap next to a training step).
#include "common/batchplan.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/error.h"
#include "common/rng.h"

#define PLAN_STREAM_SAMPLES 0xB0u // Philox stream id of the per-epoch sample shuffle
#define PLAN_STREAM_BATCHES 0xB1u // Philox stream id of the per-epoch batch shuffle

// A sample and its length, for sorting a bucket by length.
typedef struct {
    int64_t len, sample;
} plan_item;

// By length, then by sample index: a total order, so the result does not depend on qsort's
// handling of equal keys (it is not stable).
static int plan_item_cmp(const void *a, const void *b) {
    const plan_item *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->sample > y->sample) - (x->sample < y->sample);
}

// Greedy packing of order[0..n) (already in packing order) into runs of at most max_tokens tokens.
// Writes the batches to out[nb..] when out is given; returns the new batch count.
static int64_t plan_pack_run(const batchplan *p, int64_t *order, int64_t n, batch_ref *out, int64_t nb) {
    int64_t start = 0, tokens = 0;
    for (int64_t j = 0; j <= n; j++) {
        int64_t len = j < n ? p->lengths[order[j]] : 0;
        if (j == n || (j > start && tokens + len > p->max_tokens)) { // close the batch [start, j)
            if (j > start) {
                if (out) out[nb] = (batch_ref){.n = j - start, .tokens = tokens, .samples = order + start};
                nb++;
            }
            start = j;
            tokens = 0;
        }
        tokens += len;
    }
    return nb;
}

// Pack epoch e's training batches. order[n_train] receives the samples, each batch a contiguous
// run of it; out (NULL: only count them) receives the batches in the epoch's final, shuffled order.
// Returns the number of batches.
static int64_t plan_pack_epoch(const batchplan *p, int64_t epoch, int64_t *order, batch_ref *out) {
    int64_t n = p->n_train;
    for (int64_t i = 0; i < n; i++) order[i] = i; // training samples are 0 .. n_train-1
    rng r;
    rng_init(&r, p->seed, (uint64_t)epoch, PLAN_STREAM_SAMPLES);
    rng_shuffle(&r, order, n);

    // Buckets of consecutive shuffled samples: sorting within a bucket puts samples of similar
    // length together (less padding waste in a packed batch) while the shuffle keeps the epoch random.
    int64_t bucket = p->bucket_size > 0 && p->bucket_size < n ? p->bucket_size : n;
    plan_item *items = xmalloc((size_t)bucket * sizeof *items);
    int64_t nb = 0;
    for (int64_t b0 = 0; b0 < n; b0 += bucket) {
        int64_t m = n - b0 < bucket ? n - b0 : bucket;
        for (int64_t j = 0; j < m; j++) items[j] = (plan_item){p->lengths[order[b0 + j]], order[b0 + j]};
        qsort(items, (size_t)m, sizeof *items, plan_item_cmp);
        for (int64_t j = 0; j < m; j++) order[b0 + j] = items[j].sample;
        nb = plan_pack_run(p, order + b0, m, out, nb);
    }
    free(items);

    // Shuffle the batches, else an epoch would run short batches first within every bucket.
    // Fisher-Yates exactly as rng_shuffle, on the batch records instead of int64 values.
    if (out) {
        rng_init(&r, p->seed, (uint64_t)epoch, PLAN_STREAM_BATCHES);
        for (int64_t i = nb - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
            batch_ref t = out[i];
            out[i] = out[j];
            out[j] = t;
        }
    }
    return nb;
}

// Record the batch count of epoch e when it is the next epoch not yet known.
static void plan_note_epoch(batchplan *p, int64_t e, int64_t count) {
    if (e != p->n_epochs_known) return;
    if (p->n_epochs_known == p->cap_epochs_known) {
        p->cap_epochs_known = p->cap_epochs_known ? 2 * p->cap_epochs_known : 16;
        p->epoch_end = xrealloc(p->epoch_end, (size_t)p->cap_epochs_known * sizeof *p->epoch_end);
    }
    p->epoch_end[e] = (e > 0 ? p->epoch_end[e - 1] : 0) + count;
    p->n_epochs_known++;
}

int batchplan_build(batchplan *p, const int64_t *lengths, int64_t n_samples, int64_t n_heldout, int64_t max_tokens,
                    int64_t bucket_size, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->epoch = -1;
    if (max_tokens < 1)
        return error_set("batch plan: max_tokens_per_batch = %lld, expected at least 1", (long long)max_tokens);
    if (n_heldout < 0 || n_heldout >= n_samples)
        return error_set("batch plan: %lld held-out samples of %lld usable ones leave none to train on "
                         "(data.heldout_samples must be less than the usable samples)",
                         (long long)n_heldout, (long long)n_samples);
    for (int64_t i = 0; i < n_samples; i++) {
        if (lengths[i] > max_tokens)
            return error_set("batch plan: sample %lld has %lld tokens, more than max_tokens_per_batch = %lld",
                             (long long)i, (long long)lengths[i], (long long)max_tokens);
        if (lengths[i] < 1)
            return error_set("batch plan: sample %lld has %lld tokens, expected at least 1", (long long)i,
                             (long long)lengths[i]);
    }
    p->seed = seed;
    p->max_tokens = max_tokens;
    p->bucket_size = bucket_size;
    p->n_samples = n_samples;
    p->n_heldout = n_heldout;
    p->n_train = n_samples - n_heldout;
    p->lengths = xmalloc((size_t)n_samples * sizeof *p->lengths);
    memcpy(p->lengths, lengths, (size_t)n_samples * sizeof *p->lengths);
    p->batches = xmalloc((size_t)p->n_train * sizeof *p->batches); // a batch holds >= 1 sample
    p->storage = xmalloc((size_t)p->n_train * sizeof *p->storage);
    p->scratch = xmalloc((size_t)p->n_train * sizeof *p->scratch);

    // Held-out batches: the last n_heldout samples in file order, packed as they come, so an
    // evaluation always sees the same batches whatever the seed.
    size_t nh = (size_t)(n_heldout > 0 ? n_heldout : 1);
    p->heldout = xmalloc(nh * sizeof *p->heldout);
    p->heldout_storage = xmalloc(nh * sizeof *p->heldout_storage);
    for (int64_t k = 0; k < n_heldout; k++) p->heldout_storage[k] = p->n_train + k;
    p->n_heldout_batches = plan_pack_run(p, p->heldout_storage, n_heldout, p->heldout, 0);
    return 0;
}

void batchplan_free(batchplan *p) {
    free(p->lengths);
    free(p->batches);
    free(p->storage);
    free(p->scratch);
    free(p->epoch_end);
    free(p->heldout);
    free(p->heldout_storage);
    memset(p, 0, sizeof *p);
    p->epoch = -1;
}

int64_t batchplan_epoch_size(batchplan *p, int64_t epoch) {
    if (epoch < 0 || p->n_train == 0) return 0;
    int64_t count;
    if (epoch == p->epoch) count = p->n_batches;
    else if (epoch < p->n_epochs_known) count = p->epoch_end[epoch] - (epoch > 0 ? p->epoch_end[epoch - 1] : 0);
    else count = plan_pack_epoch(p, epoch, p->scratch, NULL); // scratch: the current epoch stays intact
    plan_note_epoch(p, epoch, count);
    return count;
}

const batch_ref *batchplan_train_batch(batchplan *p, int64_t i, int64_t *epoch) {
    if (i < 0 || p->n_train == 0) return NULL;
    // Learn the batch counts of epochs in order until one ends past i (every epoch has >= 1 batch).
    while (p->n_epochs_known == 0 || p->epoch_end[p->n_epochs_known - 1] <= i)
        batchplan_epoch_size(p, p->n_epochs_known);
    // The first epoch whose end is past i.
    int64_t lo = 0, hi = p->n_epochs_known - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (p->epoch_end[mid] > i) hi = mid;
        else lo = mid + 1;
    }
    int64_t e = lo;
    if (p->epoch != e) {
        p->n_batches = plan_pack_epoch(p, e, p->storage, p->batches);
        p->epoch = e;
    }
    if (epoch) *epoch = e;
    return &p->batches[i - (e > 0 ? p->epoch_end[e - 1] : 0)];
}

const batch_ref *batchplan_heldout_batch(const batchplan *p, int64_t i) {
    if (i < 0 || i >= p->n_heldout_batches) return NULL;
    return &p->heldout[i];
}
