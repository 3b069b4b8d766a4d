// teacher_loop.c: serve batches to students (see teacher_loop.h).
#include "teacher/teacher_loop.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/arena.h"
#include "common/comm/nccl_link.h"
#include "common/comm/watchdog.h"
#include "common/comm/wire.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/log.h"
#include "common/data/batchplan.h"
#include "common/data/dataset.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"

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

int teacher_serve(const world *w, const config *cfg, backend *be, nccl_links *links) {
    for (int r = w->teachers; r < w->size; r++) watchdog_watch(r, 1); // the students, until each stops
    target_model m = {.be = be}; // planned from its config.json first: a budget too small fails before the load
    teacher_contract tc;
    target_outputs o;
    if (target_config_load(&m.cfg, cfg->target_path) || teacher_train_outputs(cfg, &m, &tc, &o) ||
        teacher_train_budget(cfg, &m, &o, tc.max_tokens))
        return w->role_index == 0 ? -1 : WORLD_REPORTED_ELSEWHERE; // the same on every teacher: the first says it
    if (target_load(&m, cfg->target_path, be)) return -1;
    dataset ts;
    if (dataset_open(&ts, cfg, 2 * cfg->block_size)) return -1;
    // (its vocabulary against the target's: train_check_inputs, on rank 0 before the roles start)
    batchplan bp;
    if (teacher_plan(cfg, &ts, &bp)) return -1;

    int T = tc.max_tokens;
    arena work;
    if (arena_init(&work, "teacher work", be, target_work_bytes(&m, &o, T, T, o.vocab_tile))) return -1;
    target_work tw;
    target_work_carve(&tw, &work, &m, &o, T, T, o.vocab_tile);
    int64_t D = (int64_t)o.n_feat * m.cfg.hidden, k = o.topk;
    size_t max_bytes = wire_bytes(T, T, k, D);
    int n_buf = (int)cfg->slots * w->students + 1;
    char **bufs = xmalloc((size_t)n_buf * sizeof(char *));
    MPI_Request *sends = xmalloc((size_t)n_buf * sizeof(MPI_Request));
    for (int i = 0; i < n_buf; i++) {
        bufs[i] = xmalloc(max_bytes);
        sends[i] = MPI_REQUEST_NULL;
    }
    int32_t *tokens = xmalloc((size_t)T * sizeof(int32_t)), *cu = xmalloc(((size_t)T + 1) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)T);
    dtype act = ops_act_dtype(be);
    void *feat_raw = xmalloc((size_t)T * (size_t)D * dtype_size(act));
    // With NCCL links the features go GPU to GPU from a ring of device buffers (bf16, the compute
    // dtype of a CUDA backend); the rest of the payload stays on MPI.
    size_t feat_bytes = (size_t)T * (size_t)D * 2;
    void **feat_dev = links ? xcalloc((size_t)n_buf, sizeof(void *)) : NULL;
    nccl_ticket *tickets = links ? xcalloc((size_t)n_buf, sizeof(nccl_ticket)) : NULL;
    for (int i = 0; links && i < n_buf; i++) feat_dev[i] = backend_alloc(be, feat_bytes);
    size_t peak = m.weights.used + work.used + (links ? (size_t)n_buf * feat_bytes : 0);

    int stops = 0, next = 0;
    int64_t served = 0;
    double busy = 0, t_start = time_now();
    while (stops < w->students) {
        int64_t req[WIRE_REQUEST];
        MPI_Status st;
        // idle: the students may wait on another teacher (1.5 x); before the first request they are
        // still setting up (reading the embedding, planning, allocating), which may take longer (5 x)
        watchdog_wait_begin(w->teachers, w->size - 1, served == 0 ? 5 : 1.5, "a request from a student");
        mpi_check(MPI_Recv(req, WIRE_REQUEST, MPI_INT64_T, MPI_ANY_SOURCE, TAG_REQUEST, MPI_COMM_WORLD, &st));
        watchdog_wait_end();
        if (req[0] == WIRE_STOP) {
            stops++;
            watchdog_watch(st.MPI_SOURCE, 0); // done with us: it may exit
            continue;
        }
        double t0 = time_now();
        const batch_ref *b = req[0] == WIRE_TRAIN ? batchplan_train_batch(&bp, req[1], NULL)
                                                  : batchplan_heldout_batch(&bp, req[1]);
        int n_seq = (int)b->n, S = 0;
        cu[0] = 0;
        for (int i = 0; i < n_seq; i++) {
            int64_t len = dataset_len(&ts, b->samples[i]);
            if (dataset_read(&ts, b->samples[i], tokens + S, mask + S)) fatal("teacher: %s", error_msg());
            S += (int)len;
            cu[i + 1] = S;
        }
        if (target_forward(&m, &o, &tw, tokens, cu, n_seq, S, NULL, 0, NULL)) fatal("teacher: %s", error_msg());
        // the next buffer of the ring, once its previous send is done
        int slot = next++ % n_buf;
        watchdog_wait_begin(w->teachers, w->size - 1, 1.5, "a student to receive an earlier batch");
        mpi_check(MPI_Wait(&sends[slot], MPI_STATUS_IGNORE));
        if (links && nccl_ticket_wait(&tickets[slot])) fatal("teacher: %s", error_msg());
        watchdog_wait_end();
        wire_batch wb = {.kind = req[0], .index = req[1], .S = S, .n_seq = n_seq, .k = k, .D = D, .peak_bytes = (int64_t)peak,
                         .features_on_link = links != NULL};
        wire_write_header(bufs[slot], &wb);
        wire_layout(bufs[slot], &wb);
        memcpy(wb.tokens, tokens, (size_t)S * sizeof(int32_t));
        memcpy(wb.cu, cu, ((size_t)n_seq + 1) * sizeof(int32_t));
        memcpy(wb.mask, mask, (size_t)S);
        if (links) { // GPU to GPU: into this slot's device buffer, sent below
            backend_copy_to_device(be, feat_dev[slot], tw.features, (size_t)S * (size_t)D * 2);
        } else if (act == DT_BF16) {
            backend_copy_to_host(be, wb.features, tw.features, (size_t)S * (size_t)D * 2);
        } else { // fp32 on the CPU: bf16 on the wire
            backend_copy_to_host(be, feat_raw, tw.features, (size_t)S * (size_t)D * sizeof(float));
            convert_from_f32(wb.features, DT_BF16, feat_raw, (int64_t)S * D);
        }
        backend_copy_to_host(be, wb.topk_idx, tw.topk_idx, (size_t)S * (size_t)k * sizeof(int32_t));
        backend_copy_to_host(be, wb.topk_val, tw.topk_val, (size_t)S * (size_t)k * sizeof(float));
        backend_copy_to_host(be, wb.lse, tw.lse, (size_t)S * sizeof(float));
        if (cfg->test_slow_teacher == w->rank && cfg->test_slow_ms > 0) { // test-only: a slow teacher
            struct timespec ts_sleep = {cfg->test_slow_ms / 1000, (cfg->test_slow_ms % 1000) * 1000000L};
            nanosleep(&ts_sleep, NULL);
        }
        mpi_check(MPI_Isend(bufs[slot], (int)wire_bytes(S, n_seq, k, links ? 0 : D), MPI_BYTE, st.MPI_SOURCE, TAG_DATA,
                            MPI_COMM_WORLD, &sends[slot]));
        // the features after their header: the student posts its receive once the header is in
        if (links && nccl_link_send(links, st.MPI_SOURCE, feat_dev[slot], (size_t)S * (size_t)D * 2, NULL, &tickets[slot]))
            fatal("teacher: %s", error_msg());
        served++;
        busy += time_now() - t0;
    }
    mpi_check(MPI_Waitall(n_buf, sends, MPI_STATUSES_IGNORE)); // every student has stopped: all received
    for (int i = 0; links && i < n_buf; i++) {
        if (nccl_ticket_wait(&tickets[i])) fatal("teacher: %s", error_msg());
        nccl_ticket_free(&tickets[i]);
        backend_free(be, feat_dev[i]);
    }
    free(feat_dev);
    free(tickets);
    double el = time_now() - t_start;
    log_info("teacher %d: served %lld batches, busy %.0f%% of %.1fs", w->rank, (long long)served,
             el > 0 ? 100 * busy / el : 0, el);
    for (int i = 0; i < n_buf; i++) free(bufs[i]);
    free(bufs);
    free(sends);
    free(tokens);
    free(cu);
    free(mask);
    free(feat_raw);
    arena_free(&work);
    batchplan_free(&bp);
    dataset_close(&ts);
    target_free(&m);
    return 0;
}
