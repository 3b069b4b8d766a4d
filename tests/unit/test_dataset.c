// test_dataset.c: several training sets mixed by weight. The batch plan over sets (draws per set
// per epoch = round(weight x training samples), weight 2 = each twice, 0.5 = a different random
// half every epoch, determinism, the held-out split spread over the sets and disjoint from
// training, one set of weight 1 = the plain plan), the dataset module (sample i of the mix, its
// set, the checks across files) and the data.sets key (text and JSON forms, the errors).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/config.h"
#include "common/data/batchplan.h"
#include "common/data/dataset.h"
#include "common/data/featfile.h"
#include "common/data/featreader.h"
#include "common/data/trainset.h"
#include "testing.h"

enum { MAXTOK = 300 };

static int64_t len_of(int64_t i) { return 1 + (i * 37 + 11) % 120; }

// Counts of each sample over epoch e's training batches (counts[n_samples], zeroed here).
static int64_t count_epoch(batchplan *p, int64_t e, int64_t *counts) {
    memset(counts, 0, (size_t)p->n_samples * sizeof *counts);
    int64_t first = 0, total = 0;
    for (int64_t k = 0; k < e; k++) first += batchplan_epoch_size(p, k);
    int64_t nb = batchplan_epoch_size(p, e);
    for (int64_t b = 0; b < nb; b++) {
        int64_t ep = -1;
        const batch_ref *br = batchplan_train_batch(p, first + b, &ep);
        CHECK(br && ep == e && br->tokens <= p->max_tokens);
        for (int64_t j = 0; br && j < br->n; j++) counts[br->samples[j]]++, total++;
    }
    return total;
}

// Sets of 90, 50, 40 and 30 samples with weights 2, 0.5, 1.5 and 1; 20 held out.
static void test_plan_counts(void) {
    enum { NS = 4, N = 210, HELD = 20 };
    const batchplan_set sets[NS] = {{90, 2.0, NULL, 0}, {50, 0.5, NULL, 0}, {40, 1.5, NULL, 0}, {30, 1.0, NULL, 0}};
    int64_t len[N], counts[N];
    for (int64_t i = 0; i < N; i++) len[i] = len_of(i);
    batchplan p;
    CHECK(batchplan_build(&p, len, N, sets, NS, HELD, MAXTOK, 16, 77) == 0);
    CHECK(p.n_sets == NS && p.n_heldout == HELD && p.n_train == N - HELD);
    // held-out shares in proportion to the sizes: 20 * (90, 50, 40, 30) / 210 = 8.57, 4.76, 3.81,
    // 2.86 -> 8, 4, 3, 2 (17) + one each to the three largest remainders (.86, .81, .76)
    int64_t want_held[NS] = {8, 5, 4, 3}, first = 0, held_sum = 0;
    for (int i = 0; i < NS; i++) {
        const batchplan_set_info *s = &p.sets[i];
        CHECK_MSG(s->n_heldout == want_held[i], "set %d: %lld held out, expected %lld", i, (long long)s->n_heldout,
                  (long long)want_held[i]);
        CHECK(s->first == first && s->n == sets[i].n && s->n_train == s->n - s->n_heldout);
        CHECK_MSG(s->per_epoch == (int64_t)round(sets[i].weight * (double)s->n_train), "set %d: %lld per epoch", i,
                  (long long)s->per_epoch);
        first += s->n;
        held_sum += s->n_heldout;
    }
    CHECK(held_sum == HELD);
    CHECK(p.n_epoch == p.sets[0].per_epoch + p.sets[1].per_epoch + p.sets[2].per_epoch + p.sets[3].per_epoch);

    // held-out batches: the last samples of each set, in sample order, each once
    int64_t *is_held = calloc(N, sizeof *is_held);
    int64_t k = 0, next_set = 0;
    for (int64_t b = 0; b < p.n_heldout_batches; b++) {
        const batch_ref *br = batchplan_heldout_batch(&p, b);
        for (int64_t j = 0; j < br->n; j++, k++) {
            int64_t smp = br->samples[j];
            while (next_set < NS - 1 && smp >= p.sets[next_set].first + p.sets[next_set].n) next_set++;
            const batchplan_set_info *s = &p.sets[next_set];
            CHECK(smp >= s->first + s->n_train && smp < s->first + s->n);
            is_held[smp]++;
        }
    }
    CHECK(k == HELD);

    int64_t picked[2][50];
    for (int64_t e = 0; e < 3; e++) {
        int64_t total = count_epoch(&p, e, counts);
        CHECK_MSG(total == p.n_epoch, "epoch %lld: %lld samples drawn, expected %lld", (long long)e, (long long)total,
                  (long long)p.n_epoch);
        for (int i = 0; i < NS; i++) {
            const batchplan_set_info *s = &p.sets[i];
            int64_t per_set = 0, lo = s->per_epoch / s->n_train, bad = 0, in_held = 0;
            for (int64_t j = 0; j < s->n; j++) {
                int64_t c = counts[s->first + j];
                per_set += c;
                if (j >= s->n_train) in_held += c != 0 || !is_held[s->first + j];
                else bad += c != lo && c != lo + 1;
            }
            CHECK_MSG(per_set == s->per_epoch, "epoch %lld set %d: %lld drawn, expected round(%g x %lld) = %lld",
                      (long long)e, i, (long long)per_set, s->weight, (long long)s->n_train, (long long)s->per_epoch);
            CHECK_MSG(bad == 0, "epoch %lld set %d: %lld samples drawn neither %lld nor %lld times", (long long)e, i,
                      (long long)bad, (long long)lo, (long long)lo + 1);
            CHECK_MSG(in_held == 0, "epoch %lld set %d: held-out samples in training batches", (long long)e, i);
        }
        // weight 2: every training sample of set 0 exactly twice; weight 1: set 3 once each
        for (int64_t j = 0; j < p.sets[0].n_train; j++) CHECK(counts[j] == 2);
        for (int64_t j = 0; j < p.sets[3].n_train; j++) CHECK(counts[p.sets[3].first + j] == 1);
        if (e < 2)
            for (int64_t j = 0; j < p.sets[1].n_train; j++) picked[e][j] = counts[p.sets[1].first + j];
    }
    // weight 0.5: a different half in epochs 0 and 1
    CHECK(memcmp(picked[0], picked[1], (size_t)p.sets[1].n_train * sizeof(int64_t)) != 0);

    // determinism: another build asked for epoch 2 first gives the same epochs
    batchplan q;
    CHECK(batchplan_build(&q, len, N, sets, NS, HELD, MAXTOK, 16, 77) == 0);
    int64_t c2[N], c0[N];
    count_epoch(&q, 2, c2);
    count_epoch(&q, 0, c0);
    count_epoch(&p, 2, counts);
    CHECK(memcmp(c2, counts, sizeof c2) == 0);
    count_epoch(&p, 0, counts);
    CHECK(memcmp(c0, counts, sizeof c0) == 0);
    for (int64_t b = 0; b < batchplan_epoch_size(&p, 0); b++) {
        const batch_ref *x = batchplan_train_batch(&p, b, NULL), *y = batchplan_train_batch(&q, b, NULL);
        CHECK(x->n == y->n && memcmp(x->samples, y->samples, (size_t)x->n * sizeof(int64_t)) == 0);
    }
    batchplan_free(&q);
    // another seed: another half of set 1
    CHECK(batchplan_build(&q, len, N, sets, NS, HELD, MAXTOK, 16, 78) == 0);
    count_epoch(&q, 0, c0);
    CHECK(memcmp(c0 + p.sets[1].first, picked[0], (size_t)p.sets[1].n_train * sizeof(int64_t)) != 0 ||
          memcmp(c0, counts, sizeof c0) != 0);
    batchplan_free(&q);
    batchplan_free(&p);
    free(is_held);
}

// One set of weight 1 given explicitly is the plain plan (sets NULL), batch for batch.
static void test_plan_single_set(void) {
    enum { N = 150, HELD = 9 };
    int64_t len[N];
    for (int64_t i = 0; i < N; i++) len[i] = len_of(i);
    batchplan p, q;
    const batchplan_set one = {N, 1.0, NULL, 0};
    CHECK(batchplan_build(&p, len, N, NULL, 0, HELD, MAXTOK, 32, 5) == 0);
    CHECK(batchplan_build(&q, len, N, &one, 1, HELD, MAXTOK, 32, 5) == 0);
    CHECK(p.n_epoch == N - HELD && q.n_epoch == N - HELD);
    int64_t total = 0;
    for (int e = 0; e < 3; e++) total += batchplan_epoch_size(&p, e);
    int same = batchplan_epoch_size(&q, 0) + batchplan_epoch_size(&q, 1) + batchplan_epoch_size(&q, 2) == total;
    for (int64_t b = 0; b < total && same; b++) {
        const batch_ref *x = batchplan_train_batch(&p, b, NULL), *y = batchplan_train_batch(&q, b, NULL);
        same = x->n == y->n && memcmp(x->samples, y->samples, (size_t)x->n * sizeof(int64_t)) == 0;
    }
    CHECK(same);
    // held-out: the last HELD samples
    CHECK(p.n_heldout_batches == q.n_heldout_batches && batchplan_heldout_batch(&q, 0)->samples[0] == N - HELD);
    batchplan_free(&p);
    batchplan_free(&q);
}

static void test_plan_errors(void) {
    int64_t len[20];
    for (int i = 0; i < 20; i++) len[i] = 10;
    batchplan p;
    batchplan_set s[2] = {{10, 1, NULL, 0}, {10, 0, NULL, 0}};
    CHECK_ERR(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1), "set 1 has weight 0");
    s[1].weight = NAN;
    CHECK_ERR(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1), "finite number > 0");
    s[1].weight = INFINITY;
    CHECK_ERR(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1), "finite number > 0");
    s[1].weight = -1;
    CHECK_ERR(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1), "set 1 has weight -1");
    s[1] = (batchplan_set){9, 1, NULL, 0};
    CHECK_ERR(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1), "hold 19 samples, not the 20");
    s[1] = (batchplan_set){10, 0.01, NULL, 0}; // 0.01 x 9 training samples rounds to 0
    CHECK_ERR(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1), "set 1: weight 0.01 of 9 training samples draws no sample");
    // 10 held out of 1 + 1 + 18: 0.5 -> 0, 0.5 -> 0, 9; the one left goes to set 0 (a tie: the lower set)
    const batchplan_set s3[3] = {{1, 1, NULL, 0}, {1, 1, NULL, 0}, {18, 1, NULL, 0}};
    CHECK_ERR(batchplan_build(&p, len, 20, s3, 3, 10, MAXTOK, 0, 1), "set 0: its share of the held-out samples (1) takes all its 1");
    s[0] = (batchplan_set){20, 1, NULL, 0}, s[1] = (batchplan_set){0, 1, NULL, 0};
    CHECK_ERR(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1), "set 1 has no usable samples");
    // weight 0.06 x 9 = 0.54 rounds to 1: allowed
    s[0] = (batchplan_set){10, 1, NULL, 0}, s[1] = (batchplan_set){10, 0.06, NULL, 0};
    CHECK(batchplan_build(&p, len, 20, s, 2, 2, MAXTOK, 0, 1) == 0 && p.sets[1].per_epoch == 1 && p.n_epoch == 10);
    batchplan_free(&p);
}

// ---------------------------------------------------------------- the dataset module

// A training set of n samples; sample j has j % 5 + 40 tokens, every token = base + j (so a read
// names its file and sample), all loss tokens.
static void write_set(const char *path, int n, int base, int64_t vocab, const char *tokenizer) {
    trainset_writer w;
    CHECK(trainset_writer_open(&w, path, vocab, tokenizer) == 0);
    int32_t t[64];
    for (int j = 0; j < n; j++) {
        int len = j % 5 + 40;
        for (int k = 0; k < len; k++) t[k] = base + j;
        CHECK(trainset_writer_append(&w, t, NULL, len) == 0);
    }
    CHECK(trainset_writer_close(&w) == 0);
}

static void test_dataset_mix(void) {
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s", test_path("a.h5"));
    snprintf(b, sizeof b, "%s", test_path("b.h5"));
    snprintf(c, sizeof c, "%s", test_path("c.h5"));
    write_set(a, 12, 100, 1000, "tok");
    write_set(b, 7, 500, 1000, "tok");
    const char *paths[2] = {a, b};
    const double weights[2] = {2, 0.5};
    dataset d;
    CHECK(dataset_open_sets(&d, 2, paths, weights, 4) == 0);
    CHECK(d.n_sets == 2 && d.n == 19 && d.first[0] == 0 && d.first[1] == 12 && d.first[2] == 19);
    CHECK(d.vocab_size == 1000 && strcmp(d.tokenizer, "tok") == 0 && strcmp(dataset_path(&d, 1), b) == 0);
    int ok = 1;
    int32_t t[64];
    uint8_t m[64];
    for (int64_t i = 0; i < d.n; i++) {
        int set = i < 12 ? 0 : 1;
        int64_t j = i - (set ? 12 : 0);
        ok &= dataset_set_of(&d, i) == set && dataset_len(&d, i) == j % 5 + 40;
        ok &= dataset_read(&d, i, t, m) == 0 && t[0] == (set ? 500 : 100) + j && t[dataset_len(&d, i) - 1] == t[0] && m[0] == 1;
    }
    CHECK_MSG(ok, "sample i of the mix is not set 0's samples then set 1's");
    CHECK_ERR(dataset_read(&d, 19, t, m), "sample 19 out of range [0, 19)");
    batchplan_set ps[2];
    dataset_plan_sets(&d, ps);
    CHECK(ps[0].n == 12 && ps[0].weight == 2 && ps[1].n == 7 && ps[1].weight == 0.5);
    dataset_close(&d);

    // the checks across files
    write_set(c, 5, 100, 900, "tok");
    const char *pc[2] = {a, c};
    CHECK_ERR(dataset_open_sets(&d, 2, pc, NULL, 4), "different vocab_size (1000 and 900)");
    CHECK(strstr(error_msg(), a) && strstr(error_msg(), c));
    write_set(c, 5, 100, 1000, "other");
    CHECK_ERR(dataset_open_sets(&d, 2, pc, NULL, 4), "different tokenizers");
    CHECK(strstr(error_msg(), a) && strstr(error_msg(), c));
    write_set(c, 5, 100, 1000, "");     // a set naming no tokenizer mixes with any
    CHECK(dataset_open_sets(&d, 2, pc, NULL, 4) == 0 && d.n == 17);
    dataset_close(&d);
    char a2[600];
    snprintf(a2, sizeof a2, "%s/./a.h5", test_tmpdir());
    const char *same[2] = {a, a2};
    CHECK_ERR(dataset_open_sets(&d, 2, same, NULL, 4), "are the same file");
    const char *missing[2] = {a, test_path("nope.h5")};
    CHECK_ERR(dataset_open_sets(&d, 2, missing, NULL, 4), "nope.h5");
    const double bad_w[2] = {1, 0};
    CHECK_ERR(dataset_open_sets(&d, 2, paths, bad_w, 4), "weight 0");
    CHECK_ERR(dataset_open_sets(&d, 2, paths, NULL, 45), "has no usable samples"); // min_loss_tokens above every sample
    // one set alone without usable samples: named, with the counts and reasons (not a batch plan message)
    CHECK_ERR(dataset_open_sets(&d, 1, paths, NULL, 45), "has no usable samples (12 samples, 12 rejected: 12 with no valid anchor or fewer than 45 loss tokens)");
    CHECK(strstr(error_msg(), a) != NULL);
    write_set(c, 0, 100, 1000, "tok"); // no sample at all
    CHECK_ERR(dataset_open_sets(&d, 1, pc + 1, NULL, 4), "c.h5 has no usable samples (0 samples, 0 rejected)");
    CHECK_ERR(dataset_open_sets(&d, 0, paths, NULL, 4), "no training data");

    // through the configuration
    config cfg;
    config_defaults(&cfg);
    char text[1400];
    snprintf(text, sizeof text, "data.sets=%s:2,%s:0.5", a, b);
    CHECK(config_set(&cfg, text) == 0 && cfg.data_sets.n == 2);
    CHECK(dataset_open(&d, &cfg, 4) == 0 && d.n == 19 && d.weights[0] == 2 && d.weights[1] == 0.5);
    dataset_close(&d);
    CHECK(dataset_preflight(&cfg) == 0);
    snprintf(text, sizeof text, "data.sets=%s,%s", a, test_path("nope.h5"));
    CHECK(config_set(&cfg, text) == 0);
    CHECK_ERR(dataset_preflight(&cfg), "nope.h5: cannot open");
    snprintf(text, sizeof text, "data.path=%s", a);
    CHECK(config_set(&cfg, text) == 0);
    CHECK_ERR(dataset_open(&d, &cfg, 4), "data.path and data.sets are both set");
    CHECK_ERR(config_check(&cfg), "data.path and data.sets are both set");
    CHECK(config_set(&cfg, "data.sets=") == 0 && config_check(&cfg) == 0 && config_data_count(&cfg) == 1);
    CHECK(dataset_open(&d, &cfg, 4) == 0 && d.n_sets == 1 && d.n == 12 && d.weights[0] == 1);
    dataset_close(&d);
}

// ---------------------------------------------------------------- offline features of a mix

// A feature directory of 10 samples in one shard, its index with the given "sets" text (NULL: none).
static void write_features(const char *dir, const char *sets) {
    mkdir(dir, 0755);
    featfile_info info = {.vocab_size = 100, .n_feat = 1, .hidden = 2, .topk = 2, .layer_ids = {0}};
    char path[1200];
    snprintf(path, sizeof path, "%s/features-00000-of-00001.h5", dir);
    featfile_writer w;
    CHECK(featfile_writer_open(&w, path, &info) == 0);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, idx[16] = {0};
    uint16_t feat[16] = {0};
    float val[16] = {0}, lse[8] = {0};
    for (int i = 0; i < 10; i++) CHECK(featfile_writer_append(&w, tok, NULL, 3 + i % 5, feat, idx, val, lse) == 0);
    CHECK(featfile_writer_close(&w) == 0);
    snprintf(path, sizeof path, "%s/features.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"format_version\": 1, \"data\": \"/d/one.h5\", %s%s%s \"target_layer_ids\": [0], \"hidden_size\": 2, "
               "\"topk\": 2, \"samples\": 10, \"shards\": [\"features-00000-of-00001.h5\"]}\n",
            sets ? "\"sets\": " : "", sets ? sets : "", sets ? "," : "");
    fclose(f);
}

static void test_feature_sets(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s", test_path("feat"));
    write_features(dir, "[{\"path\": \"/d/a.h5\", \"samples\": 6, \"weight\": 2}, {\"path\": \"/d/b.h5\", \"samples\": 4, \"weight\": 0.5}]");
    featreader *fr = NULL;
    CHECK(featreader_open(&fr, dir) == 0);
    if (!fr) return;
    double w = 0;
    const char *path = NULL;
    CHECK(featreader_n_sets(fr) == 2);
    CHECK(featreader_set(fr, 1, &w, &path) == 4 && w == 0.5 && strcmp(path, "/d/b.h5") == 0);
    config cfg;
    config_defaults(&cfg);
    snprintf(cfg.data_features, sizeof cfg.data_features, "%s", dir);
    batchplan_set sets[CONFIG_MAX_SETS];
    // no sets in the configuration: the index's weights
    CHECK(dataset_feature_sets(&cfg, fr, sets) == 2 && sets[0].n == 6 && sets[0].weight == 2 && sets[1].n == 4 &&
          sets[1].weight == 0.5);
    // the configuration's weights, for the sets it was dumped from in their order
    CHECK(config_set(&cfg, "data.sets=/d/a.h5:1,/d/b.h5:3") == 0);
    CHECK(dataset_feature_sets(&cfg, fr, sets) == 2 && sets[0].n == 6 && sets[0].weight == 1 && sets[1].weight == 3);
    // another order (the weights apply by position), or another file that cannot be compared: refused
    CHECK(config_set(&cfg, "data.sets=/d/b.h5:1,/d/a.h5:3") == 0);
    CHECK_ERR(dataset_feature_sets(&cfg, fr, sets), "data.sets: set 0 is /d/b.h5, but data.features");
    CHECK(config_set(&cfg, "data.sets=/d/a.h5:1,/elsewhere/b.h5:3") == 0);
    CHECK_ERR(dataset_feature_sets(&cfg, fr, sets), "set 1 is /elsewhere/b.h5, but data.features");
    CHECK(config_set(&cfg, "data.sets=") == 0 && config_set(&cfg, "data.path=/d/one.h5") == 0);
    CHECK_ERR(dataset_feature_sets(&cfg, fr, sets), "was dumped from 2 training set(s), the configuration names 1 (data.path)");
    featreader_close(fr);

    // an index without "sets": one set of every sample, weight 1, its path from "data"
    write_features(dir, NULL);
    CHECK(featreader_open(&fr, dir) == 0);
    if (!fr) return;
    CHECK(featreader_n_sets(fr) == 1 && featreader_set(fr, 0, &w, &path) == 10 && w == 1 && strcmp(path, "/d/one.h5") == 0);
    CHECK(dataset_feature_sets(&cfg, fr, sets) == 1 && sets[0].n == 10 && sets[0].weight == 1);
    featreader_close(fr);

    // bad "sets"
    write_features(dir, "[{\"path\": \"/d/a.h5\", \"samples\": 6, \"weight\": 2}, {\"path\": \"/d/b.h5\", \"samples\": 3, \"weight\": 1}]");
    CHECK_ERR(featreader_open(&fr, dir), "\"sets\" hold 9 samples, \"samples\" says 10");
    write_features(dir, "[{\"path\": \"/d/a.h5\", \"samples\": 10, \"weight\": 0}]");
    CHECK_ERR(featreader_open(&fr, dir), "\"sets\"[0] must be");
    write_features(dir, "[]");
    CHECK_ERR(featreader_open(&fr, dir), "\"sets\" must be an array of at least one training set");
}

// ---------------------------------------------------------------- the data.sets key

static void test_config_key(void) {
    config c;
    config_defaults(&c);
    CHECK(c.data_sets.n == 0 && config_data_count(&c) == 0);
    CHECK(config_set(&c, "data.sets=a.h5:2,dir/b.h5:0.5,c.h5") == 0 && c.data_sets.n == 3);
    double w = 0;
    CHECK(strcmp(config_data_path(&c, 0, &w), "a.h5") == 0 && w == 2);
    CHECK(strcmp(config_data_path(&c, 1, &w), "dir/b.h5") == 0 && w == 0.5);
    CHECK(strcmp(config_data_path(&c, 2, &w), "c.h5") == 0 && w == 1);
    CHECK(config_data_count(&c) == 3);
    CHECK(config_set(&c, "data.sets=a.h5:2, b.h5 : 0.25 ,c.h5") == 0 && c.data_sets.n == 3 &&
          strcmp(c.data_sets.v[1].path, "b.h5") == 0 && c.data_sets.v[1].weight == 0.25 && strcmp(c.data_sets.v[2].path, "c.h5") == 0);
    CHECK(config_set(&c, "data.sets=x:y/c.h5") == 0 && strcmp(c.data_sets.v[0].path, "x:y/c.h5") == 0); // a colon in a path
    CHECK_ERR(config_set(&c, "data.sets=a.h5:0"), "set 0 (a.h5) has weight 0; a weight must be a finite number > 0");
    CHECK_ERR(config_set(&c, "data.sets=a.h5:1,b.h5:-2"), "set 1 (b.h5) has weight -2");
    CHECK_ERR(config_set(&c, "data.sets=a.h5:inf"), "finite number > 0");
    CHECK_ERR(config_set(&c, "data.sets=a.h5:nan"), "finite number > 0");
    CHECK_ERR(config_set(&c, "data.sets=a.h5:x"), "the weight in \"a.h5:x\" is not a number");
    CHECK_ERR(config_set(&c, "data.sets=a.h5:"), "is not a number");
    CHECK_ERR(config_set(&c, "data.sets=a.h5,,b.h5"), "empty set");
    CHECK_ERR(config_set(&c, "data.sets=a.h5:1,a.h5:2"), "names a.h5 twice");
    CHECK_ERR(config_set(&c, "data.sets=:2"), "set 0 has no path");
    CHECK(c.data_sets.n == 1 && strcmp(c.data_sets.v[0].path, "x:y/c.h5") == 0); // a bad value changes nothing

    // the JSON form
    CHECK(config_load_json(&c, "{\"data\": {\"sets\": [{\"path\": \"a.h5\", \"weight\": 2}, \"b.h5\", {\"path\": \"c.h5\"}]}}",
                           "t.json") == 0);
    CHECK(c.data_sets.n == 3 && c.data_sets.v[0].weight == 2 && c.data_sets.v[1].weight == 1 &&
          strcmp(c.data_sets.v[2].path, "c.h5") == 0 && c.data_sets.v[2].weight == 1);
    CHECK_ERR(config_load_json(&c, "{\"data\": {\"sets\": [{\"path\": \"a.h5\", \"weight\": 0}]}}", "t.json"),
              "t.json: key 'data.sets': set 0 (a.h5) has weight 0");
    CHECK_ERR(config_load_json(&c, "{\"data\": {\"sets\": [{\"path\": \"a.h5\", \"wieght\": 2}]}}", "t.json"),
              "unknown key \"wieght\"");
    CHECK_ERR(config_load_json(&c, "{\"data\": {\"sets\": [{\"weight\": 2}]}}", "t.json"), "set 0 has no \"path\"");
    CHECK_ERR(config_load_json(&c, "{\"data\": {\"sets\": [{\"path\": \"a.h5\", \"weight\": \"2\"}]}}", "t.json"),
              "\"weight\" wants a number");
    CHECK_ERR(config_load_json(&c, "{\"data\": {\"sets\": \"a.h5:2\"}}", "t.json"), "wants a list of training sets");
    CHECK_ERR(config_load_json(&c, "{\"data\": {\"sets\": [\"a.h5\", \"a.h5\"]}}", "t.json"), "names a.h5 twice");

    // the effective configuration round-trips
    char *json = config_to_json(&c);
    config d;
    config_defaults(&d);
    CHECK(config_load_json(&d, json, "effective") == 0);
    CHECK(d.data_sets.n == 3 && d.data_sets.v[0].weight == 2 && strcmp(d.data_sets.v[1].path, "b.h5") == 0);
    CHECK(config_hash(&c) == config_hash(&d));
    free(json);
    // both keys: an error naming both, once everything is applied
    CHECK(config_set(&d, "data.path=x.h5") == 0);
    CHECK_ERR(config_check(&d), "data.path and data.sets are both set");
    CHECK_ERR(config_data_count(&d), "data.path and data.sets");
}

int main(void) {
    test_plan_counts();
    test_plan_single_set();
    test_plan_errors();
    test_dataset_mix();
    test_feature_sets();
    test_config_key();
    return test_finish("test_dataset");
}
