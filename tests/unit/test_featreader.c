// test_featreader.c: the offline feature reader (src/common/data/featreader.c): feature sets written with
// the shard writer (featfile.h) and an index in dump_index's exact format, read back sample by
// sample across shard boundaries (including more shards than the reader keeps open), and broken
// sets that must fail with one line naming the file and what is wrong.
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/data/featfile.h"
#include "common/data/featreader.h"
#include "testing.h"

enum { V = 300, NFEAT = 2, HID = 6, D = NFEAT * HID, K = 4, MAXLEN = 40 };
static const int64_t layer_ids[NFEAT] = {1, 3};

// One sample's contents, generated from its global index.
typedef struct {
    int64_t n;
    int32_t tok[MAXLEN];
    uint8_t mask[MAXLEN];
    uint16_t feat[MAXLEN * D];
    int32_t idx[MAXLEN * K];
    float val[MAXLEN * K];
    float lse[MAXLEN];
} sample;

static void make_sample(sample *s, int64_t g) {
    s->n = 1 + (g * 7 + 3) % MAXLEN;
    for (int64_t t = 0; t < s->n; t++) {
        s->tok[t] = (int32_t)(test_rand_u32() % V);
        s->mask[t] = (uint8_t)(test_rand_u32() % 2);
        s->lse[t] = (float)g + 0.25f * (float)t;
        for (int j = 0; j < D; j++) s->feat[t * D + j] = (uint16_t)test_rand_u32();
        for (int j = 0; j < K; j++) {
            s->idx[t * K + j] = (int32_t)(test_rand_u32() % V);
            s->val[t * K + j] = (float)(test_rand_u32() % 1000) * 0.01f - 5.0f;
        }
    }
}

static featfile_info test_info(void) {
    featfile_info info = {.vocab_size = V, .n_feat = NFEAT, .hidden = HID, .topk = K};
    snprintf(info.tokenizer, sizeof info.tokenizer, "test-tok");
    snprintf(info.target, sizeof info.target, "/models/target");
    snprintf(info.target_arch, sizeof info.target_arch, "LlamaForCausalLM");
    for (int i = 0; i < NFEAT; i++) info.layer_ids[i] = layer_ids[i];
    return info;
}

// The shard names dump-features uses.
static void shard_name(char *buf, size_t n, int64_t s, int64_t n_shards) {
    snprintf(buf, n, "features-%05lld-of-%05lld.h5", (long long)s, (long long)n_shards);
}

// The index exactly as dump_index (src/teacher/dump_features.c) writes it.
static void write_index(const char *dir, int64_t n_shards, int64_t n_samples, int64_t hidden) {
    char path[1200];
    snprintf(path, sizeof path, "%s/features.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\n  \"format_version\": 1,\n  \"data\": \"%s\",\n  \"target\": \"%s\",\n  \"target_architecture\": \"%s\",\n",
            "/data/train.h5", "/models/target", "LlamaForCausalLM");
    fprintf(f, "  \"target_layer_ids\": [");
    for (int i = 0; i < NFEAT; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)layer_ids[i]);
    fprintf(f, "],\n  \"hidden_size\": %lld,\n  \"topk\": %d,\n  \"samples\": %lld,\n  \"shards\": [\n", (long long)hidden, K,
            (long long)n_samples);
    for (int64_t s = 0; s < n_shards; s++) {
        char p[64];
        shard_name(p, sizeof p, s, n_shards);
        fprintf(f, "    \"%s\"%s\n", p, s + 1 < n_shards ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
}

// A feature set of n_samples samples in shards of per samples (the last one shorter), as
// dump-features lays it out; samples regenerated from rng seed `seed`.
static void write_set(const char *dir, int64_t n_samples, int64_t per, uint64_t seed) {
    mkdir(dir, 0755);
    test_rand_seed(seed);
    featfile_info info = test_info();
    int64_t n_shards = (n_samples + per - 1) / per;
    sample *s = malloc(sizeof *s);
    for (int64_t sh = 0; sh < n_shards; sh++) {
        char name[64], path[1200];
        shard_name(name, sizeof name, sh, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        featfile_writer w;
        CHECK(featfile_writer_open(&w, path, &info) == 0);
        for (int64_t g = sh * per; g < (sh + 1) * per && g < n_samples; g++) {
            make_sample(s, g);
            CHECK(featfile_writer_append(&w, s->tok, s->mask, s->n, s->feat, s->idx, s->val, s->lse) == 0);
        }
        CHECK(featfile_writer_close(&w) == 0);
    }
    free(s);
    write_index(dir, n_shards, n_samples, HID);
}

// Every sample of the set read back equals what was written (samples visited in the order given).
static void check_set(featreader *r, int64_t n_samples, uint64_t seed, const int64_t *order) {
    sample *want = malloc((size_t)n_samples * sizeof *want);
    test_rand_seed(seed);
    for (int64_t g = 0; g < n_samples; g++) make_sample(&want[g], g);
    sample *got = malloc(sizeof *got);
    int bad = 0;
    for (int64_t k = 0; k < n_samples; k++) {
        int64_t g = order ? order[k] : k;
        const sample *w = &want[g];
        memset(got, 0, sizeof *got);
        int64_t n = featreader_len(r, g);
        int rc = featreader_read(r, g, got->tok, got->mask, got->feat, got->idx, got->val, got->lse);
        int same = rc == 0 && n == w->n && memcmp(got->tok, w->tok, (size_t)n * sizeof(int32_t)) == 0 &&
                   memcmp(got->mask, w->mask, (size_t)n) == 0 &&
                   memcmp(got->feat, w->feat, (size_t)(n * D) * sizeof(uint16_t)) == 0 &&
                   memcmp(got->idx, w->idx, (size_t)(n * K) * sizeof(int32_t)) == 0 &&
                   memcmp(got->val, w->val, (size_t)(n * K) * sizeof(float)) == 0 &&
                   memcmp(got->lse, w->lse, (size_t)n * sizeof(float)) == 0;
        if (!same && bad++ < 3) test_fail(__FILE__, __LINE__, "sample %lld read back differs (rc %d: %s)", (long long)g, rc, error_msg());
    }
    CHECK_MSG(bad == 0, "%d of %lld samples differ", bad, (long long)n_samples);
    free(got);
    free(want);
}

static void test_two_shards(void) {
    const char *dir = test_path("two");
    write_set(dir, 13, 8, 11); // shards of 8 and 5 samples
    featreader *r = NULL;
    CHECK(featreader_open(&r, dir) == 0);
    if (!r) return;
    CHECK(featreader_samples(r) == 13);
    CHECK(featreader_topk(r) == K && featreader_feat_dim(r) == D && featreader_vocab(r) == V);
    for (int64_t g = 0; g < 13; g++) CHECK(featreader_len(r, g) == 1 + (g * 7 + 3) % MAXLEN);
    check_set(r, 13, 11, NULL);
    // backwards across the boundary, then forwards again
    int64_t order[13] = {12, 8, 7, 0, 9, 6, 5, 11, 1, 2, 10, 3, 4};
    check_set(r, 13, 11, order);
    // any output may be NULL
    int32_t tok[MAXLEN];
    float lse[MAXLEN];
    CHECK(featreader_read(r, 8, tok, NULL, NULL, NULL, NULL, NULL) == 0);
    CHECK(featreader_read(r, 8, NULL, NULL, NULL, NULL, NULL, lse) == 0);
    CHECK(lse[0] == 8.0f && lse[1] == 8.25f);
    CHECK_ERR(featreader_read(r, 13, tok, NULL, NULL, NULL, NULL, NULL), "sample 13 out of range [0, 13)");
    CHECK_ERR(featreader_read(r, -1, tok, NULL, NULL, NULL, NULL, NULL), "out of range");
    featreader_close(r);
}

// More shards than the reader keeps open: shards are closed and reopened as reads move around.
static void test_many_shards(void) {
    const char *dir = test_path("many");
    enum { NS = 90 };
    write_set(dir, NS, 2, 5); // 45 shards
    featreader *r = NULL;
    CHECK(featreader_open(&r, dir) == 0);
    if (!r) return;
    int64_t order[NS];
    for (int64_t k = 0; k < NS; k++) order[k] = (k * 37) % NS; // 37 is coprime to 90: a permutation
    check_set(r, NS, 5, order);
    check_set(r, NS, 5, NULL);
    featreader_close(r);
}

static void write_text(const char *path, const char *text) { test_write_file(path, text, strlen(text)); }

static void test_errors(void) {
    featreader *r = NULL;
    // no features.json
    const char *empty = test_path("empty");
    mkdir(empty, 0755);
    CHECK_ERR(featreader_open(&r, empty), "features.json: cannot open");
    CHECK(r == NULL);

    // bad JSON
    const char *badjson = test_path("badjson");
    mkdir(badjson, 0755);
    char p[1200];
    snprintf(p, sizeof p, "%s/features.json", badjson);
    write_text(p, "{ \"format_version\": 1, \"shards\": [ \n");
    CHECK_ERR(featreader_open(&r, badjson), "features.json: not valid JSON");
    write_text(p, "[1, 2]");
    CHECK_ERR(featreader_open(&r, badjson), "expected a JSON object");
    write_text(p, "{\"format_version\": 2}");
    CHECK_ERR(featreader_open(&r, badjson), "format_version = 2");
    write_text(p, "{\"format_version\": 1, \"hidden_size\": 6, \"topk\": \"4\"}");
    CHECK_ERR(featreader_open(&r, badjson), "\"topk\" must be an integer");

    // a listed shard is missing: the index of a 2-shard set with shard 1 removed
    const char *miss = test_path("missing");
    write_set(miss, 5, 3, 1);
    snprintf(p, sizeof p, "%s/features-00001-of-00002.h5", miss);
    CHECK(remove(p) == 0);
    CHECK_ERR(featreader_open(&r, miss), "lists shard");
    CHECK_ERR(featreader_open(&r, miss), "features-00001-of-00002.h5, which is missing");

    // a shard without /lse
    const char *nolse = test_path("nolse");
    write_set(nolse, 5, 3, 1);
    snprintf(p, sizeof p, "%s/features-00000-of-00002.h5", nolse);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Ldelete(f, "/lse", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    CHECK_ERR(featreader_open(&r, nolse), "features-00000-of-00002.h5: missing dataset /lse");

    // a shard whose /lse is a virtual dataset over a missing file (HDF5 would read fill values)
    const char *vlse = test_path("vlse");
    write_set(vlse, 5, 3, 1);
    snprintf(p, sizeof p, "%s/features-00000-of-00002.h5", vlse);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Ldelete(f, "/lse", H5P_DEFAULT) >= 0);
    hid_t dl = H5Dopen2(f, "/tokens", H5P_DEFAULT), sp = H5Dget_space(dl), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_virtual(dcpl, sp, "absent_source.h5", "/lse", sp) >= 0);
    hid_t dv = H5Dcreate2(f, "/lse", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(dv >= 0);
    H5Dclose(dv);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Dclose(dl);
    H5Fclose(f);
    CHECK_ERR(featreader_open(&r, vlse), "features-00000-of-00002.h5: dataset /lse is a virtual dataset");

    // a shard without the training-set part (/offsets) fails in trainset_open, naming it
    const char *nooff = test_path("nooff");
    write_set(nooff, 5, 3, 1);
    snprintf(p, sizeof p, "%s/features-00001-of-00002.h5", nooff);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Ldelete(f, "/offsets", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    CHECK_ERR(featreader_open(&r, nooff), "features-00001-of-00002.h5: missing dataset /offsets");

    // the index disagrees with the shards: other hidden size, other sample count
    const char *other = test_path("other");
    write_set(other, 5, 3, 1);
    write_index(other, 2, 5, HID + 1);
    CHECK_ERR(featreader_open(&r, other), "attributes hidden_size = 6");
    write_index(other, 2, 6, HID);
    CHECK_ERR(featreader_open(&r, other), "lists 6 samples, its 2 shard(s) hold 5");
    write_index(other, 2, 4, HID);
    CHECK_ERR(featreader_open(&r, other), "more than the 4");
    write_index(other, 2, 5, HID);
    CHECK(featreader_open(&r, other) == 0);
    featreader_close(r);
    r = NULL;

    // a teacher dataset of the wrong shape
    const char *shape = test_path("shape");
    write_set(shape, 5, 3, 1);
    snprintf(p, sizeof p, "%s/features-00001-of-00002.h5", shape);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Ldelete(f, "/topk_val", H5P_DEFAULT) >= 0);
    hsize_t dims[2] = {3, K};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, "/topk_val", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0);
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(f);
    CHECK_ERR(featreader_open(&r, shape), "dataset /topk_val has shape [3, 4], expected [");
    featreader_close(NULL); // harmless
}

int main(void) {
    test_rand_seed(0x9E3779B97F4A7C15ull);
    test_two_shards();
    test_many_shards();
    test_errors();
    return test_finish("test_featreader");
}
