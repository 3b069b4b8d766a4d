// students.c: collectives among the student ranks under the watchdog (see students.h).
#include "student/train/students.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/comm/msg.h"
#include "common/comm/nccl_reduce.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "student/model/grad_buckets.h"

static int students_first, students_last; // world ranks of the students

void students_set_ranks(int first, int last) { students_first = first, students_last = last; }

void students_allreduce(void *buf, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *what) {
    watchdog_wait_begin(students_first, students_last, 1, what);
    msg_allreduce(buf, n, type, op, comm); // pieces below INT_MAX elements (msg.h)
    watchdog_wait_end();
}

void students_allgather_i64(int64_t mine, int64_t *all, MPI_Comm comm, const char *what) {
    watchdog_wait_begin(students_first, students_last, 1, what);
    MPI_Request r;
    mpi_check(MPI_Iallgather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, comm, &r));
    world_wait(&r, NULL);
    watchdog_wait_end();
}

struct students_grads {
    drafter *d;
    MPI_Comm comm;
    nccl_reduce *nccl; // NULL: MPI
    grad_buckets gb;   // NCCL: the buckets, in the order the backward finishes them
    float *host;       // MPI on a GPU: [numel] staging buffer
    int started;       // NCCL: buckets issued since the last finish (an error then aborts them)
    int log;           // the first student: logs the path, and at the end how much overlapped
    int64_t during, total; // NCCL: bucket sums started during the backward, and in all
};

int students_grads_open(students_grads **out, drafter *d, MPI_Comm comm, const char *want, int log) {
    *out = NULL;
    students_grads *g = xcalloc(1, sizeof *g);
    g->d = d, g->comm = comm, g->log = log;
    int cpu = d->be->kind == BACKEND_CPU;
    char why[256] = "";
    if (strcmp(want, "mpi") == 0) snprintf(why, sizeof why, "transport.grad_allreduce = mpi");
    else if (cpu && strcmp(want, "auto") == 0) snprintf(why, sizeof why, "CPU backend");
    else if (nccl_reduce_open(&g->nccl, comm, cpu ? -1 : d->be->device_id, why, sizeof why)) {
        free(g);
        return error_prefix("transport.grad_allreduce = %s", want);
    }
    if (!g->nccl && strcmp(want, "nccl") == 0) {
        free(g);
        return error_set("transport.grad_allreduce = nccl, but NCCL cannot sum the students' gradients: %s", why);
    }
    if (g->nccl && grad_buckets_plan(&g->gb, d)) {
        students_grads_close(g, 1);
        return -1;
    }
    if (!g->nccl && !cpu) g->host = xmalloc(size_mul(d->numel, sizeof(float)));
    if (log && g->nccl)
        log_info("gradients: summed over NCCL, GPU to GPU, in fp32, in %d buckets started as the last micro-batch's "
                 "backward finishes each", g->gb.n_buckets);
    else if (log)
        log_info("gradients: summed over MPI %s (NCCL not used: %s)", cpu ? "in place" : "through host memory", why);
    *out = g;
    return 0;
}

// One bucket's sum, started after the backward queued so far (which finished its gradients).
static int grads_issue(void *ctx, const grad_range *r, int n) {
    students_grads *g = ctx;
    g->started = 1;
    if (nccl_reduce_after(g->nccl, g->d->be) || nccl_reduce_group(g->nccl, 1)) return -1;
    for (int i = 0; i < n; i++)
        if (nccl_reduce_sum_f32(g->nccl, g->d->grad + r[i].offset, (size_t)r[i].count)) return -1;
    return nccl_reduce_group(g->nccl, 0);
}

static int grads_ready(void *ctx, int bucket) {
    students_grads *g = ctx;
    return grad_buckets_ready(&g->gb, bucket, grads_issue, g);
}

void students_grads_arm(students_grads *g, student_work *w, int on) {
    if (g && g->nccl) student_work_set_grad_hook(w, on ? grads_ready : NULL, g);
}

int students_grads_finish(students_grads *g) {
    drafter *d = g->d;
    if (!g->nccl && !g->host) { // the CPU backend: in place
        students_allreduce(d->grad, d->numel, MPI_FLOAT, MPI_SUM, g->comm, "the gradient all-reduce");
        return 0;
    }
    if (!g->nccl) {
        backend_copy_to_host(d->be, g->host, d->grad, size_mul(d->numel, sizeof(float)));
        students_allreduce(g->host, d->numel, MPI_FLOAT, MPI_SUM, g->comm, "the gradient all-reduce");
        backend_copy_to_device(d->be, d->grad, g->host, size_mul(d->numel, sizeof(float)));
        return 0;
    }
    g->during += g->gb.next, g->total += g->gb.n_buckets;
    if (grad_buckets_finish(&g->gb, grads_issue, g) || nccl_reduce_join(g->nccl, d->be)) return -1;
    // The host waits here, under the watchdog, so that a student that hangs is named after
    // run.rank_timeout rather than leaving the others' next copy to the host blocked for ever.
    watchdog_wait_begin(students_first, students_last, 1, "the gradient all-reduce (NCCL)");
    int rc = nccl_reduce_sync(g->nccl);
    watchdog_wait_end();
    g->started = 0;
    return rc;
}

void students_grads_close(students_grads *g, int abort) {
    if (!g) return;
    if (g->log && g->total > 0 && !abort)
        log_info("gradients: %lld of %lld bucket sums started during the backward, the rest after it", (long long)g->during,
                 (long long)g->total);
    nccl_reduce_close(g->nccl, abort || g->started);
    grad_buckets_free(&g->gb);
    free(g->host);
    free(g);
}
