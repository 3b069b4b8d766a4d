// preflight_rows.h: `--preflight`'s rows (docs/preflight.md): what its frame (src/preflight.c) and
// the checks share, and the hooks a mode's table entry names (mode_def.preflight).
//
// A row is a check, a rank (-1: the job as a whole), a result and a one-line detail. The frame
// assigns the roles and opens the backend (the world and backend rows), asks the mode for the
// target's shape and for each role's memory plan, runs the rows every mode has (preflight_rows.c:
// memory, pinned memory, peer access, /dev/shm, nccl), then the mode's own rows (the target, the
// data, the prompts, the directory or the output it writes: its checks, each where it runs),
// gathers them on rank 0 and prints one table sorted by check (the rows every mode has first, then
// the mode's in the order its entry lists them) and rank. The checks several modes share are in
// preflight_job.c; a mode's own are in its file.
#pragma once

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/comm/world.h"
#include "common/core/config.h"
#include "modes/mode.h"
#include "student/model/drafter_config.h"
#include "teacher/target_config.h"
#include "teacher/teacher_plan.h"

typedef enum { PF_OK = 0, PF_WARN, PF_FAIL, PF_SKIP } pf_result;

// The rows every mode has, in the table's order; the mode's own checks follow (PF_MODE_ROWS + i
// for its i-th check).
enum { PF_WORLD = 0, PF_BACKEND, PF_MEMORY, PF_PINNED, PF_PEER, PF_SHM, PF_NCCL, PF_MODE_ROWS };

#define PF_MAX_ROWS 16 // of one rank
#define PF_DETAIL 480

typedef struct {
    int32_t check, rank, result, pad; // rank -1: the job as a whole
    char detail[PF_DETAIL];
} pf_row;

typedef struct { // one rank's rows, gathered as bytes
    int32_t n, pad;
    pf_row row[PF_MAX_ROWS];
} pf_rows;

// What every rank tells every other (all-gathered as bytes) for the rows every mode has.
typedef struct {
    char host[MPI_MAX_PROCESSOR_NAME];
    char bus[32];              // the GPU's PCI bus id ("" on the CPU or when unknown)
    int32_t role, cuda, device_id, pad; // cuda: the rank's backend is a device (backend_caps.device)
    int64_t need;              // bytes this rank's role allocates on its device (-1: unknown)
    int64_t free_b, total_b;   // its device's free and total memory (host RAM on the CPU)
    int64_t pinned;            // page-locked host memory its role asks for (-1: unknown)
} pf_info;

// What the checks read: the world (roles assigned), the configuration, the mode, the backend this
// rank opened and the target's shape as far as the mode's shape hook read it.
typedef struct pf_ctx {
    world *w;
    const config *cfg;
    const mode_def *mode;      // the mode's table entry: its roles, its checks
    int offline;               // a training job from data.features (the mode's roles: world_want.offline)
    backend be;
    int have_be;
    target_config target_cfg;  // the target's config.json
    int have_target_cfg;
    teacher_contract contract; // layer ids, top-k, batch size
    int have_contract;         // the shape is known as far as the mode's memory plans need it
    drafter_config drafter_cfg; // the drafter's shape (for the student plan and the checkpoint size)
    int have_drafter_cfg;
    char target_err[PF_DETAIL], drafter_err[PF_DETAIL];
    void *mode_state;          // what a mode's shape hook keeps for its rows (malloc'd; the frame frees it)
    int check;                 // the mode check running now (its row's check: PF_MODE_ROWS + i)
    pf_rows rows;
} pf_ctx;

// A role's memory plan on this rank: the bytes it allocates on its device, -1 when it cannot be
// known; detail (n bytes) the row's text, *res its result when -1 (FAIL or SKIP).
typedef int64_t (*pf_need_fn)(pf_ctx *x, char *detail, size_t n, pf_result *res);

// Where a mode's check runs: once per host (the host's local rank 0: what every rank of the host
// reads the same way), on rank 0, or on the first student (the rank that writes a training job's
// run.dir; rank 0 without students).
typedef enum { PF_ON_EACH_HOST = 0, PF_ON_RANK0, PF_ON_FIRST_STUDENT } pf_where;

typedef struct {
    const char *name; // the table's check column ("target", "run.dir")
    pf_where where;
    void (*run)(pf_ctx *x, const char *host); // adds its row(s): pf_mode_row
} pf_check;

#define PF_MODE_CHECKS 4

// What --preflight checks for a mode (mode_def.preflight), besides the world, the backend, the
// memory plans against the devices, pinned memory, peer access, /dev/shm and NCCL. NULL hooks:
// nothing of the kind (no shape: no memory plan; no pinned: none planned).
typedef struct mode_preflight {
    // The run's own check of the role counts (train_check_roles), after the world's rule. -1 with error_set.
    int (*roles)(const world *w, const config *cfg);
    // On every rank before the memory plans: the target's shape into x (tc, ct, dc and have_*,
    // target_err / drafter_err) and what the mode's rows read once (x->mode_state).
    void (*shape)(pf_ctx *x);
    pf_need_fn teacher, student; // each role's memory plan (called when the shape is known)
    // Page-locked host memory this rank asks for (job_plan_pinned_rank); -1: unknown.
    int64_t (*pinned)(pf_ctx *x);
    pf_check checks[PF_MODE_CHECKS]; // its own rows, in the table's order (a NULL name ends)
} mode_preflight;

// pf_add: one row of check (PF_* or a mode check) for rank (-1: the job); dropped past PF_MAX_ROWS.
__attribute__((format(printf, 5, 6))) void pf_add(pf_ctx *x, int check, int rank, pf_result result, const char *fmt,
                                                  ...);
// pf_mode_row: a row of the mode check running now (x->check), for this rank.
__attribute__((format(printf, 3, 4))) void pf_mode_row(pf_ctx *x, pf_result result, const char *fmt, ...);
// pf_bytes: b as bytes_format writes it into buf (32 bytes).
const char *pf_bytes(size_t b, char *buf);

// The rows every mode has (preflight_rows.c), after the infos are all-gathered (all: one per rank).
// pf_memory: this rank's plan (plan_detail, plan_res when it has none) against its device's memory,
// summed over the ranks sharing the device.
void pf_memory(pf_ctx *x, const pf_info *all, const char *plan_detail, pf_result plan_res);
// pf_pinned: once per host (the caller: its local rank 0): the host's ranks' pinned memory against
// `ulimit -l` and MemAvailable.
void pf_pinned(pf_ctx *x, const pf_info *all);
// pf_peer: a student GPU and the teacher GPUs on its host: peer access.
void pf_peer(pf_ctx *x, const pf_info *all);
// pf_nccl: NCCL among the GPU ranks (collective: every rank calls it).
void pf_nccl(pf_ctx *x, const pf_info *all);
// pf_shm: /dev/shm's size (once per host).
void pf_shm(pf_ctx *x, const char *host);
