// preflight_job.h: the `--preflight` checks several modes share (preflight_rows.h): the target's
// shape and row, the training data's row, the run directory's row, the teacher's forward and the
// student's memory plans and a training job's pinned memory, the claim made dry; and the pieces
// from which dump-features and regenerate build their own rows (mode_dump_features.c,
// mode_regenerate.c). Each mode's entry (mode_def.preflight) is in its own file.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/data/dataset.h"
#include "modes/preflight_rows.h"

// pf_claim: the run's claim made dry: no output an input (mode_claim_distinct), then the mode's
// claim hook (dry). -1 with error_set.
int pf_claim(pf_ctx *x);

// pf_target_config: target.path's config.json into x->target_cfg (have_target_cfg); -1 with x->target_err set.
int pf_target_config(pf_ctx *x);
// pf_job_shape: the shape hook of a training job's modes: the target's config, the teachers'
// contract (have_contract) and the drafter's shape as the student derives it (have_drafter_cfg, drafter_err).
void pf_job_shape(pf_ctx *x);
// pf_target_row: the target row: config.json, the tensors (the embedding, lm_head unless tied),
// their bytes; with layers, the feature layers the teachers send.
void pf_target_row(pf_ctx *x, const char *host, int layers);
// pf_data_sets: data.path / data.sets opened as the job opens them (data.min_loss_tokens): a row
// added and 1 returned when that decides it (not set, unreadable, no usable sample, a vocabulary
// larger than the target's; nothing left open); else 0 with *ds open, what (the row's start, n
// bytes), *len (malloc'd, the ds->n samples' lengths) and *longest: the caller adds the row, frees
// len and closes ds.
int pf_data_sets(pf_ctx *x, const char *host, dataset *ds, char *what, size_t n, int64_t **len, int64_t *longest);
// pf_dir_writable: the directory a mode writes, key = dir: a row added and 1 returned when it is
// not set (result unset), the claim refuses it, or it cannot be made or written (a probe file
// created, written, fsynced and removed); else 0 with *created (made here and removed again),
// *avail (its free bytes, 0 when unknown) and *have_vs (avail is known).
int pf_dir_writable(pf_ctx *x, const char *key, const char *dir, pf_result unset, int *created, size_t *avail,
                    int *have_vs);
// pf_teacher_forward: a forward teacher's memory (its stage's with teacher groups: weights, work,
// NCCL buffers) for batches of tokens with students students; fit_batch: teacher.mem_budget must
// hold a whole batch (dump-features), else the run's own check (teacher_group_budget). A pf_need_fn
// once its batch is given.
int64_t pf_teacher_forward(pf_ctx *x, char *detail, size_t n, pf_result *res, int tokens, int students, int fit_batch);

// A training job's hooks and rows (train and eval; check and transport-test take some of them).
int64_t pf_job_teacher(pf_ctx *x, char *detail, size_t n, pf_result *res); // the students' batches
int64_t pf_job_student(pf_ctx *x, char *detail, size_t n, pf_result *res); // plan_make, as student_train
int64_t pf_job_pinned(pf_ctx *x);                                          // job_plan_pinned_rank
void pf_job_target(pf_ctx *x, const char *host);  // the target row with the feature layers
void pf_job_data(pf_ctx *x, const char *host);    // the training sets or data.features, to a batch plan
void pf_job_run_dir(pf_ctx *x, const char *host); // run.dir: writable, room for the checkpoints and the export
