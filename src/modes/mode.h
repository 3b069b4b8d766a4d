// mode.h: the modes of dflash_rank in one table: one file per mode (src/modes/mode_*.c) fills a
// mode_def, and modes.c lists them (docs/distributed.md, "Modes").
//
// A mode says which role each rank takes (a world_rule: common/comm/world.h), which paths of the
// configuration it reads and which it writes, what --preflight checks and --plan plans for it,
// what it cannot start without, how it claims its outputs, and how it runs. The frame
// (dflash_rank.c) and preflight.c read the table and nothing else: none of them decides a role or
// names a mode. The frame applies the same lifecycle to every mode: the keys checked before MPI
// starts (prepare, needs), the roles assigned (world_assign), then on rank 0, before anything is
// written: no output may be an input (mode_claim.h), the inputs opened (check_inputs), the outputs
// claimed (claim: locked, what the mode did not write refused); every rank agreeing; then run.
//
// A new mode: one file mode_NAME.c defining `const mode_def mode_NAME` with its --preflight entry
// (a mode_preflight: its checks, its own or preflight_job.c's), one X(mode_NAME) in modes.c's
// MODE_LIST; run.mode takes its name from the table (mode_find; test_modes.sh compares --help's list).
#pragma once

#include <stddef.h>

#include "common/backend/backend.h"
#include "common/comm/payload_link.h"
#include "common/comm/world.h"
#include "common/core/config.h"

// A path of the configuration that a mode reads or writes: every key that can name a file or a
// directory the mode opens (drafter.config and eval.drafter among them), and among the outputs the
// files the mode makes beside them (a file output's lock OUT.lock, regenerate's OUT.parts).
typedef struct {
    const char *key;  // what the messages name: the configuration key ("regenerate.out", "data.sets")
    const char *path; // its value (points into the configuration, or into mode_paths.own)
    int dir;          // a directory: every file in it belongs to it (target.path, features.dir)
    // An output directory: 1 for a name directly in it that the mode writes, replaces or removes
    // (its files, their temporaries, its lock); NULL: every name. An input of the job under such a
    // name is refused (mode_claim_distinct): the mode may write over it or clear it.
    int (*ours)(const char *name);
    const char *set;  // the key to change in the advice (a path made from a key's value: that key)
} mode_path;

#define MODE_MAX_PATHS (CONFIG_MAX_SETS + 8)
#define MODE_MAX_OWN 4
typedef struct {
    int n;
    mode_path v[MODE_MAX_PATHS];
    int n_own;
    char own[MODE_MAX_OWN][CONFIG_STR + 16]; // the paths made from a key's value (OUT.lock, OUT.parts)
} mode_paths;

// mode_paths_add: one more path (an empty value is left out: the key is not set).
void mode_paths_add(mode_paths *p, const char *key, const char *path, int dir);
// mode_paths_add_dir: an output directory whose names ours(name) tells (see mode_path.ours).
void mode_paths_add_dir(mode_paths *p, const char *key, const char *path, int (*ours)(const char *name));
// mode_paths_add_beside: the path value + suffix that the mode makes beside the output key = value
// ("OUT.lock"), labelled label; dir as for mode_paths_add. Left out when value is empty.
void mode_paths_add_beside(mode_paths *p, const char *label, const char *key, const char *value, const char *suffix,
                           int dir);
// mode_paths_data: data.path or each path of data.sets, or data.features (a directory).
void mode_paths_data(mode_paths *p, const config *cfg);

// What --preflight checks for a mode (preflight_rows.h): its hooks (the run's check of its roles,
// the target's shape, each role's memory plan, pinned memory) and its own rows (the target, the
// data or the prompts, the directory or the output it writes), besides the rows every mode has.
struct mode_preflight;

// What a mode's run gets: every rank calls run with its world (roles assigned), the configuration
// and its open backend.
typedef struct {
    world *w;
    config *cfg;
    backend *be;
} mode_job;

typedef struct {
    const char *name; // run.mode
    const char *what; // one line: what the job does
    world_rule roles; // the role each rank takes
    const struct mode_preflight *preflight; // --preflight's hooks and rows (NULL: the rows every mode has)
    // 1: SIGTERM, SIGUSR1/2 and a first SIGINT make it finish its unit (a step, a shard, a batch),
    // keep what is complete and exit 0 (common/core/stop.h; the frame installs the handlers before
    // MPI starts); 0: the signals' default actions (a short mode with nothing to keep).
    int stops;
    // The paths it reads and the paths it writes (filled into *in / *out; NULL: none).
    void (*inputs)(const config *cfg, mode_paths *in);
    void (*outputs)(const config *cfg, mode_paths *out);
    // Before MPI starts, on every rank (the run, --plan and --preflight): the configuration
    // checked and completed (train and eval: run.dir; eval: the drafter's shape). -1 with error_set
    // (one line). NULL: nothing.
    int (*prepare)(config *cfg);
    // Before MPI starts, a run only (not --plan or --preflight, which report it their own way): the
    // keys the job cannot start without. -1 with error_set (one line). NULL: nothing.
    int (*needs)(const config *cfg);
    // Rank 0, before the mode writes anything: lock each output for the process's life and refuse
    // one this mode did not write (unless run.overwrite, and then only what this project wrote is
    // removed or replaced). dry (--preflight): check only (a lock tested, nothing made or
    // removed). -1 with error_set naming the output (and the holder of a lock). --preflight calls
    // the same hook dry, so that it refuses what the run refuses. Train and eval check run.dir here
    // (always dry: the lock, an earlier run, an earlier eval.json), and their first student takes
    // it for the run's life with the same code (run_dir_take in student_train). NULL: no output.
    int (*claim)(const config *cfg, int dry);
    // Rank 0, before the claim: the inputs opened once, so that every rank's error is one line.
    // -1 with error_set. NULL: nothing.
    int (*check_inputs)(const world *w, const config *cfg);
    // --plan (one process, no MPI, no device): world_size and ranks_on_host from the launcher (-1
    // without one); prints when print. 0, or -1 with error_set.
    int (*plan)(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print);
    // For the watchdog's message when a peer dies or hangs: where the run can be resumed from
    // (buf left empty: nothing to say). NULL: nothing.
    void (*report)(const config *cfg, char *buf, size_t n);
    // The job, on every rank; returns this process's exit status.
    int (*run)(mode_job *j);
} mode_def;

// mode_find: the mode of that name, or NULL with error_set listing the modes.
const mode_def *mode_find(const char *name);
// mode_count, mode_at: the registry in its order.
int mode_count(void);
const mode_def *mode_at(int i);

// The frame's helpers the modes' runs share (frame.c).
// mode_exit: end the watchdog and MPI and give this rank's exit status after a result every rank
// agreed on (rank 0 printed the error line, if any): status on rank 0, 0 on the others (mpirun ends
// the job at the first non-zero exit; were it another rank's, rank 0's line could be lost).
int mode_exit(const world *w, int status);
// mode_payload_links: the payload link of a job (payload_link.h), want = transport.payload's value:
// auto or a device transport (nccl) is collective and rank 0 says which and why (auto: NCCL when
// every rank has a GPU of its own, else MPI); mpi opens the MPI transport, quietly. -1 (rank 0
// printed the error) when a device transport was asked for and cannot be had.
int mode_payload_links(const world *w, const char *want, backend *be, payload_link **links);
// mode_watch_gradients: the watchdog polls the students' gradient communicators for NCCL's errors.
void mode_watch_gradients(void);
// mode_run_teachers: the run of a mode whose every rank is a teacher (dump-features, regenerate):
// every peer watched, a teacher group's payload links opened (NCCL when they can), work run, then
// the links, the backend and the watchdog closed. work returns 0 or -1 (its error printed by
// itself); the rank's exit status.
typedef int (*mode_teacher_work)(const world *w, const config *cfg, backend *be, payload_link *links);
int mode_run_teachers(mode_job *j, mode_teacher_work work);
// mode_plan_roles: --plan's first lines for a mode: the roles of the world the launcher gives
// (world_size; -1: the configured counts) as the job assigns them, and the backend planned for
// (not opened) into *w and *be; prints "plan: T teacher(s) + S student(s), mode M; ..." when print.
int mode_plan_roles(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print, world *w,
                    backend *be);
// mode_groups_check: the target's layers split into the teacher groups' stages (rank 0).
int mode_groups_check(const world *w, const config *cfg);
