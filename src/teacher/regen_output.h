// regen_output.h: what `--mode regenerate` may do to regenerate.out and its parts directory
// OUT.parts (docs/faults.md, "Modes"): the mode's claim, made by the frame before anything is
// written. Whether an earlier regenerate.out has this run's settings (nothing to do) or others
// (refused unless run.overwrite) regenerate decides itself once it knows them (regenerate.h).
#pragma once

#include "common/core/config.h"

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
