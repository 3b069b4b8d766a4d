// train.c: the student's training loop (see train.h).
#include "student/train/train.h"
#include "common/core/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backend/arena.h"
#include "common/backend/gpu_reserve.h"
#include "common/core/bytes.h"
#include "common/comm/protocol.h"
#include "common/comm/stop_relay.h"
#include "common/comm/watchdog.h"
#include "common/comm/wire.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/core/run_dir.h"
#include "common/core/stop.h"
#include "student/train/anchors.h"
#include "student/train/batch_source.h"
#include "student/train/checkpoint.h"
#include "student/model/drafter.h"
#include "student/train/eval.h"
#include "student/loss/loss_config.h"
#include "student/model/metrics.h"
#include "student/train/optim.h"
#include "student/model/memory_plan.h"
#include "student/model/step.h"
#include "student/train/students.h"
#include "student/train/train_log.h"
#include "student/train/train_setup.h"

// Whether the run's inputs were verified against their checksums (a resumed checkpoint, feature
// shards): advice to lower the learning rate is given only when they were.
static const char *train_unverified = NULL; // NULL: verified; else what was not

// A non-finite or exploding value at step + 1: the first student's error line, naming the newest
// checkpoint that verifies (checkpoint_last_good), TRAIN_REPORTED_ELSEWHERE on the others.
static int train_nonfinite(int s, const config *cfg, int64_t step, const char *what, double value, const char *why) {
    if (s != 0) return TRAIN_REPORTED_ELSEWHERE;
    int found = 0, verified = 0, corrupt = 0;
    int64_t last = checkpoint_last_good(cfg->run_dir, &found, &verified, &corrupt);
    char good[CONFIG_STR + 160] = "none";
    if (found)
        snprintf(good, sizeof good, "step %lld in %s/checkpoints%s", (long long)last, cfg->run_dir,
                 verified ? " (verified)" : " (written before checksums: unverified)");
    char skipped[96] = "";
    if (corrupt) snprintf(skipped, sizeof skipped, "; %d newer checkpoint(s) fail their checksums", corrupt);
    char advice[256];
    if (!train_unverified && (!found || verified)) snprintf(advice, sizeof advice, "lower train.lr, or check the data");
    else snprintf(advice, sizeof advice, "%s could not be verified: check it before lowering train.lr",
                  train_unverified ? train_unverified : "the last good checkpoint");
    // (a finite, exploding gradient norm is known only after optim_step applied it: nothing saves that update)
    int after = why[0] && strstr(what, "gradient") != NULL;
    return error_set("step %lld: %s is %g%s: training stopped %s (nothing written, no drafter exported); "
                     "the last good checkpoint: %s%s (%s)", (long long)step + 1, what, value, why,
                     after ? "after the update, which nothing saves" : "before the update", good, skipped, advice);
}

// Divergence (train.divergence_factor = f > 0): a value past f * max(1, the running mean of that
// value over the earlier steps of this process) stops the run like a NaN. The running mean is an
// exponential one (weight 0.1 for each new step); the floor 1 keeps a tiny, converged loss or norm
// from tripping on an ordinary wobble. A fresh run's first value has no history: its floor is
// TRAIN_FIRST_FLOOR instead of 1 (a new drafter's first gradient norm is often in the hundreds:
// SmolLM2-135M's was 313; a teacher gone wrong gives losses of 1e19 and more), and it starts the mean.
// The means live in the optimizer state (*mean, 0 = none yet), so a resumed run is judged against
// its history. Returns 1 when value diverged; else folds it into *mean.
#define TRAIN_FIRST_FLOOR 100.0
static int train_diverged(double *mean, double value, double factor, double *limit) {
    *limit = factor * (*mean == 0 ? TRAIN_FIRST_FLOOR : *mean > 1 ? *mean : 1);
    if (factor > 0 && value > *limit) return 1;
    *mean = *mean == 0 ? value : 0.9 * *mean + 0.1 * value;
    return 0;
}

// One training (or --mode eval) job of this student: what it opened, and where it is.
typedef struct {
    const world *w;
    const config *cfg;
    backend *be;
    MPI_Comm comm;
    payload_link *links;
    int student, students, teachers; // this student's index, the students, the teachers (groups)
    int live, eval;                  // live: teachers feed it; eval: --mode eval
    int lock_fd;
    int64_t start_step;
    int resume_found, export_only; // export_only: finished, but the export after its last checkpoint is missing
    target_config target_cfg;     // the target's shape
    teacher_contract contract;    // what the teachers send (layers, top-k)
    drafter_config drafter_cfg;
    batchplan batch_plan;
    featreader *features;         // offline features (data.features), else NULL
    run_identity identity;
    student_plan plan;
    drafter d;
    arena work, opt_mem;
    student_work *step_work;
    optim_config optim_cfg;
    optim opt;
    loss_config loss_cfg;
    batch_schedule schedule;
    batch_source src;
    train_log logger;
    students_grads *grads;
    int n_ranks;
    int64_t *peaks;
    int32_t *valid, *anchors, *matches, *matches_at;
    // progress
    double t_run, t_interval, t_ckpt, wait_interval, last_norm; // clocks: the run, this log interval, the last checkpoint
    step_stats interval, first_eval, last_eval;
    int64_t step, evals, total_block, total_ctx;
    int eval_stopped; // --mode eval stopped by a signal: no result
} train_job;

// train_claim_done: a resumed run with nothing to do: the teachers told, the lock let go; 1.
static int train_claim_done(train_job *j) {
    if (j->student == 0) run_dir_remove_leftovers(j->cfg->run_dir, "drafter", run_dir_drafter_files); // killed exports'
    batch_source done = {.live = j->live, .teachers = j->w->groups, .group_size = j->w->group_size, .my_rank = j->w->rank, .link = j->links};
    batch_source_stop_teachers(&done);
    fs_unlock_dir(j->lock_fd);
    return 1;
}

// train_resume_finished: a resumed run.dir without a checkpoint whose run finished all the same
// (checkpoint.every 0: the summary in metrics.jsonl, written after the export, is its record). 0:
// not finished (the resume starts from step 0); 1: finished at train.steps or later, nothing to do
// (said in one line); -1 with error_set: finished before train.steps, which cannot go on without a
// checkpoint.
static int train_resume_finished(train_job *j) {
    const config *cfg = j->cfg;
    int64_t at = train_log_finished_at(cfg->run_dir);
    if (at < 0) return 0;
    if (at >= cfg->steps) {
        if (j->student == 0)
            log_info("run.resume: already finished at step %lld (train.steps %lld; %s/metrics.jsonl, no checkpoint): "
                     "nothing to do", (long long)at, (long long)cfg->steps, cfg->run_dir);
        return 1;
    }
    return error_set("run.resume: the run in %s finished at step %lld without a checkpoint (checkpoint.every 0), so it "
                     "cannot go on to train.steps %lld: start a new run (another run.dir, or --run.overwrite=true), "
                     "with checkpoint.every > 0 to extend it later", cfg->run_dir, (long long)at, (long long)cfg->steps);
}

// train_claim: the run directory locked and claimed, and a resumed run's starting point. 0 to go
// on, 1 when a resumed run has nothing left to do (the teachers told), -1 with error_set.
static int train_claim(train_job *j) {
    const config *cfg = j->cfg;
    const int s = j->student;
    // One job per run directory, for the job's life; the second is refused before it writes anything.
    j->lock_fd = -1;
    // A new run never writes over an earlier one (its metrics, checkpoints, drafter): refused, or
    // with run.overwrite those files go first (only those). The same code the frame and
    // --preflight run dry (mode_train_claim).
    if (s == 0 && run_dir_take(cfg->run_dir, cfg->resume, cfg->overwrite, j->eval, 0, &j->lock_fd)) return -1;
    // A resumed run: the newest checkpoint, complete, of this run (first student), and not past the end.
    j->start_step = 0;
    j->resume_found = 0, j->export_only = 0;
    if (cfg->resume && !j->eval) {
        if (checkpoint_find_resume(cfg->run_dir, &j->start_step, &j->resume_found)) return -1;
        if (j->resume_found && s == 0 && checkpoint_check_resume(cfg->run_dir, j->start_step, cfg)) return -1;
        // finished, and its drafter exported (the summary follows the export): nothing to do
        if (j->resume_found && j->start_step >= cfg->steps && !train_log_finished(cfg->run_dir, j->start_step)) {
            j->export_only = 1; // killed between its final checkpoint and the end of the export: the export
            if (s == 0)
                log_info("run.resume: finished at step %lld, but no drafter was exported after it: exporting it from %s/checkpoints",
                         (long long)j->start_step, cfg->run_dir);
        } else if (j->resume_found && j->start_step >= cfg->steps) { // nothing to do, nothing rewritten
            if (s == 0)
                log_info("run.resume: already finished at step %lld (train.steps %lld; %s/checkpoints): nothing to do",
                         (long long)j->start_step, (long long)cfg->steps, cfg->run_dir);
            return train_claim_done(j);
        } else if (!j->resume_found) { // no checkpoint: finished all the same?
            int finished = train_resume_finished(j);
            if (finished) return finished < 0 ? -1 : train_claim_done(j);
        }
    }
    return 0;
}

// train_inputs: the target's shape and embedding, the data's batch plan and the run's identity
// (checked against a resumed checkpoint's), each set's line. 0, or what student_train returns.
static int train_inputs(train_job *j, st_dir *td, const st_entry **e_emb, const st_entry **e_head) {
    const config *cfg = j->cfg;
    const int s = j->student, eval = j->eval;
    checkpoint_begin_run(cfg->run_dir, j->start_step, j->resume_found);

    // The target: its shape, and only its embedding and lm_head (SPEC §3).
    if (train_target_open(cfg, &j->target_cfg, &j->contract, &j->drafter_cfg, td, e_emb, e_head)) return -1;

    // Data: the batch plan over the usable samples of the training sets (the same on every rank).
    batchplan *bp = &j->batch_plan;
    j->features = NULL;
    if (train_data_plan(cfg, &j->target_cfg, &j->contract, bp, &j->features, &j->identity)) return -1;
    // a resumed run: the inputs its checkpoint recorded against this run's (identity.h)
    if (j->resume_found && s == 0 && checkpoint_check_identity(cfg->run_dir, j->start_step, &j->identity)) return -1;
    checkpoint_set_identity(&j->identity);
    int recorded = 0; // a set's own /heldout: a checkpoint trained on the same set must have held out the same
    for (int i = 0; i < bp->n_sets; i++) recorded |= bp->sets[i].recorded;
    if (eval && recorded && s == 0 && eval_check_heldout(cfg, &j->identity)) return -1;
    if (eval && bp->n_heldout == 0) { // (a recorded /heldout that is empty): a result over nothing would read as 0
        batchplan_free(bp);
        if (j->features) featreader_close(j->features);
        return s == 0 ? error_set("--mode eval: nothing to evaluate: the held-out split of %s is empty (its /heldout "
                                  "holds no sample)", config_data_count(cfg) > 0 ? config_data_path(cfg, 0, NULL) : cfg->data_features)
                      : TRAIN_REPORTED_ELSEWHERE;
    }
    train_unverified = j->features && !featreader_verified(j->features) ? "the features (written before checksums)" : NULL;
    for (int i = 0; i < bp->n_sets && s == 0; i++) {
        const batchplan_set_info *si = &bp->sets[i];
        const char *name = "";
        if (config_data_count(cfg) > 0) name = config_data_path(cfg, i, NULL);
        else featreader_set(j->features, i, NULL, &name);
        const char *split = si->recorded ? "the set's /heldout" : "its last ones, data.heldout_samples";
        if (eval) // no training draws: the epoch line would say 0
            log_info("data: set %d %s: %lld usable samples, %lld held out (%s)", i, name, (long long)si->n,
                     (long long)si->n_heldout, split);
        else
            log_info("data: set %d %s: %lld usable samples (%lld training, %lld held out: %s), weight %g: %lld per epoch",
                     i, name, (long long)si->n, (long long)si->n_train, (long long)si->n_heldout, split, si->weight,
                     (long long)si->per_epoch);
    }

    return 0;
}

// train_memory: the memory plan, then every allocation up front: the drafter (an evaluation's
// loaded, a resumed run's from its checkpoint), the step's work, the optimizer; the loss settings.
// 0, or what student_train returns.
static int train_memory(train_job *j, st_dir *td, const st_entry *e_emb, const st_entry *e_head, int n_buf,
                        size_t feat_bytes) {
    const config *cfg = j->cfg;
    backend *be = j->be;
    const int s = j->student, eval = j->eval;
    plan_request pr = {.budget = (size_t)cfg->train_mem_budget, .max_tokens = (int)cfg->max_tokens_per_batch,
                       .max_seqs = (int)cfg->max_tokens_per_batch, .max_anchors = (int)cfg->max_anchors, .k = j->contract.topk,
                       .adam = !eval, .ema = !eval && cfg->ema_decay > 0, .tied = j->target_cfg.tie_embeddings, .force_mode = -1};
    if (!eval && strcmp(cfg->optimizer, "muon") == 0) pr.optim_scratch = optim_muon_plan_bytes(&j->drafter_cfg);
    if (j->live && payload_link_device(j->links)) pr.link_bytes = (size_t)n_buf * feat_bytes;
    // pinned host memory (--plan's rule, job_plan_pinned_rank): the payload buffers for the link
    // chosen and, over MPI on a GPU, the gradient ring (transport.grad_allreduce auto planned as NCCL)
    if (j->live)
        pr.host_payload = batch_source_pinned_bytes(be, cfg, j->w, j->contract.topk, (int64_t)j->contract.n_feat * j->target_cfg.hidden,
                                                    payload_link_device(j->links));
    if (be->caps.device_links && j->students > 1 && !eval && strcmp(cfg->grad_allreduce, "mpi") == 0)
        pr.host_grads = students_grads_pinned_bytes(be, drafter_param_numel(&j->drafter_cfg));
    plan_breakdown bd;
    // a budget is all the process may use on its card: the plan gets it less the reserve (gpu_reserve.h)
    gpu_reserve gr;
    int grad_nccl = be->caps.device_links && j->students > 1 && !eval && strcmp(cfg->grad_allreduce, "mpi") != 0;
    gpu_reserve_make(&gr, be->caps.device, gpu_reserve_student_comms(payload_link_device(j->links), j->w->groups, grad_nccl), 0);
    pr.budget = gpu_reserve_usable(pr.budget, &gr);
    if (plan_make(&j->drafter_cfg, be, &pr, &j->plan, &bd)) { // (--plan prints it without a job: job_plan.c)
        char a[32], b[32];
        if (gr.total && cfg->train_mem_budget > 0)
            return error_prefix("train.mem_budget %s less its GPU reserve %s (gpu_reserve.h)",
                                bytes_format((size_t)cfg->train_mem_budget, a, sizeof a), bytes_format(gr.total, b, sizeof b));
        return -1;
    }
    if (s == 0) plan_print(stderr, &bd, &j->plan, pr.budget);
    char who[64];
    snprintf(who, sizeof who, "student rank %d", j->w->rank);
    // on a GPU: what is free after the context, cuBLAS and the payload links must hold the plan and
    // the gradient's communicator, opened below
    // (the cuBLAS workspace, which the plan counts, is allocated already)
    if (gpu_reserve_check(be, bd.total - bd.library, grad_nccl, who, "train.mem_budget")) return -1;
    drafter *d = &j->d;
    tensor head = e_head ? st_entry_tensor(e_head) : (tensor){0};
    if (drafter_init(d, &j->drafter_cfg, be, (uint64_t)cfg->seed, st_entry_tensor(e_emb), e_head ? &head : NULL)) return -1;
    d->embed_scale = (float)j->target_cfg.embed_scale; // the target's scaled embedding (Gemma)
    safetensors_dir_close(td);
    if (eval && eval_load_drafter(d, cfg)) return -1;
    j->opt_mem = (arena){0};
    if (arena_init(&j->work, "student work", be, student_work_bytes(d, &j->plan)))
        return error_append("lower data.max_tokens_per_batch or train.max_anchors, or set train.mem_budget (the plan "
                            "then fits its chunks to it)");
    j->step_work = student_work_create(d, &j->plan, &j->work);
    optim_config *oc = &j->optim_cfg;
    optim_config_default(oc);
    oc->lr = cfg->lr, oc->warmup_frac = cfg->warmup_frac, oc->weight_decay = cfg->weight_decay, oc->clip = cfg->grad_clip;
    oc->total_steps = cfg->steps, oc->ema_decay = cfg->ema_decay;
    oc->muon = strcmp(cfg->optimizer, "muon") == 0, oc->muon_momentum = cfg->muon_momentum;
    j->opt = (optim){0};
    if (!eval) {
        size_t scratch = oc->muon ? optim_muon_bytes(d->params, d->n_params) : 0;
        if (arena_init(&j->opt_mem, "optimizer", be, optim_bytes(d->numel, cfg->ema_decay > 0) + scratch))
            return error_append("the optimizer's state is a few copies of the drafter's weights (drafter.layers, "
                                "drafter.intermediate; train.ema adds one)");
        optim_init(&j->opt, oc, be, d->numel, &j->opt_mem, d->master);
        if (oc->muon) optim_muon_init(&j->opt, d->params, d->n_params, &j->opt_mem);
    }
    if (cfg->resume && j->resume_found) { // every student loads the same checkpoint
        int verified = 0;
        if (checkpoint_read(cfg->run_dir, j->start_step, d, &j->opt, &verified)) return -1;
        if (!verified && !train_unverified) train_unverified = "the resumed checkpoint (written before checksums)";
        if (s == 0) log_info("resuming from %s/checkpoints/step-%08lld", cfg->run_dir, (long long)j->start_step);
    } else if (cfg->resume && s == 0) {
        log_info("run.resume: no checkpoint in %s/checkpoints, starting from step 0", cfg->run_dir);
    }
    loss_config_make(&j->loss_cfg, cfg, (int)j->drafter_cfg.block_size);
    return 0;
}

// train_source: the schedule and source of batches, the metrics (first student), the per-batch
// buffers and the students' gradient sums. 0, or what student_train returns.
static int train_source(train_job *j, int n_buf, size_t feat_bytes) {
    const config *cfg = j->cfg;
    const int s = j->student, S = j->students, eval = j->eval;
    const world *w = j->w;
    batch_schedule_make(&j->schedule, cfg, s, S, j->batch_plan.n_heldout_batches); // --mode eval: no step, one evaluation over
    if (eval) batch_schedule_eval_only(&j->schedule);                      // all the (held-out) batches
    int64_t D = (int64_t)j->contract.n_feat * j->target_cfg.hidden;
    size_t max_bytes = wire_bytes(cfg->max_tokens_per_batch, cfg->max_tokens_per_batch, j->contract.topk, D);
    if (j->live) { // the host's part of a payload, sized for the link chosen (the plan's: batch_source_pinned_bytes)
        max_bytes = batch_source_payload_bytes(cfg, j->contract.topk, D, payload_link_device(j->links));
        batch_source_init_live(&j->src, w, protocol_credits(cfg, w->group_size), max_bytes, n_buf, j->links, feat_bytes,
                               j->be);
        batch_source_upload_into(&j->src, student_work_features(j->step_work), feat_bytes); // over MPI on a GPU: uploaded as they come
    } else batch_source_init_offline(&j->src, j->features, &j->batch_plan, max_bytes);

    // Run directory and metrics (first student).
    j->logger = (train_log){0};
    if (s == 0 && !eval && !j->export_only && train_log_open(&j->logger, cfg, j->start_step > 0)) return -1;
    j->n_ranks = w->size;
    j->peaks = xcalloc((size_t)j->n_ranks, sizeof(int64_t));
    j->valid = xmalloc((size_t)cfg->max_tokens_per_batch * sizeof(int32_t));
    j->anchors = xmalloc((size_t)cfg->max_anchors * sizeof(int32_t));
    j->matches = xmalloc((size_t)cfg->max_tokens_per_batch * sizeof(int32_t));    // per held-out anchor
    j->matches_at = xmalloc((size_t)cfg->max_tokens_per_batch * sizeof(int32_t)); // ... by position
    // How the students sum their gradients (transport.grad_allreduce); one student sums nothing.
    j->grads = NULL;
    if (S > 1 && !eval && students_grads_open(&j->grads, &j->d, j->comm, cfg->grad_allreduce, s == 0))
        return s == 0 ? -1 : TRAIN_REPORTED_ELSEWHERE; // the same error on every student: the first says it
    return 0;
}

// train_group_batches: the group's batches: a held-out group's every anchor forward only and the
// decode walk over them, a training group's drawn anchors with their gradients; into *cur.
// *cut_short: --mode eval stopped by a signal before the group's end. 0, or the error's rc.
static int train_group_batches(train_job *j, const batch_group *g, step_stats *cur, int *cut_short) {
    const config *cfg = j->cfg;
    const int64_t kind = g->kind;
    int rc = 0;
    for (int64_t n = g->first; n < g->first + g->count && rc == 0; n++) {
        if (j->eval && stop_relay_poll()) { // --mode eval: a signal (on any rank) ends it after this batch (below)
            *cut_short = 1;
            break;
        }
        wire_batch wb;
        if ((rc = batch_source_get(&j->src, &j->schedule, n, &wb))) break;
        student_batch b = {.S = (int)wb.S, .n_seq = (int)wb.n_seq, .k = (int)wb.k, .tokens = wb.tokens,
                           .loss_mask = wb.mask, .cu_seqlens = wb.cu, .topk_idx = wb.topk_idx, .topk_val = wb.topk_val,
                           .lse = wb.lse};
        int64_t shape[2] = {wb.S, wb.D};
        b.features = j->src.features_dev ? tensor_make(DT_BF16, j->src.features_dev, DEVICE_CUDA, 2, shape)
                                         : tensor_make(DT_BF16, wb.features, DEVICE_CPU, 2, shape);
        int nv = anchors_valid(wb.mask, wb.cu, (int)wb.n_seq, j->valid);
        if (kind == WIRE_HELDOUT) { // every anchor, forward only, then the decode walk over them
            if (nv > 0 && (rc = student_eval(&j->d, &j->loss_cfg, &j->plan, j->step_work, &b, j->valid, nv, cur, j->matches)) == 0) {
                for (int i = 0; i < nv; i++) j->matches_at[j->valid[i]] = j->matches[i];
                metrics_decode_walk(wb.mask, wb.cu, (int)wb.n_seq, j->matches_at, &cur->decode_tokens, &cur->decode_steps);
            }
        } else {
            uint64_t batch_id = ((uint64_t)kind << 40) | (uint64_t)wb.index;
            int na = anchors_sample(j->valid, nv, (int)cfg->max_anchors, (uint64_t)cfg->seed, batch_id, j->anchors);
            // the last micro-batch starts the gradient sums while its backward runs
            students_grads_arm(j->grads, j->step_work, n == g->first + g->count - 1);
            if (na > 0) rc = student_step(&j->d, &j->loss_cfg, &j->plan, j->step_work, &b, j->anchors, na, cur);
        }
        batch_source_release(&j->src, n);
    }
    return rc;
}

// train_update: an optimizer step over the group's summed gradients (all-reduced over the
// students), checked for a non-finite or exploding norm. 0, or the error's rc.
static int train_update(train_job *j, const step_stats *cur) {
    const config *cfg = j->cfg;
    int rc;
    if (j->grads && (rc = students_grads_finish(j->grads))) return rc;
    double limit = 0;
    j->last_norm = optim_step(&j->opt, j->d.master, j->d.grad, cur->sum_w);
    if (!isfinite(j->last_norm)) // optim_step left the weights as they were
        return train_nonfinite(j->student, cfg, j->step, "the gradient norm", j->last_norm, "");
    if (train_diverged(&j->opt.norm_mean, j->last_norm, cfg->divergence_factor, &limit)) {
        char why[160];
        snprintf(why, sizeof why, ", past %g (train.divergence_factor %g x its running mean)", limit, cfg->divergence_factor);
        return train_nonfinite(j->student, cfg, j->step, "the gradient norm", j->last_norm, why);
    }
    drafter_sync_compute(&j->d);
    train_stats_add(&j->interval, cur);
    j->total_block += cur->block_tokens;
    j->total_ctx += cur->ctx_tokens;
    j->step++;
    return 0;
}

// train_log_interval: at the end of a log interval (or of the run), the interval's metrics line
// with every rank's peak memory. 0, or -1 when metrics.jsonl could not be written.
static int train_log_interval(train_job *j, double lr) {
    const config *cfg = j->cfg;
    if (!(j->step % cfg->log_interval == 0 || j->step == cfg->steps)) return 0;
    const int S = j->students, T = j->teachers;
    double now = time_now(), el = now - j->t_interval;
    double wait = j->src.wait_s - j->wait_interval;
    double wait_all = wait;
    students_allreduce(&wait_all, 1, MPI_DOUBLE, MPI_MAX, j->comm, "the students' log line");
    int64_t mine = (int64_t)(j->d.mem.used + j->work.used + j->opt_mem.used);
    int64_t *student_peaks = xcalloc((size_t)S, sizeof(int64_t));
    students_allgather_i64(mine, student_peaks, j->comm, "the students' log line");
    // a teacher group's payload reports its largest stage's peak: every rank of the group shows it
    for (int r = 0; r < T && r / j->w->group_size < 1024; r++) j->peaks[r] = j->src.last_peak[r / j->w->group_size];
    for (int i = 0; i < S; i++) j->peaks[T + i] = student_peaks[i];
    free(student_peaks);
    if (j->student == 0)
        train_log_line(&j->logger, NULL, j->step, &j->interval, &j->loss_cfg, (int)j->drafter_cfg.block_size, lr, j->last_norm, el,
                       el > 0 ? wait_all / el : 0, j->peaks, j->n_ranks);
    memset(&j->interval, 0, sizeof j->interval);
    j->t_interval = now;
    j->wait_interval = j->src.wait_s;
    if (train_log_failed(&j->logger)) // the job would go on without its metrics: stop with the reason
        return error_set("%s/metrics.jsonl: a write failed (is the disk full?)", cfg->run_dir);
    return 0;
}

// train_checkpoint: after a step, a checkpoint when one is due, and whether the job stops here (a
// signal, test.stop_at_step): *stop. 0, or -1 when the checkpoint failed.
static int train_checkpoint(train_job *j, int *stop_here) {
    const config *cfg = j->cfg;
    const int s = j->student;
    // A signal on any rank (a teacher's reaches the students through the stop relay:
    // stop_relay.h) stops every student after this step, with a checkpoint (stop.h); a checkpoint
    // by wall time is due when the first student's clock says so: the students agree on both (the
    // signal's number: the largest), so they write and stop in step.
    int flags[2] = {stop_relay_poll(),
                    s == 0 && cfg->ckpt_every_minutes > 0 && time_now() - j->t_ckpt >= cfg->ckpt_every_minutes * 60.0};
    students_allreduce(flags, 2, MPI_INT, MPI_MAX, j->comm, "the other students after the step");
    int stop = flags[0] && j->step < cfg->steps;
    int ckpt_on = cfg->ckpt_every > 0 || cfg->ckpt_every_minutes > 0;
    int due = stop || flags[1] || (cfg->ckpt_every > 0 && j->step % cfg->ckpt_every == 0) || (ckpt_on && j->step == cfg->steps);
    if (due && s == 0 && checkpoint_write(cfg->run_dir, j->step, &j->d, &j->opt, cfg, (int)cfg->ckpt_keep))
        return -1; // the previous checkpoints are intact; the job stops with the reason
    if (due) j->t_ckpt = time_now();
    if (stop) {
        if (s == 0)
            log_info("stopped by %s after step %lld with a checkpoint in %s/checkpoints; resume with the same "
                     "command and --run.resume=true", stop_signal_name(flags[0]),
                     (long long)j->step, cfg->run_dir);
        *stop_here = 1;
        return 0;
    }
    if (cfg->test_stop_at_step > 0 && j->step == cfg->test_stop_at_step) {
        if (s == 0) log_info("stopping after step %lld (test.stop_at_step); resume with --run.resume=true", (long long)j->step);
        *stop_here = 1;
    }
    return 0;
}

// train_group: schedule group gi: its batches, the students' agreement, its statistics checked;
// an evaluation's kept (and logged), a training group's update, metrics and checkpoint. 0 with
// *done set when the job ends here without an error, or the error's rc.
static int train_group(train_job *j, int64_t gi, int *done) {
    const config *cfg = j->cfg;
    const int s = j->student;
    const batch_group group = batch_schedule_group(&j->schedule, gi), *g = &group;
    const int64_t kind = g->kind;
    step_stats cur;
    memset(&cur, 0, sizeof cur);
    int cut_short = 0;
    int rc = train_group_batches(j, g, &cur, &cut_short);
    // A failure on one student must not leave the others waiting in a collective: agree first.
    int bad = rc ? 1 : 0;
    students_allreduce(&bad, 1, MPI_INT, MPI_MAX, j->comm, "the other students to finish the step");
    if (bad) return rc ? rc : TRAIN_REPORTED_ELSEWHERE; // the student that failed says why
    if (j->eval) { // a signal on any rank: no result (eval.json is a whole evaluation's)
        // (the signal's number; cut short by a signal implies one: stop_relay_poll's answer stays)
        int stop = cut_short || gi + 1 < j->schedule.n_groups ? stop_relay_poll() : 0;
        students_allreduce(&stop, 1, MPI_INT, MPI_MAX, j->comm, "the other students to finish the evaluation");
        if (stop) {
            if (s == 0)
                log_info("eval: stopped by %s before the evaluation was complete: nothing written (eval.json "
                         "holds only a whole evaluation); run the same command again", stop_signal_name(stop));
            j->eval_stopped = 1;
            *done = 1;
            return 0;
        }
    }
    train_stats_allreduce(&cur, j->comm);
    // NaN or inf: stop before it reaches the weights, a checkpoint or the export (every student
    // sees the same sums; the first says it).
    double loss = train_stats_loss(&cur, &j->loss_cfg);
    double limit = 0;
    if (!isfinite(loss))
        return train_nonfinite(s, cfg, j->step, kind == WIRE_HELDOUT ? "the held-out loss" : "the loss", loss, "");
    if (kind != WIRE_HELDOUT && train_diverged(&j->opt.loss_mean, loss, cfg->divergence_factor, &limit)) {
        char why[160];
        snprintf(why, sizeof why, ", past %g (train.divergence_factor %g x its running mean)", limit, cfg->divergence_factor);
        return train_nonfinite(s, cfg, j->step, "the loss", loss, why);
    }
    if (kind == WIRE_HELDOUT) { // evaluation (forward only: the gradients are untouched)
        if (j->evals == 0) j->first_eval = cur;
        j->last_eval = cur;
        j->evals++;
        if (s == 0 && !j->eval) train_log_line(&j->logger, "heldout", j->step, &cur, &j->loss_cfg, (int)j->drafter_cfg.block_size, 0, 0, 0, 0, NULL, 0);
        return 0;
    }
    // An optimizer step: all-reduce the un-normalised gradients, then one update.
    double lr = optim_lr(&j->optim_cfg, j->opt.step);
    if ((rc = train_update(j, &cur))) return rc;
    if ((rc = train_log_interval(j, lr))) return rc;
    return train_checkpoint(j, done);
}

// train_finish: the teachers told, then the job's result: --mode eval's eval.json, or the drafter
// exported and the summary; everything freed. Returns rc, or the first error of the finish.
static int train_finish(train_job *j, int rc) {
    const config *cfg = j->cfg;
    const int s = j->student, S = j->students, T = j->teachers;
    // Tell every teacher this student is done (also after an error, so they can stop), once the
    // batches still in flight have landed.
    if (batch_source_drain(&j->src) && rc == 0) rc = -1;
    batch_source_stop_teachers(&j->src);
    for (int r = T; r < T + S; r++) watchdog_watch(r, 0); // no collective among the students follows
    if (rc == 0 && j->live) {
        char served[256];
        int m = 0;
        for (int t = 0; t < j->src.teachers && m < (int)sizeof served - 16; t++) m += snprintf(served + m, sizeof served - (size_t)m, "%s%lld", t ? ", " : "", (long long)j->src.served[t]);
        log_info("student %d: batches received per teacher: [%s]", s, served);
    }
    double wall = time_now() - j->t_run;
    // the samples evaluated: every one, or a set's /heldout
    if (rc == 0 && s == 0 && j->eval && !j->eval_stopped)
        rc = eval_write_result(cfg, &j->last_eval, &j->loss_cfg, (int)j->drafter_cfg.block_size, (int64_t)j->batch_plan.n_heldout);
    else if (rc == 0 && s == 0 && !j->eval) {
        char dir[CONFIG_STR + 16];
        snprintf(dir, sizeof dir, "%s/drafter", cfg->run_dir);
        if (drafter_export(&j->d, dir, 0)) rc = -1;
        else run_dir_remove_leftovers(cfg->run_dir, "drafter", run_dir_drafter_files); // killed exports' drafter.tmp.PID
        double per_s = wall > 0 ? (double)S / wall : 0;
        if (rc == 0 && j->export_only) {
            rc = train_log_exported(cfg->run_dir, j->step);
            if (rc == 0) log_info("run.resume: the drafter of step %lld exported to %s", (long long)j->step, dir);
        } else if (rc == 0) // the summary names the exported drafter: only after a successful export
            train_log_summary(&j->logger, j->step >= cfg->steps, j->step, wall, (double)j->total_block * per_s,
                              (double)j->total_ctx * per_s, j->peaks, j->n_ranks, T, &j->first_eval, &j->last_eval, dir);
    }
    train_log_close(&j->logger);
    batch_schedule_free(&j->schedule);
    free(j->peaks);
    free(j->valid);
    free(j->anchors);
    free(j->matches);
    free(j->matches_at);
    students_grads_close(j->grads, rc != 0);
    batch_source_free(&j->src);
    if (j->features) featreader_close(j->features);
    student_work_destroy(j->step_work);
    arena_free(&j->work);
    optim_free(&j->opt);
    arena_free(&j->opt_mem);
    drafter_free(&j->d);
    batchplan_free(&j->batch_plan);
    fs_unlock_dir(j->lock_fd);
    return rc;
}

// student_train_job: student_train over the job j (zeroed): set up, the groups of the schedule in
// order, the finish.
static int student_train_job(train_job *j, const world *w, const config *cfg, backend *be, MPI_Comm comm,
                             payload_link *links) {
    j->w = w, j->cfg = cfg, j->be = be, j->comm = comm, j->links = links;
    j->student = w->role_index, j->students = w->students, j->teachers = w->teachers, j->live = cfg->data_features[0] == '\0';
    j->eval = cfg->eval_only; // --mode eval: one evaluation of eval.drafter, no training
    if (train_check_roles(w, cfg)) return -1;
    for (int r = 0; r < w->size; r++) watchdog_watch(r, 1); // the teachers and the other students
    students_set_ranks(j->teachers, j->teachers + j->students - 1);
    int rc = train_claim(j);
    if (rc) return rc < 0 ? -1 : 0; // 1: a resumed run with nothing left to do
    st_dir td;
    const st_entry *e_emb, *e_head;
    if ((rc = train_inputs(j, &td, &e_emb, &e_head))) return rc;
    // Memory: the plan, then every allocation up front. The NCCL receive ring: one GPU buffer of
    // features per host buffer of the source.
    int n_buf = batch_source_buffers(cfg, w);
    size_t feat_bytes = (size_t)cfg->max_tokens_per_batch * (size_t)(j->contract.n_feat * j->target_cfg.hidden) * 2;
    if ((rc = train_memory(j, &td, e_emb, e_head, n_buf, feat_bytes))) return rc;
    if ((rc = train_source(j, n_buf, feat_bytes))) return rc;

    j->t_run = j->t_interval = j->t_ckpt = time_now();
    j->step = j->start_step;
    // A resumed run skips the groups before its checkpoint (and asks no teacher for their batches).
    // (the evaluation after the checkpoint's step, when one is due, runs after the resume)
    int64_t first_group = j->start_step > 0 ? batch_schedule_group_of_step(&j->schedule, j->start_step - 1) + 1 : 0;
    if (j->export_only) first_group = j->schedule.n_groups; // no step, no evaluation: the checkpoint's weights are exported
    if (first_group < j->schedule.n_groups) batch_source_start_at(&j->src, batch_schedule_group(&j->schedule, first_group).first);
    for (int64_t gi = first_group; gi < j->schedule.n_groups; gi++) {
        int done = 0;
        if ((rc = train_group(j, gi, &done)) || done) break;
    }
    return train_finish(j, rc);
}

int student_train(const world *w, const config *cfg, backend *be, MPI_Comm comm, payload_link *links) {
    train_job *j = xcalloc(1, sizeof *j);
    int rc = student_train_job(j, w, cfg, be, comm, links);
    free(j);
    return rc;
}

// Every block position of a batch is counted in int (rows of the loss, the planner's chunks).
static int train_config_check(const config *c) {
    if (c->max_anchors * c->block_size > (1ll << 24))
        return error_set("train.max_anchors %lld x drafter.block_size %lld = %lld block positions per batch: at most 2^24 "
                         "(16777216)", (long long)c->max_anchors, (long long)c->block_size,
                         (long long)(c->max_anchors * c->block_size));
    return 0;
}

// Settings: the keys of the training loop (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key train_keys[] = {
    {"train.steps", CFG_INT, CONFIG_F(steps), "100", "optimizer steps", NULL, 1, CONFIG_STEPS_MAX},
    {"train.batches_per_step", CFG_INT, CONFIG_F(batches_per_step), "1", "packed batches per optimizer step over all students (a multiple of world.students); the loss is normalised over all of them", NULL, 1, 1e6},
    {"train.max_anchors", CFG_INT, CONFIG_F(max_anchors), "64", "anchors drawn per batch (fewer when the batch has fewer valid positions)", NULL, 1, 1e7},
    {"train.divergence_factor", CFG_FLOAT, CONFIG_F(divergence_factor), "100", "a training step whose loss or gradient norm exceeds this many times max(1, its running mean over the earlier steps; 100 for the first step of a fresh run) stops the run like a NaN does (before the update); 0 = off", NULL, 0, 1e30},
    {"train.mem_budget", CFG_BYTES, CONFIG_F(train_mem_budget), "0", "student memory budget (device bytes); 0 = no limit", NULL, CONFIG_SIZES},
    {"train.log_interval", CFG_INT, CONFIG_F(log_interval), "10", "steps between metrics lines", NULL, 1, 1e9},
    {"train.eval_interval", CFG_INT, CONFIG_F(eval_interval), "50", "steps between held-out evaluations (also at the start and the end)", NULL, 1, 1e9},
    {"train.eval_batches", CFG_INT, CONFIG_F(eval_batches), "0", "held-out batches per evaluation: 0 = the whole held-out split (every anchor of every batch, forward only); N = the first N", NULL, 0, 1e9},
    {"test.stop_at_step", CFG_INT, CONFIG_F(test_stop_at_step), "0", "testing: stop after this step's checkpoint, as a preempted job would; 0 = never", NULL, 0, CONFIG_STEPS_MAX},
};
const config_key_set train_settings = CONFIG_KEY_SET(train_keys, train_config_check);
