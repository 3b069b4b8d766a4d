// safetensors.c: the safetensors reader (mmap + full validation), model directories (single file or
// sharded index) and the atomic writer. See safetensors.h for the format and the rules enforced.
#include "common/data/safetensors.h"
#include "common/core/json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"

// The reference implementation refuses headers past 100 MB: such a header is corrupt, not a big
// model (a 100k-tensor model needs about 10 MB).
#define ST_MAX_HEADER 100000000ull
// JSON numbers are doubles in cJSON: integers above 2^53 are not exact, so a shape or an offset
// past it cannot be trusted (and no real file needs one: 2^53 bytes is 8 PiB).
#define ST_MAX_JSON_INT 9007199254740992.0

// ------------------------------------------------------------------------------------------------
// small helpers

// A JSON value as text for error messages ("-3", "\"x\"", "[1,2]"), cut to fit buf.
static const char *json_text(const cJSON *x, char *buf, int n) {
    if (!cJSON_PrintPreallocated((cJSON *)x, buf, n, 0)) snprintf(buf, (size_t)n, "(a long value)");
    return buf;
}

// json_uint: x is a JSON number holding an integer in [0, 2^53]. 0 if so.
static int json_uint(const cJSON *x, uint64_t *out) {
    if (!cJSON_IsNumber(x)) return -1;
    double d = x->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_JSON_INT) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

// path_join: "dir/name" in a fresh allocation.
static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = xmalloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

// ------------------------------------------------------------------------------------------------
// reader

// Frees everything an st_file owns, also a half-built one (on a failed open).
static void st_file_free(st_file *f) {
    for (int i = 0; i < f->n; i++) free(f->entries[i].name);
    free(f->entries);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    free(f->aligned);
    if (f->map) munmap(f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

// The tensor's begin offset within the data region (entries keep only the data pointer).
static uint64_t st_entry_begin(const st_file *f, const st_entry *e) {
    return (uint64_t)((const char *)e->data - ((const char *)f->map + f->data_start));
}

static int cmp_entry_name(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return strcmp(x->name, y->name);
}

// Data order: by begin, then end (a zero-size tensor sorts before a real one at its offset).
static int cmp_entry_offset(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    const char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

// __metadata__: an object of string values (the format says "free form text map").
static int st_parse_meta(st_file *f, const cJSON *meta) {
    if (!cJSON_IsObject(meta)) {
        char buf[64];
        return error_set("%s: __metadata__ is %s, not a JSON object of strings", f->path,
                         json_text(meta, buf, sizeof buf));
    }
    int count = cJSON_GetArraySize(meta);
    f->meta_keys = xcalloc((size_t)count, sizeof(char *));
    f->meta_values = xcalloc((size_t)count, sizeof(char *));
    for (const cJSON *kv = meta->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv)) {
            char buf[64];
            return error_set("%s: __metadata__ key '%s' is %s, not a string", f->path, kv->string,
                             json_text(kv, buf, sizeof buf));
        }
        for (int i = 0; i < f->n_meta; i++)
            if (strcmp(f->meta_keys[i], kv->string) == 0)
                return error_set("%s: __metadata__ key '%s' appears twice", f->path, kv->string);
        f->meta_keys[f->n_meta] = xstrdup(kv->string);
        f->meta_values[f->n_meta] = xstrdup(kv->valuestring);
        f->n_meta++;
    }
    return 0;
}

// One tensor entry {"dtype", "shape", "data_offsets"}; unknown keys are ignored, as the reference
// implementation does. e->name is already set. data_size: bytes after the header.
static int st_parse_entry(st_file *f, const cJSON *item, st_entry *e, size_t data_size) {
    const char *path = f->path, *name = e->name;
    char buf[64], sbuf[192]; // sbuf: a whole shape (8 dims of up to 16 digits)
    if (!cJSON_IsObject(item))
        return error_set("%s: tensor '%s': entry is %s, not a JSON object", path, name,
                         json_text(item, buf, sizeof buf));
    const cJSON *jdt = NULL, *jshape = NULL, *joff = NULL;
    for (const cJSON *k = item->child; k; k = k->next) {
        const cJSON **slot = strcmp(k->string, "dtype") == 0          ? &jdt
                             : strcmp(k->string, "shape") == 0        ? &jshape
                             : strcmp(k->string, "data_offsets") == 0 ? &joff
                                                                      : NULL;
        if (!slot) continue;
        if (*slot)
            return error_set("%s: tensor '%s': key \"%s\" appears twice", path, name, k->string);
        *slot = k;
    }
    const char *missing = !jdt ? "dtype" : !jshape ? "shape" : !joff ? "data_offsets" : NULL;
    if (missing) return error_set("%s: tensor '%s': missing \"%s\"", path, name, missing);

    if (!cJSON_IsString(jdt))
        return error_set("%s: tensor '%s': dtype is %s, not a string", path, name,
                         json_text(jdt, buf, sizeof buf));
    if (dtype_parse(jdt->valuestring, &e->dt) != 0)
        return error_set("%s: tensor '%s': unknown dtype '%s' (known: F32, F16, BF16, F64, I8, U8, "
                         "I16, U16, I32, U32, I64, U64, BOOL, F8_E4M3, F8_E5M2, F8_E8M0)",
                         path, name, jdt->valuestring);

    if (!cJSON_IsArray(jshape))
        return error_set("%s: tensor '%s': shape is %s, not an array", path, name,
                         json_text(jshape, buf, sizeof buf));
    int ndim = cJSON_GetArraySize(jshape);
    if (ndim > TENSOR_MAX_DIMS)
        return error_set("%s: tensor '%s': shape has %d dimensions, more than %d", path, name, ndim,
                         TENSOR_MAX_DIMS);
    e->ndim = ndim;
    // numel * element size in 64 bits, refusing overflow: a crafted shape must not wrap around to
    // a small byte count that then matches the offsets.
    uint64_t nbytes = dtype_size(e->dt);
    int d = 0;
    for (const cJSON *x = jshape->child; x; x = x->next, d++) {
        uint64_t v;
        if (json_uint(x, &v) != 0)
            return error_set("%s: tensor '%s': shape[%d] = %s is not an integer in [0, 2^53]", path,
                             name, d, json_text(x, buf, sizeof buf));
        e->shape[d] = (int64_t)v;
        if (__builtin_mul_overflow(nbytes, v, &nbytes))
            return error_set("%s: tensor '%s': shape %s of %s overflows a 64-bit byte count", path,
                             name, json_text(jshape, sbuf, sizeof sbuf), dtype_name(e->dt));
    }

    uint64_t begin, end;
    if (!cJSON_IsArray(joff) || cJSON_GetArraySize(joff) != 2 ||
        json_uint(joff->child, &begin) != 0 || json_uint(joff->child->next, &end) != 0)
        return error_set("%s: tensor '%s': data_offsets %s is not a pair of non-negative integers",
                         path, name, json_text(joff, buf, sizeof buf));
    if (begin > end)
        return error_set("%s: tensor '%s': data_offsets [%llu, %llu] begin after end", path, name,
                         (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return error_set("%s: tensor '%s': data_offsets [%llu, %llu] end beyond the data region "
                         "(%zu bytes; is the file truncated?)",
                         path, name, (unsigned long long)begin, (unsigned long long)end, data_size);
    if (end - begin != nbytes)
        return error_set(
            "%s: tensor '%s': shape %s x %s = %llu bytes but data_offsets [%llu, %llu] "
            "hold %llu (size mismatch)",
            path, name, json_text(jshape, sbuf, sizeof sbuf), dtype_name(e->dt),
            (unsigned long long)nbytes, (unsigned long long)begin, (unsigned long long)end,
            (unsigned long long)(end - begin));
    e->nbytes = (size_t)nbytes;
    e->data = (const char *)f->map + f->data_start + begin;
    return 0;
}

// Checks over all entries: unique names, and data_offsets that tile [0, data_size) exactly.
static int st_check_layout(const st_file *f, size_t data_size) {
    if (f->n == 0) {
        if (data_size != 0)
            return error_set(
                "%s: hole: data bytes [0, %zu) belong to no tensor (the header lists none)",
                f->path, data_size);
        return 0;
    }
    const st_entry **order = xmalloc((size_t)f->n * sizeof *order);
    for (int i = 0; i < f->n; i++) order[i] = &f->entries[i];
    int rc = 0;

    qsort(order, (size_t)f->n, sizeof *order, cmp_entry_name);
    for (int i = 1; i < f->n && rc == 0; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0)
            rc = error_set("%s: tensor '%s' appears twice in the header (duplicate name)", f->path,
                           order[i]->name);

    // Sorted by offset, each tensor must start where the previous one ended: a start before it is
    // an overlap, a start after it a hole. The format requires this (the reference implementation
    // rejects both, and a file whose tensors do not reach the end of the data).
    qsort(order, (size_t)f->n, sizeof *order, cmp_entry_offset);
    uint64_t pos = 0;
    const st_entry *prev = NULL;
    for (int i = 0; i < f->n && rc == 0; i++) {
        const st_entry *e = order[i];
        uint64_t b = st_entry_begin(f, e);
        if (b < pos)
            rc = error_set(
                "%s: tensor '%s' data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                f->path, e->name, (unsigned long long)b, (unsigned long long)(b + e->nbytes),
                prev->name, (unsigned long long)st_entry_begin(f, prev),
                (unsigned long long)(st_entry_begin(f, prev) + prev->nbytes));
        else if (b > pos)
            rc = error_set(
                "%s: hole: data bytes [%llu, %llu) before tensor '%s' belong to no tensor", f->path,
                (unsigned long long)pos, (unsigned long long)b, e->name);
        pos = b + e->nbytes;
        prev = e;
    }
    if (rc == 0 && pos != data_size)
        rc = error_set("%s: hole: data bytes [%llu, %zu) after tensor '%s' belong to no tensor",
                       f->path, (unsigned long long)pos, data_size, prev->name);
    free(order);
    return rc;
}

// Entries whose data is not aligned to their element size (an odd header length, or a writer that
// does not order tensors by element size) get a copy in one aligned buffer: in place, a uint16_t
// or float load from them would be undefined behaviour (UBSan aborts; some CPUs trap).
static int st_align_entries(st_file *f) {
    size_t need = 0;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->entries[i];
        if ((uintptr_t)e->data % dtype_size(e->dt) != 0) need += (e->nbytes + 63) & ~(size_t)63;
    }
    if (need == 0) return 0;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, need) != 0)
        return error_set("%s: out of memory copying %zu bytes of misaligned tensor data to aligned memory", f->path,
                         need);
    char *buf = f->aligned = mem;
    for (int i = 0; i < f->n; i++) {
        st_entry *e = &f->entries[i];
        if ((uintptr_t)e->data % dtype_size(e->dt) == 0) continue;
        memcpy(buf, e->data, e->nbytes);
        e->data = buf;
        buf += (e->nbytes + 63) & ~(size_t)63;
    }
    return 0;
}

// Parses and validates the header of the mapped file f.
static int st_parse(st_file *f) {
    const unsigned char *p = f->map;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)p[i] << (8 * i);
    if (n > f->size - 8)
        return error_set("%s: header longer than the file: header length %llu, file %zu bytes "
                         "(truncated or not a safetensors file?)",
                         f->path, (unsigned long long)n, f->size);
    if (n > ST_MAX_HEADER)
        return error_set("%s: header length %llu is past the %llu-byte limit", f->path,
                         (unsigned long long)n, ST_MAX_HEADER);
    f->data_start = 8 + (size_t)n;
    size_t data_size = f->size - f->data_start;

    // cJSON wants a NUL-terminated string; a NUL inside the header would silently end it early.
    char *text = xmalloc((size_t)n + 1);
    memcpy(text, p + 8, (size_t)n);
    text[n] = '\0';
    cJSON *root = NULL;
    int rc = -1;
    const char *nul = memchr(text, '\0', (size_t)n);
    if (nul) {
        error_set("%s: header has a NUL byte at header offset %zu", f->path, (size_t)(nul - text));
        goto done;
    }
    const char *end = NULL;
    root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) {
        error_set("%s: header is not valid JSON (error near header byte %zu of %llu)", f->path,
                  end ? (size_t)(end - text) : 0, (unsigned long long)n);
        goto done;
    }
    // Writers pad the header with spaces up to 8-byte alignment; anything else after is garbage.
    for (const char *q = end; *q; q++) {
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            error_set("%s: header is not valid JSON (trailing bytes after it at header byte %zu)",
                      f->path, (size_t)(q - text));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        char buf[64];
        error_set("%s: header is %s, not a JSON object", f->path, json_text(root, buf, sizeof buf));
        goto done;
    }

    int count = cJSON_GetArraySize(root);
    f->entries = xcalloc((size_t)count, sizeof(st_entry));
    int seen_meta = 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (seen_meta++) {
                error_set("%s: __metadata__ appears twice in the header", f->path);
                goto done;
            }
            if (st_parse_meta(f, item) != 0) goto done;
            continue;
        }
        st_entry *e = &f->entries[f->n++];
        e->name = xstrdup(item->string);
        if (st_parse_entry(f, item, e, data_size) != 0) goto done;
    }
    rc = st_check_layout(f, data_size);
    if (rc == 0) rc = st_align_entries(f);
done:
    cJSON_Delete(root);
    free(text);
    return rc;
}

int safetensors_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd = fs_open_regular(path, NULL); // never blocks on a FIFO; a device is refused
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return error_set("%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return error_set("%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        return error_set(
            "%s: file is %zu bytes, shorter than the 8-byte header length (truncated?)", path,
            size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd); // the mapping keeps the file
    if (map == MAP_FAILED)
        return error_set("%s: cannot mmap %zu bytes: %s", path, size, strerror(err));
    f->path = xstrdup(path);
    f->map = map;
    f->size = size;
    if (st_parse(f) != 0) {
        st_file_free(f);
        return -1;
    }
    return 0;
}

// Linear: a file holds at most a few thousand tensors and each is looked up once at load.
const st_entry *safetensors_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
    return NULL;
}

const char *safetensors_meta(const st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

void safetensors_close(st_file *f) { st_file_free(f); }

tensor st_entry_tensor(const st_entry *e) {
    return tensor_make(e->dt, (void *)e->data, DEVICE_CPU, e->ndim, e->shape);
}

// ------------------------------------------------------------------------------------------------
// model directories

// A shard name from the index must stay inside the model directory.
static int shard_name_ok(const char *s) {
    if (!s[0] || s[0] == '/') return 0;
    for (const char *c = s; *c;) {
        const char *slash = strchr(c, '/');
        size_t len = slash ? (size_t)(slash - c) : strlen(c);
        if (len == 2 && c[0] == '.' && c[1] == '.') return 0;
        c += len + (slash ? 1 : 0);
    }
    return 1;
}

// Which of d's files holds entry e (entries point into their file's array).
static int st_dir_file_of(const st_dir *d, const st_entry *e) {
    uintptr_t p = (uintptr_t)e;
    for (int i = 0; i < d->n_files; i++) {
        const st_file *f = &d->files[i];
        uintptr_t lo = (uintptr_t)f->entries, hi = (uintptr_t)(f->entries + f->n);
        if (p >= lo && p < hi) return i;
    }
    return -1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// Fills d->entries (sorted by name) from every file; a name in two files is an error.
static int st_dir_collect(st_dir *d, const char *where) {
    d->n = 0;
    for (int i = 0; i < d->n_files; i++) d->n += d->files[i].n;
    d->entries = xmalloc((size_t)(d->n ? d->n : 1) * sizeof *d->entries);
    int k = 0;
    for (int i = 0; i < d->n_files; i++)
        for (int j = 0; j < d->files[i].n; j++) d->entries[k++] = &d->files[i].entries[j];
    qsort(d->entries, (size_t)d->n, sizeof *d->entries, cmp_entry_name);
    for (int i = 1; i < d->n; i++) {
        if (strcmp(d->entries[i - 1]->name, d->entries[i]->name) == 0) {
            const st_file *a = &d->files[st_dir_file_of(d, d->entries[i - 1])];
            const st_file *b = &d->files[st_dir_file_of(d, d->entries[i])];
            return error_set("%s: tensor '%s' is in two shards: %s and %s", where,
                             d->entries[i]->name, a->path, b->path);
        }
    }
    return 0;
}

// model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard file}}. Every
// shard named is opened and validated; every tensor listed must be in the shard it is listed for.
// Tensors a shard holds beyond the index are kept (transformers loads whole shards too).
static int st_dir_open_index(st_dir *d, const char *index_path) {
    char *text = file_read_text(index_path, 64u << 20);
    if (!text) return -1;
    int rc = -1;
    const char **names = NULL, **shards = NULL;
    int *shard_of = NULL, n_names = 0;
    cJSON *root = json_parse_text(text, index_path);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!root) goto done;
    if (!cJSON_IsObject(wm) || !wm->child) {
        error_set("%s: no \"weight_map\" object (or it is empty)", index_path);
        goto done;
    }

    int count = cJSON_GetArraySize(wm);
    names = xcalloc((size_t)count, sizeof *names);
    shards = xcalloc((size_t)count, sizeof *shards);
    shard_of = xcalloc((size_t)count, sizeof *shard_of);
    d->files = xcalloc((size_t)count, sizeof *d->files);
    for (const cJSON *kv = wm->child; kv; kv = kv->next, n_names++) {
        if (!cJSON_IsString(kv) || !shard_name_ok(kv->valuestring)) {
            char buf[64];
            error_set(
                "%s: weight_map tensor '%s': shard %s is not a file name inside the directory",
                index_path, kv->string, json_text(kv, buf, sizeof buf));
            goto done;
        }
        names[n_names] = kv->string;
        int s = 0;
        while (s < d->n_files && strcmp(shards[s], kv->valuestring) != 0) s++;
        if (s == d->n_files) shards[d->n_files++] = kv->valuestring;
        shard_of[n_names] = s;
    }

    // cJSON keeps duplicate keys: a tensor listed twice (maybe for two shards) is an error.
    const char **sorted = xmalloc((size_t)n_names * sizeof *sorted);
    memcpy(sorted, names, (size_t)n_names * sizeof *sorted);
    qsort(sorted, (size_t)n_names, sizeof *sorted, cmp_str);
    for (int i = 1; i < n_names; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            error_set("%s: tensor '%s' is listed twice in the weight_map", index_path, sorted[i]);
            free(sorted);
            goto done;
        }
    }
    free(sorted);

    // Open each shard; the error names the index, the shard and a tensor expected in it.
    for (int s = 0; s < d->n_files; s++) {
        char *path = path_join(d->dir, shards[s]);
        int r = safetensors_open(&d->files[s], path);
        free(path);
        if (r != 0) {
            int first = 0;
            while (shard_of[first] != s) first++;
            error_prefix("%s: shard '%s' (listed for tensor '%s')", index_path, shards[s],
                         names[first]);
            goto done;
        }
    }
    if (st_dir_collect(d, index_path) != 0) goto done;
    for (int i = 0; i < n_names; i++) {
        const st_entry *e = safetensors_dir_find(d, names[i]);
        int in = e ? st_dir_file_of(d, e) : -1;
        if (in != shard_of[i]) {
            if (in < 0)
                error_set("%s: tensor '%s' is listed for shard '%s', which does not contain it",
                          index_path, names[i], shards[shard_of[i]]);
            else
                error_set("%s: tensor '%s' is listed for shard '%s' but is in %s", index_path,
                          names[i], shards[shard_of[i]], d->files[in].path);
            goto done;
        }
    }
    rc = 0;
done:
    free(names);
    free(shards);
    free(shard_of);
    cJSON_Delete(root);
    free(text);
    return rc;
}

int safetensors_dir_open(st_dir *d, const char *dir) {
    memset(d, 0, sizeof *d);
    d->dir = xstrdup(dir);
    char *single = path_join(dir, "model.safetensors");
    char *index = path_join(dir, "model.safetensors.index.json");
    struct stat st;
    int rc;
    if (stat(single, &st) == 0) {
        d->files = xcalloc(1, sizeof *d->files);
        rc = safetensors_open(&d->files[0], single);
        if (rc == 0) {
            d->n_files = 1;
            rc = st_dir_collect(d, single);
        }
    } else if (stat(index, &st) == 0) {
        rc = st_dir_open_index(d, index);
    } else {
        rc = error_set("%s: no model.safetensors or model.safetensors.index.json in this directory",
                       dir);
    }
    free(single);
    free(index);
    if (rc != 0) safetensors_dir_close(d);
    return rc;
}

const st_entry *safetensors_dir_find(const st_dir *d, const char *name) {
    int lo = 0, hi = d->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(d->entries[mid]->name, name);
        if (c == 0) return d->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

void safetensors_dir_close(st_dir *d) {
    // files[] may be only partly opened (a failed open): closing a zeroed st_file is a no-op.
    if (d->files)
        for (int i = 0; i < d->n_files; i++) safetensors_close(&d->files[i]);
    free(d->files);
    free(d->entries);
    free(d->dir);
    memset(d, 0, sizeof *d);
}

// ------------------------------------------------------------------------------------------------
// writer

void safetensors_writer_init(st_writer *w) { memset(w, 0, sizeof *w); }

int safetensors_writer_add(st_writer *w, const char *name, tensor t) {
    if (t.device != DEVICE_CPU)
        return error_set("safetensors writer: tensor '%s' is not in host memory", name);
    if ((int)t.dt < 0 || t.dt >= DT_COUNT || t.ndim < 0 || t.ndim > TENSOR_MAX_DIMS)
        return error_set("safetensors writer: tensor '%s' has dtype %d and %d dimensions", name,
                         (int)t.dt, t.ndim);
    for (int i = 0; i < t.ndim; i++)
        if (t.shape[i] < 0)
            return error_set("safetensors writer: tensor '%s' has shape[%d] = %lld", name, i,
                             (long long)t.shape[i]);
    if (strcmp(name, "__metadata__") == 0)
        return error_set("safetensors writer: '__metadata__' is reserved, not a tensor name");
    if (!t.data && tensor_bytes(&t) > 0)
        return error_set("safetensors writer: tensor '%s' has no data", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->names[i], name) == 0)
            return error_set("safetensors writer: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->names = xrealloc(w->names, (size_t)w->cap * sizeof *w->names);
        w->tensors = xrealloc(w->tensors, (size_t)w->cap * sizeof *w->tensors);
    }
    w->names[w->n] = xstrdup(name);
    w->tensors[w->n] = t;
    w->n++;
    return 0;
}

void safetensors_writer_meta(st_writer *w, const char *key, const char *value) {
    for (int i = 0; i < w->n_meta; i++) {
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_values[i]);
            w->meta_values[i] = xstrdup(value);
            return;
        }
    }
    if (w->n_meta == w->cap_meta) {
        w->cap_meta = w->cap_meta ? 2 * w->cap_meta : 8;
        w->meta_keys = xrealloc(w->meta_keys, (size_t)w->cap_meta * sizeof *w->meta_keys);
        w->meta_values = xrealloc(w->meta_values, (size_t)w->cap_meta * sizeof *w->meta_values);
    }
    w->meta_keys[w->n_meta] = xstrdup(key);
    w->meta_values[w->n_meta] = xstrdup(value);
    w->n_meta++;
}

// A growing text buffer for the header.
typedef struct {
    char *p;
    size_t len, cap;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1024;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[256]; // one number or one short piece of JSON at a time
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// A JSON string with the escapes serde_json (the reference writer) uses; UTF-8 passes through.
static void sb_json_string(strbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        default:
            if (*c < 0x20)
                sb_printf(b, "\\u%04x", *c);
            else
                sb_put(b, (const char *)c, 1);
        }
    }
    sb_puts(b, "\"");
}

// write(2) until all n bytes are out (it may write less, or be interrupted).
static int write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

// The data region order: by element size, largest first, ties in insertion order. With the header
// padded to 8 bytes this starts every tensor at a multiple of its element size, as the reference
// writer does, so readers can use the mapped data in place.
typedef struct {
    size_t elem;
    int idx;
} st_slot;

static int cmp_slot(const void *a, const void *b) {
    const st_slot *x = a, *y = b;
    if (x->elem != y->elem) return x->elem > y->elem ? -1 : 1;
    return x->idx - y->idx;
}

int safetensors_writer_write(st_writer *w, const char *path) {
    // Offsets in data order.
    st_slot *order = xmalloc((size_t)(w->n ? w->n : 1) * sizeof *order);
    uint64_t *begin = xmalloc((size_t)(w->n ? w->n : 1) * sizeof *begin);
    for (int i = 0; i < w->n; i++) order[i] = (st_slot){dtype_size(w->tensors[i].dt), i};
    qsort(order, (size_t)w->n, sizeof *order, cmp_slot);
    uint64_t pos = 0;
    for (int i = 0; i < w->n; i++) {
        begin[order[i].idx] = pos;
        pos += tensor_bytes(&w->tensors[order[i].idx]);
    }

    // Header: __metadata__ first, then the tensors in insertion order, compact like serde_json.
    strbuf h = {0};
    sb_puts(&h, "{");
    if (w->n_meta > 0) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (i) sb_puts(&h, ",");
            sb_json_string(&h, w->meta_keys[i]);
            sb_puts(&h, ":");
            sb_json_string(&h, w->meta_values[i]);
        }
        sb_puts(&h, "}");
    }
    for (int i = 0; i < w->n; i++) {
        const tensor *t = &w->tensors[i];
        if (i || w->n_meta > 0) sb_puts(&h, ",");
        sb_json_string(&h, w->names[i]);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_name(t->dt));
        for (int d = 0; d < t->ndim; d++)
            sb_printf(&h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin[i],
                  (unsigned long long)(begin[i] + tensor_bytes(t)));
    }
    sb_puts(&h, "}");
    while (h.len % 8 != 0) sb_puts(&h, " ");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));

    // Write a temporary file beside path and rename it over path only once it is complete and on
    // disk: a crash or a full disk leaves the old file (or none), never a torn one.
    size_t tlen = strlen(path) + 32;
    char *tmp = xmalloc(tlen);
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        error_set("%s: cannot create the temporary file %s: %s", path, tmp, strerror(errno));
        goto done;
    }
    int ok = write_all(fd, len8, 8) == 0 && write_all(fd, h.p, h.len) == 0;
    for (int i = 0; i < w->n && ok; i++) {
        const tensor *t = &w->tensors[order[i].idx];
        ok = write_all(fd, t->data, tensor_bytes(t)) == 0;
    }
    if (ok) ok = fsync(fd) == 0;
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        error_set("%s: cannot write (via %s): %s", path, tmp, strerror(err));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        error_set("%s: cannot rename %s onto it: %s", path, tmp, strerror(err));
        goto done;
    }
    // The rename is durable only once the directory is synced. Some filesystems cannot fsync a
    // directory (EINVAL): nothing more can be done there.
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0 && fsync(dfd) != 0 && errno != EINVAL) {
        error_set("%s: written, but syncing its directory %s failed: %s", path, dir,
                  strerror(errno));
        close(dfd);
        free(dir);
        goto done;
    }
    if (dfd >= 0) close(dfd);
    free(dir);
    rc = 0;
done:
    free(tmp);
    free(h.p);
    free(order);
    free(begin);
    return rc;
}

void safetensors_writer_free(st_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->names[i]);
    free(w->names);
    free(w->tensors);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->meta_keys);
    free(w->meta_values);
    memset(w, 0, sizeof *w);
}
