// train.h: a student rank in a training job (SPEC §6, §8).
//
// Batches come from the teachers (live: requests with credits, consumed in order) or from an
// offline feature directory (data.features). Optimizer step t consumes the global batches
// t*G .. t*G+G-1 (G = train.batches_per_step); student s of S takes those with (id mod S) = s, and
// draws each batch's anchors from (seed, batch id), so the run does not depend on S beyond
// summation order. Gradients are all-reduced over the students before clipping; the first student
// writes metrics.jsonl, evaluates on the held-out batches at the start, every eval_interval steps
// and at the end, and exports the drafter to run.dir/drafter.
#pragma once
#include <mpi.h>

#include "common/backend/backend.h"
#include "common/comm/payload_link.h"
#include "common/comm/world.h"
#include "common/core/config.h"
#include "student/model/drafter_config.h"
#include "teacher/target_config.h"
#include "teacher/teacher_plan.h"

// train_drafter_config: the drafter's shape: from drafter.config (checked against the target:
// hidden size, vocabulary, target layers) when set, else the target's shape and the drafter.*
// keys. -1 with error_set.
int train_drafter_config(const config *cfg, const target_config *tc, const teacher_contract *ct, drafter_config *dc);
// train_check_inputs: what every rank of a training job would find wrong with its inputs, checked
// once (on rank 0, before the roles start) so that a bad input is one error line, not one per
// rank: the role counts, the target (config, weights, embedding), the drafter's shape against it,
// and the training sets (opened and validated, vocabulary against the target's) or the offline
// features, down to a feasible batch plan. 0, or -1 with error_set.
int train_check_inputs(const world *w, const config *cfg);
// student_train: students_comm holds the student ranks only; links: the payload link to the
// teachers (payload_link.h; its device blocks, if any, bring the features GPU to GPU). 0 on success, -1 with error_set, or TRAIN_REPORTED_ELSEWHERE when another
// student stops the job with the error line (this rank then prints nothing and waits to be ended).
// Run on every student of the job: the first holds run.dir's lock (one job per run directory), and
// a resumed run must be the same run (checkpoint_check_resume); one already at train.steps returns
// 0 at once, writing nothing. NaN or inf in the loss or the gradient norm stops the job with the
// step named, before the update.
#define TRAIN_REPORTED_ELSEWHERE WORLD_REPORTED_ELSEWHERE
int student_train(const world *w, const config *cfg, backend *be, MPI_Comm students_comm, payload_link *links);
