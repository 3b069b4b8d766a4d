// train_log.h: what a training job reports (SPEC §6): step statistics summed over the students,
// one JSON line per log interval and per evaluation in run.dir/metrics.jsonl with a short terminal
// line beside it, and the summary at the end. Only the first student writes.
#pragma once
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "common/core/config.h"
#include "student/loss/loss_config.h"
#include "student/model/step.h"

typedef struct {
    FILE *jsonl;        // run.dir/metrics.jsonl
    double t0;          // time_now() when this job opened it
    double wall_before; // a resumed run: the largest wall_s its earlier jobs wrote (0 for a new run)
} train_log;

// train_log_open: run.dir made, run.dir/config.json written (the configuration the job ran with),
// metrics.jsonl opened (append: a resumed run continues the file). 0, or -1 with error_set.
int train_log_open(train_log *lg, const config *cfg, int append);
// train_log_wall: the run's wall time in seconds: this job's since train_log_open, plus the earlier
// jobs' of a resumed run (every metrics line carries it as wall_s).
double train_log_wall(const train_log *lg);
// train_stats_add: a += b (every field is a sum).
void train_stats_add(step_stats *a, const step_stats *b);
// train_stats_allreduce: s summed over the students (collective over comm).
void train_stats_allreduce(step_stats *s, MPI_Comm comm);
// train_stats_loss: the loss the statistics add up to ((1 - alpha) CE + alpha KL + lambda CAP, + selector_weight SEL for DFlash2).
double train_stats_loss(const step_stats *s, const loss_config *lc);
// train_stats_tau_decode: decode_tokens / decode_steps (0 without steps).
double train_stats_tau_decode(const step_stats *s);
// train_stats_json: the statistics' fields of a JSON object (no braces): tau_decode, its steps and
// tokens (when walked), loss, ce, kl, cap, acc (slots 1..B-1), tau_chain, tau_tree, anchors.
void train_stats_json(FILE *f, const step_stats *s, const loss_config *lc, int B);
// train_log_eval_text: the terminal line of an evaluation, tau_decode first, after `what`.
void train_log_eval_text(const char *what, const step_stats *s, const loss_config *lc);
// train_log_line: one metrics line for step; split = "heldout" for an evaluation (lr, grad_norm,
// seconds, wait_frac and peaks unused), NULL for a training interval of `seconds` seconds. B is the
// block size (acceptance per slot 1..B-1).
void train_log_line(train_log *lg, const char *split, int64_t step, const step_stats *s, const loss_config *lc, int B,
                    double lr, double grad_norm, double seconds, double wait_frac, const int64_t *peaks, int n_peaks);
// train_log_failed: a write to metrics.jsonl failed (a full disk): the job should stop.
int train_log_failed(const train_log *lg);
// train_log_summary: the summary line of metrics.jsonl and the terminal summary with each rank's
// peak memory (ranks below T are teachers).
void train_log_summary(train_log *lg, int finished, int64_t steps, double wall, double block_per_s, double ctx_per_s,
                       const int64_t *peaks, int n_ranks, int T, const step_stats *first_eval,
                       const step_stats *last_eval, const char *drafter_dir);
// train_log_finished: run_dir/metrics.jsonl holds the summary of a run finished at `steps`, which
// is written only after its drafter was exported (1), or not (0: the export is missing).
int train_log_finished(const char *run_dir, int64_t steps);
// train_log_finished_at: the step of the last finished summary in run_dir/metrics.jsonl (a run that
// ended at train.steps and exported its drafter, with or without checkpoints); -1 when none.
int64_t train_log_finished_at(const char *run_dir);
// train_log_exported: appends the summary line of a run whose export a resume completed (the
// statistics stay with the earlier lines): {"summary": true, "finished": true, "steps": N,
// "exported_on_resume": true}. -1 with error_set when the write fails.
int train_log_exported(const char *run_dir, int64_t steps);
void train_log_close(train_log *lg);
