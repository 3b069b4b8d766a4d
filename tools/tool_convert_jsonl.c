// tool_convert_jsonl.c: `dflash_tool convert-jsonl IN.jsonl OUT.h5`: tokenized JSON lines -> the
// HDF5 training set of SPEC §7.
//
// Each non-empty line is one sample, a JSON object:
//   {"input_ids": [1, 2, 3, ...], "loss_mask": [0, 0, 1, ...]}
// input_ids: non-empty array of integers in [0, vocab_size) (or >= 0 when no --vocab-size is given:
// the file's vocab_size is then the largest id + 1). loss_mask: optional, same length, 0/1 (or
// false/true); absent = every token is trained on. Other keys are ignored. Lines are read one at a
// time (memory follows the longest line, not the file). A bad line stops the conversion with one
// error line naming the line number and the problem, exit 1, and no OUT file (the writer's
// temporary is removed; an existing OUT is left as it was). So does an input with no sample to
// write (empty, only blank lines, or every sample short of --min-loss-tokens).
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "common/data/trainset.h"
#include "tools/tools.h"

// Inputs smaller than this convert in a second or so: no progress line for them (and a bad line
// in them gives exactly one line on stderr).
#define CONVERT_PROGRESS_MIN_BYTES ((int64_t)32 << 20)

static void convert_usage(FILE *f) {
    fprintf(f,
            "usage: dflash_tool convert-jsonl IN.jsonl OUT.h5 [--vocab-size V] [--tokenizer NAME]\n"
            "                                 [--min-loss-tokens N]\n"
            "\n"
            "Convert tokenized JSON lines, one sample per line,\n"
            "  {\"input_ids\": [ids...], \"loss_mask\": [0/1...]}\n"
            "into an HDF5 training set (/tokens, /offsets, /loss_mask). loss_mask is optional\n"
            "(absent = train on every token) and must match input_ids in length. Empty lines are\n"
            "skipped; any malformed line is an error naming the line, and no OUT.h5 is written.\n"
            "\n"
            "  --vocab-size V        ids must be < V (default: the largest id + 1)\n"
            "  --tokenizer NAME      stored in the file's tokenizer attribute (default \"\")\n"
            "  --min-loss-tokens N   leave out (and count) samples with fewer than N loss tokens\n"
            "                        (default 0: keep every sample)\n");
}

static int parse_count(const char *opt, const char *s, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < min) {
        fprintf(stderr, "error: %s: '%s' is not an integer >= %lld\n", opt, s, (long long)min);
        return -1;
    }
    *out = v;
    return 0;
}

// A growing sample buffer (ids and mask), reused from line to line.
typedef struct {
    int32_t *ids;
    uint8_t *mask;
    int64_t n, cap;
} sample_buf;

static void sample_reserve(sample_buf *s, int64_t n) {
    if (n <= s->cap) return;
    s->cap = n > 2 * s->cap ? n : 2 * s->cap;
    s->ids = xrealloc(s->ids, (size_t)s->cap * sizeof *s->ids);
    s->mask = xrealloc(s->mask, (size_t)s->cap);
}

// Parse one line into s; -1 with error_set describing the problem (the caller adds the line).
// line[len] is the '\0' getline put there: passing len + 1 lets cJSON insist that nothing but
// whitespace follows the object.
static int parse_line(const char *line, size_t len, int64_t vocab_size, sample_buf *s) {
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

static int is_blank(const char *line, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n') return 0;
    return 1;
}

int tool_convert_jsonl_main(int argc, char **argv) {
    const char *in_path = NULL, *out_path = NULL, *tokenizer = "";
    int64_t vocab_size = 0, min_loss_tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            convert_usage(stdout);
            return 0;
        } else if ((strcmp(a, "--vocab-size") == 0 || strcmp(a, "--tokenizer") == 0 ||
                    strcmp(a, "--min-loss-tokens") == 0) && i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", a);
            convert_usage(stderr);
            return 2;
        } else if (strcmp(a, "--vocab-size") == 0) {
            if (parse_count(a, argv[++i], 1, &vocab_size) < 0) return 2;
            if (vocab_size > (int64_t)INT32_MAX + 1) {
                fprintf(stderr, "error: --vocab-size: %lld is above the int32 id range\n", (long long)vocab_size);
                return 2;
            }
        } else if (strcmp(a, "--tokenizer") == 0) {
            tokenizer = argv[++i];
        } else if (strcmp(a, "--min-loss-tokens") == 0) {
            if (parse_count(a, argv[++i], 0, &min_loss_tokens) < 0) return 2;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "error: unknown option '%s'\n", a);
            convert_usage(stderr);
            return 2;
        } else if (!in_path) {
            in_path = a;
        } else if (!out_path) {
            out_path = a;
        } else {
            fprintf(stderr, "error: unexpected argument '%s'\n", a);
            convert_usage(stderr);
            return 2;
        }
    }
    if (!in_path || !out_path) {
        convert_usage(stderr);
        return 2;
    }

    FILE *in = fopen(in_path, "rb");
    if (!in) {
        log_error("%s: cannot open: %s", in_path, strerror(errno));
        return 1;
    }
    struct stat st;
    int64_t in_bytes = fstat(fileno(in), &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : 0;
    trainset_writer w;
    if (trainset_writer_open(&w, out_path, vocab_size, tokenizer) < 0) {
        fclose(in);
        log_error("%s", error_msg());
        return 1;
    }

    sample_buf s = {0};
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    int64_t line_no = 0, bytes = 0, loss_tokens = 0, skipped_short = 0;
    int rc = 0;
    progress p = {0};
    int show_progress = in_bytes >= CONVERT_PROGRESS_MIN_BYTES;
    if (show_progress) progress_start(&p, "convert-jsonl (bytes)", in_bytes);
    errno = 0;
    while ((got = getline(&line, &line_cap, in)) != -1) {
        line_no++;
        bytes += got;
        if (is_blank(line, (size_t)got)) continue;
        if (parse_line(line, (size_t)got, vocab_size, &s) < 0) {
            error_prefix("%s line %lld", in_path, (long long)line_no);
            rc = -1;
            break;
        }
        int64_t loss = 0;
        for (int64_t k = 0; k < s.n; k++) loss += s.mask[k];
        if (loss < min_loss_tokens) {
            skipped_short++;
            continue;
        }
        if (trainset_writer_append(&w, s.ids, s.mask, s.n) < 0) {
            error_prefix("%s line %lld", in_path, (long long)line_no);
            rc = -1;
            break;
        }
        loss_tokens += loss;
        if (show_progress) progress_update(&p, bytes);
    }
    if (rc == 0 && ferror(in)) rc = error_set("%s: read error after line %lld: %s", in_path, (long long)line_no,
                                              strerror(errno));
    fclose(in);
    free(line);
    free(s.ids);
    free(s.mask);
    // a training set without samples fails every consumer later, with a less clear message
    if (rc == 0 && w.n_samples == 0)
        rc = skipped_short > 0 ? error_set("%s: no sample to write: all %lld have fewer than %lld loss tokens (no %s "
                                           "written)", in_path, (long long)skipped_short, (long long)min_loss_tokens,
                                           out_path)
                               : error_set("%s: no sample to write: the file has no non-blank line (no %s written)",
                                           in_path, out_path);
    if (rc == 0) {
        if (show_progress) progress_end(&p);
        rc = trainset_writer_close(&w);
    } else {
        trainset_writer_abort(&w);
    }
    if (rc < 0) {
        log_error("%s", error_msg());
        return 1;
    }
    printf("%s: %" PRId64 " samples, %" PRId64 " tokens, %" PRId64 " loss tokens, vocab_size %" PRId64,
           out_path, w.n_samples, w.n_tokens, loss_tokens, w.vocab_size);
    if (min_loss_tokens > 0)
        printf(", %" PRId64 " samples with fewer than %" PRId64 " loss tokens left out", skipped_short,
               min_loss_tokens);
    printf("\n");
    return 0;
}
