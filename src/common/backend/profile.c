// profile.c: per-op timing (see profile.h). A mark is one timed call: two events from a pool that
// grows as needed (a device: the backend's timing events, backend_ops.h) or two wall-clock readings
// (the CPU); prof_collect turns the marks into sums.
#include "common/backend/profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/backend_ops.h"
#include "common/core/check.h"

typedef struct {
    const char *name;
    double flops;
    int ev;        // a device: events ev (start) and ev + 1 (stop) of the pool
    double t0, t1; // CPU: wall clock
} prof_mark;

static struct {
    backend *be; // collecting on this backend; NULL: off
    prof_mark *marks;
    int n, cap;
    void **events; // the backend's timing events (backend_ops' timer_*): n_ev in use, cap_ev created
    int n_ev, cap_ev;
} P;

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// on_device: the backend times its ops with events of its own (work queued, not done, on return)
static int on_device(void) { return P.be && P.be->ops && P.be->ops->timer_new; }

static const backend_timer prof_timer = {.begin = prof_begin, .end = prof_end};

void prof_enable(backend *be) {
    prof_disable();
    P.be = be;
    be->timer = &prof_timer; // backend_gemm times itself through it
}

void prof_disable(void) {
    if (P.be) P.be->timer = NULL;
    if (P.cap_ev) backend_sync(P.be);
    for (int i = 0; i < P.cap_ev; i++) P.be->ops->timer_free(P.events[i]);
    free(P.events);
    free(P.marks);
    memset(&P, 0, sizeof P);
}

// two events of the pool (created on first use), recorded start now
static int take_events(void) {
    if (P.n_ev + 2 > P.cap_ev) {
        int cap = P.cap_ev ? 2 * P.cap_ev : 256;
        P.events = xrealloc(P.events, (size_t)cap * sizeof(void *));
        for (int i = P.cap_ev; i < cap; i++) P.events[i] = P.be->ops->timer_new();
        P.cap_ev = cap;
    }
    int ev = P.n_ev;
    P.n_ev += 2;
    P.be->ops->timer_record(P.be, P.events[ev]);
    return ev;
}

int prof_begin(backend *be) {
    if (!P.be || be != P.be) return -1;
    if (P.n == P.cap) {
        P.cap = P.cap ? 2 * P.cap : 256;
        P.marks = xrealloc(P.marks, (size_t)P.cap * sizeof(prof_mark));
    }
    prof_mark *m = &P.marks[P.n];
    memset(m, 0, sizeof *m);
    if (on_device()) m->ev = take_events();
    else m->t0 = wall_s();
    return P.n++;
}

void prof_end(backend *be, int token, const char *name, double flops) {
    if (token < 0 || be != P.be) return;
    prof_mark *m = &P.marks[token];
    m->name = name;
    m->flops = flops;
    if (on_device()) {
        P.be->ops->timer_record(P.be, P.events[m->ev + 1]);
        return;
    }
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
        if (on_device()) s = P.be->ops->timer_seconds(P.events[m->ev], P.events[m->ev + 1]);
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
