// train.c: the student's training loop (see train.h).
#include "student/train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backend/arena.h"
#include "common/backend/gpu_reserve.h"
#include "common/core/bytes.h"
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
#include "student/model/plan.h"
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

int student_train(const world *w, const config *cfg, backend *be, MPI_Comm comm, nccl_links *links) {
    int s = w->role_index, S = w->students, T = w->teachers, live = cfg->data_features[0] == '\0';
    int eval = strcmp(cfg->mode, "eval") == 0; // --mode eval: one evaluation of eval.drafter, no training
    if (train_check_roles(w, cfg)) return -1;
    for (int r = 0; r < w->size; r++) watchdog_watch(r, 1); // the teachers and the other students
    students_set_ranks(T, T + S - 1);
    // One job per run directory, for the job's life; the second is refused before it writes anything.
    int lock_fd = -1;
    if (s == 0 && (fs_mkdirs(cfg->run_dir) || fs_lock_dir(cfg->run_dir, &lock_fd))) return -1;
    // A new run never writes over an earlier one (its metrics, checkpoints, drafter): refused, or
    // with run.overwrite those files go first (only those).
    if (s == 0 && !cfg->resume && run_dir_claim(cfg->run_dir, cfg->overwrite, eval)) return -1;
    // A resumed run: the newest checkpoint, complete, of this run (first student), and not past the end.
    int64_t start_step = 0;
    int resume_found = 0, export_only = 0; // export_only: finished, but the export after its last checkpoint is missing
    if (cfg->resume && !eval) {
        if (checkpoint_find_resume(cfg->run_dir, &start_step, &resume_found)) return -1;
        if (resume_found && s == 0 && checkpoint_check_resume(cfg->run_dir, start_step, cfg)) return -1;
        // finished, and its drafter exported (the summary follows the export): nothing to do
        if (resume_found && start_step >= cfg->steps && !train_log_finished(cfg->run_dir, start_step)) {
            export_only = 1; // killed between its final checkpoint and the end of the export: the export
            if (s == 0)
                log_info("run.resume: finished at step %lld, but no drafter was exported after it: exporting it from %s/checkpoints",
                         (long long)start_step, cfg->run_dir);
        } else if (resume_found && start_step >= cfg->steps) { // nothing to do, nothing rewritten
            if (s == 0)
                log_info("run.resume: already finished at step %lld (train.steps %lld; %s/checkpoints): nothing to do",
                         (long long)start_step, (long long)cfg->steps, cfg->run_dir);
            batch_source done = {.live = live, .T = w->groups, .G = w->group_size, .my_rank = w->rank};
            batch_source_stop_teachers(&done);
            fs_unlock_dir(lock_fd);
            return 0;
        }
    }

    checkpoint_begin_run(cfg->run_dir, start_step, resume_found);

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
    run_identity rid;
    if (train_data_plan(cfg, &tc, &ct, &bp, &fr, &rid)) return -1;
    // a resumed run: the inputs its checkpoint recorded against this run's (identity.h)
    if (resume_found && s == 0 && checkpoint_check_identity(cfg->run_dir, start_step, &rid)) return -1;
    checkpoint_set_identity(&rid);
    int recorded = 0; // a set's own /heldout: a checkpoint trained on the same set must have held out the same
    for (int i = 0; i < bp.n_sets; i++) recorded |= bp.sets[i].recorded;
    if (eval && recorded && s == 0 && eval_check_heldout(cfg, &rid)) return -1;
    if (eval && bp.n_heldout == 0) { // (a recorded /heldout that is empty): a result over nothing would read as 0
        batchplan_free(&bp);
        if (fr) featreader_close(fr);
        return s == 0 ? error_set("--mode eval: nothing to evaluate: the held-out split of %s is empty (its /heldout "
                                  "holds no sample)", config_data_count(cfg) > 0 ? config_data_path(cfg, 0, NULL) : cfg->data_features)
                      : TRAIN_REPORTED_ELSEWHERE;
    }
    train_unverified = fr && !featreader_verified(fr) ? "the features (written before checksums)" : NULL;
    int rc = 0;
    for (int i = 0; i < bp.n_sets && s == 0; i++) {
        const batchplan_set_info *si = &bp.sets[i];
        const char *name = "";
        if (config_data_count(cfg) > 0) name = config_data_path(cfg, i, NULL);
        else featreader_set(fr, i, NULL, &name);
        const char *split = si->recorded ? "the set's /heldout" : "its last ones, data.heldout_samples";
        if (eval) // no training draws: the epoch line would say 0
            log_info("data: set %d %s: %lld usable samples, %lld held out (%s)", i, name, (long long)si->n,
                     (long long)si->n_heldout, split);
        else
            log_info("data: set %d %s: %lld usable samples (%lld training, %lld held out: %s), weight %g: %lld per epoch",
                     i, name, (long long)si->n, (long long)si->n_train, (long long)si->n_heldout, split, si->weight,
                     (long long)si->per_epoch);
    }

    // Memory: the plan, then every allocation up front.
    plan_request pr = {.budget = (size_t)cfg->train_mem_budget, .max_tokens = (int)cfg->max_tokens_per_batch,
                       .max_seqs = (int)cfg->max_tokens_per_batch, .max_anchors = (int)cfg->max_anchors, .k = ct.topk,
                       .adam = !eval, .ema = !eval && cfg->ema_decay > 0, .tied = tc.tie_embeddings, .force_mode = -1};
    // the NCCL receive ring: one GPU buffer of features per host buffer of the source (below)
    int n_buf = batch_source_buffers(cfg, w);
    size_t feat_bytes = (size_t)cfg->max_tokens_per_batch * (size_t)(ct.n_feat * tc.hidden) * 2;
    if (live && links) pr.link_bytes = (size_t)n_buf * feat_bytes;
    student_plan plan;
    plan_breakdown bd;
    // a budget is all the process may use on its card: the plan gets it less the reserve (gpu_reserve.h)
    gpu_reserve gr;
    int grad_nccl = be->kind == BACKEND_CUDA && S > 1 && !eval && strcmp(cfg->grad_allreduce, "mpi") != 0;
    gpu_reserve_make(&gr, be->kind == BACKEND_CUDA, gpu_reserve_student_comms(links != NULL, w->groups, grad_nccl), 0);
    pr.budget = gpu_reserve_usable(pr.budget, &gr);
    if (plan_make(&dc, be, &pr, &plan, &bd)) { // (--plan prints it without a job: plan_world.c)
        char a[32], b[32];
        if (gr.total && cfg->train_mem_budget > 0)
            return error_prefix("train.mem_budget %s less its GPU reserve %s (gpu_reserve.h)",
                                bytes_format((size_t)cfg->train_mem_budget, a, sizeof a), bytes_format(gr.total, b, sizeof b));
        return -1;
    }
    if (s == 0) plan_print(stderr, &bd, &plan, pr.budget);
    char who[64];
    snprintf(who, sizeof who, "student rank %d", w->rank);
    // on a GPU: what is free after the context, cuBLAS and the payload links must hold the plan and
    // the gradient's communicator, opened below
    // (the cuBLAS workspace, which the plan counts, is allocated already)
    if (gpu_reserve_check(be, bd.total - bd.library, grad_nccl, who, "train.mem_budget")) return -1;
    drafter d;
    tensor head = e_head ? st_entry_tensor(e_head) : (tensor){0};
    if (drafter_init(&d, &dc, be, (uint64_t)cfg->seed, st_entry_tensor(e_emb), e_head ? &head : NULL)) return -1;
    safetensors_dir_close(&td);
    if (eval && eval_load_drafter(&d, cfg)) return -1;
    arena work, opt_mem = {0};
    if (arena_init(&work, "student work", be, student_work_bytes(&d, &plan))) return -1;
    student_work *sw = student_work_create(&d, &plan, &work);
    optim_config oc;
    optim_config_default(&oc);
    oc.lr = cfg->lr, oc.warmup_frac = cfg->warmup_frac, oc.weight_decay = cfg->weight_decay, oc.clip = cfg->grad_clip;
    oc.total_steps = cfg->steps, oc.ema_decay = cfg->ema_decay;
    optim opt = {0};
    if (!eval) {
        if (arena_init(&opt_mem, "optimizer", be, optim_bytes(d.numel, cfg->ema_decay > 0))) return -1;
        optim_init(&opt, &oc, be, d.numel, &opt_mem, d.master);
    }
    if (cfg->resume && resume_found) { // every student loads the same checkpoint
        int verified = 0;
        if (checkpoint_read(cfg->run_dir, start_step, &d, &opt, &verified)) return -1;
        if (!verified && !train_unverified) train_unverified = "the resumed checkpoint (written before checksums)";
        if (s == 0) log_info("resuming from %s/checkpoints/step-%08lld", cfg->run_dir, (long long)start_step);
    } else if (cfg->resume && s == 0) {
        log_info("run.resume: no checkpoint in %s/checkpoints, starting from step 0", cfg->run_dir);
    }
    loss_config lc;
    loss_config_make(&lc, cfg, (int)dc.block_size);

    // The source of batches.
    batch_schedule sc; // --mode eval: no step, one evaluation over all the (held-out) batches
    batch_schedule_make(&sc, cfg, s, S, bp.n_heldout_batches);
    if (eval) batch_schedule_eval_only(&sc);
    batch_source src;
    int64_t D = (int64_t)ct.n_feat * tc.hidden;
    size_t max_bytes = wire_bytes(cfg->max_tokens_per_batch, cfg->max_tokens_per_batch, ct.topk, D);
    if (live) batch_source_init_live(&src, w, teacher_credits(cfg, w->group_size), max_bytes, n_buf, links, feat_bytes, be);
    else batch_source_init_offline(&src, fr, &bp, max_bytes);

    // Run directory and metrics (first student).
    train_log lg = {0};
    if (s == 0 && !eval && !export_only && train_log_open(&lg, cfg, start_step > 0)) return -1;
    int n_ranks = w->size;
    int64_t *peaks = xcalloc((size_t)n_ranks, sizeof(int64_t));
    int32_t *valid = xmalloc((size_t)cfg->max_tokens_per_batch * sizeof(int32_t));
    int32_t *anchors = xmalloc((size_t)cfg->max_anchors * sizeof(int32_t));
    int32_t *matches = xmalloc((size_t)cfg->max_tokens_per_batch * sizeof(int32_t));    // per held-out anchor
    int32_t *matches_at = xmalloc((size_t)cfg->max_tokens_per_batch * sizeof(int32_t)); // ... by position
    // How the students sum their gradients (transport.grad_allreduce); one student sums nothing.
    students_grads *grads = NULL;
    if (S > 1 && !eval && students_grads_open(&grads, &d, comm, cfg->grad_allreduce, s == 0))
        return s == 0 ? -1 : TRAIN_REPORTED_ELSEWHERE; // the same error on every student: the first says it

    double t_run = time_now(), t_int = t_run, t_ckpt = t_run, wait_int = 0, last_norm = 0;
    step_stats interval, cur, first_eval, last_eval;
    memset(&interval, 0, sizeof interval);
    memset(&first_eval, 0, sizeof first_eval);
    memset(&last_eval, 0, sizeof last_eval);
    int64_t step = start_step, evals = 0, total_block = 0, total_ctx = 0;
    int eval_stopped = 0; // --mode eval stopped by a signal: no result
    // A resumed run skips the groups before its checkpoint (and asks no teacher for their batches).
    // (the evaluation after the checkpoint's step, when one is due, runs after the resume)
    int64_t first_group = start_step > 0 ? batch_schedule_group_of_step(&sc, start_step - 1) + 1 : 0;
    if (export_only) first_group = sc.n_groups; // no step, no evaluation: the checkpoint's weights are exported
    if (first_group < sc.n_groups) batch_source_start_at(&src, batch_schedule_group(&sc, first_group).first);
    for (int64_t gi = first_group; gi < sc.n_groups; gi++) {
        const batch_group group = batch_schedule_group(&sc, gi), *g = &group;
        int64_t kind = g->kind;
        memset(&cur, 0, sizeof cur);
        int cut_short = 0;
        for (int64_t n = g->first; n < g->first + g->count && rc == 0; n++) {
            if (eval && stop_requested()) { // --mode eval: a signal ends it after this batch (below)
                cut_short = 1;
                break;
            }
            wire_batch wb;
            if ((rc = batch_source_get(&src, &sc, n, &wb))) break;
            student_batch b = {.S = (int)wb.S, .n_seq = (int)wb.n_seq, .k = (int)wb.k, .tokens = wb.tokens,
                               .loss_mask = wb.mask, .cu_seqlens = wb.cu, .topk_idx = wb.topk_idx, .topk_val = wb.topk_val,
                               .lse = wb.lse};
            int64_t shape[2] = {wb.S, wb.D};
            b.features = src.features_dev ? tensor_make(DT_BF16, src.features_dev, DEVICE_CUDA, 2, shape)
                                          : tensor_make(DT_BF16, wb.features, DEVICE_CPU, 2, shape);
            int nv = anchors_valid(wb.mask, wb.cu, (int)wb.n_seq, valid);
            if (kind == WIRE_HELDOUT) { // every anchor, forward only, then the decode walk over them
                if (nv > 0 && (rc = student_eval(&d, &lc, &plan, sw, &b, valid, nv, &cur, matches)) == 0) {
                    for (int i = 0; i < nv; i++) matches_at[valid[i]] = matches[i];
                    metrics_decode_walk(wb.mask, wb.cu, (int)wb.n_seq, matches_at, &cur.decode_tokens, &cur.decode_steps);
                }
            } else {
                uint64_t batch_id = ((uint64_t)kind << 40) | (uint64_t)wb.index;
                int na = anchors_sample(valid, nv, (int)cfg->max_anchors, (uint64_t)cfg->seed, batch_id, anchors);
                // the last micro-batch starts the gradient sums while its backward runs
                students_grads_arm(grads, sw, n == g->first + g->count - 1);
                if (na > 0) rc = student_step(&d, &lc, &plan, sw, &b, anchors, na, &cur);
            }
            batch_source_release(&src, n);
        }
        // A failure on one student must not leave the others waiting in a collective: agree first.
        int bad = rc ? 1 : 0;
        students_allreduce(&bad, 1, MPI_INT, MPI_MAX, comm, "the other students to finish the step");
        if (bad) {
            if (!rc) rc = TRAIN_REPORTED_ELSEWHERE; // the student that failed says why
            break;
        }
        if (eval) { // a signal on any student: no result (eval.json is a whole evaluation's)
            int stop = cut_short || (stop_requested() && gi + 1 < sc.n_groups);
            students_allreduce(&stop, 1, MPI_INT, MPI_MAX, comm, "the other students to finish the evaluation");
            if (stop) {
                if (s == 0)
                    log_info("eval: stopped by %s before the evaluation was complete: nothing written (eval.json "
                             "holds only a whole evaluation); run the same command again", stop_signal_name(stop_requested()));
                eval_stopped = 1;
                break;
            }
        }
        train_stats_allreduce(&cur, comm);
        // NaN or inf: stop before it reaches the weights, a checkpoint or the export (every student
        // sees the same sums; the first says it).
        double loss = train_stats_loss(&cur, &lc);
        double limit = 0;
        if (!isfinite(loss)) {
            rc = train_nonfinite(s, cfg, step, kind == WIRE_HELDOUT ? "the held-out loss" : "the loss", loss, "");
            break;
        }
        if (kind != WIRE_HELDOUT && train_diverged(&opt.loss_mean, loss, cfg->divergence_factor, &limit)) {
            char why[160];
            snprintf(why, sizeof why, ", past %g (train.divergence_factor %g x its running mean)", limit, cfg->divergence_factor);
            rc = train_nonfinite(s, cfg, step, "the loss", loss, why);
            break;
        }
        if (kind == WIRE_HELDOUT) { // evaluation (forward only: the gradients are untouched)
            if (evals == 0) first_eval = cur;
            last_eval = cur;
            evals++;
            if (s == 0 && !eval) train_log_line(&lg, "heldout", step, &cur, &lc, (int)dc.block_size, 0, 0, 0, 0, NULL, 0);
            continue;
        }
        // An optimizer step: all-reduce the un-normalised gradients, then one update.
        if (grads && (rc = students_grads_finish(grads))) break;
        double lr = optim_lr(&oc, opt.step);
        last_norm = optim_step(&opt, d.master, d.grad, cur.sum_w);
        if (!isfinite(last_norm)) { // optim_step left the weights as they were
            rc = train_nonfinite(s, cfg, step, "the gradient norm", last_norm, "");
            break;
        }
        if (train_diverged(&opt.norm_mean, last_norm, cfg->divergence_factor, &limit)) {
            char why[160];
            snprintf(why, sizeof why, ", past %g (train.divergence_factor %g x its running mean)", limit, cfg->divergence_factor);
            rc = train_nonfinite(s, cfg, step, "the gradient norm", last_norm, why);
            break;
        }
        drafter_sync_compute(&d);
        train_stats_add(&interval, &cur);
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
            students_allgather_i64(mine, student_peaks, comm, "the students' log line");
            // a teacher group's payload reports its largest stage's peak: every rank of the group shows it
            for (int r = 0; r < T && r / w->group_size < 1024; r++) peaks[r] = src.last_peak[r / w->group_size];
            for (int i = 0; i < S; i++) peaks[T + i] = student_peaks[i];
            free(student_peaks);
            if (s == 0) train_log_line(&lg, NULL, step, &interval, &lc, (int)dc.block_size, lr, last_norm, el, el > 0 ? wait_all / el : 0, peaks, n_ranks);
            memset(&interval, 0, sizeof interval);
            t_int = now;
            wait_int = src.wait_s;
            if (train_log_failed(&lg)) { // the job would go on without its metrics: stop with the reason
                rc = error_set("%s/metrics.jsonl: a write failed (is the disk full?)", cfg->run_dir);
                break;
            }
        }
        // A signal on any rank stops every student after this step, with a checkpoint (stop.h); a
        // checkpoint by wall time is due when the first student's clock says so: the students agree
        // on both, so they write and stop in step.
        int flags[2] = {stop_requested() ? 1 : 0,
                        s == 0 && cfg->ckpt_every_minutes > 0 && time_now() - t_ckpt >= cfg->ckpt_every_minutes * 60.0};
        students_allreduce(flags, 2, MPI_INT, MPI_MAX, comm, "the other students after the step");
        int stop = flags[0] && step < cfg->steps;
        int ckpt_on = cfg->ckpt_every > 0 || cfg->ckpt_every_minutes > 0;
        int due = stop || flags[1] || (cfg->ckpt_every > 0 && step % cfg->ckpt_every == 0) || (ckpt_on && step == cfg->steps);
        if (due && s == 0 && checkpoint_write(cfg->run_dir, step, &d, &opt, cfg, (int)cfg->ckpt_keep)) {
            rc = -1; // the previous checkpoints are intact; the job stops with the reason
            break;
        }
        if (due) t_ckpt = time_now();
        if (stop) {
            if (s == 0)
                log_info("stopped by %s after step %lld with a checkpoint in %s/checkpoints; resume with the same "
                         "command and --run.resume=true", stop_signal_name(stop_requested()),
                         (long long)step, cfg->run_dir);
            break;
        }
        if (cfg->test_stop_at_step > 0 && step == cfg->test_stop_at_step) {
            if (s == 0) log_info("stopping after step %lld (test.stop_at_step); resume with --run.resume=true", (long long)step);
            break;
        }
    }
    // Tell every teacher this student is done (also after an error, so they can stop), once the
    // batches still in flight have landed.
    if (batch_source_drain(&src) && rc == 0) rc = -1;
    batch_source_stop_teachers(&src);
    for (int r = T; r < T + S; r++) watchdog_watch(r, 0); // no collective among the students follows
    if (rc == 0 && live) {
        char served[256];
        int m = 0;
        for (int t = 0; t < src.T && m < (int)sizeof served - 16; t++) m += snprintf(served + m, sizeof served - (size_t)m, "%s%lld", t ? ", " : "", (long long)src.served[t]);
        log_info("student %d: batches received per teacher: [%s]", s, served);
    }
    double wall = time_now() - t_run;
    // the samples evaluated: every one, or a set's /heldout
    if (rc == 0 && s == 0 && eval && !eval_stopped) rc = eval_write_result(cfg, &last_eval, &lc, (int)dc.block_size, (int64_t)bp.n_heldout);
    else if (rc == 0 && s == 0 && !eval) {
        char dir[CONFIG_STR + 16];
        snprintf(dir, sizeof dir, "%s/drafter", cfg->run_dir);
        if (drafter_export(&d, dir, 0)) rc = -1;
        double per_s = wall > 0 ? (double)S / wall : 0;
        if (rc == 0 && export_only) {
            rc = train_log_exported(cfg->run_dir, step);
            if (rc == 0) log_info("run.resume: the drafter of step %lld exported to %s", (long long)step, dir);
        } else if (rc == 0) // the summary names the exported drafter: only after a successful export
            train_log_summary(&lg, step >= cfg->steps, step, wall, (double)total_block * per_s, (double)total_ctx * per_s, peaks,
                          n_ranks, T, &first_eval, &last_eval, dir);
    }
    train_log_close(&lg);
    batch_schedule_free(&sc);
    free(peaks);
    free(valid);
    free(anchors);
    free(matches);
    free(matches_at);
    students_grads_close(grads, rc != 0);
    batch_source_free(&src);
    if (fr) featreader_close(fr);
    student_work_destroy(sw);
    arena_free(&work);
    arena_free(&opt_mem);
    drafter_free(&d);
    batchplan_free(&bp);
    fs_unlock_dir(lock_fd);
    return rc;
}
