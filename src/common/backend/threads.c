// threads.c: the CPU thread policy (see threads.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // sched_getaffinity, CPU_COUNT
#endif
#include "common/backend/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void threads_exec_passive(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 0) != 0) return;
    execv("/proc/self/exe", argv);
    // no re-exec (no /proc): the runtime already chose its policy, and the variable set above
    // only tells the processes this one starts
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
        snprintf(why, (size_t)n, "%s; idle threads %s", buf,
                 wait ? (wait[0] == 'p' || wait[0] == 'P' ? "sleep (OMP_WAIT_POLICY=passive)" : "spin (OMP_WAIT_POLICY)")
                      : "spin a while (GOMP_SPINCOUNT or the runtime's default)");
    }
    return t;
}

int threads_setup(int requested, int local_ranks, char *why, int n) {
    int t = threads_choose(requested, local_ranks, why, n);
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
    return t;
}
