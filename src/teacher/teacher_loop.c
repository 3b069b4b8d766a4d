// teacher_loop.c: serve batches to students (see teacher_loop.h).
#include "teacher/teacher_loop.h"
#include "common/core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/arena.h"
#include "common/backend/gpu_reserve.h"
#include "common/comm/payload_link.h"
#include "common/comm/protocol.h"
#include "common/comm/stop_relay.h"
#include "common/comm/watchdog.h"
#include "common/comm/wire.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/log.h"
#include "common/core/stop.h"
#include "common/data/batchplan.h"
#include "common/data/dataset.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/teacher_group.h"
#include "teacher/teacher_plan.h"

// The batch plan over the usable samples of the training sets (shared with the students).
static int teacher_plan(const config *cfg, dataset *ds, batchplan *bp) {
    int64_t *len = xmalloc((size_t)(ds->n > 0 ? ds->n : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < ds->n; i++) len[i] = dataset_len(ds, i);
    batchplan_set *sets = xmalloc((size_t)ds->n_sets * sizeof *sets);
    dataset_plan_sets(ds, sets);
    int rc = batchplan_build(bp, len, ds->n, sets, ds->n_sets, cfg->heldout_samples, cfg->max_tokens_per_batch,
                             cfg->bucket_size, (uint64_t)cfg->seed);
    free(sets);
    free(len);
    return rc;
}

// What a first stage serves from: the batch plan, the training sets, the students' stops so far.
typedef struct {
    batchplan bp;
    dataset ts;
    int stops;
} teacher_requests;

// The next batch of a first stage: a student's request (or a stop); the batch read from the
// training sets into tokens/cu/mask. 1 a batch (h filled), 0 every student has stopped.

static int teacher_next_request(const world *w, payload_link *link, teacher_requests *q, int64_t served, stage_header *h,
                                int32_t *tokens, int32_t *cu, uint8_t *mask) {
    while (q->stops < w->students) {
        protocol_request req;
        int from = -1;
        // idle: the students may wait on another teacher (1.5 x); before the first request they are
        // still setting up (reading the embedding, planning, allocating), which may take longer (5 x)
        watchdog_wait_begin(w->teachers, w->size - 1, served == 0 ? 5 : 1.5, "a request from a student");
        int rc = protocol_request_recv(link, &req, &from);
        watchdog_wait_end();
        if (rc) return -1;
        if (req.kind == WIRE_STOP) {
            q->stops++;
            if (w->group_size == 1) watchdog_watch(from, 0); // done with us: it may exit
            continue;
        }
        const batch_ref *b = req.kind == WIRE_TRAIN ? batchplan_train_batch(&q->bp, req.index, NULL)
                                                    : batchplan_heldout_batch(&q->bp, req.index);
        int n_seq = (int)b->n, S = 0;
        cu[0] = 0;
        for (int i = 0; i < n_seq; i++) {
            int64_t len = dataset_len(&q->ts, b->samples[i]);
            if (dataset_read(&q->ts, b->samples[i], tokens + S, mask + S)) fatal("teacher: %s", error_msg());
            S += (int)len;
            cu[i + 1] = S;
        }
        *h = (stage_header){.kind = req.kind, .index = req.index, .S = S, .n_seq = n_seq, .reply = from};
        return 1;
    }
    return 0;
}

int teacher_serve(const world *w, const config *cfg, backend *be, payload_link *link) {
    int G = w->group_size, first = w->stage <= 0, last = w->stage == G - 1 || G == 1;
    int on_link = payload_link_device(link); // the features as a device block
    // the students (requests on the first stage, payloads from the last), and the group's neighbours
    for (int r = w->teachers; r < w->size && (first || last); r++) watchdog_watch(r, 1);
    if (!first) watchdog_watch(w->rank - 1, 1);
    if (!last) watchdog_watch(w->rank + 1, 1);
    target_model m = {.be = be}; // planned from its config.json first: a budget too small fails before the load
    teacher_contract tc;
    target_outputs o;
    // the same on every group: the first group's stages say it (each its own stage's)
    if (target_config_load(&m.cfg, cfg->target_path) || teacher_train_outputs(cfg, &m, &tc, &o) ||
        teacher_stage_select(w, &m) || teacher_stage_budget(cfg, &m, &o, tc.max_tokens, w->students, on_link))
        return w->group == 0 ? -1 : WORLD_REPORTED_ELSEWHERE;
    // on a GPU: its context, cuBLAS and NCCL communicators exist now; what is free must hold the plan
    char who[64];
    snprintf(who, sizeof who, "teacher rank %d", w->rank);
    if (gpu_reserve_check(be, target_model_weight_bytes(&m) + target_work_bytes(&m, &o, tc.max_tokens, tc.max_tokens, o.vocab_tile) +
                                  teacher_stage_ring_bytes(cfg, &m.cfg, &tc, G, G > 1 ? w->stage : 0, w->students, on_link),
                          0, who, "teacher.mem_budget"))
        return -1;
    if (target_load_stage(&m, cfg->target_path, be, m.layer_begin, m.layer_end > 0 ? m.layer_end : -1)) return -1;
    teacher_requests q = {.stops = 0};
    if (first) {
        if (dataset_open(&q.ts, cfg, cfg->min_loss_tokens)) return -1;
        // (its vocabulary against the target's: train_check_inputs, on rank 0 before the roles start)
        if (teacher_plan(cfg, &q.ts, &q.bp)) return -1;
    }

    int T = tc.max_tokens;
    arena work;
    if (arena_init(&work, "teacher work", be, target_work_bytes(&m, &o, T, T, o.vocab_tile)))
        return error_append("a teacher runs the students' batches of data.max_tokens_per_batch = %d tokens whole: lower "
                            "it (or teacher.vocab_tile); teacher.mem_budget checks the plan at start", T);
    target_work tw;
    target_work_carve(&tw, &work, &m, &o, T, T, o.vocab_tile);
    int64_t D = (int64_t)o.n_feat * m.cfg.hidden, k = o.topk;
    int n_buf = protocol_send_buffers(cfg, G, w->students); // every batch this rank may have in flight
    stage_link sl;
    if (G > 1 && stage_link_init(&sl, w, be, link, n_buf, T, m.cfg.hidden, D)) return -1;
    // the host's part of a payload on the link chosen: with device blocks the features stay off it
    size_t max_bytes = teacher_payload_bytes(T, k, D, on_link);
    int n_pay = last ? n_buf : 0; // the payload ring of the last stage
    // The payload ring: pinned host buffers (backend_host_alloc) the outputs are copied into
    // asynchronously, each with the event its send waits for (teacher_pinned_bytes plans them).
    char **bufs = xcalloc((size_t)n_pay + 1, sizeof(char *));
    void **copied = xcalloc((size_t)n_pay + 1, sizeof(void *));
    payload_ticket *sends = xcalloc((size_t)n_pay + 1, sizeof(payload_ticket));
    size_t pageable = 0;
    for (int i = 0; i < n_pay; i++) {
        if (!(bufs[i] = backend_host_alloc(be, max_bytes))) {
            for (int j = 0; j < i; j++) backend_host_free(be, bufs[j]), backend_event_free(be, copied[j]);
            free(bufs), free(copied), free(sends);
            return error_prefix("teacher rank %d: its payload ring (%d buffers)", w->rank, n_pay);
        }
        if (be->caps.pinned_transfers && !backend_host_pinned(be, bufs[i])) pageable += max_bytes;
        copied[i] = backend_event_new(be);
    }
    if (pageable) {
        char what[96];
        snprintf(what, sizeof what, "teacher rank %d's payload ring", w->rank);
        backend_host_warn(what, pageable, size_mul(n_pay, max_bytes), "pageable instead, the copies into it are synchronous");
    }
    int32_t *tokens = xmalloc((size_t)T * sizeof(int32_t)), *cu = xmalloc(((size_t)T + 1) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)T);
    dtype act = ops_act_dtype(be);
    void *feat_raw = last ? xmalloc(size_mul(T, D) * dtype_size(act)) : NULL;
    // With device blocks the features go GPU to GPU from a ring of device buffers (bf16, the
    // compute dtype of a CUDA backend); the rest of the payload is the host message.
    size_t feat_bytes = size_mul(T, D) * 2;
    void **feat_dev = on_link ? xcalloc((size_t)n_pay + 1, sizeof(void *)) : NULL;
    payload_ticket *tickets = on_link ? xcalloc((size_t)n_pay + 1, sizeof(payload_ticket)) : NULL;
    for (int i = 0; on_link && i < n_pay; i++) feat_dev[i] = backend_alloc(be, feat_bytes);
    // the device memory: weights, work, and the link's buffers (the stage rings and the payload ring)
    size_t peak = m.weights.used + work.used +
                  teacher_stage_ring_bytes(cfg, &m.cfg, &tc, G, G > 1 ? w->stage : 0, w->students, on_link);

    int next = 0, stop_said = 0;
    int64_t served = 0;
    double busy = 0, t_start = time_now();
    for (;;) {
        // A signal to this teacher (a node of teachers drained or preempted alone): every rank is
        // told (stop_relay.h); the students checkpoint after their step and stop, as for their own.
        if (stop_relay_poll() && stop_requested() && !stop_said) {
            log_info("teacher rank %d: %s: the students are told; they stop after their current step", w->rank,
                     stop_signal_name(stop_requested()));
            stop_said = 1;
        }
        stage_header h;
        int got = first ? teacher_next_request(w, link, &q, served, &h, tokens, cu, mask)
                        // after the previous stage: a little more patient than it, so the rank nearest a hung peer names it
                        : stage_recv(&sl, &h, tokens, cu, mask, &tw, (served == 0 ? 5 : 1.5) + 0.25 * w->stage);
        if (got < 0) fatal("teacher: %s", error_msg());
        if (got == 0) break;
        double t0 = time_now();
        int S = (int)h.S, n_seq = (int)h.n_seq;
        if (h.peak < (int64_t)peak) h.peak = (int64_t)peak;
        if (target_forward(&m, &o, &tw, tokens, cu, n_seq, S, NULL, 0, NULL)) fatal("teacher: %s", error_msg());
        served++;
        if (!last) { // on to the next stage of the group
            if (stage_send(&sl, &h, tokens, cu, mask, &tw)) fatal("teacher: %s", error_msg());
            busy += time_now() - t0;
            continue;
        }
        // the next buffer of the ring, once its previous send is done
        int slot = next++ % n_pay;
        watchdog_wait_begin(w->teachers, w->size - 1, 1.5, "a student to receive an earlier batch");
        payload_link_wait(&sends[slot]);
        if (on_link && payload_link_wait(&tickets[slot])) fatal("teacher: %s", error_msg());
        watchdog_wait_end();
        wire_batch wb = {.kind = h.kind, .index = h.index, .S = S, .n_seq = n_seq, .k = k, .D = D, .peak_bytes = h.peak,
                         .features_on_link = on_link};
        wire_write_header(bufs[slot], &wb);
        wire_layout(bufs[slot], &wb);
        // The outputs into the slot's pinned buffer by asynchronous copies on the copy stream, after
        // the forward (backend_copy_async), then the host's part of the payload while they run. A
        // CUDA forward writes its features in bf16 (the wire's dtype, converted on the device); the
        // CPU's fp32 ones are converted here.
        if (on_link) { // GPU to GPU: into this slot's device buffer, sent below
            backend_copy_to_device(be, feat_dev[slot], tw.features, size_mul(S, D) * 2);
        } else if (act == DT_BF16) {
            backend_copy_async(be, BACKEND_STREAM_COPY, wb.features, tw.features, size_mul(S, D) * 2);
        } else { // fp32 on the CPU: bf16 on the wire
            backend_copy_to_host(be, feat_raw, tw.features, size_mul(S, D) * sizeof(float));
            convert_from_f32(wb.features, DT_BF16, feat_raw, (int64_t)S * D);
        }
        backend_copy_async(be, BACKEND_STREAM_COPY, wb.topk_idx, tw.topk_idx, size_mul(S, k) * sizeof(int32_t));
        backend_copy_async(be, BACKEND_STREAM_COPY, wb.topk_val, tw.topk_val, size_mul(S, k) * sizeof(float));
        backend_copy_async(be, BACKEND_STREAM_COPY, wb.lse, tw.lse, (size_t)S * sizeof(float));
        backend_event_record(be, copied[slot], BACKEND_STREAM_COPY);
        memcpy(wb.tokens, tokens, (size_t)S * sizeof(int32_t));
        memcpy(wb.cu, cu, ((size_t)n_seq + 1) * sizeof(int32_t));
        memcpy(wb.mask, mask, (size_t)S);
        config_test_slow(cfg, w->rank); // testing: a slow teacher
        // the send posts once the copies are in (the next forward, which rewrites what they read,
        // starts after it and overlaps the send)
        backend_event_sync(be, copied[slot]);
        int reply = (int)h.reply;
        size_t bytes = wire_bytes(S, n_seq, k, on_link ? 0 : D);
        if (cfg->check_payloads) wire_seal(bufs[slot], bytes); // checked by the student on arrival
        payload_link_post_send(link, reply, TAG_DATA, bufs[slot], bytes, &sends[slot]);
        // the features after their header: the student posts its receive once the header is in
        if (on_link && payload_link_post_send_dev(link, reply, feat_dev[slot], size_mul(S, D) * 2, &tickets[slot]))
            fatal("teacher: %s", error_msg());
        busy += time_now() - t0;
    }
    if (G > 1 && !last) stage_send_stop(&sl); // every student has stopped: the next stage ends after its batches
    if (G > 1) stage_link_free(&sl);
    for (int i = 0; i < n_pay; i++) payload_link_wait(&sends[i]); // every student has stopped: all received
    for (int i = 0; on_link && i < n_pay; i++) {
        if (payload_link_wait(&tickets[i])) fatal("teacher: %s", error_msg());
        payload_link_ticket_free(&tickets[i]);
        backend_free(be, feat_dev[i]);
    }
    free(feat_dev);
    free(tickets);
    double el = time_now() - t_start;
    char role[64] = "";
    if (G > 1) snprintf(role, sizeof role, " (group %d stage %d)", w->group, w->stage);
    log_info("teacher %d%s: served %lld batches, busy %.0f%% of %.1fs", w->rank, role, (long long)served,
             el > 0 ? 100 * busy / el : 0, el);
    for (int i = 0; i < n_pay; i++) backend_host_free(be, bufs[i]), backend_event_free(be, copied[i]);
    free(bufs);
    free(copied);
    free(sends);
    free(tokens);
    free(cu);
    free(mask);
    free(feat_raw);
    arena_free(&work);
    if (first) {
        batchplan_free(&q.bp);
        dataset_close(&q.ts);
    }
    target_free(&m);
    return 0;
}

// Settings: the keys of testing: a slow teacher (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key teacher_test_keys[] = {
    {"test.slow_teacher", CFG_INT, CONFIG_F(test_slow_teacher), "-1", "testing: this teacher rank sleeps test.slow_ms per batch (--mode regenerate and dump-features: per shard); -1 = none, -2 = every rank", NULL, -2, 1e6},
    {"test.slow_ms", CFG_INT, CONFIG_F(test_slow_ms), "0", "testing: the slow teacher's delay per batch (ms)", NULL, 0, 1e7},
};
const config_key_set teacher_test_settings = CONFIG_KEY_SET(teacher_test_keys, NULL);
