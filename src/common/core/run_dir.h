// run_dir.h: what a job may do to its run directory (docs/faults.md, "One run per run directory"):
// refuse a directory that is a file-system root or the home directory, refuse to start a new run
// over an earlier one (unless run.overwrite), and remove only the files this project writes.
#pragma once

// run_dir_refuse_unsafe: -1 with error_set when dir (an existing path; one that does not exist yet
// is fine) is a file-system root (/, a mount point) or $HOME: a run there would mix its files with
// everything else in it. key names the setting in the message ("run.dir").
int run_dir_refuse_unsafe(const char *key, const char *dir);

// run_dir_claim: a new run (not resumed) in dir. When dir holds an earlier run (its metrics.jsonl,
// config.json, eval.json, a checkpoint, an exported drafter): -1 with one line saying what is there
// and how to go on (--run.resume=true, a new dir or --run.overwrite=true); with overwrite, those
// files are removed first (only them: a file this project does not write is never removed, and a
// directory holding one stays). 0 when dir holds no earlier run. eval: an evaluation, which writes
// eval.json only: refused when one is there (replaced with overwrite).
int run_dir_claim(const char *dir, int overwrite, int eval);

// run_dir_take: what a training or evaluation job does to run.dir before it writes anything: the
// directory made, locked for the process's life (fs_lock_dir, *lock_fd: keep it open), and for a
// new run (not resume) claimed (run_dir_claim). dry (--preflight, and the frame's check on rank 0
// before any rank starts): the same checks with nothing made, locked or removed (lock_fd may be
// NULL): a lock held by a live job, a lock file that is not ours, an earlier run without
// --run.resume, an earlier eval.json. -1 with error_set (one line).
int run_dir_take(const char *dir, int resume, int overwrite, int eval, int dry, int *lock_fd);

// run_dir_ours: 1 when name, directly in a run.dir, is one a job writes, replaces or removes there
// (or one of its temporaries): the top files, checkpoints, drafter, the lock; eval: eval.json and
// the lock only. An input of the job by such a name would be written over (mode_claim.h).
int run_dir_ours(const char *name, int eval);

// run_dir_remove_known: unlink the files named in names (a NULL-terminated list) from dir, then
// remove dir itself when that left it empty. 0 when dir is gone (or never was); -1 with errno
// ENOTEMPTY when something else is in it (left untouched), or the errno of a failed unlink.
int run_dir_remove_known(const char *dir, const char *const *names);

// run_dir_holds_only: 1 when every entry of the directory dir is a regular file named in names (so
// removing dir removes only what this project wrote), 0 otherwise (or when it cannot be read).
int run_dir_holds_only(const char *dir, const char *const *names);

// run_dir_remove_leftovers: what interrupted jobs left in dir beside an output this project writes
// under a temporary name and renames into place: entries "STEM.tmp.PID" and "STEM.old.PID" (PID:
// digits), STEM being `stem`, or, for a stem ending in '*', any name starting with the text before
// the '*' and ending in ".h5" (the shards "features-*", the parts "part-*"). With dir_files, only a
// directory holding nothing but those files is removed (an export's); without, only a regular file
// that is HDF5 or empty (a training set's, a shard's or a part's); anything else is left, with a
// warning. Call it at a successful end while holding the output's lock (no
// other job writes there). Returns how many were removed.
int run_dir_remove_leftovers(const char *dir, const char *stem, const char *const *dir_files);

// The files of a checkpoint directory (checkpoints/step-N) and of an exported drafter directory.
extern const char *const run_dir_checkpoint_files[];
extern const char *const run_dir_drafter_files[];
