// mode_train.h: what train and eval share (one job of teachers feeding students; mode_train.c).
#pragma once

#include "modes/mode.h"

void mode_train_inputs(const config *cfg, mode_paths *in);
void mode_train_outputs(const config *cfg, mode_paths *out);
void mode_eval_outputs(const config *cfg, mode_paths *out);
// The claim of run.dir, checked (run_dir_take dry: its lock, an earlier run or eval.json) on rank
// 0 before the run and by --preflight; the first student takes it for the run (student_train).
int mode_train_claim(const config *cfg, int dry);
int mode_eval_claim(const config *cfg, int dry);
// mode_train_prepare: what a training job (train, eval) asks of the keys before MPI starts: run.dir
// set and safe; with teachers, data.max_tokens_per_batch within teacher.max_tokens. -1 with error_set.
int mode_train_prepare(config *cfg);
int mode_train_needs(const config *cfg);
int mode_train_check_inputs(const world *w, const config *cfg);
int mode_train_plan(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print);
int mode_train_run(mode_job *j);
// What --preflight checks for train and eval (preflight_rows.h): the roles, the target, the
// training data and run.dir; each role's memory plan and the pinned host memory.
extern const struct mode_preflight mode_train_preflight;
