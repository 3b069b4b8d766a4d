// regen_output.h: what `--mode regenerate` writes (regenerate.h, "shards" and "output"): each
// shard's part OUT.parts/part-SSSSS-of-NNNNN.h5, their merge into regenerate.out (rank 0), and what
// the mode may do to regenerate.out and OUT.parts (docs/faults.md, "Modes"): the mode's claim, made
// by the frame before anything is written, and the tidy-up after a successful end. Whether an
// earlier regenerate.out has this run's settings (nothing to do) or others (refused unless
// run.overwrite) regenerate decides itself once it knows them (regen_identity_check_out).
#pragma once

#include <stdint.h>

#include "common/core/config.h"
#include "teacher/regen_job.h"

// regen_output_claim: regenerate.out is set and is not a directory; when it exists it is a
// training set that regenerate made (its "settings" attribute: compared later by regenerate),
// or, with run.overwrite, any training set this project wrote (replaced at the end); anything else
// (a prompts file, another file) is refused even with run.overwrite, which only ever replaces what
// this project wrote. OUT.parts, when there, is a directory holding only regenerate's parts; with
// run.overwrite they are removed (unless dry: --preflight checks only). -1 with error_set naming
// regenerate.out (or OUT.parts) and what is there.
int regen_output_claim(const config *cfg, int dry);

// regen_output_tidy: after regenerate.out is complete (written now, or found made with these
// settings): OUT.parts removed (when it holds only regenerate's entries; else left, with a warning)
// and the training sets interrupted merges left beside OUT (OUT.tmp.PID). Rank 0, holding OUT.lock.
void regen_output_tidy(const config *cfg);

// regen_output_prompts_done: the job's prompts whose parts are on disk now, whoever decoded them (a
// part is renamed into place complete, so its presence is its end): what the progress line counts.
int64_t regen_output_prompts_done(const regen *g);
// regen_output_part_found: 1 when shard s's part is already there, made with these settings and
// holding its cnt samples; 0 when it is not there; -1 with error_set naming the part and the
// fields that differ otherwise.
int regen_output_part_found(const regen *g, int64_t s, int64_t cnt);
// regen_output_part_write: shard s's part from its replies st (sample j = prompt first + j, read
// back checked, loss_mask 0, + its reply, loss_mask 1), under a temporary name renamed when
// complete; -1 with error_set, nothing left behind.
int regen_output_part_write(regen *g, const shard_state *st, int64_t s);
// regen_output_merge: rank 0, every part there: regenerate.out from the parts in prompt order, each
// checked again, with /finish_reason, /heldout and the attributes regenerate.h lists; then
// regen_output_tidy. -1 with error_set (regenerate.out not written).
int regen_output_merge(regen *g);
