// checkpoint.h: training checkpoints (SPEC §7): run.dir/checkpoints/step-NNNNNNNN/ with
//   model.safetensors      the fp32 master weights under their export names
//   optimizer.safetensors  AdamW moments "m", "v" (and "ema"), flat fp32 [numel]
//   state.json             {"step", "optim_step", "run_id", "config_hash", "config": the run's configuration,
//                           "identity": the run's inputs (identity.h), "checksums": the CRC32C of the two
//                           files above, "crc32c": the seal of state.json itself (crc32c.h)}
// written under a temporary name (checkpoints/.tmp-step-N.PID), every file and the directory
// fsynced, then renamed: a directory under its final name is always complete. The newest `keep`
// checkpoints are kept. A failed write (a full disk: ENOSPC, or EFBIG past RLIMIT_FSIZE when
// SIGXFSZ is ignored) removes its temporary directory and leaves the earlier checkpoints as they
// were; temporaries left by a job killed while writing are removed by the next write. Pruning
// renames a checkpoint to a temporary name before deleting it, and removes only checkpoints of this
// run (state.json's run_id) holding only the files above. Non-finite weights or moments are
// never written, and refused at load. Every file is verified against its checksum before it is read
// (a mismatch refuses the checkpoint naming the file and both CRCs); a checkpoint written before
// checksums (no seal, no "checksums") is read with one warning, as unverified.
#pragma once
#include <stdint.h>

#include "common/core/config.h"
#include "common/data/identity.h"
#include "student/model/drafter.h"
#include "student/train/optim.h"

// checkpoint_begin_run: this run's identity, written into every state.json: the resumed
// checkpoint's (resumed: checkpoint `step` of run_dir), else a new one. Call once before writing.
void checkpoint_begin_run(const char *run_dir, int64_t step, int resumed);
// checkpoint_set_identity: the run's inputs, recorded in every state.json written after it.
void checkpoint_set_identity(const run_identity *id);
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
// checkpoint_verify: checkpoint directory dir against its checksums: 0 and *verified = 1 when every
// file matches, 0 and *verified = 0 for a checkpoint without checksums (older), -1 with error_set
// naming the file and both CRCs on a mismatch or a corrupt state.json.
int checkpoint_verify(const char *dir, int *verified);
// checkpoint_last_good: the newest checkpoint of run_dir that passes checkpoint_verify (*found = 0:
// none); *verified as there; *n_corrupt: newer ones that failed it.
int64_t checkpoint_last_good(const char *run_dir, int *found, int *verified, int *n_corrupt);
// checkpoint_check_identity: the identity recorded in checkpoint `step` against the run's (identity.h);
// a checkpoint without one passes. -1 with error_set naming both values.
int checkpoint_check_identity(const char *run_dir, int64_t step, const run_identity *now);
// checkpoint_read: weights and optimizer state of checkpoint `step` into d and o; state.json's fields
// validated after checkpoint_verify (*verified as there), non-finite values refused. -1 with error_set.
int checkpoint_read(const char *run_dir, int64_t step, drafter *d, optim *o, int *verified);
