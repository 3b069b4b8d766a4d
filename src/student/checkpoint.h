// checkpoint.h: training checkpoints (SPEC §7): run.dir/checkpoints/step-NNNNNNNN/ with
//   model.safetensors      the fp32 master weights under their export names
//   optimizer.safetensors  AdamW moments "m", "v" (and "ema"), flat fp32 [numel]
//   state.json             {"step", "optim_step", "config_hash"}
// written under a temporary name (checkpoints/.tmp-step-N.PID), every file and the directory
// fsynced, then renamed: a directory under its final name is always complete. The newest `keep`
// checkpoints are kept. A failed write (a full disk: ENOSPC, or EFBIG past RLIMIT_FSIZE when
// SIGXFSZ is ignored) removes its temporary directory and leaves the earlier checkpoints as they
// were; temporaries left by a job killed while writing are removed by the next write.
#pragma once
#include <stdint.h>

#include "student/drafter.h"
#include "student/optim.h"

// checkpoint_write: -1 with error_set (nothing under the final name, no temporary left) on any
// failure; the message is one line: "checkpoint DIR not written (...): FILE: ...: OS reason".
int checkpoint_write(const char *run_dir, int64_t step, const drafter *d, const optim *o, uint64_t config_hash, int keep);
// checkpoint_latest: the newest complete checkpoint's step in run_dir (0 and *found = 0 if none).
int64_t checkpoint_latest(const char *run_dir, int *found);
// checkpoint_read: weights and optimizer state of checkpoint `step` into d and o; -1 with error_set.
int checkpoint_read(const char *run_dir, int64_t step, drafter *d, optim *o);
