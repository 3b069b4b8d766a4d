// test_threads.c: the CPU thread policy (common/backend/threads.h): the count follows the affinity
// mask, not the machine; an explicit request and OMP_NUM_THREADS are capped to the mask's cores;
// ranks sharing a mask divide it; threads_setup gives OpenMP and OpenBLAS the same count.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // sched_setaffinity
#endif
#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>

#include "common/backend/threads.h"
#include "testing.h"

static void test_counts(void) {
    unsetenv("OMP_NUM_THREADS");
    int cores = threads_cores(), online = threads_online();
    CHECK_MSG(cores >= 1 && cores <= online, "mask %d cores, %d online", cores, online);
    char why[384];
    CHECK(threads_choose(0, 1, why, sizeof why) == cores); // one rank: every core of its mask
    CHECK(threads_choose(1, 1, NULL, 0) == 1);
    CHECK(threads_choose(cores + 5, 1, why, sizeof why) == cores); // never more than the cores
    CHECK_MSG(strstr(why, "capped") != NULL, "the reason does not say the request was capped: %s", why);
    // as many ranks as online CPUs (all sharing this mask when it is the whole machine): 1 thread each
    CHECK(threads_choose(0, 3 * online, NULL, 0) == 1);
    if (cores == online && online >= 2) CHECK(threads_choose(0, 2, NULL, 0) == online / 2);
    setenv("OMP_NUM_THREADS", "1", 1);
    CHECK(threads_choose(0, 1, NULL, 0) == 1);
    CHECK(threads_choose(2, 1, NULL, 0) == (cores < 2 ? cores : 2)); // the knob before the variable
    setenv("OMP_NUM_THREADS", "abc", 1); // not a count: ignored, and said
    CHECK(threads_choose(0, 1, why, sizeof why) == cores);
    CHECK_MSG(strstr(why, "OMP_NUM_THREADS='abc' is not a thread count") != NULL, "why: %s", why);
    setenv("OMP_NUM_THREADS", "100000", 1);
    CHECK(threads_choose(0, 1, NULL, 0) == cores);
    unsetenv("OMP_NUM_THREADS");
}

// A mask of one CPU (as taskset -c N or mpirun --bind-to core gives): one thread, however many ranks.
static void test_mask(void) {
    cpu_set_t old, one;
    if (sched_getaffinity(0, sizeof old, &old) != 0 || CPU_COUNT(&old) < 2) {
        printf("  (one CPU in the mask: the narrowing check is not run)\n");
        return;
    }
    int first = 0;
    while (!CPU_ISSET(first, &old)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    CHECK(threads_cores() == 1);
    CHECK(threads_choose(0, 1, NULL, 0) == 1);
    CHECK(threads_choose(0, threads_online(), NULL, 0) == 1);
    CHECK(threads_choose(8, 1, NULL, 0) == 1);
    // a lone rank bound to one core of a larger host is told; ranks that each own a core are not
    char msg[512] = "";
    int online = threads_online();
    CHECK(threads_bound_warning(1, msg, sizeof msg) == (online >= 2));
    CHECK_MSG(online < 2 || strstr(msg, "--bind-to none"), "message: %s", msg);
    CHECK(threads_bound_warning(online, NULL, 0) == 0);
    CHECK(sched_setaffinity(0, sizeof old, &old) == 0);
    CHECK(threads_cores() < online || threads_bound_warning(1, NULL, 0) == 0); // the whole host: nothing to say
}

static void test_setup(void) {
    int n = threads_setup(1, 1, NULL, 0);
    CHECK(n == 1 && omp_get_max_threads() == 1 && openblas_get_num_threads() == 1);
    n = threads_setup(0, 1, NULL, 0);
    CHECK(n == threads_cores() && omp_get_max_threads() == n && openblas_get_num_threads() == n);
}

int main(void) {
    test_counts();
    test_mask();
    test_setup();
    return test_finish("test_threads");
}
