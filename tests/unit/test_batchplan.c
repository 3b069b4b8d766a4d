// test_batchplan.c: the batch plan (src/common/data/batchplan.c): coverage of every epoch (each training
// sample exactly once, no held-out sample), held-out batches in file order, the token limit,
// determinism from (seed, epoch) whatever order epochs are asked for in, epoch rollover, buckets,
// and the errors.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/data/batchplan.h"
#include "testing.h"

enum { N = 300, HELD = 17, MAXTOK = 512 };

static void make_lengths(int64_t *len, int64_t n) {
    for (int64_t i = 0; i < n; i++) len[i] = 1 + test_rand_u32() % MAXTOK;
    len[5] = MAXTOK; // a sample exactly at the limit fills a batch alone
    len[6] = 1;
}

// Check epoch e of p (batches [first, first + nb) of the run): every training sample exactly once,
// no held-out sample, no batch over max_tokens, tokens = the sum of lengths, samples sorted by length
// within a batch; the batch after the epoch's last is the next epoch's first.
static void check_epoch(batchplan *p, int64_t e, const int64_t *len) {
    int64_t first = 0;
    for (int64_t k = 0; k < e; k++) first += batchplan_epoch_size(p, k);
    int64_t nb = batchplan_epoch_size(p, e);
    int *seen = calloc((size_t)p->n_samples, sizeof *seen);
    int over = 0, bad_sum = 0, heldout = 0, unsorted = 0, wrong_epoch = 0, total = 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t ep = -1;
        const batch_ref *br = batchplan_train_batch(p, first + b, &ep);
        wrong_epoch += ep != e;
        int64_t sum = 0;
        for (int64_t j = 0; j < br->n; j++) {
            int64_t s = br->samples[j];
            if (s >= p->n_train) heldout++;
            else seen[s]++;
            sum += len[s];
            if (j > 0 && len[br->samples[j - 1]] > len[s]) unsorted++;
        }
        total += (int)br->n;
        over += br->tokens > p->max_tokens;
        bad_sum += sum != br->tokens || br->n < 1;
    }
    int once = 1;
    for (int64_t s = 0; s < p->n_train; s++) once &= seen[s] == 1;
    CHECK_MSG(once && total == p->n_train, "epoch %lld: training samples not each exactly once", (long long)e);
    CHECK_MSG(heldout == 0, "epoch %lld: %d held-out samples in training batches", (long long)e, heldout);
    CHECK_MSG(over == 0, "epoch %lld: %d batches over max_tokens", (long long)e, over);
    CHECK_MSG(bad_sum == 0, "epoch %lld: %d batches with a wrong token count", (long long)e, bad_sum);
    CHECK_MSG(unsorted == 0, "epoch %lld: %d batches not in length order", (long long)e, unsorted);
    CHECK_MSG(wrong_epoch == 0, "epoch %lld: %d batches report another epoch", (long long)e, wrong_epoch);
    // The batch after the last one is the next epoch's first.
    int64_t ep = -1;
    CHECK(batchplan_train_batch(p, first + nb, &ep) != NULL && ep == e + 1);
    free(seen);
}

static void test_coverage(void) {
    int64_t len[N];
    make_lengths(len, N);
    int64_t buckets[] = {0, 1, 16, 64, N * 2};
    for (int bi = 0; bi < (int)(sizeof buckets / sizeof buckets[0]); bi++) {
        batchplan p;
        CHECK(batchplan_build(&p, len, N, NULL, 0, HELD, MAXTOK, buckets[bi], 42) == 0);
        CHECK(p.n_train == N - HELD && p.n_heldout == HELD);
        for (int64_t e = 0; e < 4; e++) check_epoch(&p, e, len);
        batchplan_free(&p);
    }
}

// Held-out batches: the last HELD samples, in file order, packed greedily, never over max_tokens.
static void test_heldout(void) {
    int64_t len[N];
    make_lengths(len, N);
    for (int64_t i = N - HELD; i < N; i++) len[i] = 100 + (i % 3) * 150; // several per batch
    batchplan p;
    CHECK(batchplan_build(&p, len, N, NULL, 0, HELD, MAXTOK, 64, 7) == 0);
    int64_t next = N - HELD, over = 0, greedy = 1;
    for (int64_t b = 0; b < p.n_heldout_batches; b++) {
        const batch_ref *br = batchplan_heldout_batch(&p, b);
        int64_t sum = 0;
        for (int64_t j = 0; j < br->n; j++) {
            CHECK_MSG(br->samples[j] == next, "held-out batch %lld: sample %lld, expected %lld", (long long)b,
                      (long long)br->samples[j], (long long)next);
            sum += len[br->samples[j]];
            next++;
        }
        over += sum > MAXTOK || sum != br->tokens;
        // greedy: the next sample would not have fitted
        if (next < N && sum + len[next] <= MAXTOK) greedy = 0;
    }
    CHECK(next == N);
    CHECK(over == 0);
    CHECK(greedy);
    CHECK(p.n_heldout_batches > 1);
    CHECK(batchplan_heldout_batch(&p, p.n_heldout_batches) == NULL);
    CHECK(batchplan_heldout_batch(&p, -1) == NULL);
    CHECK(batchplan_train_batch(&p, -1, NULL) == NULL);
    batchplan_free(&p);

    // no held-out samples: no held-out batches
    CHECK(batchplan_build(&p, len, N, NULL, 0, 0, MAXTOK, 64, 7) == 0);
    CHECK(p.n_heldout_batches == 0 && p.n_train == N);
    check_epoch(&p, 0, len);
    batchplan_free(&p);
}

// The sample sequence of epoch e, flattened over its batches (with -1 between batches).
static int64_t flatten_epoch(batchplan *p, int64_t e, int64_t *out) {
    int64_t first = 0, n = 0;
    for (int64_t k = 0; k < e; k++) first += batchplan_epoch_size(p, k);
    for (int64_t b = 0; b < batchplan_epoch_size(p, e); b++) {
        const batch_ref *br = batchplan_train_batch(p, first + b, NULL);
        for (int64_t j = 0; j < br->n; j++) out[n++] = br->samples[j];
        out[n++] = -1;
    }
    return n;
}

static void test_determinism(void) {
    int64_t len[N];
    make_lengths(len, N);
    enum { CAP = 2 * N + 8 };
    static int64_t a[4][CAP], b[4][CAP];
    int64_t na[4], nb[4];

    // Plan A asked in order, plan B (built later in the same process) asked epoch 3 first, then 1,
    // then 0 and 2: identical batches, as on two ranks that start at different points.
    batchplan p, q;
    CHECK(batchplan_build(&p, len, N, NULL, 0, HELD, MAXTOK, 32, 1234) == 0);
    for (int e = 0; e < 4; e++) na[e] = flatten_epoch(&p, e, a[e]);
    batchplan_free(&p);
    CHECK(batchplan_build(&q, len, N, NULL, 0, HELD, MAXTOK, 32, 1234) == 0);
    int order[4] = {3, 1, 0, 2};
    for (int k = 0; k < 4; k++) nb[order[k]] = flatten_epoch(&q, order[k], b[order[k]]);
    for (int e = 0; e < 4; e++)
        CHECK_MSG(na[e] == nb[e] && memcmp(a[e], b[e], (size_t)na[e] * sizeof(int64_t)) == 0,
                  "epoch %d differs between two builds of the same plan", e);
    // A batch index far ahead first (a resumed run), then back: the same batch.
    int64_t far = 0;
    for (int e = 0; e < 9; e++) far += batchplan_epoch_size(&q, e);
    batchplan r;
    CHECK(batchplan_build(&r, len, N, NULL, 0, HELD, MAXTOK, 32, 1234) == 0);
    int64_t e1 = -1, e2 = -1;
    const batch_ref *x = batchplan_train_batch(&r, far + 3, &e1);
    int64_t xs[N], xn = x->n;
    memcpy(xs, x->samples, (size_t)xn * sizeof(int64_t));
    const batch_ref *y = batchplan_train_batch(&q, far + 3, &e2);
    CHECK(e1 == 9 && e2 == 9 && y->n == xn && memcmp(xs, y->samples, (size_t)xn * sizeof(int64_t)) == 0);
    batchplan_free(&r);

    // Epochs differ from each other; another seed differs.
    CHECK(na[0] != na[1] || memcmp(a[0], a[1], (size_t)na[0] * sizeof(int64_t)) != 0);
    CHECK(na[1] != na[2] || memcmp(a[1], a[2], (size_t)na[1] * sizeof(int64_t)) != 0);
    batchplan s;
    CHECK(batchplan_build(&s, len, N, NULL, 0, HELD, MAXTOK, 32, 1235) == 0);
    int64_t c[CAP];
    int64_t nc = flatten_epoch(&s, 0, c);
    CHECK(nc != na[0] || memcmp(c, a[0], (size_t)nc * sizeof(int64_t)) != 0);
    // held-out batches do not depend on the seed
    CHECK(s.n_heldout_batches == q.n_heldout_batches);
    batchplan_free(&s);
    batchplan_free(&q);
}

// batchplan_epoch_size of another epoch leaves the current epoch's batches (and pointers) alone.
static void test_epoch_size_keeps_current(void) {
    int64_t len[N];
    make_lengths(len, N);
    batchplan p;
    CHECK(batchplan_build(&p, len, N, NULL, 0, HELD, MAXTOK, 0, 99) == 0);
    const batch_ref *b0 = batchplan_train_batch(&p, 2, NULL);
    batch_ref copy = *b0;
    int64_t first[N];
    memcpy(first, b0->samples, (size_t)b0->n * sizeof(int64_t));
    int64_t sizes = 0;
    for (int e = 0; e < 6; e++) sizes += batchplan_epoch_size(&p, e);
    CHECK(sizes >= 6);
    CHECK(p.epoch == 0 && b0->n == copy.n && b0->samples == copy.samples &&
          memcmp(first, b0->samples, (size_t)b0->n * sizeof(int64_t)) == 0);
    // rollover: batch index sizes is the first of epoch 6
    int64_t e = -1;
    CHECK(batchplan_train_batch(&p, sizes, &e) != NULL && e == 6);
    CHECK(batchplan_train_batch(&p, sizes - 1, &e) != NULL && e == 5);
    batchplan_free(&p);
}

static void test_errors(void) {
    int64_t len[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    batchplan p;
    len[4] = 600;
    CHECK_ERR(batchplan_build(&p, len, 10, NULL, 0, 2, MAXTOK, 0, 1), "sample 4 has 600 tokens, more than max_tokens_per_batch = 512");
    batchplan_free(&p); // safe after a failed build
    len[4] = 9;
    len[8] = 700; // held-out samples are checked too
    CHECK_ERR(batchplan_build(&p, len, 10, NULL, 0, 2, MAXTOK, 0, 1), "sample 8 has 700 tokens");
    len[8] = 13;
    len[2] = 0;
    CHECK_ERR(batchplan_build(&p, len, 10, NULL, 0, 2, MAXTOK, 0, 1), "sample 2 has 0 tokens");
    len[2] = 7;
    CHECK_ERR(batchplan_build(&p, len, 10, NULL, 0, 10, MAXTOK, 0, 1), "10 held-out samples of 10");
    CHECK_ERR(batchplan_build(&p, len, 10, NULL, 0, 11, MAXTOK, 0, 1), "11 held-out samples of 10");
    CHECK_ERR(batchplan_build(&p, len, 10, NULL, 0, -2, MAXTOK, 0, 1), "held-out");
    // BATCHPLAN_ALL_HELDOUT (--mode eval): every sample held out once, no training batch
    CHECK(batchplan_build(&p, len, 10, NULL, 0, BATCHPLAN_ALL_HELDOUT, MAXTOK, 0, 1) == 0);
    {
        int seen[10] = {0}, total = 0;
        for (int64_t b = 0; b < p.n_heldout_batches; b++) {
            const batch_ref *r = batchplan_heldout_batch(&p, b);
            for (int64_t i = 0; i < r->n; i++) seen[r->samples[i]]++, total++;
        }
        int once = 1;
        for (int i = 0; i < 10; i++) once = once && seen[i] == 1;
        CHECK(total == 10 && once && p.n_train == 0 && p.n_epoch == 0);
    }
    batchplan_free(&p);
    CHECK_ERR(batchplan_build(&p, len, 0, NULL, 0, 0, MAXTOK, 0, 1), "0 held-out samples of 0");
    CHECK_ERR(batchplan_build(&p, len, 10, NULL, 0, 0, 0, 0, 1), "max_tokens_per_batch = 0");
    // one training sample: one batch per epoch
    CHECK(batchplan_build(&p, len, 10, NULL, 0, 9, MAXTOK, 0, 1) == 0);
    int64_t e = -1;
    const batch_ref *b = batchplan_train_batch(&p, 5, &e);
    CHECK(b && e == 5 && b->n == 1 && b->samples[0] == 0 && b->tokens == 5);
    CHECK(p.n_heldout_batches == 1 && batchplan_heldout_batch(&p, 0)->n == 9);
    batchplan_free(&p);
}

// Count how often each sample appears in epoch 0's training batches and in the held-out batches.
static void count_plan(batchplan *p, int *train, int *held) {
    memset(train, 0, (size_t)p->n_samples * sizeof *train);
    memset(held, 0, (size_t)p->n_samples * sizeof *held);
    for (int64_t b = 0; b < batchplan_epoch_size(p, 0); b++) {
        const batch_ref *br = batchplan_train_batch(p, b, NULL);
        for (int64_t j = 0; j < br->n; j++) train[br->samples[j]]++;
    }
    for (int64_t b = 0; b < p->n_heldout_batches; b++) {
        const batch_ref *br = batchplan_heldout_batch(p, b);
        for (int64_t j = 0; j < br->n; j++) held[br->samples[j]]++;
    }
}

// A set that records its held-out split (/heldout): exactly those samples are held out (and the
// rule's n_heldout is not taken from it); the other sets keep the rule; an evaluation plan holds out
// only the recorded ones of such a set; a list that does not increase is an error.
static void test_recorded_heldout(void) {
    int64_t len[30];
    for (int i = 0; i < 30; i++) len[i] = 10 + i;
    const int64_t rec[3] = {1, 4, 7};
    int train[30], held[30];
    batchplan p;
    batchplan_set one[1] = {{10, 1.0, rec, 3}};
    CHECK(batchplan_build(&p, len, 10, one, 1, 5, MAXTOK, 0, 3) == 0);
    CHECK(p.n_heldout == 3 && p.n_train == 7 && p.sets[0].recorded == 1);
    count_plan(&p, train, held);
    int ok = 1;
    for (int i = 0; i < 10; i++) ok &= (held[i] == (i == 1 || i == 4 || i == 7)) && train[i] == !held[i];
    CHECK(ok);
    batchplan_free(&p);
    // set 0 recorded (3 of 10), set 1 by the rule: its last 2 of 20
    batchplan_set two[2] = {{10, 1.0, rec, 3}, {20, 1.0, NULL, 0}};
    CHECK(batchplan_build(&p, len, 30, two, 2, 2, MAXTOK, 0, 3) == 0);
    CHECK(p.n_heldout == 5 && p.sets[1].n_heldout == 2 && p.sets[1].recorded == 0);
    count_plan(&p, train, held);
    ok = 1;
    for (int i = 0; i < 30; i++) {
        int want = i == 1 || i == 4 || i == 7 || i >= 28;
        ok &= held[i] == want && train[i] == !want;
    }
    CHECK(ok);
    batchplan_free(&p);
    // --mode eval: a recorded set's held-out samples only, the rule set whole, no training batch
    CHECK(batchplan_build(&p, len, 30, two, 2, BATCHPLAN_ALL_HELDOUT, MAXTOK, 0, 3) == 0);
    CHECK(p.n_heldout == 23 && p.n_train == 0 && batchplan_train_batch(&p, 0, NULL) == NULL);
    count_plan(&p, train, held);
    ok = 1;
    for (int i = 0; i < 30; i++) ok &= held[i] == (i >= 10 || i == 1 || i == 4 || i == 7);
    CHECK(ok);
    batchplan_free(&p);
    const int64_t dec[3] = {4, 1, 7};
    batchplan_set bad[1] = {{10, 1.0, dec, 3}};
    CHECK_ERR(batchplan_build(&p, len, 10, bad, 1, 0, MAXTOK, 0, 3), "set 0: its recorded held-out sample 1 is 1");
    const int64_t all[3] = {0, 1, 2};
    batchplan_set full[1] = {{3, 1.0, all, 3}};
    CHECK_ERR(batchplan_build(&p, len, 3, full, 1, 0, MAXTOK, 0, 3), "its /heldout holds every sample");
}

int main(void) {
    test_rand_seed(0x2545F4914F6CDD1Dull);
    test_recorded_heldout();
    test_coverage();
    test_heldout();
    test_determinism();
    test_epoch_size_keeps_current();
    test_errors();
    return test_finish("test_batchplan");
}
