// students.c: collectives among the student ranks under the watchdog (see students.h).
#include "student/train/students.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/backend.h"
#include "common/comm/msg.h"
#include "common/comm/nccl_reduce.h"
#include "common/comm/watchdog.h"
#include "common/core/bytes.h"
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
    watchdog_allgather(&mine, all, 1, MPI_INT64_T, comm, students_first, students_last, 1, what);
}

// MPI on a GPU: one chunk of the pinned ring and the piece of d->grad it carries.
enum { SLOT_FREE, SLOT_TO_HOST, SLOT_REDUCING, SLOT_TO_DEVICE };
typedef struct {
    float *host;       // [chunk] pinned
    void *ev; // the copy to the host (SLOT_TO_HOST), then back (SLOT_TO_DEVICE)
    MPI_Request req;   // SLOT_REDUCING: the MPI_Iallreduce
    int64_t offset, count;
    int state;
} grad_slot;

struct students_grads {
    drafter *d;
    MPI_Comm comm;
    nccl_reduce *nccl; // NULL: MPI
    grad_buckets gb;   // NCCL and MPI on a GPU: the buckets, in the order the backward finishes them
    grad_slot slot[STUDENTS_GRAD_CHUNKS]; // MPI on a GPU: the ring (slot[0].host NULL: in place)
    MPI_Comm ring_comm; // MPI on a GPU: a duplicate of comm for the pieces' MPI_Iallreduces alone
    int64_t chunk;     // elements of one chunk
    int deferred;      // MPI on a GPU, the ring pageable (pinning refused): its copies wait for the
                       // backward's end (students_grads_arm arms nothing), so the backward never waits on one
    int head, used;    // the oldest slot in use, and how many are
    int next_range, end_range; // gb.ranges[next_range .. end_range): issued buckets not yet in the ring
    int64_t next_off;  // the first element of ranges[next_range] not yet in the ring
    int64_t pieces;    // pieces put in the ring in this step so far
    int64_t pieces_during, pieces_total; // pieces put in the ring during the backward, and in all
    int started;       // NCCL: buckets issued since the last finish (an error then aborts them)
    int log;           // the first student: logs the path, and at the end how much overlapped
    int64_t during, total; // bucket sums started during the backward, and in all
};

int64_t students_grads_chunk(int64_t numel) {
    int64_t c = (numel + STUDENTS_GRAD_CHUNKS - 1) / STUDENTS_GRAD_CHUNKS;
    c = (c + 63) / 64 * 64;
    return c < STUDENTS_GRAD_CHUNK_MAX ? c : STUDENTS_GRAD_CHUNK_MAX;
}

size_t students_grads_pinned_bytes(const backend *be, int64_t numel) {
    return size_mul(backend_host_bytes(be, size_mul(students_grads_chunk(numel), sizeof(float))), STUDENTS_GRAD_CHUNKS);
}

// ring_pin: the ring's chunks pinned at `chunk` elements each, else (the system refuses) at half
// that, and so on down to STUDENTS_GRAD_CHUNK_MIN: a smaller pinned ring cuts the gradient into more
// pieces but keeps every copy asynchronous. The chunk it pinned, or 0 (none pinned, slots empty).
static int64_t ring_pin(students_grads *g, int64_t chunk) {
    backend *be = g->d->be;
    for (int64_t c = chunk;;) {
        int i = 0;
        while (i < STUDENTS_GRAD_CHUNKS && (g->slot[i].host = backend_host_try_pin(be, size_mul(c, sizeof(float))))) i++;
        if (i == STUDENTS_GRAD_CHUNKS) return c;
        while (i > 0) backend_host_free(be, g->slot[--i].host), g->slot[i].host = NULL;
        if (c <= STUDENTS_GRAD_CHUNK_MIN) return 0;
        c = (c / 2 + 63) / 64 * 64;
        if (c < STUDENTS_GRAD_CHUNK_MIN) c = STUDENTS_GRAD_CHUNK_MIN;
    }
}

// ring_open: the ring of chunks, pinned when the system grants it (ring_pin), the chunk the same on
// every student (their pieces' all-reduces must match): the smallest any pinned. When one pinned
// none, every student's ring is pageable at the planned chunk, and deferred. 0, or 1 when this
// student could not have host memory at all (its log says why).
static int ring_open(students_grads *g) {
    backend *be = g->d->be;
    int64_t planned = students_grads_chunk(g->d->numel), got = ring_pin(g, planned), agreed = got;
    students_allreduce(&agreed, 1, MPI_INT64_T, MPI_MIN, g->comm, "the other students to pin their host rings");
    size_t want = size_mul(size_mul(planned, sizeof(float)), STUDENTS_GRAD_CHUNKS);
    char what[96], after[192], c[32];
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    snprintf(what, sizeof what, "student rank %d's gradient ring (the all-reduce over MPI)", rank);
    g->chunk = agreed > 0 ? agreed : planned;
    if (agreed > 0) {
        if (agreed < planned) { // a student was refused the full ring: all cut the gradient finer
            snprintf(after, sizeof after, "a ring of %d pinned chunks of %s instead, still asynchronous (more pieces)",
                     STUDENTS_GRAD_CHUNKS, bytes_format(size_mul(agreed, sizeof(float)), c, sizeof c));
            if (got < planned) backend_host_warn(what, want - size_mul(size_mul(got, sizeof(float)), STUDENTS_GRAD_CHUNKS), want, after);
        }
    } else {
        for (int i = 0; i < STUDENTS_GRAD_CHUNKS; i++) backend_host_free(be, g->slot[i].host), g->slot[i].host = NULL;
        for (int i = 0; i < STUDENTS_GRAD_CHUNKS; i++)
            if (!(g->slot[i].host = backend_host_alloc(be, size_mul(g->chunk, sizeof(float))))) {
                log_error("the gradient all-reduce's host ring: %s", error_msg());
                return 1;
            }
        g->deferred = 1;
        if (got == 0)
            backend_host_warn(what, want, want, "pageable instead: its copies wait for the end of each step's backward "
                                                "(the backward never waits on one), so the sum no longer overlaps it");
    }
    return 0;
}

int students_grads_open(students_grads **out, drafter *d, MPI_Comm comm, const char *want, int log) {
    *out = NULL;
    students_grads *g = xcalloc(1, sizeof *g);
    g->d = d, g->comm = comm, g->log = log;
    g->ring_comm = MPI_COMM_NULL;
    int cpu = !d->be->caps.device_links; // no device to device reduction: the CPU
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
    if ((g->nccl || !cpu) && grad_buckets_plan(&g->gb, d)) {
        students_grads_close(g, 1);
        return -1;
    }
    if (!g->nccl && !cpu) {
        // The pieces' collectives on a communicator of their own: they are started as their copies
        // complete, which differs between the students, so on comm they could interleave differently
        // with the students' other collectives (the agreement and statistics after the micro-batches).
        MPI_Request dup;
        mpi_check(MPI_Comm_idup(comm, &g->ring_comm, &dup));
        watchdog_mpi_wait(&dup, NULL, students_first, students_last, 5, "the other students to set up the gradient all-reduce");
        int bad = ring_open(g);
        for (int i = 0; i < STUDENTS_GRAD_CHUNKS && !bad; i++) g->slot[i].ev = backend_event_new(d->be);
        students_allreduce(&bad, 1, MPI_INT, MPI_MAX, comm, "the other students to set up their host rings"); // the same answer everywhere
        if (bad) {
            students_grads_close(g, 1);
            return error_set("the gradient all-reduce over MPI: a student could not allocate its host ring of %d chunks "
                             "(its log says why)", STUDENTS_GRAD_CHUNKS);
        }
    }
    if (log && g->nccl)
        log_info("gradients: summed over NCCL, GPU to GPU, in fp32, in %d buckets started as the last micro-batch's "
                 "backward finishes each", g->gb.n_buckets);
    else if (log)
        log_info("gradients: summed over MPI %s (NCCL not used: %s)", cpu ? "in place" : "through host memory", why);
    if (log && !g->nccl && !cpu && !g->deferred) {
        char c[32], all[32];
        log_info("gradients: over MPI in %d buckets started as the last micro-batch's backward finishes each, through "
                 "a ring of %d pinned host chunks of %s (%s of host memory), copied asynchronously",
                 g->gb.n_buckets, STUDENTS_GRAD_CHUNKS, bytes_format(size_mul(g->chunk, sizeof(float)), c, sizeof c),
                 bytes_format(size_mul(size_mul(g->chunk, sizeof(float)), STUDENTS_GRAD_CHUNKS), all, sizeof all));
    } else if (log && !g->nccl && !cpu) {
        char c[32];
        log_info("gradients: over MPI in %d buckets through a ring of %d pageable host chunks of %s (pinning refused), "
                 "copied after each step's backward", g->gb.n_buckets, STUDENTS_GRAD_CHUNKS,
                 bytes_format(size_mul(g->chunk, sizeof(float)), c, sizeof c));
    }
    *out = g;
    return 0;
}

// ---------------------------------------------------------------- MPI on a GPU: the pinned ring
// Each slot goes FREE -> TO_HOST -> REDUCING -> TO_DEVICE -> FREE; slots are taken and freed in ring
// order, and their MPI_Iallreduces started in that order (the order of the pieces, the same on every
// student, on ring_comm, which nothing else uses: collectives on one communicator must be started
// in the same order everywhere). Nothing here waits during the backward: a bucket whose pieces find
// no free chunk stays pending (next_range .. end_range) and goes as chunks free up, at the latest in
// students_grads_finish, so a student never blocks in its backward on a peer that is itself waiting
// for it in another collective (the agreement after the micro-batches).

// ring_progress: moves every slot that can on and fills free chunks with pending pieces, without
// waiting; 1 when nothing is pending or in the ring.
static int ring_progress(students_grads *g) {
    backend *be = g->d->be;
    for (int again = 1; again;) {
        again = 0;
        int may_reduce = 1; // no earlier piece still on its way to the host
        for (int k = 0; k < g->used; k++) {
            grad_slot *sl = &g->slot[(g->head + k) % STUDENTS_GRAD_CHUNKS];
            if (sl->state == SLOT_TO_HOST) {
                if (!may_reduce || !backend_event_done(be, sl->ev)) {
                    may_reduce = 0;
                    continue;
                }
                int n_req = 0; // count <= chunk < MSG_REDUCE_PIECE: one request
                msg_iallreduce(sl->host, sl->count, MPI_FLOAT, MPI_SUM, g->ring_comm, &sl->req, &n_req);
                sl->state = SLOT_REDUCING;
            }
            if (sl->state == SLOT_REDUCING) {
                int done = 0;
                mpi_check(MPI_Test(&sl->req, &done, MPI_STATUS_IGNORE));
                if (!done) continue;
                backend_copy_async(be, BACKEND_STREAM_TO_DEVICE, g->d->grad + sl->offset, sl->host,
                                   size_mul(sl->count, sizeof(float)));
                backend_event_record(be, sl->ev, BACKEND_STREAM_TO_DEVICE);
                sl->state = SLOT_TO_DEVICE;
            }
        }
        while (g->used > 0) { // free from the oldest on
            grad_slot *sl = &g->slot[g->head];
            if (sl->state != SLOT_TO_DEVICE || !backend_event_done(be, sl->ev)) break;
            sl->state = SLOT_FREE;
            g->head = (g->head + 1) % STUDENTS_GRAD_CHUNKS, g->used--;
        }
        // pending pieces into free chunks: each copied after the backward queued so far (which
        // finished its bucket's gradients)
        while (g->next_range < g->end_range) {
            const grad_range *r = &g->gb.ranges[g->next_range];
            int64_t left = r->offset + r->count - g->next_off;
            if (left <= 0) { // this range is in the ring: the next one
                if (++g->next_range < g->end_range) g->next_off = g->gb.ranges[g->next_range].offset;
                continue;
            }
            if (g->used == STUDENTS_GRAD_CHUNKS) break;
            grad_slot *sl = &g->slot[(g->head + g->used) % STUDENTS_GRAD_CHUNKS];
            sl->offset = g->next_off, sl->count = left < g->chunk ? left : g->chunk;
            backend_copy_async(be, BACKEND_STREAM_COPY, sl->host, g->d->grad + sl->offset, size_mul(sl->count, sizeof(float)));
            backend_event_record(be, sl->ev, BACKEND_STREAM_COPY);
            sl->state = SLOT_TO_HOST;
            g->used++, g->pieces++;
            g->next_off += sl->count;
            again = 1; // its copy may have completed already
        }
    }
    return g->used == 0 && g->next_range == g->end_range;
}

// One bucket over MPI: its ranges join the pending ones (they follow the last issued bucket's in
// gb.ranges), cut into pieces of at most a chunk as chunks are free.
static int grads_issue_mpi(void *ctx, const grad_range *r, int n) {
    students_grads *g = ctx;
    int first = (int)(r - g->gb.ranges);
    if (n == 0) return 0;
    if (g->next_range == g->end_range) g->next_range = first, g->next_off = r->offset; // nothing pending
    g->end_range = first + n;
    ring_progress(g);
    return 0;
}

// ring_drain: after the step's micro-batches: progress until every piece is back on the device,
// sleeping between tries (10 us doubling to 1 ms, as world_wait), under the watchdog (a student
// that hangs is named after run.rank_timeout).
static void ring_drain(students_grads *g) {
    if (ring_progress(g)) return;
    watchdog_wait_begin(students_first, students_last, 1, "the gradient all-reduce (MPI, pinned chunks)");
    long ns = 10000;
    while (!ring_progress(g)) {
        struct timespec t = {0, ns};
        nanosleep(&t, NULL);
        if (ns < 1000000) ns *= 2;
    }
    watchdog_wait_end();
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

static grad_issue_fn grads_issue_of(const students_grads *g) { return g->nccl ? grads_issue : grads_issue_mpi; }

static int grads_ready(void *ctx, int bucket) {
    students_grads *g = ctx;
    return grad_buckets_ready(&g->gb, bucket, grads_issue_of(g), g);
}

void students_grads_arm(students_grads *g, student_work *w, int on) {
    // (a pageable ring: no hook, its copies would make the backward wait: all go in the finish)
    if (g && (g->nccl || (g->slot[0].host && !g->deferred))) student_work_set_grad_hook(w, on ? grads_ready : NULL, g);
}

int students_grads_finish(students_grads *g) {
    drafter *d = g->d;
    if (!g->nccl && !g->slot[0].host) { // the CPU backend: in place
        students_allreduce(d->grad, d->numel, MPI_FLOAT, MPI_SUM, g->comm, "the gradient all-reduce");
        return 0;
    }
    g->during += g->gb.next, g->total += g->gb.n_buckets;
    if (!g->nccl) { // the buckets not issued yet, then every piece back on the device
        g->pieces_during += g->pieces; // those put in the ring by the backward's hooks
        if (grad_buckets_finish(&g->gb, grads_issue_mpi, g)) return -1;
        ring_drain(g);
        g->pieces_total += g->pieces, g->pieces = 0;
        g->next_range = g->end_range = 0, g->next_off = 0;
        return 0;
    }
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
    if (g->log && g->total > 0 && !abort && g->pieces_total > 0)
        log_info("gradients: %lld of %lld bucket sums started during the backward, the rest after it; %lld of %lld "
                 "pieces put in the pinned ring then", (long long)g->during, (long long)g->total,
                 (long long)g->pieces_during, (long long)g->pieces_total);
    else if (g->log && g->total > 0 && !abort)
        log_info("gradients: %lld of %lld bucket sums started during the backward, the rest after it", (long long)g->during,
                 (long long)g->total);
    nccl_reduce_close(g->nccl, abort || g->started);
    grad_buckets_free(&g->gb);
    int reducing = 0; // after an error: an MPI_Iallreduce a peer never joins cannot be freed
    for (int i = 0; i < STUDENTS_GRAD_CHUNKS; i++) {
        grad_slot *sl = &g->slot[i];
        if (sl->state == SLOT_REDUCING) reducing = 1;
        if (sl->ev) backend_event_sync(g->d->be, sl->ev); // no copy still uses the chunk
    }
    for (int i = 0; i < STUDENTS_GRAD_CHUNKS && !reducing; i++) {
        backend_event_free(g->d->be, g->slot[i].ev);
        backend_host_free(g->d->be, g->slot[i].host);
    }
    if (g->ring_comm != MPI_COMM_NULL && !reducing) mpi_check(MPI_Comm_free(&g->ring_comm));
    free(g);
}
