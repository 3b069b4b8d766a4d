// tool_mem_check.c: `dflash_tool mem-check`: the student's memory plan against what it really
// uses, while the anchors per step grow, and the step time at a given size (the GPU check and
// bench/gpu_student.py use it; it runs on the CPU too, where only the arenas are measured).
//
//   dflash_tool mem-check [--device auto|cpu|cuda] [--preset tiny|8b|27b] [shape options]
//        [--anchors 32,64,128,256,512] [--budget-chunk C | --mem-budget BYTES]
//        [--time-anchors A] [--time-budget BYTES] [--repeat N] [--profile 0|1] [--json FILE]
//
// Everything is random (no files): a drafter of the given shape (weights from drafter_init, a random
// bf16 target embedding and lm_head), one packed batch of --tokens tokens in --seqs sequences with
// random bf16 features and a teacher top-k, and distinct random anchors.
//
// Memory sequence: one budget (by default the plan total of --budget-chunk anchors per chunk, the
// first anchor count: what a run with train.mem_budget set to it would get), then for each anchor
// count A the planner's plan for it under that budget (AdamW moments counted, as in training), the
// allocation (drafter, step work and optimizer arenas, as train.c allocates them), one student step
// and one optimizer step. Reported per A: the chosen anchors per chunk and loss mode, the plan's
// total, the arenas' high-water marks (what train.c reports as the rank's peak), and on a GPU the
// device memory in use (cudaMemGetInfo: free before the drafter minus free after the step, with
// every arena still allocated: arenas + cuBLAS workspace + lazily loaded kernels).
//
// Timing: after the sequence, --time-anchors anchors under --time-budget (default: none on the CPU,
// 90 % of the free device memory on a GPU; all anchors in one chunk when they fit) with a fresh plan,
// one warm-up step, then --repeat timed student steps
// (forward + loss + backward; the optimizer is not timed). Median step time, block and context tokens
// per second. --profile 1: then one more step with every op timed (profile.h: GPU time per op on
// CUDA), printed as a table and kept in the JSON's timing.profile.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/backend/profile.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/log.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/loss/loss_config.h"
#include "student/train/optim.h"
#include "student/model/memory_plan.h"
#include "student/model/step.h"
#include "tools/tools.h"

#define MC_MAX_RUNS 32

typedef struct {
    long hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, block, n_feat;
    long tokens, seqs, topk;
    int untied;
} mc_shape;

static const struct {
    const char *name;
    mc_shape s;
    const char *anchors;
    long time_anchors;
} mc_presets[] = {
    // toy sizes: seconds on a CPU
    {"tiny", {64, 2, 4, 2, 16, 128, 1000, 8, 3, 512, 2, 8, 1}, "4,8,16,32,64", 64},
    // a Qwen3-8B drafter (issue 7): 5 layers, H 4096, 32/8 heads x 128, MLP 12288, V 151936, B 16, 3072 tokens
    {"8b", {4096, 5, 32, 8, 128, 12288, 151936, 16, 5, 3072, 1, 32, 1}, "32,64,128,256,512", 512},
    // a 27B-sized drafter: H 5120, 24 x 256 q heads, 4 kv heads, MLP 17408, V 248320, B 32, 3072 tokens
    {"27b", {5120, 5, 24, 4, 256, 17408, 248320, 32, 5, 3072, 1, 32, 1}, "64,128,256,512,1024", 1024},
};
#define MC_NPRESETS (sizeof mc_presets / sizeof mc_presets[0])

static void mem_check_usage(FILE *f) {
    fprintf(f,
            "usage: dflash_tool mem-check [--device auto|cpu|cuda] [--preset tiny|8b|27b]\n"
            "        [--hidden H] [--layers L] [--heads NQ] [--kv-heads NKV] [--head-dim D] [--intermediate I]\n"
            "        [--vocab V] [--block B] [--n-feat F] [--tokens S] [--seqs N] [--topk K] [--untied 0|1]\n"
            "        [--anchors A1,A2,...] [--budget-chunk C | --mem-budget BYTES]\n"
            "        [--time-anchors A] [--time-budget BYTES] [--repeat N] [--profile 0|1] [--seed S] [--json FILE]\n"
            "  memory: for each anchor count, the plan under one budget (default: the plan total of C =\n"
            "  the first count anchors per chunk) against the arenas' peak and the device memory in use;\n"
            "  timing: --repeat student steps of --time-anchors anchors (0 = none), median time, under\n"
            "  --time-budget (default: none on the CPU, 90%% of the free memory on a GPU); --profile 1: one more\n"
            "  step with every op timed (GPU time per op on CUDA).\n"
            "  Presets: tiny (the default on the CPU), 8b (the default on a GPU), 27b.\n");
}

static double mc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static uint64_t mc_mix(uint64_t z) { // splitmix64's finaliser
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// uniform in [-amp, amp) from (stream, index)
static float mc_unif(uint64_t stream, uint64_t i, float amp) {
    return (float)((double)(mc_mix((stream << 40) ^ i) >> 40) / 16777216.0 * 2.0 - 1.0) * amp;
}
static void mc_fill_bf16(uint16_t *x, int64_t n, uint64_t stream, float amp) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = bf16_from_f32(mc_unif(stream, (uint64_t)i, amp));
}

static int mc_cmp_int(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

static int mc_parse_list(const char *s, long *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1) return -1;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *s ? -1 : n;
}

typedef struct { // one batch, host memory
    int32_t *tokens, *cu, *topk_idx;
    uint8_t *mask;
    uint16_t *features;
    float *topk_val, *lse;
} mc_batch;

static void mc_batch_make(mc_batch *b, const mc_shape *s, uint64_t seed) {
    long S = s->tokens, k = s->topk, D = s->n_feat * s->hidden, V = s->vocab;
    b->tokens = xmalloc((size_t)S * sizeof(int32_t));
    b->cu = xmalloc((size_t)(s->seqs + 1) * sizeof(int32_t));
    b->mask = xmalloc((size_t)S);
    b->features = xmalloc((size_t)S * (size_t)D * sizeof(uint16_t));
    b->topk_idx = xmalloc((size_t)S * (size_t)k * sizeof(int32_t));
    b->topk_val = xmalloc((size_t)S * (size_t)k * sizeof(float));
    b->lse = xmalloc((size_t)S * sizeof(float));
    for (long i = 0; i <= s->seqs; i++) b->cu[i] = (int32_t)(i * S / s->seqs);
    for (long t = 0; t < S; t++) {
        b->tokens[t] = (int32_t)(mc_mix(seed * 7 + 1000003ull * (uint64_t)t) % (uint64_t)(V - 1)); // never the mask token
        b->mask[t] = 1;
        uint64_t base = mc_mix(seed * 11 + 7919ull * (uint64_t)t) % (uint64_t)V;
        for (long j = 0; j < k; j++) { // distinct ids: 7919 is prime and does not divide V (checked)
            b->topk_idx[t * k + j] = (int32_t)((base + (uint64_t)j * 7919u) % (uint64_t)V);
            b->topk_val[t * k + j] = (float)(10.0 - 0.25 * (double)j);
        }
        b->lse[t] = 12.0f;
    }
    for (long i = 0; i < s->seqs; i++) // a two-token "prompt" per sequence
        for (int32_t t = b->cu[i]; t < b->cu[i] + 2 && t < b->cu[i + 1]; t++) b->mask[t] = 0;
    mc_fill_bf16(b->features, (int64_t)S * D, seed * 13 + 5, 1.0f);
}

static void mc_batch_free(mc_batch *b) {
    free(b->tokens), free(b->cu), free(b->mask), free(b->features), free(b->topk_idx), free(b->topk_val), free(b->lse);
}

// n distinct anchors (with repeats only if there are fewer valid positions), sorted. Valid: a
// position whose next token is scored, inside its sequence. Returns the mean number of keys a query
// sees (its sequence before the anchor plus the block), for the FLOP count.
static double mc_anchors(int32_t *out, long n, const mc_batch *b, const mc_shape *s, uint64_t seed) {
    long S = s->tokens, nv = 0;
    int32_t *valid = xmalloc((size_t)S * sizeof(int32_t)), *start_of = xmalloc((size_t)S * sizeof(int32_t));
    for (long i = 0; i < s->seqs; i++)
        for (int32_t t = b->cu[i]; t < b->cu[i + 1]; t++) {
            start_of[t] = b->cu[i];
            if (t + 1 < b->cu[i + 1] && b->mask[t + 1]) valid[nv++] = t;
        }
    if (nv == 0) fatal("mem-check: the batch has no valid anchor position");
    uint64_t st = mc_mix(seed * 17 + 3);
    for (long i = 0; i < nv && i < n; i++) { // partial Fisher-Yates
        st = mc_mix(st);
        long j = i + (long)(st % (uint64_t)(nv - i));
        int32_t x = valid[i];
        valid[i] = valid[j], valid[j] = x;
    }
    double keys = 0;
    for (long i = 0; i < n; i++) {
        out[i] = valid[i % nv];
        keys += (double)(out[i] - start_of[out[i]] + s->block);
    }
    qsort(out, (size_t)n, sizeof(int32_t), mc_cmp_int);
    free(valid), free(start_of);
    return keys / (double)n;
}

typedef struct {
    long anchors;
    int chunk, row_chunk;
    const char *loss_mode;
    size_t budget, plan_total, arena_peak;
    long long device_used; // -1 on the CPU
    double step_s, median_s, kv_mean;
    double times[64];
    int n_times;
    int fits; // plan_total <= budget (or no budget)
    prof_row *prof; // --profile: one more step, op by op (profile.h)
    int n_prof;
    double prof_step_s;
} mc_run;

// One plan + allocation + steps. repeat = 0: one step and one optimizer step (the memory sequence);
// repeat > 0: a warm-up step, then `repeat` timed steps.
static int mc_run_one(drafter *d, backend *be, const loss_config *lc, const mc_shape *s, const mc_batch *mb, long A,
                      size_t budget, int repeat, int profile, size_t free_base, uint64_t seed, mc_run *out) {
    memset(out, 0, sizeof *out);
    out->anchors = A, out->budget = budget, out->device_used = -1;
    plan_request pr = {.budget = budget, .max_tokens = (int)s->tokens, .max_seqs = (int)s->seqs, .max_anchors = (int)A,
                       .k = (int)s->topk, .adam = 1, .tied = !s->untied, .force_mode = -1};
    student_plan plan;
    plan_breakdown bd;
    if (plan_make(&d->cfg, be, &pr, &plan, &bd)) return -1;
    out->chunk = plan.chunk_anchors;
    out->loss_mode = plan.loss.mode == LOSS_MODE_ROWS ? "rows" : "tiles";
    out->row_chunk = plan.loss.row_chunk;
    out->plan_total = bd.total;
    out->fits = budget == 0 || bd.total <= budget;
    arena work, opt_mem;
    if (arena_init(&work, "student work", be, student_work_bytes(d, &plan))) return -1;
    if (arena_init(&opt_mem, "optimizer", be, optim_bytes(d->numel, 0))) { arena_free(&work); return -1; }
    student_work *w = student_work_create(d, &plan, &work);
    optim_config oc;
    optim_config_default(&oc);
    oc.total_steps = 1000;
    optim opt;
    optim_init(&opt, &oc, be, d->numel, &opt_mem, d->master);
    int32_t *anchors = xmalloc((size_t)A * sizeof(int32_t));
    out->kv_mean = mc_anchors(anchors, A, mb, s, seed + (uint64_t)A);
    tensor feat = tensor_make(DT_BF16, mb->features, DEVICE_CPU, 2, (int64_t[]){s->tokens, s->n_feat * s->hidden});
    student_batch b = {.S = (int)s->tokens, .n_seq = (int)s->seqs, .k = (int)s->topk, .tokens = mb->tokens,
                       .loss_mask = mb->mask, .cu_seqlens = mb->cu, .features = feat, .topk_idx = mb->topk_idx,
                       .topk_val = mb->topk_val, .lse = mb->lse};
    int rc = 0;
    for (int it = 0; it <= repeat && !rc; it++) {
        step_stats st;
        memset(&st, 0, sizeof st);
        double t0 = mc_now();
        rc = student_step(d, lc, &plan, w, &b, anchors, (int)A, &st);
        double t = mc_now() - t0; // student_step ends with backend_sync
        if (rc) break;
        if (repeat == 0) {
            out->step_s = t;
            optim_step(&opt, d->master, d->grad, st.sum_w > 0 ? st.sum_w : 1.0);
            drafter_sync_compute(d);
            backend_sync(be);
        } else if (it > 0 && out->n_times < 64) {
            out->times[out->n_times++] = t;
        } else {
            backend_memset_zero(be, d->grad, (size_t)d->numel * sizeof(float));
        }
    }
    if (!rc && profile && repeat > 0) { // one more step, every op timed (after the timed ones: no effect on them)
        step_stats st;
        memset(&st, 0, sizeof st);
        prof_enable(be);
        double t0 = mc_now();
        rc = student_step(d, lc, &plan, w, &b, anchors, (int)A, &st);
        out->prof_step_s = mc_now() - t0;
        out->n_prof = rc ? 0 : prof_collect(&out->prof);
        prof_disable();
    }
    if (!rc) {
        out->arena_peak = arena_high_water(&d->mem) + arena_high_water(&work) + arena_high_water(&opt_mem);
        if (be->caps.device) {
            size_t fr, tot;
            backend_mem_info(be, &fr, &tot);
            out->device_used = (long long)free_base - (long long)fr;
        }
        if (out->n_times) {
            double t[64];
            memcpy(t, out->times, sizeof t);
            for (int i = 1; i < out->n_times; i++) // insertion sort
                for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { double x = t[j]; t[j] = t[j - 1], t[j - 1] = x; }
            out->median_s = out->n_times % 2 ? t[out->n_times / 2] : 0.5 * (t[out->n_times / 2 - 1] + t[out->n_times / 2]);
        }
    }
    free(anchors);
    student_work_destroy(w);
    arena_free(&opt_mem);
    arena_free(&work);
    return rc;
}

// The profiled step: per op its calls, time (GPU time on CUDA), share of the step, and for the GEMMs
// the rate; then the rest of the step (host work, waits, kernels outside ops.h: the fused loss's).
static void mc_print_profile(const mc_run *r) {
    double sum = 0, gemm_s = 0, gemm_f = 0;
    printf("profile: one more step, every op timed: %.4f s\n  %-32s %6s %10s %7s %9s\n", r->prof_step_s, "op", "calls",
           "ms", "step %", "TFLOP/s");
    for (int i = 0; i < r->n_prof; i++) {
        const prof_row *p = &r->prof[i];
        sum += p->seconds;
        if (p->flops > 0) gemm_s += p->seconds, gemm_f += p->flops;
        char rate[32] = "";
        if (p->flops > 0 && p->seconds > 0) snprintf(rate, sizeof rate, "%9.1f", p->flops / p->seconds / 1e12);
        printf("  %-32s %6ld %10.3f %6.1f%% %9s\n", p->name, p->calls, 1e3 * p->seconds, 100 * p->seconds / r->prof_step_s,
               rate);
    }
    printf("  %-32s %6s %10.3f %6.1f%%\n", "(outside the ops above)", "", 1e3 * (r->prof_step_s - sum),
           100 * (r->prof_step_s - sum) / r->prof_step_s);
    if (gemm_s > 0) printf("  GEMMs: %.1f TFLOP/s over %.3f ms\n", gemm_f / gemm_s / 1e12, 1e3 * gemm_s);
}

static void mc_json_run(FILE *f, const mc_run *r) {
    fprintf(f, "{\"anchors\": %ld, \"chunk\": %d, \"loss_mode\": \"%s\", \"row_chunk\": %d, \"budget\": %zu, "
               "\"plan_total\": %zu, \"arena_peak\": %zu, \"device_used\": %lld, \"fits\": %s, \"kv_mean\": %.1f",
            r->anchors, r->chunk, r->loss_mode, r->row_chunk, r->budget, r->plan_total, r->arena_peak, r->device_used,
            r->fits ? "true" : "false", r->kv_mean);
    if (r->n_times) {
        fprintf(f, ", \"times_s\": [");
        for (int i = 0; i < r->n_times; i++) fprintf(f, "%s%.6f", i ? ", " : "", r->times[i]);
        fprintf(f, "], \"median_s\": %.6f", r->median_s);
        if (r->n_prof) {
            fprintf(f, ", \"profile\": {\"step_s\": %.6f, \"ops\": [", r->prof_step_s);
            for (int i = 0; i < r->n_prof; i++)
                fprintf(f, "%s{\"name\": \"%s\", \"calls\": %ld, \"seconds\": %.6f, \"flops\": %.6g}", i ? ", " : "",
                        r->prof[i].name, r->prof[i].calls, r->prof[i].seconds, r->prof[i].flops);
            fprintf(f, "]}");
        }
    } else {
        fprintf(f, ", \"step_s\": %.6f", r->step_s);
    }
    fprintf(f, "}");
}

int tool_mem_check_main(int argc, char **argv) {
    const char *device = "auto", *preset = NULL, *anchors_s = NULL, *budget_s = NULL, *tbudget_s = NULL, *json_path = NULL;
    long over[13];
    int has_over[13] = {0};
    static const char *over_names[13] = {"--hidden", "--layers", "--heads", "--kv-heads", "--head-dim", "--intermediate",
                                         "--vocab", "--block", "--n-feat", "--tokens", "--seqs", "--topk", "--untied"};
    long budget_chunk = 0, time_anchors = -1, repeat = 5, seed = 1, profile = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) { mem_check_usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "error: mem-check: unknown or incomplete option '%s'\n", a); return 2; }
        const char *v = argv[++i];
        int k;
        for (k = 0; k < 13; k++)
            if (strcmp(a, over_names[k]) == 0) break;
        if (k < 13) {
            char *end;
            over[k] = strtol(v, &end, 10);
            if (*end || over[k] < (k == 12 ? 0 : 1)) { fprintf(stderr, "error: mem-check: %s wants a positive integer, not '%s'\n", a, v); return 2; }
            has_over[k] = 1;
        } else if (strcmp(a, "--device") == 0) device = v;
        else if (strcmp(a, "--preset") == 0) preset = v;
        else if (strcmp(a, "--anchors") == 0) anchors_s = v;
        else if (strcmp(a, "--mem-budget") == 0) budget_s = v;
        else if (strcmp(a, "--time-budget") == 0) tbudget_s = v;
        else if (strcmp(a, "--json") == 0) json_path = v;
        else if (strcmp(a, "--budget-chunk") == 0) budget_chunk = atol(v);
        else if (strcmp(a, "--time-anchors") == 0) time_anchors = atol(v);
        else if (strcmp(a, "--repeat") == 0) repeat = atol(v);
        else if (strcmp(a, "--seed") == 0) seed = atol(v);
        else if (strcmp(a, "--profile") == 0 && (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)) profile = atol(v);
        else { fprintf(stderr, "error: mem-check: unknown option '%s'\n", a); return 2; }
    }
    if (repeat < 1 || repeat > 63 || budget_chunk < 0) { fprintf(stderr, "error: mem-check: --repeat must be 1..63, --budget-chunk >= 0\n"); return 2; }
    size_t budget = 0, tbudget = 0;
    if (budget_s && bytes_parse(budget_s, &budget)) { fprintf(stderr, "error: --mem-budget: %s\n", error_msg()); return 2; }
    if (tbudget_s && bytes_parse(tbudget_s, &tbudget)) { fprintf(stderr, "error: --time-budget: %s\n", error_msg()); return 2; }
    log_setup(0, 1, LOG_WARN);

    backend be;
    if (backend_open(&be, device, 0)) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }
    if (!preset) preset = be.caps.device ? "8b" : "tiny";
    size_t pi;
    for (pi = 0; pi < MC_NPRESETS; pi++)
        if (strcmp(preset, mc_presets[pi].name) == 0) break;
    if (pi == MC_NPRESETS) { fprintf(stderr, "error: mem-check: --preset must be tiny, 8b or 27b, not '%s'\n", preset); backend_close(&be); return 2; }
    mc_shape s = mc_presets[pi].s;
    long *fields[13] = {&s.hidden, &s.layers, &s.heads, &s.kv_heads, &s.head_dim, &s.intermediate, &s.vocab, &s.block,
                        &s.n_feat, &s.tokens, &s.seqs, &s.topk, NULL};
    for (int k = 0; k < 12; k++)
        if (has_over[k]) *fields[k] = over[k];
    if (has_over[12]) s.untied = over[12] != 0;
    if (!anchors_s) anchors_s = mc_presets[pi].anchors;
    if (time_anchors < 0) time_anchors = mc_presets[pi].time_anchors;
    long list[MC_MAX_RUNS];
    int n_list = mc_parse_list(anchors_s, list, MC_MAX_RUNS);
    if (n_list < 0 || s.vocab % 7919 == 0 || s.topk > s.vocab || s.seqs > s.tokens / 4) {
        fprintf(stderr, "error: mem-check: bad --anchors list, or vocab a multiple of 7919, topk > vocab, or sequences under 4 tokens\n");
        backend_close(&be);
        return 2;
    }

    // The drafter's config.json, as a DFlash drafter of this shape would carry it.
    char json[2048], ids[256] = "";
    for (long i = 0; i < s.n_feat; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%ld", i ? ", " : "", 1 + 2 * i);
    char types[1024] = "";
    for (long i = 0; i < s.layers; i++) snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"full_attention\"", i ? ", " : "");
    snprintf(json, sizeof json,
             "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"vocab_size\": %ld, \"hidden_size\": %ld, "
             "\"intermediate_size\": %ld, \"num_hidden_layers\": %ld, \"num_attention_heads\": %ld, \"num_key_value_heads\": %ld, "
             "\"head_dim\": %ld, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"max_position_embeddings\": 40960, "
             "\"layer_types\": [%s], \"num_target_layers\": %ld, \"tie_word_embeddings\": false, "
             "\"dflash_config\": {\"block_size\": %ld, \"mask_token_id\": %ld, \"target_layer_ids\": [%s]}}",
             s.vocab, s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.head_dim, types, 2 * s.n_feat + 1, s.block,
             s.vocab - 1, ids);
    drafter_config dc;
    if (drafter_config_parse(&dc, json, "mem-check shape")) { fprintf(stderr, "error: %s\n", error_msg()); backend_close(&be); return 1; }
    loss_config lc;
    loss_config_default(&lc, (int)dc.block_size);

    size_t free_base = 0, total_dev = 0;
    backend_mem_info(&be, &free_base, &total_dev);
    // timing without --time-budget: no limit on the CPU; on a GPU 90 % of the memory free now, so that
    // the planner chunks a size that would not fit instead of running out of memory
    if (!tbudget_s && be.caps.device) tbudget = free_base / 10 * 9;
    double t0 = mc_now();
    int64_t VH = (int64_t)s.vocab * s.hidden;
    uint16_t *emb = xmalloc((size_t)VH * sizeof(uint16_t)), *head = s.untied ? xmalloc((size_t)VH * sizeof(uint16_t)) : NULL;
    mc_fill_bf16(emb, VH, (uint64_t)seed * 3 + 1, 0.05f);
    if (head) mc_fill_bf16(head, VH, (uint64_t)seed * 3 + 2, 0.05f);
    int64_t shp[2] = {s.vocab, s.hidden};
    tensor te = tensor_make(DT_BF16, emb, DEVICE_CPU, 2, shp), th = tensor_make(DT_BF16, head, DEVICE_CPU, 2, shp);
    drafter d;
    if (drafter_init(&d, &dc, &be, (uint64_t)seed, te, head ? &th : NULL)) { fprintf(stderr, "error: %s\n", error_msg()); backend_close(&be); return 1; }
    free(emb), free(head);
    mc_batch mb;
    mc_batch_make(&mb, &s, (uint64_t)seed);
    double t_init = mc_now() - t0;

    // The budget: the plan total of budget_chunk anchors per chunk (default: the first count).
    if (!budget_s) {
        if (budget_chunk == 0) budget_chunk = list[0];
        plan_request pr = {.max_tokens = (int)s.tokens, .max_seqs = (int)s.seqs, .max_anchors = (int)budget_chunk,
                           .k = (int)s.topk, .adam = 1, .tied = !s.untied, .force_chunk = (int)budget_chunk,
                           .force_mode = LOSS_MODE_ROWS};
        student_plan p;
        plan_breakdown bd;
        if (plan_make(&dc, &be, &pr, &p, &bd)) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }
        budget = bd.total;
    }
    char b1[32], b2[32], b3[32], b4[32];
    printf("mem-check: %s; drafter %lld parameters (H %ld, %ld layers, %ld/%ld heads x %ld, I %ld, V %ld, B %ld, %ld features), "
           "batch %ld tokens in %ld sequence(s), top-%ld; set up in %.1f s\n",
           be.name, (long long)d.numel, s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.vocab, s.block,
           s.n_feat, s.tokens, s.seqs, s.topk, t_init);
    printf("memory: budget %s (%zu bytes%s)\n", bytes_format(budget, b1, sizeof b1), budget,
           budget_s ? "" : ", the plan of the first anchor count per chunk");
    printf("%8s %6s %6s %12s %12s %14s %9s\n", "anchors", "chunk", "loss", "plan", "arena peak", "device used", "step s");
    mc_run runs[MC_MAX_RUNS + 1];
    int rc = 0, n_runs = 0;
    for (int i = 0; i < n_list && !rc; i++) {
        rc = mc_run_one(&d, &be, &lc, &s, &mb, list[i], budget, 0, 0, free_base, (uint64_t)seed, &runs[n_runs]);
        if (rc) break;
        mc_run *r = &runs[n_runs++];
        printf("%8ld %6d %6s %12s %12s %14s %9.3f%s\n", r->anchors, r->chunk, r->loss_mode, bytes_format(r->plan_total, b1, sizeof b1),
               bytes_format(r->arena_peak, b2, sizeof b2),
               r->device_used >= 0 ? bytes_format((size_t)r->device_used, b3, sizeof b3) : "-", r->step_s,
               r->fits ? "" : "  (plan over the budget)");
        fflush(stdout);
    }
    mc_run timing;
    int timed = 0;
    if (!rc && time_anchors > 0) {
        rc = mc_run_one(&d, &be, &lc, &s, &mb, time_anchors, tbudget, (int)repeat, (int)profile, free_base,
                        (uint64_t)seed, &timing);
        if (!rc) {
            timed = 1;
            double bt = (double)time_anchors * (double)s.block / timing.median_s;
            printf("timing: %ld anchors, budget %s: chunks of %d, loss %s; plan %s, arena peak %s, device used %s; "
                   "median step %.4f s of %d (block tokens/s %.0f, context tokens/s %.0f)\n",
                   time_anchors, tbudget ? bytes_format(tbudget, b1, sizeof b1) : "none", timing.chunk, timing.loss_mode,
                   bytes_format(timing.plan_total, b2, sizeof b2), bytes_format(timing.arena_peak, b3, sizeof b3),
                   timing.device_used >= 0 ? bytes_format((size_t)timing.device_used, b4, sizeof b4) : "-", timing.median_s,
                   timing.n_times, bt, (double)s.tokens / timing.median_s);
            if (timing.n_prof) mc_print_profile(&timing);
        }
    }
    if (rc) fprintf(stderr, "error: %s\n", error_msg());
    if (json_path && n_runs) {
        FILE *f = fopen(json_path, "w");
        if (!f) { fprintf(stderr, "error: cannot write %s\n", json_path); rc = -1; }
        else {
            fprintf(f, "{\"tool\": \"mem-check\", \"backend\": \"%s\", \"cuda\": %s, \"device_total\": %zu, \"preset\": \"%s\", "
                       "\"shape\": {\"hidden\": %ld, \"layers\": %ld, \"heads\": %ld, \"kv_heads\": %ld, \"head_dim\": %ld, "
                       "\"intermediate\": %ld, \"vocab\": %ld, \"block\": %ld, \"n_feat\": %ld, \"tokens\": %ld, \"seqs\": %ld, "
                       "\"topk\": %ld, \"untied\": %s}, \"params\": %lld, \"init_s\": %.2f, \"budget\": %zu, \"runs\": [",
                    be.name, be.caps.device ? "true" : "false", total_dev, preset, s.hidden, s.layers, s.heads,
                    s.kv_heads, s.head_dim, s.intermediate, s.vocab, s.block, s.n_feat, s.tokens, s.seqs, s.topk,
                    s.untied ? "true" : "false", (long long)d.numel, t_init, budget);
            for (int i = 0; i < n_runs; i++) {
                if (i) fprintf(f, ", ");
                mc_json_run(f, &runs[i]);
            }
            fprintf(f, "], \"timing\": ");
            if (timed) mc_json_run(f, &timing);
            else fprintf(f, "null");
            fprintf(f, ", \"ok\": %s}\n", rc ? "false" : "true");
            fclose(f);
        }
    }
    if (timed) free(timing.prof);
    mc_batch_free(&mb);
    drafter_free(&d);
    backend_close(&be);
    return rc ? 1 : 0;
}
