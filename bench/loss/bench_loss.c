// bench_loss.c: time and peak memory of the drafter loss on the CPU, one method per process.
//
//   bench_loss --method rows|tiles|naive --n N --vocab V --hidden H [--k 32] [--topk 8] [--slots 15]
//              [--row-chunk R] [--tile T] [--repeat 2]
//
// The inputs are a pure function of the index (splitmix64), so bench_loss_torch.py builds the very
// same problem and the printed loss totals can be compared across methods and languages. Prints one
// JSON line: the method, the shape, the time of each repeat (forward + backward, i.e. the per-row
// terms and dx), and peak_extra_bytes = the process's peak resident memory during the loss minus
// its resident memory before it (inputs and outputs already touched), measured by resetting the
// kernel's high-water mark (/proc/self/clear_refs) and reading VmHWM.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "student/loss/loss.h"

static uint64_t mix(uint64_t z) { // splitmix64's finaliser
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// unif: element i of stream `seed`, uniform in [-amp, amp) (the same expression in numpy)
static float unif(uint64_t seed, uint64_t i, double amp) {
    return (float)(((double)(mix((seed << 32) + i) >> 40) / 16777216.0 * 2.0 - 1.0) * amp);
}

static long status_kb(const char *key) { // a "Vm..." line of /proc/self/status, in kB
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') v = atol(line + n + 1);
    if (f) fclose(f);
    return v;
}

static void reset_peak(void) { // VmHWM := VmRSS
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_loss --method rows|tiles|naive --n N --vocab V --hidden H [--k 32] [--topk 8]\n"
                    "                  [--slots 15] [--row-chunk R] [--tile T] [--repeat 2]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *method = NULL;
    long n = 0, V = 0, H = 0, k = 32, K = 8, slots = 15, rc = 240, tile = 8192, repeat = 2;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        const char *a = argv[i], *v = argv[++i];
        if (!strcmp(a, "--method")) method = v;
        else if (!strcmp(a, "--n")) n = atol(v);
        else if (!strcmp(a, "--vocab")) V = atol(v);
        else if (!strcmp(a, "--hidden")) H = atol(v);
        else if (!strcmp(a, "--k")) k = atol(v);
        else if (!strcmp(a, "--topk")) K = atol(v);
        else if (!strcmp(a, "--slots")) slots = atol(v);
        else if (!strcmp(a, "--row-chunk")) rc = atol(v);
        else if (!strcmp(a, "--tile")) tile = atol(v);
        else if (!strcmp(a, "--repeat")) repeat = atol(v);
        else usage();
    }
    if (!method || n < 1 || V < 1 || H < 1 || k < 1 || k > V || V % 7919 == 0 || slots < 1 || n % slots ||
        rc % slots || repeat < 1)
        usage();
    int naive = !strcmp(method, "naive"), tiles = !strcmp(method, "tiles");
    if (!naive && !tiles && strcmp(method, "rows")) usage();

    backend be;
    if (backend_open(&be, "cpu", 0) != 0) fatal("%s", error_msg());

    // the problem (bench_loss_torch.py: make_problem builds the same)
    float *x = xmalloc((size_t)n * H * sizeof(float)), *W = xmalloc((size_t)V * H * sizeof(float));
    for (long i = 0; i < n * H; i++) x[i] = unif(1, (uint64_t)i, 1.0);
    for (long i = 0; i < V * H; i++) W[i] = unif(2, (uint64_t)i, 0.05);
    int32_t *label = xmalloc((size_t)n * sizeof(int32_t)), *t_idx = xmalloc((size_t)n * k * sizeof(int32_t));
    float *mask = xmalloc((size_t)n * sizeof(float)), *t_val = xmalloc((size_t)n * k * sizeof(float));
    float *t_lse = xmalloc((size_t)n * sizeof(float));
    uint8_t *in_seq = xmalloc((size_t)n);
    for (long r = 0; r < n; r++) {
        label[r] = (int32_t)(mix((3ull << 32) + (uint64_t)r) % (uint64_t)V);
        uint64_t base = mix((4ull << 32) + (uint64_t)r) % (uint64_t)V;
        for (long a = 0; a < k; a++) {
            t_idx[r * k + a] = (int32_t)((base + (uint64_t)a * 7919u) % (uint64_t)V); // distinct: gcd(7919, V) = 1
            t_val[r * k + a] = (float)(10.0 - 0.25 * a);
        }
        t_lse[r] = 12.0f;
        mask[r] = r % 8 == 7 ? 0.0f : 1.0f;
        in_seq[r] = 1;
    }
    float *w = xcalloc((size_t)n, 4), *ce = xcalloc((size_t)n, 4), *kl = xcalloc((size_t)n, 4);
    float *cap = xcalloc((size_t)n, 4), *logp = xcalloc((size_t)n * K + 1, 4), *dx = xcalloc((size_t)n * H, 4);
    int32_t *argmax = xcalloc((size_t)n, 4), *idx = xcalloc((size_t)n * K + 1, 4);

    loss_config cfg = {.alpha = 0.15, .lambda = 0.1, .gamma = 7, .weighting = LOSS_WEIGHT_DECAY};
    loss_plan plan = {.mode = tiles ? LOSS_MODE_TILES : LOSS_MODE_ROWS, .row_chunk = (int)rc,
                      .vocab_tile = tiles ? (int)tile : 0, .topk_student = (int)K};
    loss_batch b = {.n = (int)n, .slots = (int)slots, .hidden = H, .vocab = V, .k = (int)k, .x = x, .lm_head = W,
                    .label = label, .mask = mask, .in_seq = in_seq, .t_idx = t_idx, .t_val = t_val, .t_lse = t_lse};
    loss_rows rows = {.w = w, .term = {[LOSS_TERM_CE] = ce, [LOSS_TERM_KL] = kl, [LOSS_TERM_CAP] = cap},
                      .argmax = argmax, .s_topk_idx = K ? idx : NULL, .s_topk_logp = K ? logp : NULL};
    for (int t = LOSS_TERM_CAP + 1; t < LOSS_ROW_TERMS; t++) rows.term[t] = xcalloc((size_t)n, 4); // (freed at exit)
    size_t ws_bytes = naive ? 0 : loss_workspace_bytes(&plan, H, V, (int)k);

    long base_kb = status_kb("VmRSS");
    reset_peak();
    double times[64];
    int nt = repeat < 64 ? (int)repeat : 64;
    for (int it = 0; it < nt; it++) {
        double t0 = now();
        if (naive) {
            loss_naive_cpu(&cfg, &b, (int)K, &rows, dx);
        } else {
            void *ws = backend_alloc(&be, ws_bytes); // inside the timed region: it is part of the method
            if (!ws) fatal("%s", error_msg());
            loss_forward_backward(&be, &cfg, &plan, ws, &b, &rows, dx);
            backend_free(&be, ws);
        }
        times[it] = now() - t0;
    }
    long peak_kb = status_kb("VmHWM");

    double total = 0, sum_w = 0, dx_abs = 0;
    for (long r = 0; r < n; r++) {
        total += (double)w[r] * ((1 - cfg.alpha) * ce[r] + cfg.alpha * kl[r] + cfg.lambda * cap[r]);
        sum_w += w[r];
    }
    for (long i = 0; i < n * H; i++) dx_abs += fabs(dx[i]);
    printf("{\"method\": \"%s\", \"n\": %ld, \"vocab\": %ld, \"hidden\": %ld, \"k\": %ld, \"topk\": %ld, "
           "\"row_chunk\": %ld, \"tile\": %ld, \"threads\": %d, \"times_s\": [",
           naive ? "c-naive" : tiles ? "fused-tiles" : "fused-rows", n, V, H, k, K, naive ? 0 : rc,
           tiles ? tile : 0, be.threads);
    for (int it = 0; it < nt; it++) printf("%s%.4f", it ? ", " : "", times[it]);
    printf("], \"peak_extra_bytes\": %lld, \"workspace_bytes\": %zu, \"loss\": %.9g, \"sum_w\": %.9g, "
           "\"dx_abs_sum\": %.9g}\n",
           (long long)(peak_kb - base_kb) * 1024, ws_bytes, total, sum_w, dx_abs);
    free(x), free(W), free(label), free(t_idx), free(mask), free(t_val), free(t_lse), free(in_seq);
    free(w), free(ce), free(kl), free(cap), free(logp), free(dx), free(argmax), free(idx);
    backend_close(&be);
    return 0;
}
