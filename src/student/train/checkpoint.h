// checkpoint.h: training checkpoints (SPEC §7): run.dir/checkpoints/step-NNNNNNNN/ with
//   model.safetensors      the fp32 master weights under their export names
//   optimizer.safetensors  AdamW moments "m", "v" (and "ema"), flat fp32 [numel]
//   state.json             {"step", "optim_step", "run_id", "config_hash", "config": the run's configuration}
// written under a temporary name (checkpoints/.tmp-step-N.PID), every file and the directory
// fsynced, then renamed: a directory under its final name is always complete. The newest `keep`
// checkpoints are kept. A failed write (a full disk: ENOSPC, or EFBIG past RLIMIT_FSIZE when
// SIGXFSZ is ignored) removes its temporary directory and leaves the earlier checkpoints as they
// were; temporaries left by a job killed while writing are removed by the next write. Pruning
// renames a checkpoint to a temporary name before deleting it, and removes only checkpoints of this
// run (state.json's run_id) holding only the files above. Non-finite weights or moments are
// never written, and refused at load.
#pragma once
#include <stdint.h>

#include "common/core/config.h"
#include "student/model/drafter.h"
#include "student/train/optim.h"

// checkpoint_begin_run: this run's identity, written into every state.json: the resumed
// checkpoint's (resumed: checkpoint `step` of run_dir), else a new one. Call once before writing.
void checkpoint_begin_run(const char *run_dir, int64_t step, int resumed);
// checkpoint_write: -1 with error_set (nothing under the final name, no temporary left) on any
// failure; the message is one line: "checkpoint DIR not written (...): FILE: ...: OS reason".
int checkpoint_write(const char *run_dir, int64_t step, const drafter *d, const optim *o, const config *cfg, int keep);
// checkpoint_latest: the newest checkpoint's step in run_dir (0 and *found = 0 if none).
int64_t checkpoint_latest(const char *run_dir, int *found);
// checkpoint_find_resume: the newest checkpoint, which must be complete: one without state.json is
// refused (it never happens to a checkpoint this trainer wrote), never silently passed over.
int checkpoint_find_resume(const char *run_dir, int64_t *step, int *found);
// checkpoint_check_resume: the configuration saved with checkpoint `step` against cfg: a changed
// key that shapes the run (drafter, data, seed, block, loss, ...) is refused naming every such key
// with its old and new value; a changed schedule key (steps, lr, intervals, ...) is said in one
// line. -1 with error_set.
int checkpoint_check_resume(const char *run_dir, int64_t step, const config *cfg);
// checkpoint_read: weights and optimizer state of checkpoint `step` into d and o; state.json's fields
// validated, non-finite values refused. -1 with error_set.
int checkpoint_read(const char *run_dir, int64_t step, drafter *d, optim *o);
