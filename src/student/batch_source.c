// batch_source.c: the student's batches, live from the teachers or offline from feature files
// (see batch_source.h).
#include "student/batch_source.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "teacher/teacher_loop.h"

// ----------------------------------------------------------------------------- the schedule

void batch_schedule_make(batch_schedule *sc, const config *cfg, int s, int S, int64_t n_heldout_batches) {
    int64_t G = cfg->batches_per_step, ev = cfg->eval_batches < n_heldout_batches ? cfg->eval_batches : n_heldout_batches;
    int64_t n_evals = ev > 0 ? 2 + cfg->steps / cfg->eval_interval : 0;
    int64_t cap = (cfg->steps * G) / S + G + n_evals * (ev / S + 1) + 1;
    batch_item *it = xmalloc((size_t)cap * sizeof *it);
    batch_group *g = xmalloc((size_t)(cfg->steps + n_evals + 1) * sizeof *g);
    int64_t n = 0, ng = 0;
#define EVAL()                                                                     \
    if (ev > 0) {                                                                  \
        g[ng] = (batch_group){WIRE_HELDOUT, n, 0};                                 \
        for (int64_t h = s; h < ev; h += S) it[n++] = (batch_item){WIRE_HELDOUT, h}; \
        g[ng].count = n - g[ng].first;                                             \
        ng++;                                                                      \
    }
    EVAL();
    for (int64_t t = 0; t < cfg->steps; t++) {
        g[ng] = (batch_group){WIRE_TRAIN, n, 0};
        for (int64_t j = s; j < G; j += S) it[n++] = (batch_item){WIRE_TRAIN, t * G + j};
        g[ng].count = n - g[ng].first;
        ng++;
        if ((t + 1) % cfg->eval_interval == 0 || t + 1 == cfg->steps) EVAL();
    }
#undef EVAL
    *sc = (batch_schedule){.items = it, .n_items = n, .groups = g, .n_groups = ng};
}

void batch_schedule_free(batch_schedule *sc) {
    free(sc->items);
    free(sc->groups);
    memset(sc, 0, sizeof *sc);
}


// ----------------------------------------------------------------------------- set-up

void batch_source_init_live(batch_source *s, int T, int slots, int my_rank, size_t max_bytes, int64_t n_items,
                            int n_buf, nccl_links *links, size_t feat_bytes, backend *be) {
    memset(s, 0, sizeof *s);
    s->live = 1, s->T = T, s->slots = slots, s->my_rank = my_rank, s->max_bytes = max_bytes;
    s->outstanding = xcalloc((size_t)T, sizeof(int));
    s->served = xcalloc((size_t)T, sizeof(int64_t));
    s->n_buf = n_buf;
    s->bufs = xmalloc((size_t)n_buf * sizeof(char *));
    s->buf_free = xmalloc((size_t)n_buf * sizeof(int));
    for (int i = 0; i < n_buf; i++) s->bufs[i] = xmalloc(max_bytes), s->buf_free[i] = 1;
    s->buf_of = xmalloc((size_t)n_items * sizeof(int));
    s->teacher_of = xmalloc((size_t)n_items * sizeof(int));
    s->recv = xmalloc((size_t)n_items * sizeof(MPI_Request));
    s->landed = xcalloc((size_t)n_items, sizeof(int));
    s->arrived = xcalloc((size_t)n_items, sizeof(int));
    s->bytes_of = xcalloc((size_t)n_items, sizeof(int));
    s->posted = xcalloc((size_t)n_items, sizeof(int));
    s->blocked = xcalloc((size_t)T, sizeof(int));
    if (links) {
        s->links = links;
        s->be = be;
        s->feat_bytes = feat_bytes;
        s->feat_dev = xcalloc((size_t)n_buf, sizeof(void *));
        s->tickets = xcalloc((size_t)n_buf, sizeof(nccl_ticket));
        for (int i = 0; i < n_buf; i++) s->feat_dev[i] = backend_alloc(be, feat_bytes);
    }
}

void batch_source_init_offline(batch_source *s, featreader *fr, batchplan *bp, size_t max_bytes) {
    memset(s, 0, sizeof *s);
    s->fr = fr;
    s->bp = bp;
    s->max_bytes = max_bytes;
    s->offline_buf = xmalloc(max_bytes);
}

void batch_source_start_at(batch_source *s, int64_t n) { s->next_request = s->next_consume = n; }

// ----------------------------------------------------------------------------- live: credits and order

static int source_free_buf(batch_source *s) {
    for (int i = 0; i < s->n_buf; i++)
        if (s->buf_free[i]) {
            s->buf_free[i] = 0;
            return i;
        }
    return -1;
}

// Advance the batches in flight, oldest first. A payload that has landed gives its teacher the
// credit back (its buffer stays taken until the batch is consumed, in order). With NCCL links its
// features then come GPU to GPU: the receive is enqueued once the payload has landed, in each
// teacher's sending order (a later batch of a teacher never enqueues before an earlier one: the
// order of our requests to it), and the batch is ready once that transfer is done.
static int source_progress(batch_source *s) {
    for (int t = 0; t < s->T; t++) s->blocked[t] = 0;
    for (int64_t n = s->next_consume; n < s->next_request; n++) {
        int t = s->teacher_of[n], b = s->buf_of[n];
        if (!s->landed[n]) {
            int done = 0;
            MPI_Status st;
            mpi_check(MPI_Test(&s->recv[n], &done, &st));
            if (done) {
                MPI_Get_count(&st, MPI_BYTE, &s->bytes_of[n]);
                s->landed[n] = 1;
                s->outstanding[t]--;
                if (!s->links) s->arrived[n] = 1;
            }
        }
        if (!s->links || s->arrived[n]) continue;
        if (!s->posted[n]) {
            if (!s->landed[n] || s->blocked[t]) {
                s->blocked[t] = 1;
                continue;
            }
            wire_batch wb;
            if (wire_read(s->bufs[b], (size_t)s->bytes_of[n], &wb)) return error_prefix("batch from teacher %d", t);
            if (!wb.features_on_link) return error_set("teacher %d sent its features over MPI; NCCL links expected", t);
            if ((size_t)wb.S * (size_t)wb.D * 2 > s->feat_bytes)
                return error_set("teacher %d: features of %lld x %lld exceed the receive buffer", t, (long long)wb.S,
                                 (long long)wb.D);
            if (nccl_link_recv(s->links, t, s->feat_dev[b], (size_t)wb.S * (size_t)wb.D * 2, &s->tickets[b])) return -1;
            s->posted[n] = 1;
        }
        int done = nccl_ticket_done(&s->tickets[b]);
        if (done < 0) return error_prefix("features from teacher %d", t);
        s->arrived[n] = done;
    }
    return 0;
}

// Send requests while credits allow: the next item goes to the teacher with the fewest outstanding
// requests (never more than `slots`), so a slow teacher simply gets less work. Credits come back
// when a payload lands, not when it is consumed, so a fast teacher keeps working while the
// student waits for an earlier batch from a slow one.
static int source_pump(batch_source *s, const batch_schedule *sc) {
    if (!s->live) return 0;
    if (source_progress(s)) return -1;
    while (s->next_request < sc->n_items) {
        int best = -1;
        for (int t = 0; t < s->T; t++)
            if (s->outstanding[t] < s->slots && (best < 0 || s->outstanding[t] < s->outstanding[best])) best = t;
        if (best < 0) return 0;
        int b = source_free_buf(s);
        if (b < 0) return 0; // every buffer holds a batch not yet consumed
        int64_t n = s->next_request++;
        s->buf_of[n] = b;
        s->teacher_of[n] = best;
        mpi_check(MPI_Irecv(s->bufs[b], (int)s->max_bytes, MPI_BYTE, best, TAG_DATA, MPI_COMM_WORLD, &s->recv[n]));
        int64_t req[WIRE_REQUEST] = {sc->items[n].kind, sc->items[n].index, s->my_rank};
        mpi_check(MPI_Send(req, WIRE_REQUEST, MPI_INT64_T, best, TAG_REQUEST, MPI_COMM_WORLD));
        s->outstanding[best]++;
    }
    return 0;
}

int batch_source_get(batch_source *s, const batch_schedule *sc, int64_t n, wire_batch *wb) {
    s->features_dev = NULL;
    if (s->live) {
        s->next_consume = n;
        if (source_pump(s, sc)) return -1;
        double t0 = time_now();
        // a teacher's first batch also waits for it to load the target: 5 x the timeout
        if (!s->arrived[n])
            watchdog_wait_begin(s->teacher_of[n], s->teacher_of[n], s->served[s->teacher_of[n]] ? 1 : 5, "a batch");
        while (!s->arrived[n]) { // keep handing out work while this batch is on its way
            if (source_pump(s, sc)) return -1;
            if (s->arrived[n]) break;
            struct timespec pause = {0, 100000}; // 0.1 ms
            nanosleep(&pause, NULL);
        }
        watchdog_wait_end();
        s->wait_s += time_now() - t0;
        int t = s->teacher_of[n];
        s->served[t]++;
        if (wire_read(s->bufs[s->buf_of[n]], (size_t)s->bytes_of[n], wb)) return error_prefix("batch from teacher %d", t);
        if (wb->kind != sc->items[n].kind || wb->index != sc->items[n].index)
            return error_set("teacher %d sent batch %lld/%lld, expected %lld/%lld", t, (long long)wb->kind,
                             (long long)wb->index, (long long)sc->items[n].kind, (long long)sc->items[n].index);
        if (wb->features_on_link) s->features_dev = s->feat_dev[s->buf_of[n]];
        if (t < 1024) s->last_peak[t] = wb->peak_bytes;
        return source_pump(s, sc); // keep the teachers busy while this batch is computed
    }
    // offline: pack the batch's samples from the feature files into the same layout
    const batch_ref *b = sc->items[n].kind == WIRE_TRAIN ? batchplan_train_batch(s->bp, sc->items[n].index, NULL)
                                                     : batchplan_heldout_batch(s->bp, sc->items[n].index);
    int64_t S = b->tokens, D = featreader_feat_dim(s->fr), k = featreader_topk(s->fr);
    *wb = (wire_batch){.kind = sc->items[n].kind, .index = sc->items[n].index, .S = S, .n_seq = b->n, .k = k, .D = D};
    wire_layout(s->offline_buf, wb);
    int64_t t = 0;
    wb->cu[0] = 0;
    double t0 = time_now();
    for (int64_t i = 0; i < b->n; i++) {
        int64_t len = featreader_len(s->fr, b->samples[i]);
        if (featreader_read(s->fr, b->samples[i], wb->tokens + t, wb->mask + t, wb->features + t * D, wb->topk_idx + t * k,
                            wb->topk_val + t * k, wb->lse + t))
            return -1;
        t += len;
        wb->cu[i + 1] = (int32_t)t;
    }
    s->wait_s += time_now() - t0;
    return 0;
}

int batch_source_drain(batch_source *s) {
    if (!s->live) return 0;
    watchdog_wait_begin(0, s->T - 1, 1, "the batches requested before the stop");
    for (int64_t n = s->next_consume; n < s->next_request; n++)
        while (!s->arrived[n]) {
            if (source_progress(s)) {
                watchdog_wait_end();
                return -1;
            }
            struct timespec pause = {0, 100000};
            nanosleep(&pause, NULL);
        }
    watchdog_wait_end();
    return 0;
}

void batch_source_release(batch_source *s, int64_t n) {
    if (s->live) s->buf_free[s->buf_of[n]] = 1;
}

void batch_source_stop_teachers(batch_source *s) {
    if (!s->live) return;
    for (int t = 0; t < s->T; t++) {
        int64_t req[WIRE_REQUEST] = {WIRE_STOP, 0, s->my_rank};
        mpi_check(MPI_Send(req, WIRE_REQUEST, MPI_INT64_T, t, TAG_REQUEST, MPI_COMM_WORLD));
        watchdog_watch(t, 0); // it may exit now
    }
}

void batch_source_free(batch_source *s) {
    if (s->live) {
        for (int i = 0; i < s->n_buf; i++) free(s->bufs[i]);
        free(s->bufs); free(s->buf_free); free(s->buf_of); free(s->teacher_of); free(s->recv);
        free(s->landed); free(s->arrived); free(s->bytes_of); free(s->posted); free(s->blocked);
        free(s->outstanding); free(s->served);
        for (int i = 0; s->links && i < s->n_buf; i++) {
            nccl_ticket_free(&s->tickets[i]);
            backend_free(s->be, s->feat_dev[i]);
        }
        free(s->feat_dev); free(s->tickets);
    } else {
        free(s->offline_buf);
    }
    memset(s, 0, sizeof *s);
}
