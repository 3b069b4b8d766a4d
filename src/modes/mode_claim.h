// mode_claim.h: the frame's claim of a job's outputs, the same for every mode (docs/faults.md,
// "Modes"): rank 0, before the mode writes anything.
//
//   distinct  no output is an input of the job: compared by identity (device and inode, or the
//             resolved path of what does not exist yet), not as text; an output that is an
//             existing file of an input directory (the target's files) is an input too; and no
//             input lies inside an output directory under a name the mode writes or clears there
//             (mode_path.ours: drafter.config = RUN/drafter with run.dir = RUN, a training set
//             named like a shard in features.dir). The paths are the mode's table's (mode.h):
//             every key naming a file, and the files made beside an output (OUT.lock, OUT.parts)
//   lock      each output locked for the process's life, so that a second job on the same output
//             ends at once with one line naming the output and the holder (a file output: the lock
//             file OUT.lock beside it, removed at the end; a directory: DIR/.lock, which stays).
//             The lock file is made exclusively, never through a link, and an existing one is
//             taken again only when it holds a lock line of ours (fsutil.h fs_lock_file): a file
//             of that name that is not (a user's file, a link) is refused, never written over
//   refuse    what the mode did not write is the mode's own claim (mode_def.claim); the helpers
//             below are what those claims share
#pragma once

#include "modes/mode.h"

// mode_claim_distinct: -1 with error_set naming the output, the input and both keys when an
// output of the mode is one of its inputs.
int mode_claim_distinct(const mode_def *m, const config *cfg);
// mode_claim_lock_file: the lock "<out>.lock" for the file output key = out; dry: tested,
// nothing made. -1 with error_set (fs_lock_file's line) when another job holds it or the file of
// that name is not a lock of ours.
int mode_claim_lock_file(const char *key, const char *out, int dry);
// mode_claim_lock_dir: the lock DIR/.lock of the directory output key = dir (made when missing,
// unless dry: a missing directory is then free). -1 with error_set.
int mode_claim_lock_dir(const char *key, const char *dir, int dry);
// mode_claim_release: every lock this process took, released (a file output's lock file removed).
void mode_claim_release(void);

// mode_claim_foreign: the first entry of the directory dir that is not a regular file whose name
// passes ours(name) (the files this mode writes there), into name[n]: 1 when there is one, 0 when
// every entry is ours or dir does not exist.
int mode_claim_foreign(const char *dir, int (*ours)(const char *name), char *name, size_t n);
// mode_claim_remove_ours: unlink the regular files of dir whose names pass ours (run.overwrite:
// only what this project wrote). -1 with error_set naming the file that could not be removed.
int mode_claim_remove_ours(const char *dir, int (*ours)(const char *name));
