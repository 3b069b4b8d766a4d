// test_safetensors.c: the safetensors reader, model directories and writer.
//
//   round trip       several dtypes, a 0-d scalar, a zero-size tensor, metadata with escapes
//   malformed files  built byte by byte here; each must fail with the message naming its reason
//   directories      model.safetensors, a 2-shard index, and the index's failure modes
//   writer failures  missing directory, path is a directory, file size limit (a full disk)
//   interop          tests/reference/data/written_by_python.safetensors (Python's writer) is read
//                    here; the writer's output is compared byte for byte with the committed
//                    written_by_c.safetensors, which the Python package checked
//                    (tests/reference/make_safetensors_fixture.py). DFLASH_WRITE_FIXTURE=path
//                    writes that file anew.
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "common/core/half.h"
#include "common/data/safetensors.h"
#include "testing.h"

// ------------------------------------------------------------------------------------------------
// helpers

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    *n = got;
    return buf;
}

// Writes an 8-byte length hlen, then header (hdr_bytes of it), then data; returns the path.
static const char *write_raw(const char *name, uint64_t hlen, const char *header, size_t hdr_bytes,
                             const void *data, size_t ndata) {
    size_t n = 8 + hdr_bytes + ndata;
    unsigned char *buf = malloc(n);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, hdr_bytes);
    if (ndata) memcpy(buf + 8 + hdr_bytes, data, ndata);
    const char *path = test_path(name);
    if (test_write_file(path, buf, n) != 0) test_fail(__FILE__, __LINE__, "cannot write %s", path);
    free(buf);
    return path;
}

// A file with this header (its true length) and ndata zero bytes of data; opened and closed.
static int open_header(const char *header, size_t ndata) {
    static const unsigned char zeros[256];
    const char *path = write_raw("bad.safetensors", strlen(header), header, strlen(header), zeros, ndata);
    st_file f;
    int rc = safetensors_open(&f, path);
    if (rc == 0) safetensors_close(&f);
    return rc;
}

// A file truncated to its first n bytes, opened and closed.
static int open_prefix(const char *bytes, size_t n) {
    const char *path = test_path("cut.safetensors");
    test_write_file(path, bytes, n);
    st_file f;
    int rc = safetensors_open(&f, path);
    if (rc == 0) safetensors_close(&f);
    return rc;
}

// Header entry: ENT("a", "U8", "[4]", 0, 4).
#define ENT(name, dt, shape, b, e)                                                                 \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

// Number of files in dir whose name contains ".tmp." (leftover temporaries of the writer).
static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static tensor mk(dtype dt, void *data, int ndim, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    return tensor_make(dt, data, DEVICE_CPU, ndim, shape);
}

static float f32_of_bits(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

// ------------------------------------------------------------------------------------------------
// round trip

static void test_round_trip(void) {
    float wt[6] = {1.5f, -2.25f, 0.0f, 3e-8f, -1e30f, 7.0f};
    uint16_t bf[4] = {0x3F80, 0xBFC0, 0x0000, 0x7F80};
    int32_t ids[3] = {-1, 2147483647, -2147483647 - 1};
    uint8_t u8[5] = {0, 1, 127, 128, 255};
    double scalar = -0.1;
    float unused = 0;

    st_writer w;
    safetensors_writer_init(&w);
    CHECK(safetensors_writer_add(&w, "u8", mk(DT_U8, u8, 1, 5, 0)) == 0); // odd size first
    CHECK(safetensors_writer_add(&w, "layer.weight", mk(DT_F32, wt, 2, 2, 3)) == 0);
    CHECK(safetensors_writer_add(&w, "bf16", mk(DT_BF16, bf, 1, 4, 0)) == 0);
    CHECK(safetensors_writer_add(&w, "ids", mk(DT_I32, ids, 1, 3, 0)) == 0);
    CHECK(safetensors_writer_add(&w, "scalar", mk(DT_F64, &scalar, 0, 0, 0)) == 0);
    CHECK(safetensors_writer_add(&w, "zero", mk(DT_F32, &unused, 2, 0, 4)) == 0);
    CHECK(safetensors_writer_add(&w, "null_zero", mk(DT_I64, NULL, 1, 0, 0)) == 0);
    CHECK(safetensors_writer_add(&w, "quote\"back\\slash\nnl", mk(DT_U8, u8, 1, 2, 0)) == 0);
    safetensors_writer_meta(&w, "format", "pt");
    safetensors_writer_meta(&w, "step", "1");
    safetensors_writer_meta(&w, "step", "12"); // the last value wins
    // Refused additions.
    CHECK_ERR(safetensors_writer_add(&w, "ids", mk(DT_I32, ids, 1, 3, 0)), "'ids' added twice");
    CHECK_ERR(safetensors_writer_add(&w, "__metadata__", mk(DT_U8, u8, 1, 1, 0)), "reserved");
    tensor gpu = mk(DT_F32, wt, 1, 1, 0);
    gpu.device = DEVICE_CUDA;
    CHECK_ERR(safetensors_writer_add(&w, "g", gpu), "'g' is not in host memory");
    CHECK_ERR(safetensors_writer_add(&w, "nodata", mk(DT_F32, NULL, 1, 2, 0)), "'nodata' has no data");
    CHECK(w.n == 8);

    const char *path = test_path("rt.safetensors");
    CHECK(safetensors_writer_write(&w, path) == 0);
    CHECK(count_tmp(test_tmpdir()) == 0);

    st_file f;
    CHECK(safetensors_open(&f, path) == 0);
    CHECK(f.n == 8);
    CHECK(f.data_start % 8 == 0);
    const char *start = "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"12\"},\"u8\":";
    CHECK(memcmp((const char *)f.map + 8, start, strlen(start)) == 0);
    // Header order is insertion order; data is aligned to the element size.
    const char *order[8] = {"u8", "layer.weight", "bf16", "ids", "scalar", "zero", "null_zero",
                            "quote\"back\\slash\nnl"};
    for (int i = 0; i < 8 && i < f.n; i++) {
        CHECK_MSG(strcmp(f.entries[i].name, order[i]) == 0, "entry %d is '%s'", i, f.entries[i].name);
        CHECK_MSG((uintptr_t)f.entries[i].data % dtype_size(f.entries[i].dt) == 0, "'%s' misaligned",
                  f.entries[i].name);
    }
    const st_entry *e = safetensors_find(&f, "layer.weight");
    CHECK(e && e->dt == DT_F32 && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 3);
    CHECK(e && e->nbytes == sizeof wt && memcmp(e->data, wt, sizeof wt) == 0);
    e = safetensors_find(&f, "bf16");
    CHECK(e && e->dt == DT_BF16 && e->ndim == 1 && e->shape[0] == 4 && memcmp(e->data, bf, 8) == 0);
    e = safetensors_find(&f, "ids");
    CHECK(e && e->dt == DT_I32 && e->nbytes == 12 && memcmp(e->data, ids, 12) == 0);
    e = safetensors_find(&f, "u8");
    CHECK(e && e->dt == DT_U8 && e->nbytes == 5 && memcmp(e->data, u8, 5) == 0);
    e = safetensors_find(&f, "scalar");
    CHECK(e && e->dt == DT_F64 && e->ndim == 0 && e->nbytes == 8 && memcmp(e->data, &scalar, 8) == 0);
    e = safetensors_find(&f, "zero");
    CHECK(e && e->ndim == 2 && e->shape[0] == 0 && e->shape[1] == 4 && e->nbytes == 0);
    e = safetensors_find(&f, "null_zero");
    CHECK(e && e->dt == DT_I64 && e->nbytes == 0);
    e = safetensors_find(&f, "quote\"back\\slash\nnl");
    CHECK(e && e->nbytes == 2 && memcmp(e->data, u8, 2) == 0);
    CHECK(safetensors_find(&f, "missing") == NULL);
    CHECK(f.n_meta == 2);
    CHECK(safetensors_meta(&f, "format") && strcmp(safetensors_meta(&f, "format"), "pt") == 0);
    CHECK(safetensors_meta(&f, "step") && strcmp(safetensors_meta(&f, "step"), "12") == 0);
    CHECK(safetensors_meta(&f, "nope") == NULL);
    tensor t = st_entry_tensor(safetensors_find(&f, "layer.weight"));
    CHECK(t.dt == DT_F32 && t.ndim == 2 && t.shape[1] == 3 && t.device == DEVICE_CPU);
    CHECK(tensor_bytes(&t) == sizeof wt && ((const float *)t.data)[1] == -2.25f);
    safetensors_close(&f);
    CHECK(f.map == NULL && f.entries == NULL); // closed = zeroed

    // Writing over an existing file replaces it.
    st_writer w2;
    safetensors_writer_init(&w2);
    CHECK(safetensors_writer_add(&w2, "only", mk(DT_I32, ids, 1, 2, 0)) == 0);
    CHECK(safetensors_writer_write(&w2, path) == 0);
    CHECK(safetensors_open(&f, path) == 0);
    CHECK(f.n == 1 && f.n_meta == 0 && strcmp(f.entries[0].name, "only") == 0);
    CHECK(f.size == 8 + 64 + 8); // header padded to a multiple of 8
    safetensors_close(&f);
    safetensors_writer_free(&w2);

    // An empty writer makes a valid empty file: "{}" padded to 8 bytes.
    st_writer w3;
    safetensors_writer_init(&w3);
    const char *empty = test_path("empty.safetensors");
    CHECK(safetensors_writer_write(&w3, empty) == 0);
    size_t n = 0;
    char *bytes = read_all(empty, &n);
    CHECK(bytes && n == 16 && memcmp(bytes, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0);
    free(bytes);
    CHECK(safetensors_open(&f, empty) == 0 && f.n == 0);
    safetensors_close(&f);
    safetensors_writer_free(&w3);
    safetensors_writer_free(&w);
}

// Hand-made valid files: zero-size tensors sharing offsets, foreign key order, spaces, extra keys.
static void test_valid_by_hand(void) {
    CHECK(open_header("{" ENT("z", "F32", "[0]", 0, 0) "," ENT("a", "U8", "[4]", 0, 4) ","
                      ENT("z2", "I32", "[2,0]", 4, 4) "}", 4) == 0);
    // Keys in any order, whitespace in the JSON, trailing space padding, unknown keys ignored.
    CHECK(open_header(" { \"b\" : {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [4, 12], \"x\": 1},\n"
                      "   \"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]} }   ", 12) == 0);
    CHECK(open_header("{}", 0) == 0);
    CHECK(open_header("{\"__metadata__\":{}}", 0) == 0);

    // Data of a hand-made file is what was written, in the header's order.
    unsigned char data[6] = {1, 2, 3, 4, 5, 6};
    const char *h = "{" ENT("hi", "U16", "[2]", 2, 6) "," ENT("lo", "I8", "[2]", 0, 2) "}";
    const char *path = write_raw("hand.safetensors", strlen(h), h, strlen(h), data, 6);
    st_file f;
    CHECK(safetensors_open(&f, path) == 0);
    CHECK(f.n == 2 && strcmp(f.entries[0].name, "hi") == 0);
    const st_entry *e = safetensors_find(&f, "hi");
    CHECK(e && e->dt == DT_U16 && e->nbytes == 4 && memcmp(e->data, data + 2, 4) == 0);
    safetensors_close(&f);
}

// An odd header length (valid: Python's safetensors loads it) leaves every tensor's data at an odd
// file offset, and an F32 after a 6-byte BF16 is misaligned whatever the header: the reader hands
// out aligned copies, so in-place loads of the element type (what convert_to_f32 and the CPU
// backend do; UBSan checks them in the sanitizer build) read the right values.
static void test_misaligned(void) {
    char h[256];
    const char *body = "{" ENT("w", "BF16", "[3]", 0, 6) "," ENT("f", "F32", "[2]", 6, 14) ","
                       ENT("h", "F16", "[1]", 14, 16) "}";
    snprintf(h, sizeof h, "%s%s", body, strlen(body) % 2 ? "" : " "); // odd length
    size_t hl = strlen(h);
    CHECK(hl % 2 == 1);
    unsigned char data[16];
    uint16_t w[3] = {bf16_from_f32(1.5f), bf16_from_f32(-2.0f), bf16_from_f32(3.0f)}, hh = f16_from_f32(0.5f);
    float fv[2] = {0.25f, 7.0f};
    memcpy(data, w, 6);
    memcpy(data + 6, fv, 8);
    memcpy(data + 14, &hh, 2);
    const char *path = write_raw("odd.safetensors", hl, h, hl, data, sizeof data);
    st_file f;
    CHECK(safetensors_open(&f, path) == 0);
    if (f.n != 3) return;
    for (int i = 0; i < f.n; i++) CHECK((uintptr_t)f.entries[i].data % dtype_size(f.entries[i].dt) == 0);
    const st_entry *ew = safetensors_find(&f, "w"), *ef = safetensors_find(&f, "f"), *eh = safetensors_find(&f, "h");
    float out[3] = {0};
    CHECK(ew && convert_to_f32(out, ew->data, ew->dt, 3) == 0);
    CHECK(out[0] == 1.5f && out[1] == -2.0f && out[2] == 3.0f);
    const float *in_place = ef ? (const float *)ef->data : NULL;
    CHECK(in_place && in_place[0] == 0.25f && in_place[1] == 7.0f);
    CHECK(eh && convert_to_f32(out, eh->data, eh->dt, 1) == 0 && out[0] == 0.5f);
    CHECK(memcmp(ew->data, data, 6) == 0 && memcmp(ef->data, data + 6, 8) == 0);
    safetensors_close(&f);
}

// ------------------------------------------------------------------------------------------------
// malformed files

static void test_malformed(void) {
    // Truncation at several points of a valid file.
    float v[4] = {1, 2, 3, 4};
    st_writer w;
    safetensors_writer_init(&w);
    CHECK(safetensors_writer_add(&w, "a", mk(DT_F32, v, 1, 4, 0)) == 0);
    CHECK(safetensors_writer_add(&w, "b", mk(DT_F32, v, 1, 2, 0)) == 0);
    const char *good = test_path("good.safetensors");
    CHECK(safetensors_writer_write(&w, good) == 0);
    safetensors_writer_free(&w);
    size_t n = 0;
    char *bytes = read_all(good, &n);
    CHECK(bytes && n == 8 + 112 + 24);
    if (!bytes || n != 8 + 112 + 24) return;
    CHECK_ERR(open_prefix(bytes, 0), "file is 0 bytes, shorter than the 8-byte header length");
    CHECK_ERR(open_prefix(bytes, 5), "file is 5 bytes, shorter than the 8-byte header length");
    CHECK_ERR(open_prefix(bytes, 8), "header longer than the file: header length 112, file 8 bytes");
    CHECK_ERR(open_prefix(bytes, 60), "header longer than the file");
    CHECK_ERR(open_prefix(bytes, 119), "header longer than the file");
    CHECK_ERR(open_prefix(bytes, 120), "tensor 'a': data_offsets [0, 16] end beyond the data region (0 bytes");
    CHECK_ERR(open_prefix(bytes, 120 + 17), "tensor 'b': data_offsets [16, 24] end beyond the data region (17 bytes");
    CHECK_ERR(open_prefix(bytes, n - 1), "end beyond the data region (23 bytes");
    CHECK(open_prefix(bytes, n) == 0);
    // The message names the file.
    CHECK_ERR(open_prefix(bytes, n - 1), test_path("cut.safetensors"));
    free(bytes);

    // Header length past the end, and absurd.
    CHECK_ERR(safetensors_open(&(st_file){0}, write_raw("h.safetensors", 1000, "{}", 2, NULL, 0)),
              "header longer than the file: header length 1000");
    CHECK_ERR(safetensors_open(&(st_file){0}, write_raw("h.safetensors", UINT64_MAX, "{}", 2, NULL, 0)),
              "header longer than the file: header length 18446744073709551615");

    // Not JSON, or not one object.
    CHECK_ERR(open_header("{\"a\": ", 0), "header is not valid JSON");
    CHECK_ERR(open_header("", 0), "header is not valid JSON");
    CHECK_ERR(open_header("{} x", 0), "trailing bytes after it at header byte 3");
    CHECK_ERR(open_header("{}{}", 0), "trailing bytes");
    CHECK_ERR(safetensors_open(&(st_file){0}, write_raw("nul.safetensors", 4, "{}\0 ", 4, NULL, 0)),
              "NUL byte at header offset 2");
    CHECK_ERR(open_header("[1, 2]", 0), "header is [1,2], not a JSON object");
    CHECK_ERR(open_header("\"x\"", 0), "not a JSON object");

    // Entries of the wrong shape.
    CHECK_ERR(open_header("{\"a\": 3}", 0), "tensor 'a': entry is 3, not a JSON object");
    CHECK_ERR(open_header("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4), "tensor 'a': missing \"dtype\"");
    CHECK_ERR(open_header("{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4), "tensor 'a': missing \"shape\"");
    CHECK_ERR(open_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4), "tensor 'a': missing \"data_offsets\"");
    CHECK_ERR(open_header("{\"a\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4),
              "tensor 'a': dtype is 5, not a string");
    CHECK_ERR(open_header("{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4),
              "tensor 'a': key \"dtype\" appears twice");
    CHECK_ERR(open_header("{" ENT("a", "F8_E4M3FNUZ", "[4]", 0, 4) "}", 4), "tensor 'a': unknown dtype 'F8_E4M3FNUZ'");
    CHECK_ERR(open_header("{" ENT("a", "f32", "[1]", 0, 4) "}", 4), "unknown dtype 'f32'");
    CHECK_ERR(open_header("{" ENT("a", "F32", "4", 0, 16) "}", 16), "tensor 'a': shape is 4, not an array");
    CHECK_ERR(open_header("{" ENT("a", "F32", "[2,-1]", 0, 4) "}", 4), "tensor 'a': shape[1] = -1 is not an integer");
    CHECK_ERR(open_header("{" ENT("a", "F32", "[1.5]", 0, 4) "}", 4), "shape[0] = 1.5 is not an integer");
    CHECK_ERR(open_header("{" ENT("a", "F32", "[\"2\"]", 0, 8) "}", 8), "shape[0] = \"2\" is not an integer");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[1e300]", 0, 8) "}", 8), "is not an integer in [0, 2^53]");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1), "shape has 9 dimensions, more than 8");
    CHECK_ERR(open_header("{" ENT("a", "F32", "[4294967296,4294967296]", 0, 0) "}", 0),
              "tensor 'a': shape [4294967296,4294967296] of F32 overflows");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[65536,65536,65536,65536]", 0, 0) "}", 0), "overflows");

    // Offsets.
    CHECK_ERR(open_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0]}}", 4),
              "tensor 'a': data_offsets [0] is not a pair of non-negative integers");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[4]", -4, 0) "}", 4), "data_offsets [-4,0] is not a pair");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[4]", 8, 4) "}", 8), "tensor 'a': data_offsets [8, 4] begin after end");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[4]", 0, 4) "," ENT("b", "U8", "[4]", 4, 8) "}", 6),
              "tensor 'b': data_offsets [4, 8] end beyond the data region (6 bytes");
    CHECK_ERR(open_header("{" ENT("a", "F32", "[2]", 0, 4) "}", 4),
              "tensor 'a': shape [2] x F32 = 8 bytes but data_offsets [0, 4] hold 4 (size mismatch)");
    CHECK_ERR(open_header("{" ENT("a", "F32", "[]", 0, 8) "}", 8), "shape [] x F32 = 4 bytes but data_offsets [0, 8] hold 8");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[8]", 0, 8) "," ENT("b", "U8", "[8]", 4, 12) "}", 12),
              "tensor 'b' data_offsets [4, 12] overlap tensor 'a' [0, 8]");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[8]", 0, 8) "," ENT("b", "U8", "[8]", 0, 8) "}", 8), "overlap");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[8]", 0, 8) "," ENT("z", "U8", "[0]", 4, 4) "}", 8),
              "tensor 'z' data_offsets [4, 4] overlap tensor 'a' [0, 8]");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[4]", 0, 4) "," ENT("b", "U8", "[4]", 8, 12) "}", 12),
              "hole: data bytes [4, 8) before tensor 'b' belong to no tensor");
    CHECK_ERR(open_header("{" ENT("b", "U8", "[4]", 4, 8) "}", 8), "hole: data bytes [0, 4) before tensor 'b'");
    CHECK_ERR(open_header("{" ENT("a", "U8", "[4]", 0, 4) "}", 8), "hole: data bytes [4, 8) after tensor 'a'");
    CHECK_ERR(open_header("{}", 3), "hole: data bytes [0, 3) belong to no tensor (the header lists none)");

    // Duplicate names (cJSON keeps both keys).
    CHECK_ERR(open_header("{" ENT("a", "U8", "[4]", 0, 4) "," ENT("a", "U8", "[4]", 4, 8) "}", 8),
              "tensor 'a' appears twice in the header (duplicate name)");

    // __metadata__.
    CHECK_ERR(open_header("{\"__metadata__\": \"x\"}", 0), "__metadata__ is \"x\", not a JSON object of strings");
    CHECK_ERR(open_header("{\"__metadata__\": [\"x\"]}", 0), "__metadata__ is [\"x\"], not a JSON object");
    CHECK_ERR(open_header("{\"__metadata__\": {\"a\": \"1\", \"k\": 1}}", 0), "__metadata__ key 'k' is 1, not a string");
    CHECK_ERR(open_header("{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}}", 0), "__metadata__ key 'k' appears twice");
    CHECK_ERR(open_header("{\"__metadata__\": {}, \"__metadata__\": {}}", 0), "__metadata__ appears twice");

    // Not a file.
    CHECK_ERR(safetensors_open(&(st_file){0}, test_path("nope.safetensors")), "nope.safetensors: cannot open: No such file");
    CHECK_ERR(safetensors_open(&(st_file){0}, test_tmpdir()), "not a regular file");
}

// ------------------------------------------------------------------------------------------------
// directories

static void write_index(const char *dir, const char *json) {
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(test_write_file(path, json, strlen(json)) == 0);
}

// Writes dir/name holding U8 tensors named in names (each 2 bytes).
static void write_shard(const char *dir, const char *name, const char **names, int n) {
    static uint8_t bytes[2] = {7, 9};
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    st_writer w;
    safetensors_writer_init(&w);
    for (int i = 0; i < n; i++) CHECK(safetensors_writer_add(&w, names[i], mk(DT_U8, bytes, 1, 2, 0)) == 0);
    CHECK(safetensors_writer_write(&w, path) == 0);
    safetensors_writer_free(&w);
}

static void test_dirs(void) {
    st_dir d;
    // One file.
    const char *one = test_path("one");
    mkdir(one, 0755);
    const char *names1[3] = {"z.w", "a.w", "m.w"};
    write_shard(one, "model.safetensors", names1, 3);
    CHECK(safetensors_dir_open(&d, one) == 0);
    CHECK(d.n_files == 1 && d.n == 3);
    CHECK(d.n == 3 && strcmp(d.entries[0]->name, "a.w") == 0 && strcmp(d.entries[2]->name, "z.w") == 0);
    const st_entry *e = safetensors_dir_find(&d, "m.w");
    CHECK(e && e->nbytes == 2 && ((const uint8_t *)e->data)[1] == 9);
    CHECK(safetensors_dir_find(&d, "a.w") && safetensors_dir_find(&d, "z.w"));
    CHECK(safetensors_dir_find(&d, "b.w") == NULL && safetensors_dir_find(&d, "") == NULL);
    safetensors_dir_close(&d);

    // Two shards + index; model.safetensors absent.
    const char *sh = test_path("sharded");
    mkdir(sh, 0755);
    const char *s1[3] = {"model.layers.0.w", "model.embed.w", "lm_head.w"};
    const char *s2[2] = {"model.layers.1.w", "model.norm.w"};
    write_shard(sh, "model-00001-of-00002.safetensors", s1, 3);
    write_shard(sh, "model-00002-of-00002.safetensors", s2, 2);
    const char *index_ok =
        "{\"metadata\": {\"total_size\": 10}, \"weight_map\": {"
        "\"model.embed.w\": \"model-00001-of-00002.safetensors\","
        "\"model.layers.0.w\": \"model-00001-of-00002.safetensors\","
        "\"model.layers.1.w\": \"model-00002-of-00002.safetensors\","
        "\"model.norm.w\": \"model-00002-of-00002.safetensors\","
        "\"lm_head.w\": \"model-00001-of-00002.safetensors\"}}";
    write_index(sh, index_ok);
    CHECK(safetensors_dir_open(&d, sh) == 0);
    CHECK(d.n_files == 2 && d.n == 5);
    for (int i = 1; i < d.n; i++) CHECK(strcmp(d.entries[i - 1]->name, d.entries[i]->name) < 0);
    const char *all[5] = {"model.layers.0.w", "model.embed.w", "lm_head.w", "model.layers.1.w", "model.norm.w"};
    for (int i = 0; i < 5; i++) CHECK_MSG(safetensors_dir_find(&d, all[i]) != NULL, "%s not found", all[i]);
    CHECK(safetensors_dir_find(&d, "model.layers.2.w") == NULL);
    safetensors_dir_close(&d);

    // Neither file.
    const char *none = test_path("none");
    mkdir(none, 0755);
    CHECK_ERR(safetensors_dir_open(&d, none), "no model.safetensors or model.safetensors.index.json");
    CHECK_ERR(safetensors_dir_open(&d, none), none);
    CHECK_ERR(safetensors_dir_open(&d, test_path("absent_dir")), "absent_dir: no model.safetensors");

    // Index failures: each names the index, the shard and the tensor.
    const char *bad = test_path("bad");
    mkdir(bad, 0755);
    write_shard(bad, "model-00001-of-00002.safetensors", s1, 3);
    write_shard(bad, "model-00002-of-00002.safetensors", s2, 2);
    write_index(bad, "{\"weight_map\": {\"model.embed.w\": \"model-00001-of-00002.safetensors\","
                     "\"model.x.w\": \"model-00003-of-00003.safetensors\"}}");
    CHECK_ERR(safetensors_dir_open(&d, bad),
              "model.safetensors.index.json: shard 'model-00003-of-00003.safetensors' (listed for tensor "
              "'model.x.w'): ");
    CHECK_ERR(safetensors_dir_open(&d, bad), "model-00003-of-00003.safetensors: cannot open: No such file");
    write_index(bad, "{\"weight_map\": {\"model.embed.w\": \"model-00001-of-00002.safetensors\","
                     "\"model.ghost.w\": \"model-00002-of-00002.safetensors\"}}");
    CHECK_ERR(safetensors_dir_open(&d, bad),
              "tensor 'model.ghost.w' is listed for shard 'model-00002-of-00002.safetensors', which does not contain it");
    write_index(bad, "{\"weight_map\": {\"model.embed.w\": \"model-00002-of-00002.safetensors\","
                     "\"model.norm.w\": \"model-00002-of-00002.safetensors\","
                     "\"lm_head.w\": \"model-00001-of-00002.safetensors\"}}");
    CHECK_ERR(safetensors_dir_open(&d, bad),
              "tensor 'model.embed.w' is listed for shard 'model-00002-of-00002.safetensors' but is in ");
    write_index(bad, "{\"weight_map\": {\"model.embed.w\": \"model-00001-of-00002.safetensors\","
                     "\"model.embed.w\": \"model-00002-of-00002.safetensors\"}}");
    CHECK_ERR(safetensors_dir_open(&d, bad), "tensor 'model.embed.w' is listed twice in the weight_map");
    write_index(bad, "{\"weight_map\": {\"model.embed.w\": \"../model-00001-of-00002.safetensors\"}}");
    CHECK_ERR(safetensors_dir_open(&d, bad), "shard \"../model-00001-of-00002.safetensors\" is not a file name inside");
    write_index(bad, "{\"weight_map\": {\"model.embed.w\": 3}}");
    CHECK_ERR(safetensors_dir_open(&d, bad), "weight_map tensor 'model.embed.w': shard 3 is not a file name");
    write_index(bad, "{\"weight_map\": {}}");
    CHECK_ERR(safetensors_dir_open(&d, bad), "no \"weight_map\" object (or it is empty)");
    write_index(bad, "{\"weight_map\": ");
    CHECK_ERR(safetensors_dir_open(&d, bad), "model.safetensors.index.json: not valid JSON");

    // A tensor in two shards.
    const char *s2dup[2] = {"model.layers.1.w", "model.embed.w"};
    write_shard(bad, "model-00002-of-00002.safetensors", s2dup, 2);
    write_index(bad, "{\"weight_map\": {\"model.embed.w\": \"model-00001-of-00002.safetensors\","
                     "\"model.layers.1.w\": \"model-00002-of-00002.safetensors\"}}");
    CHECK_ERR(safetensors_dir_open(&d, bad), "tensor 'model.embed.w' is in two shards");

    // A truncated shard: the error names the index, the shard and the tensor cut off.
    write_shard(bad, "model-00002-of-00002.safetensors", s2, 2);
    char path[1200];
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", bad);
    size_t n = 0;
    char *bytes = read_all(path, &n);
    if (bytes) {
        CHECK(test_write_file(path, bytes, n - 1) == 0);
        free(bytes);
    }
    write_index(bad, "{\"weight_map\": {\"model.norm.w\": \"model-00002-of-00002.safetensors\","
                     "\"model.layers.1.w\": \"model-00002-of-00002.safetensors\"}}");
    CHECK_ERR(safetensors_dir_open(&d, bad),
              "shard 'model-00002-of-00002.safetensors' (listed for tensor 'model.norm.w'): ");
    CHECK_ERR(safetensors_dir_open(&d, bad), "tensor 'model.norm.w': data_offsets [2, 4] end beyond the data region");
    CHECK(d.files == NULL && d.entries == NULL); // a failed open leaves nothing to close
}

// ------------------------------------------------------------------------------------------------
// writer failures

static void test_writer_failures(void) {
    float v[4] = {1, 2, 3, 4};
    st_writer w;
    safetensors_writer_init(&w);
    CHECK(safetensors_writer_add(&w, "a", mk(DT_F32, v, 1, 4, 0)) == 0);

    // Missing directory: nothing is created.
    const char *missing = test_path("no_such_dir/x.safetensors");
    CHECK_ERR(safetensors_writer_write(&w, missing), "no_such_dir/x.safetensors: cannot create the temporary file");
    CHECK_ERR(safetensors_writer_write(&w, missing), "No such file or directory");
    struct stat st;
    CHECK(stat(test_path("no_such_dir"), &st) != 0);

    // path is a directory: the rename fails, the temporary file is removed.
    const char *isdir = test_path("a_dir");
    mkdir(isdir, 0755);
    CHECK_ERR(safetensors_writer_write(&w, isdir), "a_dir: cannot rename");
    CHECK(count_tmp(test_tmpdir()) == 0);
    CHECK(stat(isdir, &st) == 0 && S_ISDIR(st.st_mode));

    // A full disk, simulated with the file size limit: write() fails with EFBIG part way through.
    // The old file at path keeps its content and no temporary file is left.
    const char *path = test_path("keep.safetensors");
    CHECK(safetensors_writer_write(&w, path) == 0);
    size_t n_old = 0;
    char *old = read_all(path, &n_old);
    static float big[16384]; // 64 KiB
    for (int i = 0; i < 16384; i++) big[i] = (float)i;
    st_writer wb;
    safetensors_writer_init(&wb);
    CHECK(safetensors_writer_add(&wb, "big", mk(DT_F32, big, 1, 16384, 0)) == 0);
    struct rlimit saved, lim;
    getrlimit(RLIMIT_FSIZE, &saved);
    lim = saved;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        error_clear();
        int rc = safetensors_writer_write(&wb, path);
        setrlimit(RLIMIT_FSIZE, &saved);
        CHECK_MSG(rc < 0 && strstr(error_msg(), "keep.safetensors: cannot write") &&
                      strstr(error_msg(), "File too large"),
                  "rc %d, message '%s'", rc, error_msg());
        size_t n_now = 0;
        char *now = read_all(path, &n_now);
        CHECK(old && now && n_now == n_old && memcmp(old, now, n_old) == 0);
        free(now);
        CHECK(count_tmp(test_tmpdir()) == 0);
    } else {
        CHECK_MSG(0, "setrlimit(RLIMIT_FSIZE) failed");
    }
    signal(SIGXFSZ, prev);
    free(old);
    safetensors_writer_free(&wb);
    safetensors_writer_free(&w);
}

// ------------------------------------------------------------------------------------------------
// interop with the Python package (see tests/reference/make_safetensors_fixture.py)

static void test_python_fixture(void) {
    st_file f;
    const char *path = test_src_path("tests/reference/data/written_by_python.safetensors");
    CHECK_MSG(safetensors_open(&f, path) == 0, "%s", error_msg());
    if (!f.map) return;
    CHECK(f.n == 9);
    CHECK(safetensors_meta(&f, "format") && strcmp(safetensors_meta(&f, "format"), "np") == 0);
    CHECK(safetensors_meta(&f, "producer") &&
          strcmp(safetensors_meta(&f, "producer"), "make_safetensors_fixture.py") == 0);

    const st_entry *e = safetensors_find(&f, "f32");
    CHECK(e && e->dt == DT_F32 && e->ndim == 2 && e->shape[0] == 3 && e->shape[1] == 4);
    if (e)
        for (int i = 0; i < 12; i++) CHECK(((const float *)e->data)[i] == (float)i * 0.25f - 1);
    e = safetensors_find(&f, "f16");
    const uint16_t f16[5] = {0xBC00, 0xB800, 0x0000, 0x3800, 0x3C00}; // -1, -0.5, 0, 0.5, 1
    CHECK(e && e->dt == DT_F16 && e->ndim == 1 && e->shape[0] == 5 && memcmp(e->data, f16, 10) == 0);
    e = safetensors_find(&f, "bf16");
    CHECK(e && e->dt == DT_BF16 && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 3);
    if (e)
        for (int i = 0; i < 6; i++)
            CHECK(f32_of_bits((uint32_t)((const uint16_t *)e->data)[i] << 16) == (float)(i + 1) * 1.5f);
    e = safetensors_find(&f, "i32");
    CHECK(e && e->dt == DT_I32 && e->shape[0] == 4);
    if (e)
        for (int i = 0; i < 4; i++) CHECK(((const int32_t *)e->data)[i] == i * i - 3);
    e = safetensors_find(&f, "u8");
    CHECK(e && e->dt == DT_U8 && e->shape[0] == 7);
    if (e)
        for (int i = 0; i < 7; i++) CHECK(((const uint8_t *)e->data)[i] == (i * 37) % 256);
    e = safetensors_find(&f, "i64");
    CHECK(e && e->dt == DT_I64 && e->shape[0] == 2);
    if (e) {
        const int64_t *x = e->data;
        CHECK(x[0] == -(INT64_C(1) << 40) && x[1] == (INT64_C(1) << 40) + 5);
    }
    e = safetensors_find(&f, "f64");
    CHECK(e && e->dt == DT_F64 && e->ndim == 0 && e->nbytes == 8);
    if (e) CHECK(*(const double *)e->data == 3.141592653589793);
    e = safetensors_find(&f, "flags");
    const uint8_t flags[3] = {1, 0, 1};
    CHECK(e && e->dt == DT_BOOL && e->shape[0] == 3 && memcmp(e->data, flags, 3) == 0);
    e = safetensors_find(&f, "empty");
    CHECK(e && e->dt == DT_F32 && e->ndim == 2 && e->shape[0] == 0 && e->shape[1] == 3 && e->nbytes == 0);
    // The reference writer aligns every tensor to its element size, as ours does.
    for (int i = 0; i < f.n; i++)
        CHECK((uintptr_t)f.entries[i].data % dtype_size(f.entries[i].dt) == 0);
    safetensors_close(&f);
}

// The file tests/reference/make_safetensors_fixture.py checks with the Python package
// (expected_c_fixture there).
static int c_fixture_write(const char *path) {
    static uint8_t u8[5] = {0, 51, 102, 153, 204};
    static float weight[6] = {-1, -0.5f, 0, 0.5f, 1, 1.5f};
    static uint16_t bf16[4] = {0xBFC0, 0xBF00, 0x3F00, 0x3FC0}; // -1.5, -0.5, 0.5, 1.5
    static int32_t ids[3] = {-7, 0, 123456};
    static double scalar = 0.125;
    static float empty[1];
    static uint8_t flags[2] = {1, 0};
    static int64_t big[2] = {-((int64_t)1 << 40), ((int64_t)1 << 40) + 5};
    static int16_t i16[2] = {1, 2};
    st_writer w;
    safetensors_writer_init(&w);
    int rc = 0;
    rc |= safetensors_writer_add(&w, "u8", mk(DT_U8, u8, 1, 5, 0));
    rc |= safetensors_writer_add(&w, "weight", mk(DT_F32, weight, 2, 2, 3));
    rc |= safetensors_writer_add(&w, "bf16", mk(DT_BF16, bf16, 1, 4, 0));
    rc |= safetensors_writer_add(&w, "ids", mk(DT_I32, ids, 1, 3, 0));
    rc |= safetensors_writer_add(&w, "scalar", mk(DT_F64, &scalar, 0, 0, 0));
    rc |= safetensors_writer_add(&w, "empty", mk(DT_F32, empty, 1, 0, 0));
    rc |= safetensors_writer_add(&w, "flags", mk(DT_BOOL, flags, 1, 2, 0));
    rc |= safetensors_writer_add(&w, "big", mk(DT_I64, big, 1, 2, 0));
    rc |= safetensors_writer_add(&w, "name with \"quotes\"\tand tab", mk(DT_I16, i16, 1, 2, 0));
    safetensors_writer_meta(&w, "format", "pt");
    safetensors_writer_meta(&w, "written_by", "dflash_rank");
    safetensors_writer_meta(&w, "note", "line1\nline2 \"q\" \\ end");
    if (rc == 0) rc = safetensors_writer_write(&w, path);
    safetensors_writer_free(&w);
    return rc;
}

static void test_c_fixture(void) {
    const char *out = getenv("DFLASH_WRITE_FIXTURE");
    if (out && *out) {
        CHECK_MSG(c_fixture_write(out) == 0, "%s", error_msg());
        printf("wrote %s\n", out);
    }
    const char *fresh = test_path("written_by_c.safetensors");
    CHECK_MSG(c_fixture_write(fresh) == 0, "%s", error_msg());
    const char *committed = test_src_path("tests/reference/data/written_by_c.safetensors");
    size_t na = 0, nb = 0;
    char *a = read_all(fresh, &na), *b = read_all(committed, &nb);
    CHECK_MSG(a && b && na == nb && memcmp(a, b, na) == 0,
              "the writer's output differs from %s (checked by the Python package): if the change is "
              "meant, rerun tests/reference/make_safetensors_fixture.py --test-bin <this binary>",
              committed);
    free(a);
    free(b);
    // And it reads back through our reader.
    st_file f;
    CHECK(safetensors_open(&f, fresh) == 0);
    CHECK(f.n == 9 && f.n_meta == 3);
    const char *note = safetensors_meta(&f, "note");
    CHECK(note && strcmp(note, "line1\nline2 \"q\" \\ end") == 0);
    CHECK(safetensors_find(&f, "name with \"quotes\"\tand tab") != NULL);
    safetensors_close(&f);
}

int main(void) {
    test_round_trip();
    test_valid_by_hand();
    test_misaligned();
    test_malformed();
    test_dirs();
    test_writer_failures();
    test_python_fixture();
    test_c_fixture();
    return test_finish("test_safetensors");
}
