// test_trainset.c: the HDF5 training set (src/common/data/trainset.c): writer -> reader round trips, the
// validation (rejected samples counted by reason), and files broken on purpose through the HDF5
// API, each expecting the error or the rejection it should cause.
#define _GNU_SOURCE // memmem
#include <fcntl.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/data/trainset.h"
#include "testing.h"

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

// No "<path>.tmp.<pid>" left behind.
static int tmp_exists(const char *path) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    return file_exists(tmp);
}

// The whole file, malloc'd (NULL when it cannot be read); its size in *n.
static char *read_file(const char *path, size_t *n) {
    struct stat st;
    int fd = open(path, O_RDONLY);
    char *buf = fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0 ? malloc((size_t)st.st_size) : NULL;
    ssize_t got = buf ? read(fd, buf, (size_t)st.st_size) : -1;
    if (fd >= 0) close(fd);
    *n = got > 0 ? (size_t)got : 0;
    return buf;
}

// Round trip: samples of many lengths, including length 1 and one longer than the writer's buffer
// (2^18 tokens) and the HDF5 chunk (2^16), so appends are split across flushes.
static void test_round_trip(void) {
    const char *path = test_path("round.h5");
    enum { NS = 40 };
    int64_t lens[NS];
    int32_t *ids[NS];
    uint8_t *masks[NS];
    const int64_t V = 5000;
    int64_t total_loss = 0, total = 0;
    for (int i = 0; i < NS; i++) {
        lens[i] = i == 0 ? 1 : i == 7 ? 300001 : i == 8 ? 65536 : 1 + test_rand_u32() % 700;
        ids[i] = malloc((size_t)lens[i] * sizeof(int32_t));
        masks[i] = malloc((size_t)lens[i]);
        for (int64_t k = 0; k < lens[i]; k++) {
            ids[i][k] = (int32_t)(test_rand_u32() % V);
            masks[i][k] = (uint8_t)(k == 0 ? 1 : test_rand_u32() % 2); // at least one loss token per sample
            total_loss += masks[i][k];
        }
        ids[i][0] = i == 3 ? (int32_t)(V - 1) : ids[i][0]; // the largest id appears
        total += lens[i];
    }
    trainset_writer w;
    CHECK(trainset_writer_open(&w, path, V, "test-tokenizer/v1") == 0);
    for (int i = 0; i < NS; i++) CHECK(trainset_writer_append(&w, ids[i], masks[i], lens[i]) == 0);
    CHECK(!file_exists(path)); // only the temporary until close
    CHECK(tmp_exists(path));
    CHECK(trainset_writer_close(&w) == 0);
    CHECK(file_exists(path));
    CHECK(!tmp_exists(path));
    CHECK(w.n_samples == NS && w.n_tokens == total && w.vocab_size == V);

    trainset ts;
    CHECK(trainset_open(&ts, path, 0) == 0);
    CHECK(ts.n_raw == NS && ts.n == NS && ts.n_tokens == total);
    CHECK(ts.vocab_size == V && ts.format_version == TRAINSET_FORMAT_VERSION);
    CHECK(strcmp(ts.tokenizer, "test-tokenizer/v1") == 0);
    CHECK(ts.loss_tokens == total_loss);
    CHECK(ts.rejected_offsets == 0 && ts.rejected_ids == 0 && ts.rejected_short == 0);
    int32_t *tok = malloc(300001 * sizeof(int32_t));
    uint8_t *msk = malloc(300001);
    int same = 1;
    for (int i = 0; i < NS; i++) {
        CHECK(trainset_len(&ts, i) == lens[i]);
        CHECK(trainset_read(&ts, i, tok, msk) == 0);
        same &= memcmp(tok, ids[i], (size_t)lens[i] * sizeof(int32_t)) == 0;
        same &= memcmp(msk, masks[i], (size_t)lens[i]) == 0;
    }
    CHECK_MSG(same, "samples read back differ from those written");
    CHECK(trainset_read(&ts, 7, tok, NULL) == 0); // either buffer may be NULL
    CHECK(trainset_read(&ts, 7, NULL, msk) == 0);
    CHECK_ERR(trainset_read(&ts, NS, tok, msk), "out of range");
    trainset_close(&ts);
    free(tok);
    free(msk);
    for (int i = 0; i < NS; i++) {
        free(ids[i]);
        free(masks[i]);
    }
}

// More samples than the writer buffers offsets for (2^16), vocab_size found at close, mask NULL.
static void test_many_samples(void) {
    const char *path = test_path("many.h5");
    const int NS = 70000;
    trainset_writer w;
    CHECK(trainset_writer_open(&w, path, 0, NULL) == 0);
    int ok = 1;
    int64_t total = 0;
    for (int i = 0; i < NS; i++) {
        int32_t t[3] = {i % 100, (i * 7) % 100, i == 12344 ? 4321 : 5};
        int64_t n = 1 + i % 3;
        ok &= trainset_writer_append(&w, t, NULL, n) == 0;
        total += n;
    }
    CHECK(ok);
    CHECK(trainset_writer_close(&w) == 0);
    CHECK(w.vocab_size == 4322);
    trainset ts;
    CHECK(trainset_open(&ts, path, 0) == 0);
    CHECK(ts.n == NS && ts.n_tokens == total && ts.vocab_size == 4322 && ts.loss_tokens == total);
    CHECK(strcmp(ts.tokenizer, "") == 0);
    int32_t t[3];
    uint8_t m[3];
    CHECK(trainset_len(&ts, 12344) == 3);
    CHECK(trainset_read(&ts, 12344, t, m) == 0);
    CHECK(t[0] == 44 && t[1] == (12344 * 7) % 100 && t[2] == 4321 && m[0] == 1 && m[2] == 1);
    CHECK(trainset_len(&ts, NS - 1) == 1 + (NS - 1) % 3);
    trainset_close(&ts);
}

// The training data's rule (SPEC §4, §7): with min_loss_tokens > 0 a sample is used when it has a
// valid anchor (two consecutive loss tokens inside the sample: a pair across a sample boundary
// counts for neither) and at least min_loss_tokens loss tokens; the others are rejected and counted.
// With 0 every well-formed sample is kept.
static void test_min_loss_tokens(void) {
    const char *path = test_path("short.h5");
    trainset_writer w;
    CHECK(trainset_writer_open(&w, path, 10, "t") == 0);
    int32_t t[4] = {1, 2, 3, 4};
    uint8_t m0[4] = {0, 0, 0, 0}, m1[4] = {1, 0, 0, 1}, m2[1] = {1}, m3[4] = {1, 1, 1, 0}, m4[4] = {0, 1, 1, 0};
    CHECK(trainset_writer_append(&w, t, m0, 4) == 0); // no loss token
    CHECK(trainset_writer_append(&w, t, m1, 4) == 0); // 2 loss tokens, no anchor; its last 1 ...
    CHECK(trainset_writer_append(&w, t, m2, 1) == 0); // ... and this sample's only 1 are no anchor either
    CHECK(trainset_writer_append(&w, t, m3, 3) == 0); // 3 loss tokens, 2 anchors
    CHECK(trainset_writer_append(&w, t, m4, 4) == 0); // 2 loss tokens, 1 anchor
    CHECK(trainset_writer_close(&w) == 0);
    trainset ts;
    CHECK(trainset_open(&ts, path, 2) == 0);
    CHECK(ts.n_raw == 5 && ts.n == 2 && ts.rejected_short == 3 && ts.rejected_ids == 0);
    CHECK(ts.index[0] == 3 && ts.index[1] == 4);
    CHECK(ts.loss_tokens == 5);
    CHECK(trainset_len(&ts, 0) == 3);
    trainset_close(&ts);
    CHECK(trainset_open(&ts, path, 3) == 0); // a minimum above the anchor rule's 2
    CHECK(ts.n == 1 && ts.index[0] == 3 && ts.rejected_short == 4 && ts.loss_tokens == 3);
    trainset_close(&ts);
    CHECK(trainset_open(&ts, path, 0) == 0);
    CHECK(ts.n == 5 && ts.rejected_short == 0 && ts.loss_tokens == 8);
    trainset_close(&ts);
}

// Bad input at write time: the error names the sample and the value, and the writer is aborted.
static void test_writer_errors(void) {
    const char *path = test_path("bad_write.h5");
    trainset_writer w;
    int32_t good[3] = {1, 2, 3}, big[3] = {1, 1000, 3}, neg[2] = {5, -7};
    uint8_t bad_mask[3] = {1, 2, 0};

    CHECK(trainset_writer_open(&w, path, 1000, "t") == 0);
    CHECK(trainset_writer_append(&w, good, NULL, 3) == 0);
    CHECK_ERR(trainset_writer_append(&w, big, NULL, 3), "sample 1: token 1 has id 1000, outside [0, 1000)");
    CHECK(!file_exists(path) && !tmp_exists(path));
    CHECK_ERR(trainset_writer_append(&w, good, NULL, 3), "failed call");
    CHECK_ERR(trainset_writer_close(&w), "failed call");
    trainset_writer_abort(&w); // harmless after a failure

    CHECK(trainset_writer_open(&w, path, 0, "t") == 0);
    CHECK_ERR(trainset_writer_append(&w, neg, NULL, 2), "negative id -7");
    CHECK(!file_exists(path) && !tmp_exists(path));

    CHECK(trainset_writer_open(&w, path, 0, "t") == 0);
    CHECK_ERR(trainset_writer_append(&w, good, bad_mask, 3), "loss mask 1 is 2");
    CHECK(!file_exists(path) && !tmp_exists(path));

    CHECK(trainset_writer_open(&w, path, 0, "t") == 0);
    CHECK_ERR(trainset_writer_append(&w, good, NULL, 0), "sample 0 is empty");
    CHECK(!file_exists(path) && !tmp_exists(path));

    CHECK_ERR(trainset_writer_open(&w, test_path("no/such/dir/x.h5"), 0, "t"), "cannot create");
}

// Abort removes the temporary and leaves an existing file at path as it was.
static void test_abort(void) {
    const char *path = test_path("abort.h5");
    trainset_writer w;
    int32_t t[2] = {3, 4};
    CHECK(trainset_writer_open(&w, path, 10, "t") == 0);
    CHECK(trainset_writer_append(&w, t, NULL, 2) == 0);
    trainset_writer_abort(&w);
    CHECK(!file_exists(path) && !tmp_exists(path));
    trainset_writer_abort(&w); // twice is harmless

    CHECK(trainset_writer_open(&w, path, 10, "t") == 0);
    CHECK(trainset_writer_append(&w, t, NULL, 2) == 0);
    CHECK(trainset_writer_close(&w) == 0);
    CHECK(trainset_writer_open(&w, path, 10, "t") == 0);
    CHECK(trainset_writer_append(&w, t, NULL, 1) == 0);
    trainset_writer_abort(&w);
    trainset ts;
    CHECK(trainset_open(&ts, path, 0) == 0);
    CHECK(ts.n == 1 && ts.n_tokens == 2); // the old file, untouched
    trainset_close(&ts);
}

// ---------------------------------------------------------------- files broken on purpose

typedef struct {
    const char *skip;       // dataset not written ("/offsets", ...)
    hid_t tokens_type;      // file type of /tokens (0: int32)
    int tokens_rank2;       // /tokens as [N, 1]
    int64_t mask_len;       // -1: N
    int no_vocab;           // no vocab_size attribute
    int64_t format_version; // 0: 1
} raw_opts;

static void write_ds(hid_t f, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                     const void *data) {
    hid_t s = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(f, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(d);
    H5Sclose(s);
}

static void write_int_attr(hid_t f, const char *name, int64_t v) {
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(s);
}

// A training set written directly with the HDF5 API (contiguous datasets, as h5py writes by
// default), vocab_size 100, with the defects asked for in o.
static void write_raw(const char *path, const int32_t *tok, const uint8_t *mask, int64_t N, const int64_t *off,
                      int64_t noff, raw_opts o) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dn[2] = {(hsize_t)N, 1}, dm = (hsize_t)(o.mask_len >= 0 ? o.mask_len : N), doff = (hsize_t)noff;
    if (!o.skip || strcmp(o.skip, "/tokens") != 0)
        write_ds(f, "/tokens", o.tokens_type ? o.tokens_type : H5T_STD_I32LE, H5T_NATIVE_INT32,
                 o.tokens_rank2 ? 2 : 1, dn, tok);
    if (!o.skip || strcmp(o.skip, "/loss_mask") != 0)
        write_ds(f, "/loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, &dm, mask);
    if (!o.skip || strcmp(o.skip, "/offsets") != 0)
        write_ds(f, "/offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &doff, off);
    if (!o.no_vocab) write_int_attr(f, "vocab_size", 100);
    write_int_attr(f, "format_version", o.format_version ? o.format_version : 1);
    H5Fclose(f);
}

static void test_broken_files(void) {
    //                 sample 0    | sample 1 | sample 2        | sample 3
    int32_t tok[12] = {1, 2, 3,     4, 5,      6, 7, 8, 9,       10, 11, 12};
    uint8_t mask[12] = {1, 1, 0,    1, 1,      0, 5, 1, 1,       1, 1, 1};
    int64_t off[5] = {0, 3, 5, 9, 12};
    raw_opts o0 = {NULL, 0, 0, -1, 0, 0};
    trainset ts;
    const char *p = test_path("raw.h5");

    // a mask value other than 0 and 1 is an error naming the element (issue 27)
    write_raw(p, tok, mask, 12, off, 5, o0);
    CHECK_ERR(trainset_open(&ts, p, 0), "dataset /loss_mask: element 6 is 5, a loss mask is 0 or 1");
    mask[6] = 1;
    // the well-formed file reads
    write_raw(p, tok, mask, 12, off, 5, o0);
    CHECK(trainset_open(&ts, p, 0) == 0);
    CHECK(ts.n == 4 && ts.loss_tokens == 10 && ts.tokenizer[0] == '\0');
    uint8_t m[4];
    CHECK(trainset_read(&ts, 2, NULL, m) == 0);
    CHECK(m[0] == 0 && m[1] == 1 && m[2] == 1);
    trainset_close(&ts);

    raw_opts o = o0;
    o.skip = "/offsets";
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "missing dataset /offsets");
    o.skip = "/loss_mask";
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "missing dataset /loss_mask");

    o = o0;
    o.tokens_type = H5T_IEEE_F32LE;
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "dataset /tokens has type float32, expected int32");
    o.tokens_type = H5T_STD_I64LE;
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "dataset /tokens has type int64, expected int32");
    o = o0;
    o.tokens_rank2 = 1;
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "dataset /tokens has rank 2, expected 1");
    o = o0;
    o.mask_len = 11;
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "/loss_mask has 11 elements, /tokens has 12");
    o = o0;
    o.no_vocab = 1;
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "missing root attribute vocab_size");
    o = o0;
    o.format_version = 2;
    write_raw(p, tok, mask, 12, off, 5, o);
    CHECK_ERR(trainset_open(&ts, p, 0), "format_version = 2");

    // offsets that decrease: that sample is rejected and counted, the others stay
    int64_t off_dec[5] = {0, 3, 2, 9, 12};
    write_raw(p, tok, mask, 12, off_dec, 5, o0);
    CHECK(trainset_open(&ts, p, 0) == 0);
    CHECK(ts.n_raw == 4 && ts.n == 3 && ts.rejected_offsets == 1);
    CHECK(ts.index[0] == 0 && ts.index[1] == 2 && ts.index[2] == 3 && trainset_len(&ts, 1) == 7);
    int32_t t[7];
    CHECK(trainset_read(&ts, 1, t, NULL) == 0 && t[0] == 3 && t[6] == 9);
    trainset_close(&ts);
    // an empty sample (equal offsets) counts the same way
    int64_t off_eq[5] = {0, 3, 3, 9, 12};
    write_raw(p, tok, mask, 12, off_eq, 5, o0);
    CHECK(trainset_open(&ts, p, 0) == 0);
    CHECK(ts.n == 3 && ts.rejected_offsets == 1);
    trainset_close(&ts);

    // offsets past the end of /tokens: an error naming /offsets and the value
    int64_t off_past[5] = {0, 3, 5, 9, 13};
    write_raw(p, tok, mask, 12, off_past, 5, o0);
    CHECK_ERR(trainset_open(&ts, p, 0), "/offsets: offsets[4] = 13 is outside [0, 12]");
    int64_t off_neg[5] = {-1, 3, 5, 9, 12};
    write_raw(p, tok, mask, 12, off_neg, 5, o0);
    CHECK_ERR(trainset_open(&ts, p, 0), "offsets[0] = -1");
    write_raw(p, tok, mask, 12, off, 0, o0);
    CHECK_ERR(trainset_open(&ts, p, 0), "/offsets is empty");

    // ids outside [0, vocab_size) in the file: those samples are rejected and counted
    int32_t tok_bad[12] = {1, 2, 3, 4, 100, 6, 7, 8, 9, 10, 11, -1};
    write_raw(p, tok_bad, mask, 12, off, 5, o0);
    CHECK(trainset_open(&ts, p, 2) == 0);
    CHECK(ts.n == 2 && ts.rejected_ids == 2 && ts.rejected_short == 0 && ts.index[1] == 2);
    CHECK(ts.loss_tokens == 2 + 3);
    trainset_close(&ts);

    // reasons counted once each, in order offsets > ids > short
    write_raw(p, tok_bad, mask, 12, off_dec, 5, o0);
    CHECK(trainset_open(&ts, p, 4) == 0);
    CHECK(ts.n == 0 && ts.rejected_offsets == 1 && ts.rejected_ids == 2 && ts.rejected_short == 1);
    trainset_close(&ts);

    // not an HDF5 file, a missing file, a truncated HDF5 file
    const char *txt = test_path("text.h5");
    CHECK(test_write_file(txt, "just some text, not HDF5\n", 25) == 0);
    CHECK_ERR(trainset_open(&ts, txt, 0), "not an HDF5 file");
    CHECK_ERR(trainset_open(&ts, test_path("absent.h5"), 0), "absent.h5: cannot open");
    write_raw(p, tok, mask, 12, off, 5, o0);
    FILE *f = fopen(p, "rb");
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    const char *cut = test_path("truncated.h5");
    CHECK(n > 1000 && test_write_file(cut, buf, n / 2) == 0);
    CHECK_ERR(trainset_open(&ts, cut, 0), "truncated");
    CHECK(test_write_file(cut, buf, 100) == 0); // only the superblock's start
    CHECK_ERR(trainset_open(&ts, cut, 0), "cannot open as HDF5");

    // zero samples (and zero tokens) is not an error here (dataset.c refuses it)
    int64_t off0[1] = {0};
    write_raw(p, tok, mask, 0, off0, 1, o0);
    CHECK(trainset_open(&ts, p, 0) == 0);
    CHECK(ts.n_raw == 0 && ts.n == 0);
    trainset_close(&ts);

    // tokens no sample holds: before the first offset, after the last
    int64_t off_late[5] = {2, 3, 5, 9, 12};
    write_raw(p, tok, mask, 12, off_late, 5, o0);
    CHECK_ERR(trainset_open(&ts, p, 0), "raw.h5: dataset /offsets: offsets[0] = 2, expected 0");
    int64_t off_short[5] = {0, 3, 5, 9, 10};
    write_raw(p, tok, mask, 12, off_short, 5, o0);
    CHECK_ERR(trainset_open(&ts, p, 0), "the last offset, offsets[4] = 10, is not the length of /tokens (12)");
    write_raw(p, tok, mask, 12, off0, 1, o0);
    CHECK_ERR(trainset_open(&ts, p, 0), "offsets[0] = 0, is not the length of /tokens (12)");
}

// /tokens (12 values) as a virtual dataset over a missing file, or with external raw storage.
static void write_not_stored(const char *path, const char *raw, int virtual_ds) {
    int32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    uint8_t mask[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t off[3] = {0, 6, 12};
    hsize_t n = 12, noff = 3;
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t s = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (virtual_ds) H5Pset_virtual(dcpl, s, "absent_source.h5", "/tokens", s);
    else H5Pset_external(dcpl, raw, 0, 12 * sizeof(int32_t));
    hid_t d = H5Dcreate2(f, "/tokens", H5T_STD_I32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (!virtual_ds) H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(s);
    write_ds(f, "/loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, &n, mask);
    write_ds(f, "/offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &noff, off);
    write_int_attr(f, "vocab_size", 100);
    write_int_attr(f, "format_version", 1);
    H5Fclose(f);
}

// Datasets whose data lives outside the file are refused, naming the dataset.
static void test_not_stored(void) {
    trainset ts;
    const char *p = test_path("virtual.h5");
    write_not_stored(p, NULL, 1);
    CHECK_ERR(trainset_open(&ts, p, 0), "virtual.h5: dataset /tokens is a virtual dataset");
    p = test_path("external.h5");
    write_not_stored(p, test_path("external.raw"), 0);
    CHECK_ERR(trainset_open(&ts, p, 0), "external.h5: dataset /tokens has external storage (1 raw file(s)");
}

// The tokenizer attribute: fixed-length as written now (an h5py-readable string attribute of the
// root, no global heap in the file), a legacy variable-length one read, a corrupt heap an error.
static void test_tokenizer_attr(void) {
    const char *p = test_path("tok.h5");
    int32_t ids[5] = {1, 2, 3, 4, 5};
    trainset_writer w;
    trainset ts;
    CHECK(trainset_writer_open(&w, p, 10, "org/tok-v2") == 0);
    CHECK(trainset_writer_append(&w, ids, NULL, 5) == 0 && trainset_writer_close(&w) == 0);
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = H5Aopen(f, "tokenizer", H5P_DEFAULT), type = H5Aget_type(a);
    CHECK(H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) == 0 && H5Tget_size(type) == 10);
    H5Tclose(type);
    H5Aclose(a);
    H5Fclose(f);
    size_t n = 0;
    char *bytes = read_file(p, &n);
    CHECK(bytes && !memmem(bytes, n, "GCOL", 4)); // no global heap collection
    free(bytes);
    CHECK(trainset_open(&ts, p, 0) == 0 && strcmp(ts.tokenizer, "org/tok-v2") == 0);
    trainset_close(&ts);
    CHECK(trainset_writer_open(&w, p, 10, "") == 0); // an empty name: one NUL byte, read back as ""
    CHECK(trainset_writer_append(&w, ids, NULL, 5) == 0 && trainset_writer_close(&w) == 0);
    CHECK(trainset_open(&ts, p, 0) == 0 && ts.tokenizer[0] == '\0');
    trainset_close(&ts);

    // legacy: a variable-length string (what the writer and h5py wrote before)
    int32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    uint8_t mask[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t off[3] = {0, 6, 12};
    raw_opts o0 = {NULL, 0, 0, -1, 0, 0};
    write_raw(p, tok, mask, 12, off, 3, o0);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    a = H5Acreate2(f, "tokenizer", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char *legacy = "legacy/tok";
    H5Awrite(a, type, &legacy);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(f);
    CHECK(trainset_open(&ts, p, 0) == 0 && strcmp(ts.tokenizer, "legacy/tok") == 0);
    trainset_close(&ts);

    // a corrupt object size in the heap block: libhdf5 crashes (or loops) reading it; here an error
    bytes = read_file(p, &n);
    char *gcol = bytes ? memmem(bytes, n, "GCOL", 4) : NULL;
    CHECK(gcol != NULL && (size_t)(gcol - bytes) + 32 < n);
    if (!gcol) return;
    gcol[31] = (char)0xbb; // the top byte of the first object's size (8 bytes at offset 24)
    const char *bad = test_path("tok_bad_heap.h5");
    CHECK(test_write_file(bad, bytes, n) == 0);
    free(bytes);
    CHECK_ERR(trainset_open(&ts, bad, 0), "tok_bad_heap.h5: attribute 'tokenizer' is corrupt");
}

int main(void) {
    test_rand_seed(0x9E3779B97F4A7C15ull);
    test_round_trip();
    test_many_samples();
    test_min_loss_tokens();
    test_writer_errors();
    test_abort();
    test_broken_files();
    test_not_stored();
    test_tokenizer_attr();
    return test_finish("test_trainset");
}
