// jsonl_sample.c: one tokenized JSON line -> ids and loss mask (see jsonl_sample.h).
#include "common/data/jsonl_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"


static void sample_reserve(jsonl_sample *s, int64_t n) {
    if (n <= s->cap) return;
    s->cap = n > 2 * s->cap ? n : 2 * s->cap;
    s->ids = xrealloc(s->ids, (size_t)s->cap * sizeof *s->ids);
    s->mask = xrealloc(s->mask, (size_t)s->cap);
}

int jsonl_sample_parse(const char *line, size_t len, int64_t vocab_size, jsonl_sample *s) {
    const char *nul = memchr(line, '\0', len); // JSON is text: cJSON would stop there, taking a part of the line
    if (nul) return error_set("a NUL byte at column %lld (a JSON line is text)", (long long)(nul - line) + 1);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(line, len + 1, &end, 1);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long long col = at && at >= line && at <= line + len ? (long long)(at - line) + 1 : 0;
        return error_set("invalid JSON (near column %lld)", col);
    }
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return error_set("expected a JSON object");
    }
    const cJSON *dup = json_duplicate_key(root); // Python's json keeps the last silently: refused
    if (dup) {
        rc = error_set("key \"%s\" is given twice", dup->string);
        goto done;
    }
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "input_ids");
    const cJSON *mask = cJSON_GetObjectItemCaseSensitive(root, "loss_mask");
    if (!ids) {
        rc = error_set("missing \"input_ids\"");
        goto done;
    }
    if (!cJSON_IsArray(ids)) {
        rc = error_set("\"input_ids\" is not an array");
        goto done;
    }
    int64_t n = cJSON_GetArraySize(ids);
    if (n == 0) {
        rc = error_set("\"input_ids\" is empty");
        goto done;
    }
    if (mask && !cJSON_IsNull(mask)) {
        if (!cJSON_IsArray(mask)) {
            rc = error_set("\"loss_mask\" is not an array");
            goto done;
        }
        int64_t nm = cJSON_GetArraySize(mask);
        if (nm != n) {
            rc = error_set("\"loss_mask\" has %lld values, \"input_ids\" has %lld", (long long)nm, (long long)n);
            goto done;
        }
    } else {
        mask = NULL;
    }
    sample_reserve(s, n);
    s->n = n;
    int64_t k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, ids) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : 0.5;
        if (!isfinite(d) || d != floor(d)) {
            char *txt = cJSON_PrintUnformatted(v);
            rc = error_set("input_ids[%lld] = %s is not an integer", (long long)k, txt ? txt : "?");
            free(txt);
            goto done;
        }
        if (d < 0) {
            rc = error_set("input_ids[%lld] = %.0f is negative", (long long)k, d);
            goto done;
        }
        if (d > INT32_MAX || (vocab_size > 0 && d >= (double)vocab_size)) {
            rc = error_set("input_ids[%lld] = %.0f is not below the vocabulary size %lld", (long long)k, d,
                           (long long)(vocab_size > 0 ? vocab_size : (int64_t)INT32_MAX + 1));
            goto done;
        }
        s->ids[k++] = (int32_t)d;
    }
    k = 0;
    if (mask) {
        cJSON_ArrayForEach(v, mask) {
            if (cJSON_IsBool(v)) s->mask[k] = cJSON_IsTrue(v) ? 1 : 0;
            else if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1))
                s->mask[k] = (uint8_t)v->valuedouble;
            else {
                char *txt = cJSON_PrintUnformatted(v);
                rc = error_set("loss_mask[%lld] = %s is not 0 or 1", (long long)k, txt ? txt : "?");
                free(txt);
                goto done;
            }
            k++;
        }
    } else {
        memset(s->mask, 1, (size_t)n);
    }
done:
    cJSON_Delete(root);
    return rc;
}

int jsonl_line_blank(const char *line, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n') return 0;
    return 1;
}

void jsonl_sample_free(jsonl_sample *s) {
    free(s->ids);
    free(s->mask);
    memset(s, 0, sizeof *s);
}
