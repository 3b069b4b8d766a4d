// tool_teacher_dump.c: `dflash_tool teacher-dump MODEL_DIR TOKENS.json OUT.safetensors`
//
// Runs the target (teacher) forward over the sequences of TOKENS.json ({"sequences": [[ids], ...]},
// packed in the given order) and writes what a teacher rank produces, in fp32:
//   features    f32 [T, n_feat*H]  HF hidden_states[id + 1] for each id of layer_ids (after the final
//                                  norm for id = L-1; target.h)
//   topk_idx    i32 [T, k]         top-k vocabulary ids, sorted by logit, descending
//   topk_val    f32 [T, k]         their logits
//   lse         f32 [T]            log-sum-exp of the full-vocabulary logits
//   logits_last f32 [n_seq, V]     full logits of each sequence's last token (for checking)
//   tokens i32 [T], cu_seqlens i32 [n_seq+1], layer_ids i32 [n_feat]  (the inputs, for the record)
// It is the hook for checking the teacher against other implementations (tests/reference/).
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/backend/profile.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/json_util.h"
#include "common/core/log.h"
#include "common/data/safetensors.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/target_quant.h"
#include "tools/tools.h"

static void teacher_dump_usage(FILE *f) {
    fprintf(f, "usage: dflash_tool teacher-dump MODEL_DIR TOKENS.json OUT.safetensors [--device auto|cpu|cuda]\n"
               "                                [--layers 1,9,17] [--topk K] [--vocab-tile N]\n"
               "  TOKENS.json: {\"sequences\": [[id, ...], ...]}, packed in order\n"
               "  --layers: target layers (0-based) whose HF hidden_states[id + 1] form the features (the last\n"
               "            layer's after the final norm); default: SPEC section 2's formula for 5 features\n"
               "  --topk:   k of the top-k logits (default 32)\n"
               "  --quant-weights resident|dequantize: a quantised target's weights on the device (teacher.quant_weights:\n"
               "            kept as stored and de-quantised a layer at a time, the default, or de-quantised at load);\n"
               "            the last line gives the weights' device bytes\n"
               "  --repeat N: run the forward N more times and print its median time and tokens/s (benchmarks)\n"
               "  --profile: one more forward with every op timed; prints the time per op, slowest first\n");
}

// Read {"sequences": [[...], ...]} into tokens[T] and cu_seqlens[n+1] (malloc'd).
static int teacher_dump_read_tokens(const char *path, int32_t **tokens, int32_t **cu, int *n_seq, int *T) {
    char *buf = file_read_text(path, SIZE_MAX);
    if (!buf) return -1;
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    if (!root) return error_set("%s: not valid JSON", path);
    const cJSON *seqs = cJSON_GetObjectItemCaseSensitive(root, "sequences");
    int rc = 0;
    if (!cJSON_IsArray(seqs) || cJSON_GetArraySize(seqs) == 0) {
        rc = error_set("%s: wants {\"sequences\": [[ids...], ...]} with at least one sequence", path);
    } else {
        int ns = cJSON_GetArraySize(seqs), total = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, seqs) total += cJSON_IsArray(s) ? cJSON_GetArraySize(s) : 0;
        *tokens = xmalloc((size_t)(total > 0 ? total : 1) * sizeof(int32_t));
        *cu = xmalloc(((size_t)ns + 1) * sizeof(int32_t));
        (*cu)[0] = 0;
        int i = 0, t = 0;
        cJSON_ArrayForEach(s, seqs) {
            if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) == 0) {
                rc = error_set("%s: sequence %d is not a non-empty list of ids", path, i);
                break;
            }
            const cJSON *id;
            cJSON_ArrayForEach(id, s) {
                if (!cJSON_IsNumber(id) || id->valuedouble != (double)(int32_t)id->valuedouble) {
                    rc = error_set("%s: sequence %d holds a value that is not an int32 id", path, i);
                    break;
                }
                (*tokens)[t++] = (int32_t)id->valuedouble;
            }
            if (rc) break;
            (*cu)[++i] = t;
        }
        *n_seq = ns;
        *T = t;
        if (rc) {
            free(*tokens);
            free(*cu);
        }
    }
    cJSON_Delete(root);
    return rc;
}

static int teacher_dump_parse_ids(const char *s, target_outputs *o) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_feat = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (end == tok || *end || o->n_feat >= TARGET_MAX_FEAT) return error_set("--layers '%s': want up to %d comma-separated integers", s, TARGET_MAX_FEAT);
        o->layer_ids[o->n_feat++] = v;
    }
    return o->n_feat ? 0 : error_set("--layers '%s' is empty", s);
}

int tool_teacher_dump_main(int argc, char **argv) {
    const char *pos[3] = {0}, *device = "auto", *layers = NULL, *quant_weights = NULL;
    int npos = 0, topk = 32, tile = 0, repeat = 0, profile = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) { teacher_dump_usage(stdout); return 0; }
        if (strcmp(a, "--profile") == 0) { profile = 1; continue; }
        if ((strcmp(a, "--device") == 0 || strcmp(a, "--layers") == 0 || strcmp(a, "--topk") == 0 ||
             strcmp(a, "--vocab-tile") == 0 || strcmp(a, "--repeat") == 0 || strcmp(a, "--quant-weights") == 0) &&
            i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(a, "--device") == 0) device = v;
            else if (strcmp(a, "--quant-weights") == 0) quant_weights = v;
            else if (strcmp(a, "--layers") == 0) layers = v;
            else if (strcmp(a, "--topk") == 0) topk = atoi(v);
            else if (strcmp(a, "--repeat") == 0) repeat = atoi(v);
            else tile = atoi(v);
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "error: teacher-dump: unknown or incomplete option '%s'\n", a);
            teacher_dump_usage(stderr);
            return 2;
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            teacher_dump_usage(stderr);
            return 2;
        }
    }
    if (npos != 3) {
        teacher_dump_usage(stderr);
        return 2;
    }
    if (quant_weights && target_quant_weights_set(quant_weights, "--quant-weights")) {
        fprintf(stderr, "error: teacher-dump: %s\n", error_msg());
        return 2;
    }
    log_setup(0, 1, LOG_WARN);
    backend be;
    if (backend_open(&be, device, 0)) {
        fprintf(stderr, "error: %s\n", error_msg());
        return 1;
    }
    target_model m;
    if (target_load(&m, pos[0], &be)) {
        fprintf(stderr, "error: %s\n", error_msg());
        backend_close(&be);
        return 1;
    }
    target_outputs o = {.topk = topk, .vocab_tile = tile};
    int rc = 0;
    if (layers) {
        rc = teacher_dump_parse_ids(layers, &o);
    } else {
        o.n_feat = 5;
        rc = target_default_layer_ids(m.cfg.n_layers, o.n_feat, o.layer_ids);
    }
    if (rc == 0) rc = target_outputs_check(&m, &o);
    int32_t *tokens = NULL, *cu = NULL;
    int n_seq = 0, T = 0;
    if (rc == 0) rc = teacher_dump_read_tokens(pos[1], &tokens, &cu, &n_seq, &T);
    if (rc) {
        fprintf(stderr, "error: %s\n", error_msg());
        target_free(&m);
        backend_close(&be);
        return 1;
    }

    const target_config *c = &m.cfg;
    int64_t H = c->hidden, V = c->vocab, nf = o.n_feat, k = o.topk;
    arena work;
    size_t bytes = target_work_bytes(&m, &o, T, n_seq, o.vocab_tile);
    if (arena_init(&work, "teacher-dump work", &be, bytes)) {
        fprintf(stderr, "error: %s\n", error_msg());
        return 1;
    }
    target_work w;
    target_work_carve(&w, &work, &m, &o, T, n_seq, o.vocab_tile);
    int *last = xmalloc((size_t)n_seq * sizeof(int));
    for (int s = 0; s < n_seq; s++) last[s] = cu[s + 1] - 1;
    float *logits_last = xmalloc((size_t)n_seq * (size_t)V * sizeof(float));
    if (target_forward(&m, &o, &w, tokens, cu, n_seq, T, last, n_seq, logits_last)) {
        fprintf(stderr, "error: %s\n", error_msg());
        return 1;
    }

    if (repeat > 0) { // timing: the forward alone (no logits rows), median of N runs
        double *ms = xmalloc((size_t)repeat * sizeof(double));
        for (int r = 0; r < repeat; r++) {
            double t0 = time_now();
            target_forward(&m, &o, &w, tokens, cu, n_seq, T, NULL, 0, NULL);
            ms[r] = 1e3 * (time_now() - t0);
        }
        for (int i = 1; i < repeat; i++) // insertion sort: a handful of values
            for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
                double x = ms[j];
                ms[j] = ms[j - 1];
                ms[j - 1] = x;
            }
        double med = ms[repeat / 2];
        printf("teacher-forward: %d tokens, median %.2f ms over %d runs, %.1f tokens/s (%s)\n", T, med, repeat,
               1e3 * T / med, be.name);
        free(ms);
    }
    if (profile) { // every op timed (after the timed runs: no effect on them)
        prof_enable(&be);
        double t0 = time_now();
        target_forward(&m, &o, &w, tokens, cu, n_seq, T, NULL, 0, NULL);
        double total = time_now() - t0;
        prof_row *rows = NULL;
        int n = prof_collect(&rows);
        printf("teacher-forward profile: %d tokens, %.2f ms (%s)\n  %-28s %8s %10s %7s %9s\n", T, 1e3 * total, be.name,
               "op", "calls", "ms", "share", "GFLOP/s");
        for (int i = 0; i < n; i++) {
            printf("  %-28s %8ld %10.2f %6.1f%%", rows[i].name, rows[i].calls, 1e3 * rows[i].seconds,
                   100.0 * rows[i].seconds / total);
            if (rows[i].flops > 0) printf(" %9.1f", rows[i].flops / rows[i].seconds * 1e-9);
            printf("\n");
        }
        free(rows);
        prof_disable();
    }

    // Outputs to the host, features converted to fp32.
    dtype act = ops_act_dtype(&be);
    size_t nfeat = (size_t)T * (size_t)(nf * H);
    void *feat_raw = xmalloc(nfeat * dtype_size(act));
    float *features = xmalloc(nfeat * sizeof(float));
    int32_t *topk_idx = xmalloc((size_t)T * (size_t)k * sizeof(int32_t));
    float *topk_val = xmalloc((size_t)T * (size_t)k * sizeof(float));
    float *lse = xmalloc((size_t)T * sizeof(float));
    backend_copy_to_host(&be, feat_raw, w.features, nfeat * dtype_size(act));
    convert_to_f32(features, feat_raw, act, (int64_t)nfeat);
    backend_copy_to_host(&be, topk_idx, w.topk_idx, (size_t)T * (size_t)k * sizeof(int32_t));
    backend_copy_to_host(&be, topk_val, w.topk_val, (size_t)T * (size_t)k * sizeof(float));
    backend_copy_to_host(&be, lse, w.lse, (size_t)T * sizeof(float));
    int32_t ids[TARGET_MAX_FEAT];
    for (int i = 0; i < nf; i++) ids[i] = (int32_t)o.layer_ids[i];

    st_writer sw;
    safetensors_writer_init(&sw);
    int64_t s_feat[2] = {T, nf * H}, s_k[2] = {T, k}, s_t[1] = {T}, s_last[2] = {n_seq, V}, s_cu[1] = {n_seq + 1}, s_ids[1] = {nf};
    safetensors_writer_add(&sw, "features", tensor_make(DT_F32, features, DEVICE_CPU, 2, s_feat));
    safetensors_writer_add(&sw, "topk_idx", tensor_make(DT_I32, topk_idx, DEVICE_CPU, 2, s_k));
    safetensors_writer_add(&sw, "topk_val", tensor_make(DT_F32, topk_val, DEVICE_CPU, 2, s_k));
    safetensors_writer_add(&sw, "lse", tensor_make(DT_F32, lse, DEVICE_CPU, 1, s_t));
    safetensors_writer_add(&sw, "logits_last", tensor_make(DT_F32, logits_last, DEVICE_CPU, 2, s_last));
    safetensors_writer_add(&sw, "tokens", tensor_make(DT_I32, tokens, DEVICE_CPU, 1, s_t));
    safetensors_writer_add(&sw, "cu_seqlens", tensor_make(DT_I32, cu, DEVICE_CPU, 1, s_cu));
    safetensors_writer_add(&sw, "layer_ids", tensor_make(DT_I32, ids, DEVICE_CPU, 1, s_ids));
    safetensors_writer_meta(&sw, "producer", "dflash_tool teacher-dump");
    safetensors_writer_meta(&sw, "backend", be.name);
    safetensors_writer_meta(&sw, "architecture", c->arch_name);
    rc = safetensors_writer_write(&sw, pos[2]);
    if (rc) fprintf(stderr, "error: %s\n", error_msg());
    else {
        char wb[32], sb[32], qd[64], quant[160] = "";
        if (c->quant.method != TARGET_QUANT_NONE && m.quant_jobs)
            snprintf(quant, sizeof quant, " (%s, quantised, resident: layer scratch %s)",
                     target_quant_describe(&c->quant, qd, sizeof qd), bytes_format(m.scratch_bytes, sb, sizeof sb));
        else if (c->quant.method != TARGET_QUANT_NONE)
            snprintf(quant, sizeof quant, " (%s, de-quantised at load)", target_quant_describe(&c->quant, qd, sizeof qd));
        fprintf(stderr, "teacher-dump: %d sequence(s), %d tokens, %d features x %lld, top-%d -> %s (%s); weights %s = %zu "
                        "bytes%s\n", n_seq, T, (int)nf, (long long)H, (int)k, pos[2], be.name,
                bytes_format(m.weights.used, wb, sizeof wb), m.weights.used, quant);
    }
    safetensors_writer_free(&sw);
    free(feat_raw);
    free(features);
    free(topk_idx);
    free(topk_val);
    free(lse);
    free(last);
    free(logits_last);
    free(tokens);
    free(cu);
    arena_free(&work);
    target_free(&m);
    backend_close(&be);
    return rc ? 1 : 0;
}
