// tool_make_data.c: `dflash_tool make-data OUT.h5 --target MODEL_DIR --samples N --prompt-len P
// --gen-len G [--seed S] [--device cpu|cuda] [--vocab-low A] [--batch B]`
//
// Self-distilled toy data, DFlash's recipe at toy scale: each sample is a random prompt of P ids,
// continued greedily by the target itself for G tokens (the cached decode of
// teacher/target_decode.h: a K/V cache on the attention layers, and on the Gated DeltaNet layers of
// the Qwen3.5 / Qwen3.6 hybrid the conv and recurrent state). A drafter trained on it learns to predict the target's own
// continuations, so acceptance lengths measured on held-out samples are meaningful even for a
// random-weight target.
//
//   prompt of sample i   P ids from [A, V), Philox stream rng_init(S, i, MAKE_DATA_RNG_ID):
//                        id_t = A + rng_below(V - A), t = 0..P-1 (a pure function of S and i)
//   sample i             prompt + G greedy tokens; loss_mask 0 on the prompt, 1 on the generated
//   file                 the HDF5 training set of SPEC section 7 (trainset writer: written under a
//                        temporary name and renamed, so a failed run leaves no OUT.h5), vocab_size =
//                        the target's V, tokenizer = "random-prompts+greedy(<MODEL_DIR>)"
//
// Samples are decoded B at a time in lockstep (--batch, default 8). The numbers of a batch do not
// depend on the other samples in it except through GEMM rounding over a different row count (far
// below any argmax gap that matters; the test checks --batch 1 and the default agree).
//
// Hidden test option: --prompts FILE.json takes the prompts from {"prompts": [[ids...], ...]} (other
// keys ignored; prompts may differ in length) instead of drawing them; --samples and --prompt-len are
// then not needed. tests/cli/test_make_data.sh uses it to check the decode against transformers'
// generate on the prompts of tests/reference/data/decode_*.json.
//
// --device cuda decodes on the GPU (target_decode.h: bf16 activations, so a continuation can part
// from the CPU's where two logits nearly tie); auto means cpu, the reference the tests compare.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "common/core/rng.h"
#include "common/data/trainset.h"
#include "teacher/target.h"
#include "teacher/target_decode.h"
#include "tools/tools.h"

#define MAKE_DATA_RNG_ID 0x4d44u // "MD": the prompts' Philox stream id

static void make_data_usage(FILE *f) {
    fprintf(f,
            "usage: dflash_tool make-data OUT.h5 --target MODEL_DIR --samples N --prompt-len P --gen-len G\n"
            "                             [--seed S] [--device cpu|cuda] [--vocab-low A] [--batch B]\n"
            "\n"
            "Self-distilled toy data: N random prompts of P token ids, each continued greedily by the\n"
            "target for G tokens (KV-cached decode, CPU), written as an HDF5 training set with loss_mask 0\n"
            "on the prompt and 1 on the generated tokens.\n"
            "\n"
            "  --seed S        prompts are a pure function of S and the sample index (default 0)\n"
            "  --vocab-low A   prompt ids are drawn from [A, V), e.g. to avoid small special ids (default 0)\n"
            "  --device        cpu (the default; auto means cpu) or cuda\n"
            "  --batch B       samples decoded in lockstep (default 8)\n");
}

static int make_data_int(const char *opt, const char *s, long long min, long long max, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return error_set("%s: '%s' is not an integer in [%lld, %lld]", opt, s, min, max);
    *out = v;
    return 0;
}

// Read {"prompts": [[ids...], ...]} into one malloc'd block: ids (concatenated) and off[n+1].
static int make_data_read_prompts(const char *path, int32_t **ids, int64_t **off, int *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) return error_set("--prompts %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = xmalloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    buf[got] = '\0';
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    if (!root) return error_set("--prompts %s: not valid JSON", path);
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(root, "prompts");
    int rc = 0;
    if (!cJSON_IsArray(ps) || cJSON_GetArraySize(ps) == 0) {
        rc = error_set("--prompts %s: wants {\"prompts\": [[ids...], ...]} with at least one prompt", path);
    } else {
        int np = cJSON_GetArraySize(ps), total = 0, i = 0;
        const cJSON *p, *id;
        cJSON_ArrayForEach(p, ps) total += cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
        *ids = xmalloc((size_t)(total > 0 ? total : 1) * sizeof(int32_t));
        *off = xmalloc(((size_t)np + 1) * sizeof(int64_t));
        (*off)[0] = 0;
        int64_t t = 0;
        cJSON_ArrayForEach(p, ps) {
            if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0) {
                rc = error_set("--prompts %s: prompt %d is not a non-empty list of ids", path, i);
                break;
            }
            cJSON_ArrayForEach(id, p) {
                if (!cJSON_IsNumber(id) || id->valuedouble != (double)(int32_t)id->valuedouble) {
                    rc = error_set("--prompts %s: prompt %d holds a value that is not an int32 id", path, i);
                    break;
                }
                (*ids)[t++] = (int32_t)id->valuedouble;
            }
            if (rc) break;
            (*off)[++i] = t;
        }
        *n_out = np;
        if (rc) {
            free(*ids);
            free(*off);
        }
    }
    cJSON_Delete(root);
    return rc;
}

int tool_make_data_main(int argc, char **argv) {
    const char *out = NULL, *target = NULL, *device = "cpu", *prompts_path = NULL;
    long long samples = -1, plen = -1, glen = -1, vocab_low = 0, batch = 8;
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            make_data_usage(stdout);
            return 0;
        }
        if (a[0] == '-' && a[1] == '-') {
            static const char *const opts[] = {"--target", "--samples", "--prompt-len", "--gen-len", "--seed",
                                               "--device", "--vocab-low", "--batch", "--prompts"};
            int known = 0;
            for (size_t j = 0; j < sizeof opts / sizeof opts[0]; j++) known |= strcmp(a, opts[j]) == 0;
            if (!known || i + 1 >= argc) {
                fprintf(stderr, "error: make-data: unknown or incomplete option '%s'\n", a);
                make_data_usage(stderr);
                return 2;
            }
            const char *v = argv[++i];
            int rc = 0;
            if (strcmp(a, "--target") == 0) target = v;
            else if (strcmp(a, "--device") == 0) device = v;
            else if (strcmp(a, "--prompts") == 0) prompts_path = v;
            else if (strcmp(a, "--samples") == 0) rc = make_data_int(a, v, 1, INT32_MAX, &samples);
            else if (strcmp(a, "--prompt-len") == 0) rc = make_data_int(a, v, 1, INT32_MAX, &plen);
            else if (strcmp(a, "--gen-len") == 0) rc = make_data_int(a, v, 1, INT32_MAX, &glen);
            else if (strcmp(a, "--vocab-low") == 0) rc = make_data_int(a, v, 0, INT32_MAX, &vocab_low);
            else if (strcmp(a, "--batch") == 0) rc = make_data_int(a, v, 1, 4096, &batch);
            else { // --seed: any unsigned 64-bit value
                char *end;
                errno = 0;
                unsigned long long s = strtoull(v, &end, 10);
                if (errno || end == v || *end || v[0] == '-') rc = error_set("--seed: '%s' is not an unsigned integer", v);
                seed = s;
            }
            if (rc) {
                fprintf(stderr, "error: make-data: %s\n", error_msg());
                return 1;
            }
        } else if (!out) {
            out = a;
        } else {
            fprintf(stderr, "error: make-data: unexpected argument '%s'\n", a);
            make_data_usage(stderr);
            return 2;
        }
    }
    if (!out || !target || glen < 0 || (!prompts_path && (samples < 0 || plen < 0))) {
        fprintf(stderr, "error: make-data: OUT.h5, --target, --gen-len and (unless --prompts) --samples and "
                        "--prompt-len are required\n");
        make_data_usage(stderr);
        return 2;
    }
    log_setup(0, 1, LOG_INFO);

    // The prompts: drawn, or read from --prompts.
    int32_t *pids = NULL;
    int64_t *poff = NULL;
    int n = 0;
    if (prompts_path) {
        if (make_data_read_prompts(prompts_path, &pids, &poff, &n)) {
            fprintf(stderr, "error: make-data: %s\n", error_msg());
            return 1;
        }
        samples = n;
    }

    backend be;
    if (strcmp(device, "auto") == 0) device = "cpu"; // the fp32 reference unless a GPU is asked for
    int bad = backend_open(&be, device, 0);
    if (bad) {
        fprintf(stderr, "error: make-data: %s\n", error_msg());
        free(pids);
        free(poff);
        return 1;
    }
    target_model m;
    if (target_load(&m, target, &be)) {
        fprintf(stderr, "error: make-data: %s\n", error_msg());
        backend_close(&be);
        free(pids);
        free(poff);
        return 1;
    }
    const target_config *c = &m.cfg;
    int64_t V = c->vocab;
    int rc = 0, max_prompt = (int)plen;
    if (vocab_low >= V)
        rc = error_set("--vocab-low %lld leaves no ids: the target's vocabulary is [0, %lld)", vocab_low, (long long)V);
    if (prompts_path) { // the file's prompts: every id inside the vocabulary
        max_prompt = 0;
        for (int s = 0; rc == 0 && s < n; s++) {
            if (poff[s + 1] - poff[s] > max_prompt) max_prompt = (int)(poff[s + 1] - poff[s]);
            for (int64_t t = poff[s]; t < poff[s + 1]; t++)
                if (pids[t] < 0 || pids[t] >= V) {
                    rc = error_set("prompt %d: id %d is outside the target vocabulary [0, %lld)", s, pids[t], (long long)V);
                    break;
                }
        }
    } else {
        n = (int)samples;
    }
    if (rc == 0 && (int64_t)max_prompt + glen > c->max_positions)
        rc = error_set("a prompt of %d + %lld generated tokens exceeds the target's max_position_embeddings %lld",
                       max_prompt, glen, (long long)c->max_positions);
    if (rc == 0 && (int64_t)max_prompt + glen > INT32_MAX / 2)
        rc = error_set("a prompt of %d + %lld generated tokens is too long", max_prompt, glen);
    int nb = (int)(batch < n ? batch : n);
    target_decoder dec;
    memset(&dec, 0, sizeof dec);
    if (rc == 0) rc = target_decoder_init(&dec, &m, nb, max_prompt + (int)glen - 1, 0, NULL);
    char tokenizer[256];
    snprintf(tokenizer, sizeof tokenizer, "%s+greedy(%s)", prompts_path ? "prompts-file" : "random-prompts", target);
    trainset_writer w;
    int writer_open = 0;
    if (rc == 0) {
        rc = trainset_writer_open(&w, out, V, tokenizer);
        writer_open = rc == 0;
    }
    if (rc) {
        fprintf(stderr, "error: make-data: %s\n", error_msg());
        target_decoder_free(&dec);
        target_free(&m);
        backend_close(&be);
        free(pids);
        free(poff);
        return 1;
    }

    // Decode in batches of nb samples; write each sample as prompt + continuation. Drawn prompts are
    // made batch by batch (memory does not grow with N).
    const int32_t **prompts = xmalloc((size_t)nb * sizeof *prompts);
    int *lens = xmalloc((size_t)nb * sizeof(int));
    int32_t *drawn = prompts_path ? NULL : xmalloc((size_t)nb * (size_t)plen * sizeof(int32_t));
    int32_t *gen = xmalloc((size_t)nb * (size_t)glen * sizeof(int32_t));
    int32_t *sample = xmalloc(((size_t)max_prompt + (size_t)glen) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)max_prompt + (size_t)glen);
    progress pr;
    progress_start(&pr, "make-data: samples", n);
    double t0 = time_now();
    for (int s0 = 0; rc == 0 && s0 < n; s0 += nb) {
        int cnt = n - s0 < nb ? n - s0 : nb;
        for (int j = 0; j < cnt; j++) {
            if (prompts_path) {
                prompts[j] = pids + poff[s0 + j];
                lens[j] = (int)(poff[s0 + j + 1] - poff[s0 + j]);
            } else { // sample s's prompt: a pure function of (seed, s)
                int32_t *p = drawn + (size_t)j * plen;
                rng r;
                rng_init(&r, seed, (uint64_t)(s0 + j), MAKE_DATA_RNG_ID);
                for (int64_t t = 0; t < plen; t++) p[t] = (int32_t)(vocab_low + (int64_t)rng_below(&r, (uint64_t)(V - vocab_low)));
                prompts[j] = p;
                lens[j] = (int)plen;
            }
        }
        rc = target_decoder_generate(&dec, cnt, prompts, lens, (int)glen, gen);
        for (int j = 0; rc == 0 && j < cnt; j++) {
            int P = lens[j];
            memcpy(sample, prompts[j], (size_t)P * sizeof(int32_t));
            memcpy(sample + P, gen + (size_t)j * glen, (size_t)glen * sizeof(int32_t));
            memset(mask, 0, (size_t)P);
            memset(mask + P, 1, (size_t)glen);
            rc = trainset_writer_append(&w, sample, mask, P + glen);
        }
        if (rc == 0) progress_update(&pr, s0 + cnt);
    }
    double secs = time_now() - t0;
    if (rc == 0) {
        progress_end(&pr);
        rc = trainset_writer_close(&w);
    } else if (writer_open) {
        trainset_writer_abort(&w);
    }
    if (rc) fprintf(stderr, "error: make-data: %s\n", error_msg());
    else
        log_info("make-data: %d samples, %lld generated tokens each, %lld tokens in all -> %s (%s, %.0f generated tokens/s)",
                 n, glen, (long long)w.n_tokens, out, be.name, secs > 0 ? (double)n * (double)glen / secs : 0.0);
    free(prompts);
    free(lens);
    free(drawn);
    free(gen);
    free(sample);
    free(mask);
    free(pids);
    free(poff);
    target_decoder_free(&dec);
    target_free(&m);
    backend_close(&be);
    return rc ? 1 : 0;
}
