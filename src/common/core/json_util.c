// json_util.c: small text files and shared cJSON helpers (see json_util.h).
#include "common/core/json_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"

// file_read_fail: error_set("<path>: <why>") and leave errno = err; returns NULL.
static char *file_read_fail(const char *path, const char *why, int err) {
    error_set("%s: %s", path, why);
    errno = err;
    return NULL;
}

char *file_read_text(const char *path, size_t max_bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int err = errno;
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
    return buf;
}

cJSON *json_parse_text(const char *json, const char *source) {
    cJSON *root = cJSON_Parse(json);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1;
        for (const char *p = json; at && p < at; p++) line += *p == '\n';
        error_set("%s: not valid JSON (near line %d)", source, line);
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

int json_get_string(const cJSON *obj, const char *key, const char *name, const char *src, const char **out) {
    const cJSON *v = json_field(obj, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) {
        char s[64];
        json_value_str(v, s, sizeof s);
        return error_set("%s: '%s' wants a string, got %s", src, name, s);
    }
    *out = v->valuestring;
    return 0;
}
