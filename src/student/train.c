// train.c: the student's training loop (see train.h).
#include "student/train.h"

#include <signal.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/arena.h"
#include "common/batchplan.h"
#include "common/check.h"
#include "common/error.h"
#include "common/featreader.h"
#include "common/fsutil.h"
#include "common/half.h"
#include "common/log.h"
#include "common/nccl_link.h"
#include "common/safetensors.h"
#include "common/dataset.h"
#include "common/watchdog.h"
#include "common/wire.h"
#include "student/anchors.h"
#include "student/checkpoint.h"
#include "student/drafter.h"
#include "student/loss_config.h"
#include "student/optim.h"
#include "student/plan.h"
#include "student/step.h"
#include "teacher/target_config.h"
#include "teacher/teacher_loop.h"

// One batch this student consumes, in order.
typedef struct {
    int64_t kind, index; // WIRE_TRAIN / WIRE_HELDOUT and the batch's index in its plan
} train_item;

// Where batches come from: teachers (live) or a feature directory (offline).
typedef struct {
    int live;
    int T, slots, my_rank;
    size_t max_bytes;
    // live
    int *outstanding;            // [T]
    int64_t *served;             // [T] batches each teacher sent us
    int n_buf;
    char **bufs;
    int *buf_of;                 // item -> buffer
    int *teacher_of;             // item -> teacher
    MPI_Request *recv;           // item -> request
    int *buf_free;               // [n_buf]
    int *landed;                 // item -> its MPI payload is here (its teacher's credit is back)
    int *arrived;                // item -> ready to be consumed (with NCCL: its features are here too)
    int *bytes_of;               // item -> payload bytes
    int64_t next_request, next_consume;
    double wait_s;               // time spent waiting for data
    int64_t last_peak[1024];     // teachers' reported peak bytes
    // NCCL links (NULL: every payload comes whole over MPI)
    nccl_links *links;
    size_t feat_bytes;           // one batch's features, bf16
    void **feat_dev;             // [n_buf] GPU buffers for the features
    nccl_ticket *tickets;        // [n_buf] their receives
    int *posted;                 // item -> its features' receive is enqueued
    int *blocked;                // [T] scratch of source_progress
    void *features_dev;          // the batch source_get returned: its features in GPU memory
    // offline
    featreader *fr;
    batchplan *bp;
    char *offline_buf;
} source;

static int source_free_buf(source *s) {
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
static int source_progress(source *s) {
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
static int source_pump(source *s, const train_item *items, int64_t n_items) {
    if (!s->live) return 0;
    if (source_progress(s)) return -1;
    while (s->next_request < n_items) {
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
        int64_t req[WIRE_REQUEST] = {items[n].kind, items[n].index, s->my_rank};
        mpi_check(MPI_Send(req, WIRE_REQUEST, MPI_INT64_T, best, TAG_REQUEST, MPI_COMM_WORLD));
        s->outstanding[best]++;
    }
    return 0;
}

// Item n as a wire batch (live: wait for its payload; offline: read it). Features in GPU memory
// (NCCL) are left in s->features_dev (NULL when they are in the payload, wb->features).
static int source_get(source *s, const train_item *items, int64_t n_items, int64_t n, wire_batch *wb) {
    s->features_dev = NULL;
    if (s->live) {
        s->next_consume = n;
        if (source_pump(s, items, n_items)) return -1;
        double t0 = time_now();
        // a teacher's first batch also waits for it to load the target: 5 x the timeout
        if (!s->arrived[n])
            watchdog_wait_begin(s->teacher_of[n], s->teacher_of[n], s->served[s->teacher_of[n]] ? 1 : 5, "a batch");
        while (!s->arrived[n]) { // keep handing out work while this batch is on its way
            if (source_pump(s, items, n_items)) return -1;
            if (s->arrived[n]) break;
            struct timespec pause = {0, 100000}; // 0.1 ms
            nanosleep(&pause, NULL);
        }
        watchdog_wait_end();
        s->wait_s += time_now() - t0;
        int t = s->teacher_of[n];
        s->served[t]++;
        if (wire_read(s->bufs[s->buf_of[n]], (size_t)s->bytes_of[n], wb)) return error_prefix("batch from teacher %d", t);
        if (wb->kind != items[n].kind || wb->index != items[n].index)
            return error_set("teacher %d sent batch %lld/%lld, expected %lld/%lld", t, (long long)wb->kind,
                             (long long)wb->index, (long long)items[n].kind, (long long)items[n].index);
        if (wb->features_on_link) s->features_dev = s->feat_dev[s->buf_of[n]];
        if (t < 1024) s->last_peak[t] = wb->peak_bytes;
        return source_pump(s, items, n_items); // keep the teachers busy while this batch is computed
    }
    // offline: pack the batch's samples from the feature files into the same layout
    const batch_ref *b = items[n].kind == WIRE_TRAIN ? batchplan_train_batch(s->bp, items[n].index, NULL)
                                                     : batchplan_heldout_batch(s->bp, items[n].index);
    int64_t S = b->tokens, D = featreader_feat_dim(s->fr), k = featreader_topk(s->fr);
    *wb = (wire_batch){.kind = items[n].kind, .index = items[n].index, .S = S, .n_seq = b->n, .k = k, .D = D};
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

// Wait for every payload already requested (a student that stops early still has batches in
// flight; their buffers must outlive the transfers).
static int source_drain(source *s) {
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

static void source_release(source *s, int64_t n) {
    if (s->live) s->buf_free[s->buf_of[n]] = 1;
}

// ----------------------------------------------------------------------------- logging

typedef struct {
    FILE *jsonl;
    double t_last;
    double wait_last;
} train_log;

static void stats_add(step_stats *a, const step_stats *b) {
    a->sum_w += b->sum_w;
    a->sum_w_ce += b->sum_w_ce;
    a->sum_w_kl += b->sum_w_kl;
    a->sum_w_cap += b->sum_w_cap;
    a->anchors += b->anchors;
    for (int j = 0; j < STEP_MAX_SLOTS; j++) {
        a->slot_scored[j] += b->slot_scored[j];
        a->slot_correct[j] += b->slot_correct[j];
    }
    a->tau_chain_sum += b->tau_chain_sum;
    for (int t = 0; t < STEP_TREE_BUDGETS; t++) a->tau_tree_sum[t] += b->tau_tree_sum[t];
    a->ctx_tokens += b->ctx_tokens;
    a->block_tokens += b->block_tokens;
}

// An all-reduce among the students (in place), under the watchdog: a student that died or hangs
// ends the job with its rank named instead of leaving the others in the collective forever.
static int students_first, students_last; // world ranks of the students
static void students_allreduce(void *buf, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *what) {
    watchdog_wait_begin(students_first, students_last, 1, what);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, n, type, op, comm));
    watchdog_wait_end();
}

// Sum stats over the students (all fields are sums).
static void stats_allreduce(step_stats *s, MPI_Comm comm) {
    double d[5 + STEP_TREE_BUDGETS];
    int64_t i[3 + 2 * STEP_MAX_SLOTS];
    d[0] = s->sum_w, d[1] = s->sum_w_ce, d[2] = s->sum_w_kl, d[3] = s->sum_w_cap, d[4] = s->tau_chain_sum;
    for (int t = 0; t < STEP_TREE_BUDGETS; t++) d[5 + t] = s->tau_tree_sum[t];
    i[0] = s->anchors, i[1] = s->ctx_tokens, i[2] = s->block_tokens;
    memcpy(i + 3, s->slot_scored, sizeof s->slot_scored);
    memcpy(i + 3 + STEP_MAX_SLOTS, s->slot_correct, sizeof s->slot_correct);
    students_allreduce(d, 5 + STEP_TREE_BUDGETS, MPI_DOUBLE, MPI_SUM, comm, "the students' statistics");
    students_allreduce(i, 3 + 2 * STEP_MAX_SLOTS, MPI_INT64_T, MPI_SUM, comm, "the students' statistics");
    s->sum_w = d[0], s->sum_w_ce = d[1], s->sum_w_kl = d[2], s->sum_w_cap = d[3], s->tau_chain_sum = d[4];
    for (int t = 0; t < STEP_TREE_BUDGETS; t++) s->tau_tree_sum[t] = d[5 + t];
    s->anchors = i[0], s->ctx_tokens = i[1], s->block_tokens = i[2];
    memcpy(s->slot_scored, i + 3, sizeof s->slot_scored);
    memcpy(s->slot_correct, i + 3 + STEP_MAX_SLOTS, sizeof s->slot_correct);
}

// One JSON line of metrics (and a short terminal line). split = NULL for training lines.
static void log_line(train_log *lg, const char *split, int64_t step, const step_stats *s, const loss_config *lc, int B,
                     double lr, double grad_norm, double seconds, double wait_frac, const int64_t *peaks, int n_peaks) {
    double W = s->sum_w > 0 ? s->sum_w : 1, ce = s->sum_w_ce / W, kl = s->sum_w_kl / W, cap = s->sum_w_cap / W;
    double loss = (1 - lc->alpha) * ce + lc->alpha * kl + lc->lambda * cap;
    double tau = s->anchors ? s->tau_chain_sum / (double)s->anchors : 0;
    FILE *f = lg->jsonl;
    fprintf(f, "{\"step\": %lld, ", (long long)step);
    if (split) fprintf(f, "\"split\": \"%s\", ", split);
    fprintf(f, "\"loss\": %.6f, \"ce\": %.6f, \"kl\": %.6f, \"cap\": %.6f, \"acc\": [", loss, ce, kl, cap);
    for (int j = 1; j < B; j++)
        fprintf(f, "%s%.4f", j > 1 ? ", " : "", s->slot_scored[j] ? (double)s->slot_correct[j] / (double)s->slot_scored[j] : 0.0);
    fprintf(f, "], \"tau_chain\": %.4f, \"tau_tree\": {", tau);
    for (int t = 0; t < STEP_TREE_BUDGETS; t++)
        fprintf(f, "%s\"%d\": %.4f", t ? ", " : "", step_tree_budgets[t], s->anchors ? s->tau_tree_sum[t] / (double)s->anchors : 0);
    fprintf(f, "}, \"anchors\": %lld", (long long)s->anchors);
    if (!split) {
        fprintf(f, ", \"lr\": %.6g, \"grad_norm\": %.6f, \"block_tokens_per_s\": %.1f, \"ctx_tokens_per_s\": %.1f, "
                   "\"teacher_wait_frac\": %.4f, \"peak_bytes\": [",
                lr, grad_norm, seconds > 0 ? (double)s->block_tokens / seconds : 0, seconds > 0 ? (double)s->ctx_tokens / seconds : 0,
                wait_frac);
        for (int r = 0; r < n_peaks; r++) fprintf(f, "%s%lld", r ? ", " : "", (long long)peaks[r]);
        fprintf(f, "]");
    }
    fprintf(f, "}\n");
    fflush(f);
    if (split)
        log_info("eval  step %5lld  loss %.4f  ce %.4f  kl %.4f  acc@1 %.3f  tau_chain %.3f  tau_tree@%d %.3f", (long long)step,
                 loss, ce, kl, s->slot_scored[1] ? (double)s->slot_correct[1] / (double)s->slot_scored[1] : 0.0, tau,
                 step_tree_budgets[STEP_TREE_BUDGETS - 1],
                 s->anchors ? s->tau_tree_sum[STEP_TREE_BUDGETS - 1] / (double)s->anchors : 0);
    else
        log_info("step %5lld  loss %.4f  ce %.4f  kl %.4f  cap %.4f  tau %.3f  lr %.2e  |g| %.3f  %.0f block tok/s  wait %.0f%%",
                 (long long)step, loss, ce, kl, cap, tau, lr, grad_norm, seconds > 0 ? (double)s->block_tokens / seconds : 0,
                 100 * wait_frac);
}

// The un-normalised gradients summed over the students. On the CPU in place; on a GPU through a
// host buffer, since MPI need not be CUDA-aware (NCCL, which is, is the planned GPU path).
static void train_allreduce_grads(drafter *d, MPI_Comm comm, float *host_grad) {
    if (d->be->kind == BACKEND_CPU) {
        students_allreduce(d->grad, (int)d->numel, MPI_FLOAT, MPI_SUM, comm, "the gradient all-reduce");
        return;
    }
    backend_copy_to_host(d->be, host_grad, d->grad, (size_t)d->numel * sizeof(float));
    students_allreduce(host_grad, (int)d->numel, MPI_FLOAT, MPI_SUM, comm, "the gradient all-reduce");
    backend_copy_to_device(d->be, d->grad, host_grad, (size_t)d->numel * sizeof(float));
}

// SIGTERM / SIGUSR1 (SLURM's preemption warning): finish the current step, checkpoint, exit 0.
// SIGINT (Ctrl-C) the same the first time; a second SIGINT aborts at once, without a checkpoint.
static volatile sig_atomic_t train_stop_requested = 0, train_interrupts = 0;
static void train_on_signal(int sig) { train_stop_requested = sig; }
static void train_on_interrupt(int sig) {
    if (train_interrupts++ > 0) {
        static const char m[] = "error: interrupted twice: aborted at once, without a checkpoint\n";
        ssize_t ignored = write(STDERR_FILENO, m, sizeof m - 1);
        (void)ignored;
        _exit(130);
    }
    static const char m[] = "interrupt: finishing this step and writing a checkpoint (interrupt again to abort at once)\n";
    ssize_t ignored = write(STDERR_FILENO, m, sizeof m - 1);
    (void)ignored;
    train_stop_requested = sig;
}

void train_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = train_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = train_on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    // a file-size limit (ulimit -f) makes write() fail with EFBIG, reported as such, rather than kill
    signal(SIGXFSZ, SIG_IGN);
}

// ----------------------------------------------------------------------------- set-up

// The drafter's shape: from drafter.config (a DFlash config.json: a published drafter's, or one an
// earlier run exported) when it is set, else from the target's config and the drafter.* keys. A
// config file must fit the target (hidden size, vocabulary, number of target layers) and ask for
// the target layers the teachers send (target.layer_ids); the drafter.* shape keys are then unused
// (a warning names those set to something else).
int train_drafter_config(const config *cfg, const target_config *tc, const teacher_contract *ct, drafter_config *dc) {
    if (cfg->drafter_config_path[0]) {
        char path[CONFIG_STR + 16];
        struct stat st; // a drafter directory (run.dir/drafter, a downloaded drafter) stands for its config.json
        snprintf(path, sizeof path, "%s%s", cfg->drafter_config_path,
                 stat(cfg->drafter_config_path, &st) == 0 && S_ISDIR(st.st_mode) ? "/config.json" : "");
        if (drafter_config_load(dc, path)) return error_prefix("drafter.config");
        const char *fields[3] = {"hidden_size", "vocab_size", "num_target_layers"};
        const char *target_fields[3] = {"hidden_size", "vocab_size", "num_hidden_layers"};
        int64_t mine[3] = {dc->hidden, dc->vocab, dc->num_target_layers}, theirs[3] = {tc->hidden, tc->vocab, tc->n_layers};
        for (int i = 0; i < 3; i++)
            if (mine[i] != theirs[i] && !(i == 2 && mine[i] == 0)) // num_target_layers may be absent
                return error_set("drafter.config %s: '%s' is %lld but the target's '%s' is %lld (target.path %s): the "
                                 "drafter must be made for this target", path, fields[i], (long long)mine[i],
                                 target_fields[i], (long long)theirs[i], cfg->target_path);
        dc->num_target_layers = tc->n_layers;
        int same = dc->n_feat == ct->n_feat;
        for (int i = 0; same && i < ct->n_feat; i++) same = dc->target_layer_ids[i] == ct->layer_ids[i];
        if (!same) {
            char want[256] = "", have[256] = "";
            int nw = 0, nh = 0;
            for (int i = 0; i < dc->n_feat && nw < (int)sizeof want - 24; i++)
                nw += snprintf(want + nw, sizeof want - (size_t)nw, "%s%lld", i ? "," : "", (long long)dc->target_layer_ids[i]);
            for (int i = 0; i < ct->n_feat && nh < (int)sizeof have - 24; i++)
                nh += snprintf(have + nh, sizeof have - (size_t)nh, "%s%lld", i ? "," : "", (long long)ct->layer_ids[i]);
            return error_set("drafter.config %s: 'target_layer_ids' is [%s] but the teachers send layers [%s] "
                             "(target.layer_ids); run with --target.layer_ids=%s", path, want, have, want);
        }
        snprintf(dc->torch_dtype, sizeof dc->torch_dtype, "float32"); // the master weights; export sets its own
        // drafter.* keys set to something the file overrides: say so once, not silently.
        char ignored[512] = "";
        int n = 0;
        const struct { const char *key; int64_t value, def, file; } keys[] = {
            {"drafter.layers", cfg->drafter_layers, 1, dc->n_layers},
            {"drafter.block_size", cfg->block_size, 16, dc->block_size},
            {"drafter.intermediate", cfg->drafter_intermediate, 0, dc->intermediate},
            {"drafter.heads", cfg->drafter_heads, 0, dc->n_heads},
            {"drafter.kv_heads", cfg->drafter_kv_heads, 0, dc->n_kv_heads},
            {"drafter.head_dim", cfg->drafter_head_dim, 0, dc->head_dim},
            {"drafter.mask_token_id", cfg->mask_token_id, -1, dc->mask_token_id},
            {"drafter.sliding_window", cfg->sliding_window, 0, dc->sliding_window},
        };
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && n < (int)sizeof ignored - 80; i++)
            if (keys[i].value != keys[i].def && keys[i].value != keys[i].file)
                n += snprintf(ignored + n, sizeof ignored - (size_t)n, "%s%s = %lld (the file: %lld)", n ? ", " : "",
                              keys[i].key, (long long)keys[i].value, (long long)keys[i].file);
        if (n) log_warn("drafter.config %s sets the drafter's shape; ignored: %s", path, ignored);
        log_info("drafter shape from %s: %lld layer(s), %lld/%lld heads x %lld, intermediate %lld, block size %lld",
                 path, (long long)dc->n_layers, (long long)dc->n_heads, (long long)dc->n_kv_heads,
                 (long long)dc->head_dim, (long long)dc->intermediate, (long long)dc->block_size);
        return 0;
    }
    memset(dc, 0, sizeof *dc);
    dc->n_layers = cfg->drafter_layers;
    dc->hidden = tc->hidden;
    dc->intermediate = cfg->drafter_intermediate > 0 ? cfg->drafter_intermediate : tc->intermediate;
    dc->n_heads = cfg->drafter_heads > 0 ? cfg->drafter_heads : tc->n_heads;
    dc->n_kv_heads = cfg->drafter_kv_heads > 0 ? cfg->drafter_kv_heads : tc->n_kv_heads;
    dc->head_dim = cfg->drafter_head_dim > 0 ? cfg->drafter_head_dim : tc->head_dim;
    dc->vocab = tc->vocab;
    dc->rms_eps = tc->rms_eps;
    dc->rope_theta = tc->rope_theta;
    dc->max_positions = tc->max_positions;
    dc->block_size = cfg->block_size;
    dc->mask_token_id = cfg->mask_token_id >= 0 ? cfg->mask_token_id : tc->vocab - 1;
    dc->sliding_window = cfg->sliding_window;
    dc->sliding_causal = 1;
    for (int64_t l = 0; l < dc->n_layers; l++) dc->layer_sliding[l] = cfg->sliding_window > 0 && l + 1 < dc->n_layers;
    dc->n_feat = ct->n_feat;
    for (int i = 0; i < ct->n_feat; i++) dc->target_layer_ids[i] = ct->layer_ids[i];
    dc->num_target_layers = tc->n_layers;
    snprintf(dc->torch_dtype, sizeof dc->torch_dtype, "float32");
    if (dc->n_heads % dc->n_kv_heads || dc->head_dim % 2)
        return error_set("drafter: %lld query heads do not group over %lld kv heads, or head_dim %lld is odd",
                         (long long)dc->n_heads, (long long)dc->n_kv_heads, (long long)dc->head_dim);
    if (dc->mask_token_id >= dc->vocab) return error_set("drafter.mask_token_id %lld is outside the vocabulary of %lld",
                                                         (long long)dc->mask_token_id, (long long)dc->vocab);
    return 0;
}

// Items of this student, in consumption order, in groups that are the same on every student (an
// evaluation, or one optimizer step), so the students' collective calls line up even when a group
// holds no batch of this student: an evaluation first, then each step, with evaluations after
// every eval_interval steps and after the last.
typedef struct {
    int64_t kind;          // WIRE_HELDOUT or WIRE_TRAIN
    int64_t first, count;  // items of this student
} train_group;

static train_item *train_items(const config *cfg, int s, int S, int64_t n_heldout_batches, int64_t *n_out,
                               train_group **groups, int64_t *n_groups) {
    int64_t G = cfg->batches_per_step, ev = cfg->eval_batches < n_heldout_batches ? cfg->eval_batches : n_heldout_batches;
    int64_t n_evals = ev > 0 ? 2 + cfg->steps / cfg->eval_interval : 0;
    int64_t cap = (cfg->steps * G) / S + G + n_evals * (ev / S + 1) + 1;
    train_item *it = xmalloc((size_t)cap * sizeof *it);
    train_group *g = xmalloc((size_t)(cfg->steps + n_evals + 1) * sizeof *g);
    int64_t n = 0, ng = 0;
#define EVAL()                                                                     \
    if (ev > 0) {                                                                  \
        g[ng] = (train_group){WIRE_HELDOUT, n, 0};                                 \
        for (int64_t h = s; h < ev; h += S) it[n++] = (train_item){WIRE_HELDOUT, h}; \
        g[ng].count = n - g[ng].first;                                             \
        ng++;                                                                      \
    }
    EVAL();
    for (int64_t t = 0; t < cfg->steps; t++) {
        g[ng] = (train_group){WIRE_TRAIN, n, 0};
        for (int64_t j = s; j < G; j += S) it[n++] = (train_item){WIRE_TRAIN, t * G + j};
        g[ng].count = n - g[ng].first;
        ng++;
        if ((t + 1) % cfg->eval_interval == 0 || t + 1 == cfg->steps) EVAL();
    }
#undef EVAL
    *n_out = n;
    *groups = g;
    *n_groups = ng;
    return it;
}

// The target's shape and its embedding (and lm_head) entries, the teachers' contract and the
// drafter's shape. On success td is open (the caller closes it).
static int train_target_open(const config *cfg, target_config *tc, teacher_contract *ct, drafter_config *dc, st_dir *td,
                             const st_entry **e_emb, const st_entry **e_head) {
    if (target_config_load(tc, cfg->target_path)) return -1;
    if (teacher_contract_make(cfg, tc->n_layers, ct)) return -1;
    if (train_drafter_config(cfg, tc, ct, dc)) return -1;
    if (safetensors_dir_open(td, cfg->target_path)) return error_prefix("target");
    *e_emb = safetensors_dir_find(td, "model.embed_tokens.weight");
    *e_head = tc->tie_embeddings ? NULL : safetensors_dir_find(td, "lm_head.weight");
    if (!*e_emb || (!tc->tie_embeddings && !*e_head)) {
        safetensors_dir_close(td);
        return error_set("target %s: missing %s", cfg->target_path, *e_emb ? "lm_head.weight" : "model.embed_tokens.weight");
    }
    return 0;
}

// The batch plan over the usable samples: of the training sets (live; their vocabulary checked
// against the target's) or of the offline feature directory (*fr stays open for reading).
static int train_data_plan(const config *cfg, const target_config *tc, const teacher_contract *ct, batchplan *bp,
                           featreader **fr) {
    int64_t n_samples;
    int64_t *lengths;
    batchplan_set sets[CONFIG_MAX_SETS];
    int n_sets;
    *fr = NULL;
    if (!cfg->data_features[0]) {
        dataset ds;
        if (dataset_open(&ds, cfg, 2 * cfg->block_size)) return -1;
        if (ds.vocab_size > tc->vocab) {
            int64_t v = ds.vocab_size;
            dataset_close(&ds);
            return error_set("training set %s has vocab_size %lld, larger than the target's %lld (%s)",
                             config_data_path(cfg, 0, NULL), (long long)v, (long long)tc->vocab, cfg->target_path);
        }
        n_samples = ds.n;
        lengths = xmalloc((size_t)(n_samples + 1) * sizeof(int64_t));
        for (int64_t i = 0; i < n_samples; i++) lengths[i] = dataset_len(&ds, i);
        n_sets = ds.n_sets;
        dataset_plan_sets(&ds, sets);
        dataset_close(&ds);
    } else {
        if (featreader_open(fr, cfg->data_features)) return -1;
        if (featreader_topk(*fr) != ct->topk || featreader_feat_dim(*fr) != ct->n_feat * tc->hidden) {
            int rc = error_set("data.features %s has top-%d and %d feature columns, the run expects top-%d and %lld",
                               cfg->data_features, featreader_topk(*fr), featreader_feat_dim(*fr), ct->topk,
                               (long long)(ct->n_feat * tc->hidden));
            featreader_close(*fr);
            *fr = NULL;
            return rc;
        }
        n_samples = featreader_samples(*fr);
        lengths = xmalloc((size_t)(n_samples + 1) * sizeof(int64_t));
        for (int64_t i = 0; i < n_samples; i++) lengths[i] = featreader_len(*fr, i);
        if ((n_sets = dataset_feature_sets(cfg, *fr, sets)) < 0) {
            free(lengths);
            featreader_close(*fr);
            *fr = NULL;
            return -1;
        }
    }
    int rc = batchplan_build(bp, lengths, n_samples, sets, n_sets, cfg->heldout_samples, cfg->max_tokens_per_batch,
                             cfg->bucket_size, (uint64_t)cfg->seed);
    free(lengths);
    if (rc && *fr) {
        featreader_close(*fr);
        *fr = NULL;
    }
    return rc;
}

int train_check_inputs(const world *w, const config *cfg) {
    int live = cfg->data_features[0] == '\0';
    if (w->students < 1) return error_set("a training job needs a student rank (world.students)");
    if (cfg->batches_per_step % w->students)
        return error_set("train.batches_per_step = %lld is not a multiple of the %d student(s)",
                         (long long)cfg->batches_per_step, w->students);
    if (live && w->teachers == 0) return error_set("no teacher ranks and no data.features: nothing would produce batches");
    target_config tc;
    teacher_contract ct;
    drafter_config dc;
    st_dir td;
    const st_entry *e_emb, *e_head;
    if (train_target_open(cfg, &tc, &ct, &dc, &td, &e_emb, &e_head)) return -1;
    safetensors_dir_close(&td);
    batchplan bp;
    featreader *fr = NULL;
    if (train_data_plan(cfg, &tc, &ct, &bp, &fr)) return -1;
    batchplan_free(&bp);
    if (fr) featreader_close(fr);
    return 0;
}

int student_train(const world *w, const config *cfg, backend *be, MPI_Comm comm, nccl_links *links) {
    int s = w->role_index, S = w->students, T = w->teachers, live = cfg->data_features[0] == '\0';
    if (cfg->batches_per_step % S)
        return error_set("train.batches_per_step = %lld is not a multiple of the %d student(s)", (long long)cfg->batches_per_step, S);
    if (live && T == 0) return error_set("no teacher ranks and no data.features: nothing would produce batches");
    for (int r = 0; r < w->size; r++) watchdog_watch(r, 1); // the teachers and the other students
    students_first = T, students_last = T + S - 1;

    // The target: its shape, and only its embedding and lm_head (SPEC §3).
    target_config tc;
    teacher_contract ct;
    drafter_config dc;
    st_dir td;
    const st_entry *e_emb, *e_head;
    if (train_target_open(cfg, &tc, &ct, &dc, &td, &e_emb, &e_head)) return -1;

    // Data: the batch plan over the usable samples of the training sets (the same on every rank).
    batchplan bp;
    featreader *fr = NULL;
    if (train_data_plan(cfg, &tc, &ct, &bp, &fr)) return -1;
    int rc = 0;
    for (int i = 0; i < bp.n_sets && s == 0; i++) {
        const batchplan_set_info *si = &bp.sets[i];
        const char *name = "";
        if (config_data_count(cfg) > 0) name = config_data_path(cfg, i, NULL);
        else featreader_set(fr, i, NULL, &name);
        log_info("data: set %d %s: %lld usable samples (%lld training, %lld held out), weight %g: %lld per epoch", i,
                 name, (long long)si->n, (long long)si->n_train, (long long)si->n_heldout, si->weight,
                 (long long)si->per_epoch);
    }

    // Memory: the plan, then every allocation up front.
    plan_request pr = {.budget = (size_t)cfg->train_mem_budget, .max_tokens = (int)cfg->max_tokens_per_batch,
                       .max_seqs = (int)cfg->max_tokens_per_batch, .max_anchors = (int)cfg->max_anchors, .k = ct.topk,
                       .adam = 1, .ema = cfg->ema_decay > 0, .tied = tc.tie_embeddings, .force_mode = -1};
    // the NCCL receive ring: one GPU buffer of features per host buffer of the source (below)
    int n_buf = 2 * (int)cfg->slots * T + 1;
    size_t feat_bytes = (size_t)cfg->max_tokens_per_batch * (size_t)(ct.n_feat * tc.hidden) * 2;
    if (live && links) pr.link_bytes = (size_t)n_buf * feat_bytes;
    student_plan plan;
    plan_breakdown bd;
    if (plan_make(&dc, be, &pr, &plan, &bd)) return -1;
    if (cfg->plan_only) { // --plan: the breakdown, then stop before any large allocation
        if (s == 0) {
            plan_print(stdout, &bd, &plan, (size_t)cfg->train_mem_budget);
            fflush(stdout);
        }
        safetensors_dir_close(&td);
        batchplan_free(&bp);
        if (fr) featreader_close(fr);
        return 0;
    }
    if (s == 0) plan_print(stderr, &bd, &plan, (size_t)cfg->train_mem_budget);
    drafter d;
    tensor head = e_head ? st_entry_tensor(e_head) : (tensor){0};
    if (drafter_init(&d, &dc, be, (uint64_t)cfg->seed, st_entry_tensor(e_emb), e_head ? &head : NULL)) return -1;
    safetensors_dir_close(&td);
    arena work, opt_mem;
    if (arena_init(&work, "student work", be, student_work_bytes(&d, &plan))) return -1;
    if (arena_init(&opt_mem, "optimizer", be, optim_bytes(d.numel, cfg->ema_decay > 0))) return -1;
    student_work *sw = student_work_create(&d, &plan, &work);
    optim_config oc;
    optim_config_default(&oc);
    oc.lr = cfg->lr, oc.warmup_frac = cfg->warmup_frac, oc.weight_decay = cfg->weight_decay, oc.clip = cfg->grad_clip;
    oc.total_steps = cfg->steps, oc.ema_decay = cfg->ema_decay;
    optim opt;
    optim_init(&opt, &oc, be, d.numel, &opt_mem, d.master);
    int64_t start_step = 0;
    if (cfg->resume) { // every student loads the same checkpoint
        int found = 0;
        int64_t latest = checkpoint_latest(cfg->run_dir, &found);
        if (found) {
            if (checkpoint_read(cfg->run_dir, latest, &d, &opt)) return -1;
            start_step = latest;
            if (s == 0) log_info("resuming from %s/checkpoints/step-%08lld", cfg->run_dir, (long long)latest);
        } else if (s == 0) {
            log_info("run.resume: no checkpoint in %s/checkpoints, starting from step 0", cfg->run_dir);
        }
    }
    loss_config lc;
    loss_config_default(&lc, (int)dc.block_size);
    lc.alpha = cfg->loss_alpha, lc.lambda = cfg->loss_lambda;
    if (cfg->loss_gamma > 0) lc.gamma = cfg->loss_gamma;
    lc.weighting = strcmp(cfg->loss_weighting, "dpace") == 0 ? LOSS_WEIGHT_DPACE : LOSS_WEIGHT_DECAY;
    lc.label_teacher = strcmp(cfg->loss_label, "teacher") == 0;

    // The source of batches.
    int64_t n_items, n_groups;
    train_group *groups;
    train_item *items = train_items(cfg, s, S, bp.n_heldout_batches, &n_items, &groups, &n_groups);
    source src;
    memset(&src, 0, sizeof src);
    src.live = live, src.T = T, src.slots = (int)cfg->slots, src.my_rank = w->rank;
    int64_t D = (int64_t)ct.n_feat * tc.hidden;
    src.max_bytes = wire_bytes(cfg->max_tokens_per_batch, cfg->max_tokens_per_batch, ct.topk, D);
    if (live) {
        src.outstanding = xcalloc((size_t)T, sizeof(int));
        src.served = xcalloc((size_t)T, sizeof(int64_t));
        src.n_buf = n_buf; // in flight (slots per teacher) + arrived, not yet consumed
        src.bufs = xmalloc((size_t)src.n_buf * sizeof(char *));
        src.buf_free = xmalloc((size_t)src.n_buf * sizeof(int));
        for (int i = 0; i < src.n_buf; i++) src.bufs[i] = xmalloc(src.max_bytes), src.buf_free[i] = 1;
        src.buf_of = xmalloc((size_t)n_items * sizeof(int));
        src.teacher_of = xmalloc((size_t)n_items * sizeof(int));
        src.recv = xmalloc((size_t)n_items * sizeof(MPI_Request));
        src.landed = xcalloc((size_t)n_items, sizeof(int));
        src.arrived = xcalloc((size_t)n_items, sizeof(int));
        src.bytes_of = xcalloc((size_t)n_items, sizeof(int));
        src.posted = xcalloc((size_t)n_items, sizeof(int));
        src.blocked = xcalloc((size_t)T, sizeof(int));
        if (links) {
            src.links = links;
            src.feat_bytes = feat_bytes;
            src.feat_dev = xcalloc((size_t)n_buf, sizeof(void *));
            src.tickets = xcalloc((size_t)n_buf, sizeof(nccl_ticket));
            for (int i = 0; i < n_buf; i++) src.feat_dev[i] = backend_alloc(be, feat_bytes);
        }
    } else {
        src.fr = fr;
        src.bp = &bp;
        src.offline_buf = xmalloc(src.max_bytes);
    }

    // Run directory and metrics (first student).
    train_log lg = {0};
    if (s == 0) {
        if (fs_mkdirs(cfg->run_dir)) return error_prefix("run.dir");
        char path[CONFIG_STR + 32];
        snprintf(path, sizeof path, "%s/config.json", cfg->run_dir);
        char *json = config_to_json(cfg);
        size_t jn = strlen(json);
        json = xrealloc(json, jn + 2);
        memcpy(json + jn, "\n", 2);
        rc = fs_write_text(path, json);
        free(json);
        if (rc) return -1;
        snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->run_dir);
        lg.jsonl = fopen(path, start_step > 0 ? "a" : "w");
        if (!lg.jsonl) return error_set("%s: %s", path, strerror(errno));
    }
    int n_ranks = w->size;
    int64_t *peaks = xcalloc((size_t)n_ranks, sizeof(int64_t));
    int32_t *valid = xmalloc((size_t)cfg->max_tokens_per_batch * sizeof(int32_t));
    int32_t *anchors = xmalloc((size_t)cfg->max_anchors * sizeof(int32_t));
    float *host_grad = be->kind == BACKEND_CPU || S == 1 ? NULL : xmalloc((size_t)d.numel * sizeof(float));

    double t_run = time_now(), t_int = t_run, wait_int = 0, last_norm = 0;
    step_stats interval, cur, first_eval, last_eval;
    memset(&interval, 0, sizeof interval);
    memset(&first_eval, 0, sizeof first_eval);
    memset(&last_eval, 0, sizeof last_eval);
    int64_t step = start_step, evals = 0, total_block = 0, total_ctx = 0;
    // A resumed run skips the groups before its checkpoint (and asks no teacher for their batches).
    int64_t first_group = 0;
    for (int64_t t = 0; first_group < n_groups && t < start_step; first_group++)
        t += groups[first_group].kind == WIRE_TRAIN;
    if (first_group < n_groups) src.next_request = src.next_consume = groups[first_group].first;
    for (int64_t gi = first_group; gi < n_groups; gi++) {
        int64_t kind = groups[gi].kind;
        memset(&cur, 0, sizeof cur);
        for (int64_t n = groups[gi].first; n < groups[gi].first + groups[gi].count && rc == 0; n++) {
            wire_batch wb;
            if ((rc = source_get(&src, items, n_items, n, &wb))) break;
            student_batch b = {.S = (int)wb.S, .n_seq = (int)wb.n_seq, .k = (int)wb.k, .tokens = wb.tokens,
                               .loss_mask = wb.mask, .cu_seqlens = wb.cu, .topk_idx = wb.topk_idx, .topk_val = wb.topk_val,
                               .lse = wb.lse};
            int64_t shape[2] = {wb.S, wb.D};
            b.features = src.features_dev ? tensor_make(DT_BF16, src.features_dev, DEVICE_CUDA, 2, shape)
                                          : tensor_make(DT_BF16, wb.features, DEVICE_CPU, 2, shape);
            int nv = anchors_valid(wb.mask, wb.cu, (int)wb.n_seq, valid);
            uint64_t batch_id = ((uint64_t)kind << 40) | (uint64_t)wb.index;
            int na = anchors_sample(valid, nv, (int)cfg->max_anchors, (uint64_t)cfg->seed, batch_id, anchors);
            if (na > 0) rc = student_step(&d, &lc, &plan, sw, &b, anchors, na, &cur);
            source_release(&src, n);
        }
        // A failure on one student must not leave the others waiting in a collective: agree first.
        int bad = rc ? 1 : 0;
        students_allreduce(&bad, 1, MPI_INT, MPI_MAX, comm, "the other students to finish the step");
        if (bad) {
            if (!rc) rc = error_set("another student failed (see its message)");
            break;
        }
        stats_allreduce(&cur, comm);
        if (kind == WIRE_HELDOUT) { // evaluation: the gradients it left are discarded
            backend_memset_zero(be, d.grad, (size_t)d.numel * sizeof(float));
            if (evals == 0) first_eval = cur;
            last_eval = cur;
            evals++;
            if (s == 0) log_line(&lg, "heldout", step, &cur, &lc, (int)dc.block_size, 0, 0, 0, 0, NULL, 0);
            continue;
        }
        // An optimizer step: all-reduce the un-normalised gradients, then one update.
        if (S > 1) train_allreduce_grads(&d, comm, host_grad);
        double lr = optim_lr(&oc, opt.step);
        last_norm = optim_step(&opt, d.master, d.grad, cur.sum_w);
        drafter_sync_compute(&d);
        stats_add(&interval, &cur);
        total_block += cur.block_tokens;
        total_ctx += cur.ctx_tokens;
        step++;
        if (step % cfg->log_interval == 0 || step == cfg->steps) {
            double now = time_now(), el = now - t_int;
            double wait = src.wait_s - wait_int;
            double wait_all = wait;
            students_allreduce(&wait_all, 1, MPI_DOUBLE, MPI_MAX, comm, "the students' log line");
            int64_t mine = (int64_t)(d.mem.used + work.used + opt_mem.used);
            int64_t *student_peaks = xcalloc((size_t)S, sizeof(int64_t));
            watchdog_wait_begin(students_first, students_last, 1, "the students' log line");
            mpi_check(MPI_Allgather(&mine, 1, MPI_INT64_T, student_peaks, 1, MPI_INT64_T, comm));
            watchdog_wait_end();
            for (int t = 0; t < T && t < 1024; t++) peaks[t] = src.last_peak[t];
            for (int i = 0; i < S; i++) peaks[T + i] = student_peaks[i];
            free(student_peaks);
            if (s == 0) log_line(&lg, NULL, step, &interval, &lc, (int)dc.block_size, lr, last_norm, el, el > 0 ? wait_all / el : 0, peaks, n_ranks);
            memset(&interval, 0, sizeof interval);
            t_int = now;
            wait_int = src.wait_s;
            if (lg.jsonl && ferror(lg.jsonl)) { // the job would go on without its metrics: stop with the reason
                rc = error_set("%s/metrics.jsonl: a write failed (is the disk full?)", cfg->run_dir);
                break;
            }
        }
        if (cfg->ckpt_every > 0 && (step % cfg->ckpt_every == 0 || step == cfg->steps) && s == 0 &&
            checkpoint_write(cfg->run_dir, step, &d, &opt, config_hash(cfg), (int)cfg->ckpt_keep)) {
            rc = -1; // the previous checkpoints are intact; the job stops with the reason
            break;
        }
        // A signal on any rank stops every student after this step, with a checkpoint.
        int stop = train_stop_requested ? 1 : 0;
        students_allreduce(&stop, 1, MPI_INT, MPI_MAX, comm, "the other students after the step");
        if (stop && step < cfg->steps) {
            if (s == 0) {
                if (checkpoint_write(cfg->run_dir, step, &d, &opt, config_hash(cfg), (int)cfg->ckpt_keep)) {
                    rc = -1;
                    break;
                }
                log_info("stopped by a signal after step %lld with a checkpoint in %s/checkpoints; resume with the same "
                         "command and --run.resume=true", (long long)step, cfg->run_dir);
            }
            break;
        }
        if (cfg->test_stop_at_step > 0 && step == cfg->test_stop_at_step) {
            if (s == 0) log_info("stopping after step %lld (test.stop_at_step); resume with --run.resume=true", (long long)step);
            break;
        }
    }
    // Tell every teacher this student is done (also after an error, so they can stop), once the
    // batches still in flight have landed.
    if (source_drain(&src) && rc == 0) rc = -1;
    if (live)
        for (int t = 0; t < T; t++) {
            int64_t req[WIRE_REQUEST] = {WIRE_STOP, 0, w->rank};
            mpi_check(MPI_Send(req, WIRE_REQUEST, MPI_INT64_T, t, TAG_REQUEST, MPI_COMM_WORLD));
            watchdog_watch(t, 0); // it may exit now
        }
    for (int r = T; r < T + S; r++) watchdog_watch(r, 0); // no collective among the students follows
    if (rc == 0 && live) {
        char served[256];
        int m = 0;
        for (int t = 0; t < T && m < (int)sizeof served - 16; t++) m += snprintf(served + m, sizeof served - (size_t)m, "%s%lld", t ? ", " : "", (long long)src.served[t]);
        log_info("student %d: batches received per teacher: [%s]", s, served);
    }
    double wall = time_now() - t_run;
    if (rc == 0 && s == 0) {
        char dir[CONFIG_STR + 16];
        snprintf(dir, sizeof dir, "%s/drafter", cfg->run_dir);
        if (drafter_export(&d, dir, 0)) rc = -1;
        double tau0 = first_eval.anchors ? first_eval.tau_chain_sum / (double)first_eval.anchors : 0;
        double tau1 = last_eval.anchors ? last_eval.tau_chain_sum / (double)last_eval.anchors : 0;
        fprintf(lg.jsonl, "{\"summary\": true, \"finished\": %s, \"steps\": %lld, \"wall_s\": %.2f, \"block_tokens_per_s\": %.1f, "
                          "\"ctx_tokens_per_s\": %.1f, \"peak_bytes\": [", step >= cfg->steps ? "true" : "false", (long long)step, wall,
                wall > 0 ? (double)total_block * S / wall : 0, wall > 0 ? (double)total_ctx * S / wall : 0);
        for (int r = 0; r < n_ranks; r++) fprintf(lg.jsonl, "%s%lld", r ? ", " : "", (long long)peaks[r]);
        fprintf(lg.jsonl, "], \"tau_first\": %.4f, \"tau_last\": %.4f}\n", tau0, tau1);
        log_info("summary: %lld steps in %.1fs, %.0f block tokens/s, held-out tau_chain %.3f -> %.3f, drafter in %s",
                 (long long)step, wall, wall > 0 ? (double)total_block * S / wall : 0, tau0, tau1, dir);
        char pb[32];
        for (int r = 0; r < n_ranks; r++) log_info("  peak memory rank %d (%s): %s", r, r < T ? "teacher" : "student",
                                                   bytes_format((size_t)peaks[r], pb, sizeof pb));
    }
    if (lg.jsonl) fclose(lg.jsonl);
    free(items);
    free(groups);
    free(peaks);
    free(valid);
    free(anchors);
    free(host_grad);
    if (live) {
        for (int i = 0; i < src.n_buf; i++) free(src.bufs[i]);
        free(src.bufs); free(src.buf_free); free(src.buf_of); free(src.teacher_of); free(src.recv);
        free(src.landed); free(src.arrived); free(src.bytes_of); free(src.posted); free(src.blocked);
        free(src.outstanding); free(src.served);
        for (int i = 0; links && i < n_buf; i++) {
            nccl_ticket_free(&src.tickets[i]);
            backend_free(be, src.feat_dev[i]);
        }
        free(src.feat_dev); free(src.tickets);
    } else {
        free(src.offline_buf);
        featreader_close(fr);
    }
    student_work_destroy(sw);
    arena_free(&work);
    arena_free(&opt_mem);
    drafter_free(&d);
    batchplan_free(&bp);
    return rc;
}
