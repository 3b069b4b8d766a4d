// json_util.c: small text files and shared cJSON helpers (see json_util.h).
#include "common/core/json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"

// file_read_fail: error_set("<path>: <why>") and leave errno = err; returns NULL.
static char *file_read_fail(const char *path, const char *why, int err) {
    error_set("%s: %s", path, why);
    errno = err;
    return NULL;
}

char *file_read_text(const char *path, size_t max_bytes) {
    size_t len;
    return file_read_text_len(path, max_bytes, &len);
}

char *file_read_text_len(const char *path, size_t max_bytes, size_t *len) {
    FILE *f = fs_fopen_regular(path, NULL); // a FIFO or a device is refused, never read
    if (!f) {
        int err = errno;
        if (err == EINVAL) { // the message is fs_open_regular's ("...: not a regular file (a FIFO)...")
            errno = EIO;
            return NULL;
        }
        return file_read_fail(path, strerror(err), err);
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
        if (n > max_bytes) {
            fclose(f);
            free(buf);
            char why[64];
            if (max_bytes % (1u << 20) == 0) snprintf(why, sizeof why, "larger than %zu MiB", max_bytes >> 20);
            else snprintf(why, sizeof why, "larger than %zu bytes", max_bytes);
            return file_read_fail(path, why, EFBIG);
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return file_read_fail(path, "read error", EIO);
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

cJSON *json_parse_text(const char *json, const char *source) {
    // require_null_terminated: anything but whitespace after the document is refused (cJSON_Parse
    // would read the first document and ignore the rest).
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1;
        for (const char *p = json; at && p < at; p++) line += *p == '\n';
        cJSON *first = cJSON_ParseWithOpts(json, NULL, 0);
        if (first) error_set("%s: data after the end of the JSON document (line %d)", source, line);
        else error_set("%s: not valid JSON (near line %d)", source, line);
        cJSON_Delete(first);
    }
    return root;
}

const cJSON *json_field(const cJSON *obj, const char *key) {
    if (!obj) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

void json_value_str(const cJSON *v, char *buf, size_t n) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s) {
        snprintf(buf, n, "?");
        return;
    }
    if (strlen(s) + 1 > n && n > 4) {
        memcpy(buf, s, n - 4);
        memcpy(buf + n - 4, "...", 4);
    } else {
        snprintf(buf, n, "%s", s);
    }
    free(s);
}

void json_add_float_py(cJSON *o, const char *key, double v) {
    char buf[64];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEni")) strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
    cJSON_AddRawToObject(o, key, buf);
}

cJSON *json_parse_object(const char *json, const char *source, const char *what) {
    cJSON *root = json_parse_text(json, source);
    if (!root) return NULL;
    char path[256];
    if (!cJSON_IsObject(root)) error_set("%s: %s must be a JSON object", source, what);
    else if (json_find_nul(json, path, sizeof path))
        error_set("%s: key '%s' holds a NUL character (\\u0000), which would cut the value", source, path);
    else return root;
    cJSON_Delete(root);
    return NULL;
}

// json_wants: error_set("<src>: '<name>' wants <what>, got <v>"); returns -1.
static int json_wants(const cJSON *v, const char *name, const char *src, const char *what) {
    char s[64];
    json_value_str(v, s, sizeof s);
    return error_set("%s: '%s' wants %s, got %s", src, name, what, s);
}

int json_get_string(const cJSON *obj, const char *key, const char *name, const char *src, const char **out) {
    const cJSON *v = json_field(obj, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return json_wants(v, name, src, "a string");
    *out = v->valuestring;
    return 0;
}

int json_int_value(const cJSON *v, const char *name, const char *src, int64_t *out) {
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d != floor(d) || fabs(d) > 9.0e15) return json_wants(v, name, src, "an integer");
    *out = (int64_t)d;
    return 0;
}

int json_get_int(const cJSON *obj, const char *key, const char *name, const char *src, int64_t *out, int *found) {
    const cJSON *v = json_field(obj, key);
    if (found) *found = v != NULL;
    return v ? json_int_value(v, name, src, out) : 0;
}

int json_get_positive(const cJSON *obj, const char *key, const char *src, int64_t *out) {
    if (json_get_int(obj, key, key, src, out, NULL)) return -1;
    if (*out <= 0) return error_set("%s: '%s' must be positive, got %lld", src, key, (long long)*out);
    return 0;
}

int json_get_double(const cJSON *obj, const char *key, const char *name, const char *src, double *out, int *found) {
    const cJSON *v = json_field(obj, key);
    if (found) *found = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return json_wants(v, name, src, "a number");
    *out = v->valuedouble;
    return 0;
}

int json_get_bool(const cJSON *obj, const char *key, const char *src, int *out, int *found) {
    const cJSON *v = json_field(obj, key);
    if (found) *found = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return json_wants(v, key, src, "true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

static int json_member_cmp(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

const cJSON *json_duplicate_key(const cJSON *obj) {
    size_t n = 0;
    for (const cJSON *v = obj ? obj->child : NULL; v; v = v->next) n++;
    if (n < 2) return NULL;
    const cJSON **m = xmalloc(n * sizeof *m); // sorted by name: a repeat sits next to its first
    n = 0;
    for (const cJSON *v = obj->child; v; v = v->next) m[n++] = v;
    qsort(m, n, sizeof *m, json_member_cmp);
    const cJSON *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(m[i - 1]->string, m[i]->string) == 0) dup = m[i];
    free(m);
    return dup;
}

int json_find_nul(const char *json, char *path, size_t n) {
    enum { MAX_DEPTH = 1100 }; // cJSON parses at most 1000 levels, and json parsed
    size_t base[MAX_DEPTH];    // path length when each open object or array began
    char is_obj[MAX_DEPTH];
    char buf[1024] = "";       // the dotted path of the member being read
    size_t len = 0;
    int d = 0, expect_key = 0;
    for (const char *p = json; *p; p++) {
        if (*p == '{' || *p == '[') {
            if (d >= MAX_DEPTH) return 0;
            base[d] = len, is_obj[d] = *p == '{', expect_key = *p == '{';
            d++;
        } else if (*p == '}' || *p == ']') {
            if (d > 0) len = base[--d], buf[len] = '\0';
            expect_key = 0;
        } else if (*p == ',') {
            expect_key = d > 0 && is_obj[d - 1];
        } else if (*p == ':') {
            expect_key = 0;
        } else if (*p == '"') {
            const char *s = ++p;
            int nul = 0;
            for (; *p && *p != '"'; p++) {
                if (*p != '\\') continue;
                if (p[1] == 'u' && strncmp(p + 2, "0000", 4) == 0) nul = 1;
                if (p[1]) p++;
            }
            if (expect_key && d > 0) { // a member's name: the path is its object's, then the name
                size_t b = base[d - 1];
                int w = snprintf(buf + b, sizeof buf - b, "%s%.*s", b ? "." : "", (int)(p - s), s);
                len = b + (w > 0 ? (size_t)w : 0);
                if (len >= sizeof buf) len = sizeof buf - 1;
            }
            if (nul) {
                snprintf(path, n, "%s", buf);
                return 1;
            }
            if (!*p) return 0;
        }
    }
    return 0;
}

void text_one_line(const char *src, char *dst, size_t n) {
    if (n == 0) return;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        char e[8];
        if (*p == '\n') snprintf(e, sizeof e, "\\n");
        else if (*p == '\t') snprintf(e, sizeof e, "\\t");
        else if (*p == '\r') snprintf(e, sizeof e, "\\r");
        else if (*p < 0x20 || *p == 0x7f) snprintf(e, sizeof e, "\\x%02x", *p);
        else e[0] = (char)*p, e[1] = '\0';
        size_t el = strlen(e);
        if (o + el + 4 > n) { // no room for this and "...": cut here
            if (p[1] || o + el + 1 > n) {
                snprintf(dst + o, n - o, "%s", n - o > 3 ? "..." : "");
                return;
            }
        }
        memcpy(dst + o, e, el);
        o += el;
    }
    dst[o] = '\0';
}
