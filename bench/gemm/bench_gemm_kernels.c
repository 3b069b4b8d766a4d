// bench_gemm_kernels.c: OpenBLAS's sgemm under every kernel ("core type") the installed library can
// run on this processor, side by side in one run, on the student step's and the teacher's shapes,
// against the processor's nominal fp32 peak.
//
//   bench_gemm_kernels [--threads T] [--repeat R] [--rounds N] [--shapes NAME:MxNxK[:nt|nn],...] [--kernels A,B,...]
//
// OpenBLAS picks its kernel once, when the library loads (OPENBLAS_CORETYPE, or its own detection),
// so each kernel is timed in a child process of this program started with OPENBLAS_CORETYPE set
// (the first column, "default", with the variable removed: what a plain program gets; a second,
// "project", with the choice blas_kernel.h makes for dflash_rank). Every child times the same
// shapes on the same operands (the project's Philox stream) and prints one line per shape; the
// parent prints the table: GFLOP/s per kernel, the ratio to the fastest, the fraction of the peak.
// The kernels are timed in turn, --rounds times over (default 3), and each keeps its fastest round:
// on a machine where other work runs, a slow moment then costs one round, not one kernel's column.
// A kernel the processor cannot run (its instructions are missing) is skipped: the child is never
// started for it, so no SIGILL.
//
// Default shapes (C[M, N] = A[M, K] . B^T or . B, fp32, row-major as backend_gemm calls it):
//   lmhead    4096 x 2048 x 576  nt   the loss's vocabulary tile (rows x tile x hidden; SmolLM2 H)
//   mlp_up    4096 x 1536 x 576  nt   a drafter layer's gate/up projection on a step's rows
//   mlp_down  4096 x 576 x 1536  nt   its down projection
//   dlogits   576 x 2048 x 4096  nn   a weight gradient (hidden x tile x rows) of the loss
//   teacher   512 x 1536 x 576   nt   a teacher prefill chunk's MLP projection
//   issue     1024 x 2048 x 512  nt   the shape the issue "Every CPU at full speed" measured
// Peak: measured, not computed from a clock (a virtual machine's /proc/cpuinfo reports its nominal
// MHz, well below the clock it runs at): each thread runs 12 independent chains of fused
// multiply-adds on full vectors (AVX-512 where the processor has it, else AVX2 + FMA), the rate no
// sgemm kernel can pass on that unit. Timings never assert anything (bench/, not tests/).
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/backend/blas_kernel.h"
#include "common/core/rng.h"

#define MAX_SHAPES 16
#define MAX_KERNELS 16

typedef struct {
    char name[32];
    int m, n, k, trans_b; // trans_b: C = A B^T (nt) or A B (nn)
} shape;

static const char *default_shapes = "lmhead:4096x2048x576:nt,mlp_up:4096x1536x576:nt,mlp_down:4096x576x1536:nt,"
                                    "dlogits:576x2048x4096:nn,teacher:512x1536x576:nt,issue:1024x2048x512:nt";

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int shapes_parse(const char *text, shape *out) {
    int n = 0;
    char *copy = strdup(text), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < MAX_SHAPES; tok = strtok_r(NULL, ",", &save)) {
        shape s = {.trans_b = 1};
        char mode[8] = "nt";
        if (sscanf(tok, "%31[^:]:%dx%dx%d:%7s", s.name, &s.m, &s.n, &s.k, mode) < 4 || s.m < 1 || s.n < 1 || s.k < 1) {
            fprintf(stderr, "bench_gemm_kernels: --shapes: '%s' is not NAME:MxNxK[:nt|nn]\n", tok);
            free(copy);
            return -1;
        }
        s.trans_b = strcmp(mode, "nn") != 0;
        out[n++] = s;
    }
    free(copy);
    return n;
}

// child: time every shape under the kernel this process loaded; one line per shape:
// "<name> <seconds per call>".
static int child_run(const shape *sh, int n_shapes, int threads, int repeat) {
    openblas_set_num_threads(threads);
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &sh[i];
        size_t na = (size_t)s->m * (size_t)s->k, nb = (size_t)s->n * (size_t)s->k, nc = (size_t)s->m * (size_t)s->n;
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
        if (!a || !b || !c) return 1;
        rng g;
        rng_init(&g, 12345u, 0, 0);
        for (size_t q = 0; q < na; q++) a[q] = (float)(2.0 * rng_uniform(&g) - 1.0);
        for (size_t q = 0; q < nb; q++) b[q] = (float)(2.0 * rng_uniform(&g) - 1.0);
        int ldb = s->trans_b ? s->k : s->n;
        for (int r = -2; r < repeat; r++) { // two warm-up calls
            if (r == 0) {
                double t0 = now_s();
                for (int q = 0; q < repeat; q++)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, s->trans_b ? CblasTrans : CblasNoTrans, s->m, s->n, s->k,
                                1.0f, a, s->k, b, ldb, 0.0f, c, s->n);
                printf("%s %.9f\n", s->name, (now_s() - t0) / repeat);
                break;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, s->trans_b ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, 1.0f, a,
                        s->k, b, ldb, 0.0f, c, s->n);
        }
        free(a), free(b), free(c);
    }
    printf("kernel %s\n", openblas_get_corename());
    return 0;
}

// spawn: run this program as a child with OPENBLAS_CORETYPE = kernel (NULL: unset) and read its
// seconds per shape into secs; the kernel it reports into got. 0 or -1.
static int spawn(const char *self, const char *kernel, char **child_argv, const shape *sh, int n_shapes,
                 double *secs, char *got, size_t got_n) {
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]), close(fds[1]);
        if (kernel) setenv("OPENBLAS_CORETYPE", kernel, 1);
        else unsetenv("OPENBLAS_CORETYPE");
        execv(self, child_argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[256];
    for (int i = 0; i < n_shapes; i++) secs[i] = NAN;
    while (f && fgets(line, sizeof line, f)) {
        char name[64];
        double t;
        if (sscanf(line, "kernel %63s", name) == 1) snprintf(got, got_n, "%s", name);
        else if (sscanf(line, "%63s %lf", name, &t) == 2)
            for (int i = 0; i < n_shapes; i++)
                if (!strcmp(name, sh[i].name)) secs[i] = t;
    }
    if (f) fclose(f);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

// fma_chains_*: n rounds of 12 independent vector FMA chains (12 named registers: an array would
// live in memory and the chains would wait on it); returns a value so nothing is optimised away.
// FLOPs: n x 12 x lanes x 2.
#define FMA_CHAINS(T, SET1, FMA, ADD)                                                                         \
    T x = SET1(0.999999f), y = SET1(1e-7f), a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), \
      a5 = SET1(5), a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);     \
    for (long r = 0; r < n; r++) {                                                                           \
        a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y);                       \
        a4 = FMA(a4, x, y), a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y);                       \
        a8 = FMA(a8, x, y), a9 = FMA(a9, x, y), a10 = FMA(a10, x, y), a11 = FMA(a11, x, y);                   \
    }                                                                                                         \
    T sum = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), ADD(ADD(a8, a9), ADD(a10, a11)))
__attribute__((target("avx512f"))) static float fma_chains_512(long n) {
    FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps);
    return _mm512_reduce_add_ps(sum);
}
__attribute__((target("avx2,fma"))) static float fma_chains_256(long n) {
    FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps);
    float v[8];
    _mm256_storeu_ps(v, sum);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

// fma_peak: GFLOP/s of `threads` threads running the chains at once (the best of 3 tries).
static double fma_peak(int threads, int lanes) {
    const long n = 50 * 1000 * 1000;
    double best = 0;
    volatile float sink = 0;
    for (int t = 0; t < 3; t++) {
        double t0 = now_s();
#pragma omp parallel num_threads(threads)
        {
            float v = lanes == 16 ? fma_chains_512(n) : fma_chains_256(n);
#pragma omp atomic
            sink += v;
        }
        double g = (double)threads * n * 12 * lanes * 2 / (now_s() - t0) * 1e-9;
        if (g > best) best = g;
    }
    (void)sink;
    return best;
}

int main(int argc, char **argv) {
    int threads = 1, repeat = 5, rounds = 3, child = 0;
    const char *shapes_text = default_shapes, *kernels_text = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--child")) { child = 1; continue; }
        if (!v) {
            fprintf(stderr, "bench_gemm_kernels: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--threads")) threads = atoi(v);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(v);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(v);
        else if (!strcmp(argv[i], "--shapes")) shapes_text = v;
        else if (!strcmp(argv[i], "--kernels")) kernels_text = v;
        else {
            fprintf(stderr, "bench_gemm_kernels: unknown argument %s\n", argv[i]);
            return 2;
        }
        i++;
    }
    if (threads < 1 || repeat < 1 || rounds < 1) {
        fprintf(stderr, "bench_gemm_kernels: --threads, --repeat and --rounds must be >= 1\n");
        return 2;
    }
    shape sh[MAX_SHAPES];
    int n_shapes = shapes_parse(shapes_text, sh);
    if (n_shapes <= 0) return 2;
    if (child) return child_run(sh, n_shapes, threads, repeat);

    // The kernels: "default" (unset), "project" (blas_kernel_choose), then every one this
    // processor can run, weakest first.
    const char *kernels[MAX_KERNELS];
    char labels[MAX_KERNELS][32];
    int n_k = 0;
    char project[32] = "", why[256] = "";
    blas_kernel_choose(project, sizeof project, why, sizeof why);
    kernels[n_k] = NULL, snprintf(labels[n_k++], 32, "default");
    if (project[0]) kernels[n_k] = project, snprintf(labels[n_k++], 32, "project");
    char *klist = kernels_text ? strdup(kernels_text) : NULL, *save = NULL;
    if (klist) {
        for (char *t = strtok_r(klist, ",", &save); t && n_k < MAX_KERNELS; t = strtok_r(NULL, ",", &save))
            kernels[n_k] = t, snprintf(labels[n_k++], 32, "%s", t);
    } else {
        for (int i = 0; i < blas_kernel_count() && n_k < MAX_KERNELS; i++)
            if (blas_kernel_runs_here(i)) kernels[n_k] = blas_kernel_name(i), snprintf(labels[n_k++], 32, "%s", blas_kernel_name(i));
    }

    char thr[16], rep[16];
    snprintf(thr, sizeof thr, "%d", threads), snprintf(rep, sizeof rep, "%d", repeat);
    char *child_argv[] = {argv[0], "--child", "--threads", thr, "--repeat", rep, "--shapes", (char *)shapes_text, NULL};
    double secs[MAX_KERNELS][MAX_SHAPES], round_secs[MAX_SHAPES];
    char got[MAX_KERNELS][64];
    for (int j = 0; j < n_k; j++) {
        got[j][0] = 0;
        for (int i = 0; i < n_shapes; i++) secs[j][i] = INFINITY;
    }
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < n_k; j++) {
            if (spawn("/proc/self/exe", kernels[j], child_argv, sh, n_shapes, round_secs, got[j], sizeof got[j])) {
                fprintf(stderr, "bench_gemm_kernels: the child for %s failed\n", labels[j]);
                continue;
            }
            for (int i = 0; i < n_shapes; i++)
                if (round_secs[i] < secs[j][i]) secs[j][i] = round_secs[i];
        }
    int lanes = blas_cpu_has_avx512() ? 16 : 8;
    double peak = fma_peak(threads, lanes); // GFLOP/s
    printf("sgemm, %d thread(s), %d calls per shape, the fastest of %d rounds; %s\n", threads, repeat, rounds, openblas_get_config());
    printf("processor: %s; peak %.0f GFLOP/s (measured: %d thread(s) of independent %d-lane FMA chains)\n",
           blas_cpu_model(), peak, threads, lanes);
    printf("project's choice: %s (%s)\n", project[0] ? project : "none: the library's own", why);
    printf("%-9s %-16s", "shape", "M x N x K");
    for (int j = 0; j < n_k; j++) printf(" %12s", labels[j]);
    printf("   best\n%-9s %-16s", "", "(kernel run)");
    for (int j = 0; j < n_k; j++) printf(" %12s", got[j]);
    printf("\n");
    for (int i = 0; i < n_shapes; i++) {
        double flops = 2.0 * sh[i].m * (double)sh[i].n * sh[i].k, best = 0;
        int bj = 0;
        char dims[40];
        snprintf(dims, sizeof dims, "%dx%dx%d %s", sh[i].m, sh[i].n, sh[i].k, sh[i].trans_b ? "nt" : "nn");
        printf("%-9s %-16s", sh[i].name, dims);
        for (int j = 0; j < n_k; j++) {
            double g = flops / secs[j][i] * 1e-9;
            if (g > best) best = g, bj = j;
            printf(" %12.1f", g);
        }
        printf("   %s %.1f GFLOP/s (%.0f%% of peak); default/best %.2fx\n", labels[bj], best, 100 * best / peak,
               flops / secs[0][i] * 1e-9 / best);
    }
    free(klist);
    return 0;
}
