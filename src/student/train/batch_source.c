// batch_source.c: the student's batches, live from the teachers or offline from feature files
// (see batch_source.h).
#include "student/train/batch_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/comm/protocol.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"

// ----------------------------------------------------------------------------- the schedule

// The schedule is arithmetic, not a list: O(1) memory for any train.steps. Groups, in order: an
// evaluation (when there are held-out batches), then per period of I = eval_interval steps the I
// training steps and an evaluation; the last period may be shorter, and ends with an evaluation too.
// This student's items: Tc = G/S per training step (global batches t*G + s, t*G + s + S, ...) and e per
// evaluation (held-out batches s, s + S, ... below ev).
void batch_schedule_make(batch_schedule *sc, const config *cfg, int s, int S, int64_t n_heldout_batches) {
    int64_t G = cfg->batches_per_step;
    int64_t ev = cfg->eval_batches > 0 && cfg->eval_batches < n_heldout_batches ? cfg->eval_batches : n_heldout_batches;
    *sc = (batch_schedule){.student = s, .students = S, .batches_per_step = G, .steps = cfg->steps, .interval = cfg->eval_interval};
    sc->items_per_step = (G - s + S - 1) / S; // G is a multiple of S: G / S
    sc->evals = ev > 0;
    sc->items_per_eval = ev > s ? (ev - s + S - 1) / S : 0;
    int64_t after = sc->steps / sc->interval + (sc->steps % sc->interval != 0); // evaluations after a step
    sc->n_items = sc->evals * sc->items_per_eval * (1 + after) + sc->steps * sc->items_per_step;
    sc->n_groups = sc->evals * (1 + after) + sc->steps;
}

void batch_schedule_eval_only(batch_schedule *sc) {
    sc->steps = 0;
    sc->n_items = sc->evals * sc->items_per_eval;
    sc->n_groups = sc->evals;
}

void batch_schedule_free(batch_schedule *sc) { memset(sc, 0, sizeof *sc); }

// The first item of training step t's group.
static int64_t schedule_train_first(const batch_schedule *sc, int64_t t) {
    return sc->evals * sc->items_per_eval * (1 + t / sc->interval) + t * sc->items_per_step;
}

batch_group batch_schedule_group(const batch_schedule *sc, int64_t gi) {
    if (sc->evals && gi == 0) return (batch_group){WIRE_HELDOUT, 0, sc->items_per_eval};
    int64_t per = sc->interval + sc->evals, k = (gi - sc->evals) / per, r = (gi - sc->evals) % per;
    int64_t in_period = sc->steps - k * sc->interval < sc->interval ? sc->steps - k * sc->interval : sc->interval;
    if (r < in_period) return (batch_group){WIRE_TRAIN, schedule_train_first(sc, k * sc->interval + r), sc->items_per_step};
    // the evaluation after the period's last step
    return (batch_group){WIRE_HELDOUT, schedule_train_first(sc, k * sc->interval + in_period - 1) + sc->items_per_step, sc->items_per_eval};
}

int64_t batch_schedule_group_of_step(const batch_schedule *sc, int64_t t) {
    return sc->evals + (t / sc->interval) * (sc->interval + sc->evals) + t % sc->interval;
}

batch_item batch_schedule_item(const batch_schedule *sc, int64_t n) {
    int64_t e = sc->evals * sc->items_per_eval;
    if (n < e) return (batch_item){WIRE_HELDOUT, sc->student + n * sc->students};
    // periods of I steps of tc items, then e items of an evaluation
    int64_t m = n - e, per = sc->interval * sc->items_per_step + e, k = m / per, r = m % per;
    int64_t in_period = sc->steps - k * sc->interval < sc->interval ? sc->steps - k * sc->interval : sc->interval;
    if (r < in_period * sc->items_per_step) {
        int64_t t = k * sc->interval + r / sc->items_per_step, j = r % sc->items_per_step;
        return (batch_item){WIRE_TRAIN, t * sc->batches_per_step + sc->student + j * sc->students};
    }
    return (batch_item){WIRE_HELDOUT, sc->student + (r - in_period * sc->items_per_step) * sc->students};
}

// ----------------------------------------------------------------------------- set-up

int batch_source_buffers(const config *cfg, const world *w) { return 2 * protocol_credits(cfg, w->group_size) * w->groups + 1; }

size_t batch_source_payload_bytes(const config *cfg, int64_t k, int64_t D, int on_link) {
    return wire_bytes(cfg->max_tokens_per_batch, cfg->max_tokens_per_batch, k, on_link ? 0 : D);
}

size_t batch_source_pinned_bytes(const backend *be, const config *cfg, const world *w, int64_t k, int64_t D, int on_link) {
    return size_mul(batch_source_buffers(cfg, w), backend_host_bytes(be, batch_source_payload_bytes(cfg, k, D, on_link)));
}

void batch_source_init_live(batch_source *s, const world *w, int credits, size_t max_bytes, int n_buf, payload_link *link,
                            size_t feat_bytes, backend *be) {
    memset(s, 0, sizeof *s);
    int T = w->groups;
    s->live = 1, s->teachers = T, s->group_size = w->group_size, s->slots = credits, s->my_rank = w->rank, s->max_bytes = max_bytes;
    s->outstanding = xcalloc((size_t)T, sizeof(int));
    s->served = xcalloc((size_t)T, sizeof(int64_t));
    s->n_buf = n_buf;
    // the payloads land in pinned host buffers (backend_host_alloc), each with the event of the
    // upload that last read it
    s->be = be;
    s->bufs = xcalloc((size_t)n_buf, sizeof(char *));
    s->buf_free = xmalloc((size_t)n_buf * sizeof(int));
    s->uploaded = xcalloc((size_t)n_buf, sizeof(void *));
    size_t pageable = 0;
    for (int i = 0; i < n_buf; i++) {
        if (!(s->bufs[i] = backend_host_alloc(be, max_bytes))) fatal("student: its payload buffers: %s", error_msg());
        if (be->caps.pinned_transfers && !backend_host_pinned(be, s->bufs[i])) pageable += max_bytes;
        s->buf_free[i] = 1;
        s->uploaded[i] = backend_event_new(be);
    }
    if (pageable) {
        char what[96];
        snprintf(what, sizeof what, "student rank %d's payload buffers", w->rank);
        backend_host_warn(what, pageable, size_mul(n_buf, max_bytes),
                          "pageable instead, the features' uploads from them are synchronous");
    }
    // per item in flight: a ring of n_buf (each requested, unconsumed item holds a buffer)
    s->buf_of = xmalloc((size_t)n_buf * sizeof(int));
    s->teacher_of = xmalloc((size_t)n_buf * sizeof(int));
    s->recv = xcalloc((size_t)n_buf, sizeof(payload_ticket));
    s->landed = xcalloc((size_t)n_buf, sizeof(int));
    s->arrived = xcalloc((size_t)n_buf, sizeof(int));
    s->bytes_of = xcalloc((size_t)n_buf, sizeof(size_t));
    s->posted = xcalloc((size_t)n_buf, sizeof(int));
    s->blocked = xcalloc((size_t)T, sizeof(int));
    s->link = link;
    s->on_link = payload_link_device(link);
    if (s->on_link) {
        s->feat_bytes = feat_bytes;
        s->feat_dev = xcalloc((size_t)n_buf, sizeof(void *));
        s->tickets = xcalloc((size_t)n_buf, sizeof(payload_ticket));
        for (int i = 0; i < n_buf; i++) s->feat_dev[i] = backend_alloc(be, feat_bytes);
    }
}

void batch_source_upload_into(batch_source *s, void *dev, size_t bytes) {
    if (!s->live || s->on_link || !s->be->caps.device) return;
    s->up_dev = dev;
    s->up_bytes = bytes;
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

// Teacher t is the group of world ranks t*G .. t*G+G-1: requests go to its first stage, the payload
// (and its features as a device block) comes from its last.
static int source_request_rank(const batch_source *s, int t) { return t * s->group_size; }
static int source_data_rank(const batch_source *s, int t) { return t * s->group_size + s->group_size - 1; }

static int source_free_buf(batch_source *s) {
    for (int i = 0; i < s->n_buf; i++)
        if (s->buf_free[i]) {
            s->buf_free[i] = 0;
            return i;
        }
    return -1;
}

// Advance the batches in flight, oldest first. A payload that has landed gives its teacher the
// credit back (its buffer stays taken until the batch is consumed, in order). With device blocks its
// features then come GPU to GPU: the receive is enqueued once the payload has landed, in each
// teacher's sending order (a later batch of a teacher never enqueues before an earlier one: the
// order of our requests to it), and the batch is ready once that transfer is done.
static int source_progress(batch_source *s) {
    for (int t = 0; t < s->teachers; t++) s->blocked[t] = 0;
    for (int64_t n = s->next_consume; n < s->next_request; n++) {
        int t = s->teacher_of[n % s->n_buf], b = s->buf_of[n % s->n_buf];
        if (!s->landed[n % s->n_buf]) {
            if (payload_link_test(&s->recv[n % s->n_buf])) {
                s->bytes_of[n % s->n_buf] = s->recv[n % s->n_buf].bytes;
                s->landed[n % s->n_buf] = 1;
                s->outstanding[t]--;
                if (!s->on_link) s->arrived[n % s->n_buf] = 1;
            }
        }
        if (!s->on_link || s->arrived[n % s->n_buf]) continue;
        if (!s->posted[n % s->n_buf]) {
            if (!s->landed[n % s->n_buf] || s->blocked[t]) {
                s->blocked[t] = 1;
                continue;
            }
            wire_batch wb;
            if (wire_read(s->bufs[b], s->bytes_of[n % s->n_buf], &wb)) return error_prefix("batch from teacher %d", t);
            if (!wb.features_on_link)
                return error_set("teacher %d sent its features in the payload; %s device blocks expected", t,
                                 payload_link_label(s->link));
            if (size_mul(wb.S, wb.D) * 2 > s->feat_bytes)
                return error_set("teacher %d: features of %lld x %lld exceed the receive buffer", t, (long long)wb.S,
                                 (long long)wb.D);
            if (payload_link_post_recv_dev(s->link, source_data_rank(s, t), s->feat_dev[b], size_mul(wb.S, wb.D) * 2, &s->tickets[b]))
                return -1;
            s->posted[n % s->n_buf] = 1;
        }
        int done = payload_link_test(&s->tickets[b]);
        if (done < 0) return error_prefix("features from teacher %d", t);
        s->arrived[n % s->n_buf] = done;
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
        for (int t = 0; t < s->teachers; t++)
            if (s->outstanding[t] < s->slots && (best < 0 || s->outstanding[t] < s->outstanding[best])) best = t;
        if (best < 0) return 0;
        int b = source_free_buf(s);
        if (b < 0) return 0; // every buffer holds a batch not yet consumed
        int64_t n = s->next_request++;
        int64_t r = n % s->n_buf;
        backend_event_sync(s->be, s->uploaded[b]); // the upload of the batch it held has read it
        s->buf_of[r] = b, s->teacher_of[r] = best;
        s->landed[r] = s->arrived[r] = s->posted[r] = 0, s->bytes_of[r] = 0;
        payload_link_post_recv(s->link, source_data_rank(s, best), TAG_DATA, s->bufs[b], s->max_bytes, &s->recv[n % s->n_buf]);
        batch_item it = batch_schedule_item(sc, n);
        protocol_request_send(s->link, source_request_rank(s, best),
                              &(protocol_request){.kind = it.kind, .index = it.index, .student = s->my_rank});
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
        int tw = s->teacher_of[n % s->n_buf]; // every stage of its group
        if (!s->arrived[n % s->n_buf])
            watchdog_wait_begin(source_request_rank(s, tw), source_data_rank(s, tw), s->served[tw] ? 1 : 5, "a batch");
        while (!s->arrived[n % s->n_buf]) { // keep handing out work while this batch is on its way
            if (source_pump(s, sc)) return -1;
            if (s->arrived[n % s->n_buf]) break;
            struct timespec pause = {0, 100000}; // 0.1 ms
            nanosleep(&pause, NULL);
        }
        watchdog_wait_end();
        s->wait_s += time_now() - t0;
        int t = s->teacher_of[n % s->n_buf];
        s->served[t]++;
        if (wire_read(s->bufs[s->buf_of[n % s->n_buf]], s->bytes_of[n % s->n_buf], wb)) return error_prefix("batch from teacher %d", t);
        batch_item it = batch_schedule_item(sc, n);
        if (wire_check_seal(s->bufs[s->buf_of[n % s->n_buf]], s->bytes_of[n % s->n_buf]))
            return error_prefix("transport.check_payloads: %s batch %lld from teacher %d", it.kind == WIRE_TRAIN ? "training" : "held-out",
                                (long long)it.index, t);
        if (wb->seal) {
            s->sealed++;
            if (s->bytes_of[n % s->n_buf] > s->sealed_max) s->sealed_max = s->bytes_of[n % s->n_buf];
        }
        if (wb->kind != it.kind || wb->index != it.index)
            return error_set("teacher %d sent batch %lld/%lld, expected %lld/%lld", t, (long long)wb->kind,
                             (long long)wb->index, (long long)it.kind, (long long)it.index);
        if (wb->features_on_link) s->features_dev = s->feat_dev[s->buf_of[n % s->n_buf]];
        if (s->up_dev) { // from the pinned buffer onto the device, in order on the backend's stream
            if (size_mul(wb->S, wb->D) * 2 > s->up_bytes)
                return error_set("teacher %d: features of %lld x %lld exceed the student's feature buffer", t,
                                 (long long)wb->S, (long long)wb->D);
            backend_copy_async(s->be, BACKEND_STREAM_MAIN, s->up_dev, wb->features, size_mul(wb->S, wb->D) * 2);
            backend_event_record(s->be, s->uploaded[s->buf_of[n % s->n_buf]], BACKEND_STREAM_MAIN);
            s->features_dev = s->up_dev;
        }
        if (t < 1024) s->last_peak[t] = wb->peak_bytes;
        return source_pump(s, sc); // keep the teachers busy while this batch is computed
    }
    // offline: pack the batch's samples from the feature files into the same layout
    batch_item it = batch_schedule_item(sc, n);
    const batch_ref *b = it.kind == WIRE_TRAIN ? batchplan_train_batch(s->bp, it.index, NULL) : batchplan_heldout_batch(s->bp, it.index);
    int64_t S = b->tokens, D = featreader_feat_dim(s->fr), k = featreader_topk(s->fr);
    *wb = (wire_batch){.kind = it.kind, .index = it.index, .S = S, .n_seq = b->n, .k = k, .D = D};
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
    watchdog_wait_begin(0, s->teachers * s->group_size - 1, 1, "the batches requested before the stop");
    for (int64_t n = s->next_consume; n < s->next_request; n++)
        while (!s->arrived[n % s->n_buf]) {
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
    if (s->live) s->buf_free[s->buf_of[n % s->n_buf]] = 1;
}

void batch_source_stop_teachers(batch_source *s) {
    if (!s->live) return;
    for (int t = 0; t < s->teachers; t++) {
        protocol_request_send(s->link, source_request_rank(s, t), &(protocol_request){.kind = WIRE_STOP, .student = s->my_rank});
        for (int r = source_request_rank(s, t); r <= source_data_rank(s, t); r++) watchdog_watch(r, 0); // it may exit now
    }
}

void batch_source_free(batch_source *s) {
    if (s->sealed)
        log_info("transport.check_payloads: %lld payloads matched their teachers' CRC-32C (the largest %zu bytes)",
                 (long long)s->sealed, s->sealed_max);
    if (s->live) {
        for (int i = 0; i < s->n_buf; i++) {
            backend_event_sync(s->be, s->uploaded[i]);
            backend_event_free(s->be, s->uploaded[i]);
            backend_host_free(s->be, s->bufs[i]);
        }
        free(s->bufs); free(s->uploaded); free(s->buf_free); free(s->buf_of); free(s->teacher_of); free(s->recv);
        free(s->landed); free(s->arrived); free(s->bytes_of); free(s->posted); free(s->blocked);
        free(s->outstanding); free(s->served);
        for (int i = 0; s->on_link && i < s->n_buf; i++) {
            payload_link_ticket_free(&s->tickets[i]);
            backend_free(s->be, s->feat_dev[i]);
        }
        free(s->feat_dev); free(s->tickets);
    } else {
        free(s->offline_buf);
    }
    memset(s, 0, sizeof *s);
}
