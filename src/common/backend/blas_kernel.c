// blas_kernel.c: OpenBLAS's kernel on this processor and the project's choice (see blas_kernel.h).
#include "common/backend/blas_kernel.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *name;
    int level; // what it needs: 0 SSE3, 1 SSSE3, 2 SSE4.2, 3 AVX, 4 AVX2+FMA, 5 AVX-512, 6 + BF16
} kernel;

static const kernel kernels[] = {
    {"Prescott", 0}, {"Core2", 1}, {"Nehalem", 2}, {"Sandybridge", 3}, {"Haswell", 4}, {"SkylakeX", 5}, {"Cooperlake", 6},
};
#define N_KERNELS ((int)(sizeof kernels / sizeof kernels[0]))

// cpu_level: the strongest level above this processor supports (-1 off x86-64).
static int cpu_level(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return __builtin_cpu_supports("avx512bf16") ? 6 : 5;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 4;
    if (__builtin_cpu_supports("avx")) return 3;
    if (__builtin_cpu_supports("sse4.2")) return 2;
    if (__builtin_cpu_supports("ssse3")) return 1;
    return 0;
#else
    return -1;
#endif
}

int blas_kernel_count(void) { return cpu_level() < 0 ? 0 : N_KERNELS; }
const char *blas_kernel_name(int i) { return i >= 0 && i < N_KERNELS ? kernels[i].name : "?"; }
int blas_kernel_runs_here(int i) { return i >= 0 && i < N_KERNELS && kernels[i].level <= cpu_level(); }
int blas_cpu_has_avx512(void) { return cpu_level() >= 5; }

int blas_kernel_rank(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < N_KERNELS; i++)
        if (!strcasecmp(name, kernels[i].name)) return i;
    if (!strncasecmp(name, "zen", 3)) return blas_kernel_rank("Haswell");
    return -1;
}

const char *blas_cpu_model(void) {
    static char model[256];
    if (model[0]) return model;
    char name[160] = "unknown", line[512];
    int family = -1, mod = -1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(name, sizeof name, "%s", strchr(line, ':') + 2);
            name[strcspn(name, "\n")] = 0;
        } else if (family < 0 && sscanf(line, "cpu family : %d", &family) == 1) {
        } else if (mod < 0 && !strncmp(line, "model\t", 6)) {
            sscanf(strchr(line, ':') + 1, "%d", &mod);
        }
        if (!strcmp(line, "\n")) break; // the first processor's block is enough
    }
    if (f) fclose(f);
    snprintf(model, sizeof model, "%s (family %d model %d)", name, family, mod);
    return model;
}

int blas_kernel_choose(char *out, size_t n, char *why, size_t why_n) {
    out[0] = 0;
    const char *user = getenv("OPENBLAS_CORETYPE"), *chose = getenv("DFLASH_BLAS_CHOSE");
    if (user && *user) {
        if (chose && *chose && !strncmp(chose, user, strlen(user)) && chose[strlen(user)] == ':')
            snprintf(why, why_n, "%s, chosen by dflash_rank", user);
        else
            snprintf(why, why_n, "OPENBLAS_CORETYPE=%s set by the user", user);
        return 0;
    }
    const char *lib = openblas_get_corename();
    int have = blas_kernel_rank(lib), level = cpu_level();
    if (level < 0 || have < 0) {
        snprintf(why, why_n, "the library's own choice (%s)", lib ? lib : "?");
        return 0;
    }
    int best = -1;
    for (int i = 0; i < N_KERNELS; i++)
        if (kernels[i].level <= level) best = i;
    if (best <= have) {
        snprintf(why, why_n, "the library's own choice, the best this processor runs");
        return 0;
    }
    snprintf(out, n, "%s", kernels[best].name);
    snprintf(why, why_n, "the library runs %s on this processor, which it does not know; %s is the strongest its features allow",
             lib, kernels[best].name);
    return 1;
}

void blas_kernel_describe(char *out, size_t n) {
    char k[32], why[256];
    blas_kernel_choose(k, sizeof k, why, sizeof why);
    const char *chose = getenv("DFLASH_BLAS_CHOSE"), *user = getenv("OPENBLAS_CORETYPE");
    const char *cfg = openblas_get_config(); // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY USE_OPENMP Prescott ..."
    char ver[48], version[64] = "OpenBLAS";
    if (cfg && sscanf(cfg, "OpenBLAS %47s", ver) == 1) snprintf(version, sizeof version, "OpenBLAS %s", ver);
    int openmp = openblas_get_parallel() == 2;
    if (user && chose && *chose && !strncmp(chose, user, strlen(user)) && chose[strlen(user)] == ':')
        snprintf(out, n, "%s (%s), kernel %s: chosen by dflash_rank (the library runs %s on this processor, %s, which it does "
                 "not know; set OPENBLAS_CORETYPE to choose another)",
                 version, openmp ? "OpenMP" : "threads", openblas_get_corename(), chose + strlen(user) + 1, blas_cpu_model());
    else
        snprintf(out, n, "%s (%s), kernel %s: %s", version, openmp ? "OpenMP" : "threads", openblas_get_corename(), why);
}
