// regen_output.h: what `--mode regenerate` may do to regenerate.out and its parts directory
// OUT.parts (docs/faults.md, "Modes"): the mode's claim, made by the frame before anything is
// written, and the settings hook, made by regenerate once it knows the settings it would record.
#pragma once

#include "common/core/config.h"

// regen_output_claim: regenerate.out is set and is not a directory; when it exists it is a
// training set that regenerate made (its "settings" attribute: compared later, regen_output_same),
// or, with run.overwrite, any training set this project wrote (replaced at the end); anything else
// (a prompts file, another file) is refused even with run.overwrite, which only ever replaces what
// this project wrote. OUT.parts, when there, is a directory holding only regenerate's parts; with
// run.overwrite they are removed (unless dry: --preflight checks only). -1 with error_set naming
// regenerate.out (or OUT.parts) and what is there.
int regen_output_claim(const config *cfg, int dry);

// regen_output_same: the hook that decides whether an existing regenerate.out made by regenerate
// may be replaced by this run: its recorded settings equal settings (what this run records: the
// same settings give a byte-identical file), or run.overwrite. 0 when it may (or there is none),
// -1 with error_set naming both settings otherwise.
int regen_output_same(const config *cfg, const char *settings);
