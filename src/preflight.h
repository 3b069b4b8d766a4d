// preflight.h: `dflash_rank --preflight`: the checks worth making before a long run (docs/preflight.md).
//
// Every rank checks what concerns it — its role in the world, its backend and GPU, its memory plan
// against the device's free memory, peer access between teacher and student GPUs on one host,
// /dev/shm, NCCL, and what its mode reads and writes (the mode's table entry: the target, the
// training set or the prompts, the run directory or the output, their claim and free space) — and rank 0
// prints one table (check, rank, result, detail) and "preflight: ok" or "preflight: N problem(s)".
// Results: ok; WARN (the run works, but slower or at risk); FAIL (the run would fail); skipped.
#pragma once

#include "common/comm/world.h"
#include "common/core/config.h"
#include "modes/mode.h"

// preflight_run: called on every rank after world_init (roles are assigned here, as the run
// assigns them: the mode's rule, so a world that does not fit the roles is a FAIL row, not an
// exit); the rows are the ones every mode has and the checks the mode's table entry names
// (mode_def.preflight: modes/preflight_rows.h), with the run's own claim (mode_def.claim, dry) and
// world checks (teacher groups on one host). Opens and closes its
// own backend. Returns the process exit status: 1 on rank 0 when a row FAILed, else 0 (the other
// ranks exit 0 whatever failed, as mode_exit: mpirun then names rank 0's exit, whose table says why).
int preflight_run(world *w, const config *cfg, const mode_def *mode);
