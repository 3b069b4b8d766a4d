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
// write (empty, only blank lines, or every sample short of --min-loss-tokens). --heldout records a
// held-out split in the file (/heldout and its heldout_rule: trainset_heldout_draw), so that
// training, --mode eval and tools/spec_decode.py all hold out the same samples.
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
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/data/jsonl_sample.h"
#include "common/data/trainset.h"
#include "tools/tools.h"

// Inputs smaller than this convert in a second or so: no progress line for them (and a bad line
// in them gives exactly one line on stderr).
#define CONVERT_PROGRESS_MIN_BYTES ((int64_t)32 << 20)

static void convert_usage(FILE *f) {
    fprintf(f,
            "usage: dflash_tool convert-jsonl IN.jsonl OUT.h5 [--vocab-size V] [--tokenizer NAME]\n"
            "                                 [--min-loss-tokens N] [--heldout H [--heldout-seed S]]\n"
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
            "                        (default 0: keep every sample)\n"
            "  --heldout H           record a held-out split in /heldout: H >= 1 samples, or a fraction\n"
            "                        0 < H < 1 of them, drawn with --heldout-seed S (default 0); training,\n"
            "                        --mode eval and tools/spec_decode.py then hold out exactly those\n");
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

int tool_convert_jsonl_main(int argc, char **argv) {
    const char *in_path = NULL, *out_path = NULL, *tokenizer = "";
    int64_t vocab_size = 0, min_loss_tokens = 0, heldout_seed = 0;
    double heldout = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            convert_usage(stdout);
            return 0;
        } else if ((strcmp(a, "--vocab-size") == 0 || strcmp(a, "--tokenizer") == 0 || strcmp(a, "--heldout") == 0 ||
                    strcmp(a, "--heldout-seed") == 0 || strcmp(a, "--min-loss-tokens") == 0) && i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", a);
            convert_usage(stderr);
            return 2;
        } else if (strcmp(a, "--vocab-size") == 0) {
            if (parse_count(a, argv[++i], 1, &vocab_size) < 0) return 2;
            if (vocab_size > (int64_t)INT32_MAX + 1) {
                fprintf(stderr, "error: --vocab-size: %lld is above the int32 id range\n", (long long)vocab_size);
                return 2;
            }
        } else if (strcmp(a, "--heldout") == 0) {
            char *end;
            heldout = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(heldout >= 0) || heldout > 1e15) {
                fprintf(stderr, "error: --heldout: '%s' is not a count >= 1 or a fraction in (0, 1)\n", argv[i]);
                return 2;
            }
        } else if (strcmp(a, "--heldout-seed") == 0) {
            if (parse_count(a, argv[++i], 0, &heldout_seed) < 0) return 2;
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

    FILE *in = fs_fopen_regular(in_path, NULL); // a FIFO or a device is refused (fsutil.h)
    if (!in) {
        log_error("%s", error_msg());
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

    jsonl_sample s = {0};
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
        if (jsonl_line_blank(line, (size_t)got)) continue;
        if (jsonl_sample_parse(line, (size_t)got, vocab_size, &s) < 0) {
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
    jsonl_sample_free(&s);
    // a training set without samples fails every consumer later, with a less clear message
    if (rc == 0 && w.n_samples == 0)
        rc = skipped_short > 0 ? error_set("%s: no sample to write: all %lld have fewer than %lld loss tokens (no %s "
                                           "written)", in_path, (long long)skipped_short, (long long)min_loss_tokens,
                                           out_path)
                               : error_set("%s: no sample to write: the file has no non-blank line (no %s written)",
                                           in_path, out_path);
    int64_t n_held = 0;
    if (rc == 0 && heldout > 0) { // the held-out split, chosen once and recorded in the set
        int64_t *idx = xmalloc((size_t)w.n_samples * sizeof *idx);
        char rule[512];
        n_held = trainset_heldout_draw(w.n_samples, heldout, (uint64_t)heldout_seed, idx, rule, sizeof rule);
        rc = trainset_writer_dataset(&w, "/heldout", 0, idx, n_held);
        if (rc == 0) rc = trainset_writer_attr(&w, "heldout_rule", rule, NULL, 0, NULL);
        free(idx);
        if (rc < 0) { // the writer aborted itself
            log_error("%s", error_msg());
            return 1;
        }
    }
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
    if (heldout > 0) printf(", %" PRId64 " held out (/heldout)", n_held);
    printf("\n");
    return 0;
}
