// threads.c: the CPU thread policy (see threads.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // sched_getaffinity, CPU_COUNT
#endif
#include "common/backend/threads.h"
#include "common/core/config.h"

#include "common/backend/blas_kernel.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void threads_exec_policy(char **argv) {
    int again = 0;
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && setenv("OMP_WAIT_POLICY", "passive", 0) == 0) again = 1;
    char kernel[32], why[256], chose[96];
    if (blas_kernel_choose(kernel, sizeof kernel, why, sizeof why)) {
        snprintf(chose, sizeof chose, "%s:%s", kernel, openblas_get_corename());
        if (setenv("OPENBLAS_CORETYPE", kernel, 1) == 0 && setenv("DFLASH_BLAS_CHOSE", chose, 1) == 0) again = 1;
    }
    if (again) execv("/proc/self/exe", argv);
    // no re-exec (no /proc): the runtimes already chose, and the variables set above only tell the
    // processes this one starts
}

int threads_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return threads_online();
}

int threads_online(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int threads_choose(int requested, int local_ranks, char *why, int n) {
    int cores = threads_cores(), online = threads_online(), t;
    char buf[256];
    if (local_ranks < 1) local_ranks = 1;
    const char *env = getenv("OMP_NUM_THREADS");
    char bad_env[96] = ""; // OMP_NUM_THREADS that is not a count (OpenMP's list "4,2" counts its first)
    if (requested <= 0 && env && *env && atoi(env) <= 0) snprintf(bad_env, sizeof bad_env, "OMP_NUM_THREADS='%.40s' is not a thread count: ignored; ", env);
    if (requested > 0 || (env && atoi(env) > 0)) {
        int want = requested > 0 ? requested : atoi(env);
        t = want < cores ? want : cores;
        snprintf(buf, sizeof buf, "%d asked by %s%s", want, requested > 0 ? "--threads / run.threads" : "OMP_NUM_THREADS",
                 want > cores ? ", capped to the cores of this process's affinity mask" : "");
    } else {
        // the local ranks spread over the host's CPUs: how many of them this mask holds
        long long share = ((long long)local_ranks * cores + online - 1) / online;
        if (share < 1) share = 1;
        t = (int)(cores / share);
        if (share > 1)
            snprintf(buf, sizeof buf, "%d core%s in this process's affinity mask (%d online), shared by %lld ranks of this host",
                     cores, cores == 1 ? "" : "s", online, share);
        else
            snprintf(buf, sizeof buf, "%d core%s in this process's affinity mask (%d online)", cores,
                     cores == 1 ? "" : "s", online);
    }
    if (t < 1) t = 1;
    if (why && n > 0) {
        const char *wait = getenv("OMP_WAIT_POLICY");
        snprintf(why, (size_t)n, "%s%s; idle threads %s", bad_env, buf,
                 wait ? (wait[0] == 'p' || wait[0] == 'P' ? "sleep (OMP_WAIT_POLICY=passive)" : "spin (OMP_WAIT_POLICY)")
                      : "spin a while (GOMP_SPINCOUNT or the runtime's default)");
    }
    return t;
}

int threads_bound_warning(int local_ranks, char *msg, int n) {
    int cores = threads_cores(), online = threads_online();
    if (local_ranks < 1) local_ranks = 1;
    int share = online / local_ranks;
    if (share < 1) share = 1;
    if (cores >= share) return 0;
    if (msg && n > 0)
        snprintf(msg, (size_t)n,
                 "this rank's affinity mask holds %d core%s, but its share of this host is %d (%d online, %d rank%s of the "
                 "job here): the launcher bound it to fewer (Open MPI binds 1 or 2 ranks to a core each by default); start "
                 "the job with mpirun --bind-to none, or --map-by slot:PE=%d, to use them",
                 cores, cores == 1 ? "" : "s", share, online, local_ranks, local_ranks == 1 ? "" : "s", share);
    return 1;
}

int threads_setup(int requested, int local_ranks, char *why, int n) {
    int t = threads_choose(requested, local_ranks, why, n);
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
    return t;
}

// Settings: the keys of the CPU threads of a rank (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key threads_keys[] = {
    {"run.threads", CFG_INT, CONFIG_F(threads), "0", "CPU threads of each rank, for OpenMP and OpenBLAS alike; 0 = OMP_NUM_THREADS when set, else the cores of the rank's affinity mask shared among the ranks of its host. Never more than those cores. Also --threads N (docs/config.md, Threads)", NULL, 0, 4096},
};
const config_key_set threads_settings = CONFIG_KEY_SET(threads_keys, NULL);
