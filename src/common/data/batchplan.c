// batchplan.c: the batch plan of SPEC §7 (see batchplan.h).
//
// Everything is a pure function of (lengths, sets, n_heldout, max_tokens, bucket_size, seed, epoch):
// the randomness comes from Philox streams keyed by (seed, epoch), one stream id for each set's
// random part, one for the sample shuffle and one for the batch shuffle, and ties in the length
// sort are broken by sample index, so every
// rank (and a resumed run) packs the same batches in the same order, whatever order epochs are
// asked for in. Memory is O(samples): one epoch's batches are held at a time, the others are
// repacked on demand (a sort per bucket, cheap next to a training step).
#include "common/data/batchplan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/rng.h"

#define PLAN_STREAM_SAMPLES 0xB0u // Philox stream id of the per-epoch sample shuffle
#define PLAN_STREAM_BATCHES 0xB1u // Philox stream id of the per-epoch batch shuffle
#define PLAN_STREAM_PICK 0xB20000u // | set: Philox stream id of a set's random part of an epoch
#define BATCHPLAN_MAX_DRAWS (1ll << 28) // samples one epoch draws (data.sets weights x samples): its plan ~6 GiB

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

// The training samples epoch e draws, into order[n_epoch], before the shuffle: set by set, each
// training sample of set i per_epoch / n_train times, then the remainder drawn without repeats
// (a partial Fisher-Yates over the set's training samples, stream (seed, e, PICK | i)).
static void plan_draw_epoch(const batchplan *p, int64_t epoch, int64_t *order) {
    int64_t n = 0;
    for (int i = 0; i < p->n_sets; i++) {
        const batchplan_set_info *s = &p->sets[i];
        int64_t whole = s->per_epoch / s->n_train, rest = s->per_epoch % s->n_train;
        for (int64_t c = 0; c < whole; c++)
            for (int64_t j = 0; j < s->n_train; j++) order[n++] = s->train[j];
        if (rest == 0) continue;
        int64_t *pick = p->pick;
        for (int64_t j = 0; j < s->n_train; j++) pick[j] = s->train[j];
        rng r;
        rng_init(&r, p->seed, (uint64_t)epoch, PLAN_STREAM_PICK | (uint32_t)i);
        for (int64_t j = 0; j < rest; j++) {
            int64_t k = j + (int64_t)rng_below(&r, (uint64_t)(s->n_train - j));
            int64_t t = pick[j];
            pick[j] = pick[k];
            pick[k] = t;
            order[n++] = pick[j];
        }
    }
}

// Pack epoch e's training batches. order[n_epoch] receives the samples, each batch a contiguous
// run of it; out (NULL: only count them) receives the batches in the epoch's final, shuffled order.
// Returns the number of batches.
static int64_t plan_pack_epoch(const batchplan *p, int64_t epoch, int64_t *order, batch_ref *out) {
    int64_t n = p->n_epoch;
    plan_draw_epoch(p, epoch, order); // one set of weight 1: 0 .. n_train-1
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

int batchplan_build(batchplan *p, const int64_t *lengths, int64_t n_samples, const batchplan_set *sets, int n_sets,
                    int64_t n_heldout, int64_t max_tokens, int64_t bucket_size, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->epoch = -1;
    batchplan_set one = {n_samples, 1.0, NULL, 0};
    if (!sets || n_sets == 0) sets = &one, n_sets = 1;
    if (max_tokens < 1)
        return error_set("batch plan: max_tokens_per_batch = %lld, expected at least 1", (long long)max_tokens);
    // the samples of the sets without a recorded split: they share n_heldout
    int64_t n_rule = 0;
    int n_recorded = 0;
    for (int i = 0; i < n_sets; i++) {
        if (!sets[i].heldout) {
            n_rule += sets[i].n;
            continue;
        }
        n_recorded++;
        for (int64_t j = 0; j < sets[i].n_heldout; j++)
            if (sets[i].heldout[j] < 0 || sets[i].heldout[j] >= sets[i].n || (j > 0 && sets[i].heldout[j] <= sets[i].heldout[j - 1]))
                return error_set("batch plan: set %d: its recorded held-out sample %lld is %lld, not an increasing index "
                                 "of its %lld samples", i, (long long)j, (long long)sets[i].heldout[j], (long long)sets[i].n);
    }
    int all_heldout = n_heldout == BATCHPLAN_ALL_HELDOUT && n_samples > 0; // an evaluation plan
    if (all_heldout || (n_recorded > 0 && n_rule == 0)) n_heldout = n_rule; // every set recorded: n_heldout unused
    else if (n_heldout < 0 || n_heldout >= n_rule)
        return error_set("batch plan: %lld held-out samples of %lld usable ones leave none to train on "
                         "(data.heldout_samples must be less than the usable samples)",
                         (long long)n_heldout, (long long)n_rule);
    for (int64_t i = 0; i < n_samples; i++) {
        if (lengths[i] > max_tokens)
            return error_set("batch plan: sample %lld has %lld tokens, more than max_tokens_per_batch = %lld",
                             (long long)i, (long long)lengths[i], (long long)max_tokens);
        if (lengths[i] < 1)
            return error_set("batch plan: sample %lld has %lld tokens, expected at least 1", (long long)i,
                             (long long)lengths[i]);
    }
    int64_t total = 0;
    for (int i = 0; i < n_sets; i++) {
        if (sets[i].n < 0) return error_set("batch plan: set %d has %lld samples", i, (long long)sets[i].n);
        if (!(sets[i].weight > 0) || !isfinite(sets[i].weight))
            return error_set("batch plan: set %d has weight %g, expected a finite number > 0", i, sets[i].weight);
        total += sets[i].n;
    }
    if (total != n_samples)
        return error_set("batch plan: the %d set(s) hold %lld samples, not the %lld given", n_sets, (long long)total,
                         (long long)n_samples);

    // The held-out share of each set: n_heldout * n_i / n_samples, rounded down, then the samples
    // still missing one each to the sets with the largest remainders (ties: the lower set), so the
    // shares add up to n_heldout and a single set holds them all.
    batchplan_set_info *info = xcalloc((size_t)n_sets, sizeof *info);
    __int128 *rem = xmalloc((size_t)n_sets * sizeof *rem);
    int64_t given = 0;
    for (int i = 0; i < n_sets; i++) {
        if (sets[i].heldout) { // its own split; no share of n_heldout
            info[i].n_heldout = sets[i].n_heldout;
            info[i].recorded = 1;
            rem[i] = -1;
            continue;
        }
        __int128 num = (__int128)n_heldout * sets[i].n;
        info[i].n_heldout = n_rule > 0 ? (int64_t)(num / n_rule) : 0;
        rem[i] = n_rule > 0 ? num % n_rule : -1;
        given += info[i].n_heldout;
    }
    for (; given < n_heldout; given++) {
        int best = -1;
        for (int i = 0; i < n_sets; i++)
            if (rem[i] >= 0 && (best < 0 || rem[i] > rem[best])) best = i;
        info[best].n_heldout++;
        rem[best] = -1; // at most one extra sample per set
    }
    free(rem);
    int64_t first = 0, n_epoch = 0, largest = 0, n_held_all = 0;
    for (int i = 0; i < n_sets; i++) n_held_all += info[i].n_heldout;
    for (int i = 0; i < n_sets; i++) {
        batchplan_set_info *s = &info[i];
        s->first = first, s->n = sets[i].n, s->weight = sets[i].weight;
        s->n_train = s->n - s->n_heldout;
        first += s->n;
        int rc = 0;
        if (s->n == 0) rc = error_set("batch plan: set %d has no usable samples", i);
        else if (all_heldout) continue; // no training batches: nothing is drawn
        else if (s->n_train < 1)
            rc = error_set("batch plan: set %d: its share of the held-out samples (%lld) takes all its %lld usable "
                           "samples (%s)", i, (long long)s->n_heldout, (long long)s->n,
                           s->recorded ? "its /heldout holds every sample" : "lower data.heldout_samples");
        double want = rc ? 0 : round(s->weight * (double)s->n_train);
        if (rc == 0 && want > 9e15)
            rc = error_set("batch plan: set %d: weight %g draws %g samples per epoch, too many", i, s->weight, want);
        if (rc == 0 && want < 1)
            rc = error_set("batch plan: set %d: weight %g of %lld training samples draws no sample per epoch (raise it to "
                           "at least %g)", i, s->weight, (long long)s->n_train, 0.5 / (double)s->n_train);
        if (rc) {
            free(info);
            return rc;
        }
        s->per_epoch = (int64_t)want;
        n_epoch += s->per_epoch;
        if (s->n_train > largest) largest = s->n_train;
        // the epoch's plan holds every draw (three arrays of n_epoch): bounded before it is allocated
        if (n_epoch > BATCHPLAN_MAX_DRAWS) {
            int rc2 = error_set("data.sets: an epoch would draw %lld samples (set %d: weight %g x %lld training samples), "
                                "more than %lld: lower the weights", (long long)n_epoch, i, s->weight,
                                (long long)s->n_train, (long long)BATCHPLAN_MAX_DRAWS);
            free(info);
            return rc2;
        }
    }
    p->seed = seed;
    p->max_tokens = max_tokens;
    p->bucket_size = bucket_size;
    p->n_samples = n_samples;
    n_heldout = n_held_all;
    p->n_heldout = n_heldout;
    p->n_train = all_heldout ? 0 : n_samples - n_heldout; // an evaluation plan trains on nothing
    p->n_sets = n_sets;
    p->sets = info;
    p->n_epoch = n_epoch;
    p->pick = xmalloc((size_t)largest * sizeof *p->pick);
    p->lengths = xmalloc((size_t)n_samples * sizeof *p->lengths);
    memcpy(p->lengths, lengths, (size_t)n_samples * sizeof *p->lengths);
    p->batches = xmalloc((size_t)n_epoch * sizeof *p->batches); // a batch holds >= 1 sample
    p->storage = xmalloc((size_t)n_epoch * sizeof *p->storage);
    p->scratch = xmalloc((size_t)n_epoch * sizeof *p->scratch);

    // Held-out batches: the recorded split of a set, else its last samples, in sample order, packed
    // as they come, so an evaluation always sees the same batches whatever the seed. The rest of
    // each set, in order, is its training part.
    size_t nh = (size_t)(n_heldout > 0 ? n_heldout : 1);
    p->heldout = xmalloc(nh * sizeof *p->heldout);
    p->heldout_storage = xmalloc(nh * sizeof *p->heldout_storage);
    p->train_storage = xmalloc((size_t)(p->n_train > 0 ? p->n_train : 1) * sizeof *p->train_storage);
    int64_t k = 0, t = 0;
    for (int i = 0; i < n_sets; i++) {
        batchplan_set_info *s = &info[i];
        s->train = p->train_storage + t;
        for (int64_t j = 0, h = 0; j < s->n; j++) {
            int held = s->recorded ? h < s->n_heldout && sets[i].heldout[h] == j : j >= s->n - s->n_heldout;
            if (held) p->heldout_storage[k++] = s->first + j, h++;
            else if (!all_heldout) p->train_storage[t++] = s->first + j;
        }
    }
    p->n_heldout_batches = plan_pack_run(p, p->heldout_storage, n_heldout, p->heldout, 0);
    return 0;
}

void batchplan_free(batchplan *p) {
    free(p->sets);
    free(p->pick);
    free(p->lengths);
    free(p->batches);
    free(p->storage);
    free(p->scratch);
    free(p->epoch_end);
    free(p->heldout);
    free(p->heldout_storage);
    free(p->train_storage);
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
