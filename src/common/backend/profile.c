// profile.c: per-op timing (see profile.h). A mark is one timed call: two events from a pool that
// grows as needed (CUDA) or two wall-clock readings (CPU); prof_collect turns the marks into sums.
#include "common/backend/profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/core/check.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/backend/profile_cuda.h"
#endif

typedef struct {
    const char *name;
    double flops;
    int ev;        // CUDA: events ev (start) and ev + 1 (stop) of the pool
    double t0, t1; // CPU: wall clock
} prof_mark;

static struct {
    backend *be; // collecting on this backend; NULL: off
    prof_mark *marks;
    int n, cap;
    void **events; // CUDA event pool: n_ev in use, cap_ev created
    int n_ev, cap_ev;
} P;

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int on_cuda(void) { return P.be && P.be->kind == BACKEND_CUDA; }

static const backend_timer prof_timer = {.begin = prof_begin, .end = prof_end};

void prof_enable(backend *be) {
    prof_disable();
    P.be = be;
    be->timer = &prof_timer; // backend_gemm times itself through it
}

void prof_disable(void) {
    if (P.be) P.be->timer = NULL;
#ifdef DFLASH_HAVE_CUDA
    if (P.cap_ev) backend_sync(P.be);
    for (int i = 0; i < P.cap_ev; i++) cuda_prof_event_free(P.events[i]);
#endif
    free(P.events);
    free(P.marks);
    memset(&P, 0, sizeof P);
}

// two events of the pool (created on first use), recorded start now
static int take_events(void) {
#ifdef DFLASH_HAVE_CUDA
    if (P.n_ev + 2 > P.cap_ev) {
        int cap = P.cap_ev ? 2 * P.cap_ev : 256;
        P.events = xrealloc(P.events, (size_t)cap * sizeof(void *));
        for (int i = P.cap_ev; i < cap; i++) P.events[i] = cuda_prof_event_new();
        P.cap_ev = cap;
    }
    int ev = P.n_ev;
    P.n_ev += 2;
    cuda_prof_record(P.be, P.events[ev]);
    return ev;
#else
    return -1;
#endif
}

int prof_begin(backend *be) {
    if (!P.be || be != P.be) return -1;
    if (P.n == P.cap) {
        P.cap = P.cap ? 2 * P.cap : 256;
        P.marks = xrealloc(P.marks, (size_t)P.cap * sizeof(prof_mark));
    }
    prof_mark *m = &P.marks[P.n];
    memset(m, 0, sizeof *m);
    if (on_cuda()) m->ev = take_events();
    else m->t0 = wall_s();
    return P.n++;
}

void prof_end(backend *be, int token, const char *name, double flops) {
    if (token < 0 || be != P.be) return;
    prof_mark *m = &P.marks[token];
    m->name = name;
    m->flops = flops;
#ifdef DFLASH_HAVE_CUDA
    if (on_cuda()) {
        cuda_prof_record(P.be, P.events[m->ev + 1]);
        return;
    }
#endif
    m->t1 = wall_s();
}

static int by_seconds_desc(const void *a, const void *b) {
    double x = ((const prof_row *)a)->seconds, y = ((const prof_row *)b)->seconds;
    return (x < y) - (x > y);
}

int prof_collect(prof_row **rows) {
    *rows = NULL;
    if (!P.be) return 0;
    backend_sync(P.be);
    prof_row *r = xmalloc((size_t)(P.n ? P.n : 1) * sizeof(prof_row));
    int nr = 0;
    for (int i = 0; i < P.n; i++) {
        const prof_mark *m = &P.marks[i];
        if (!m->name) continue; // begun, never ended (an op that failed)
        double s = m->t1 - m->t0;
#ifdef DFLASH_HAVE_CUDA
        if (on_cuda()) s = cuda_prof_seconds(P.events[m->ev], P.events[m->ev + 1]);
#endif
        int j = 0;
        while (j < nr && strcmp(r[j].name, m->name) != 0) j++;
        if (j == nr) r[nr++] = (prof_row){m->name, 0, 0.0, 0.0};
        r[j].calls++;
        r[j].seconds += s;
        r[j].flops += m->flops;
    }
    qsort(r, (size_t)nr, sizeof *r, by_seconds_desc);
    P.n = 0;
    P.n_ev = 0;
    *rows = r;
    return nr;
}
