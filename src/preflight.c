// preflight.c: `dflash_rank --preflight`'s frame (see preflight.h and docs/preflight.md).
//
// The frame assigns the roles and opens the backend (the world and backend rows), asks the mode's
// entry (mode_def.preflight, modes/preflight_rows.h) for the target's shape and each role's memory
// plan, runs the rows every mode has (modes/preflight_rows.c) and then the mode's own checks, each
// where its entry says; rank 0 gathers the rows and prints one table, the summary and the exit
// status. Every rank makes the same collective calls in the same order whatever fails locally, so
// a failing check never leaves a peer waiting: info all-gathered, the NCCL test among the GPU
// ranks only, then the rows gathered.
#include "preflight.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/backend/gpu_info.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/version.h"
#include "modes/preflight_rows.h"

static const char *const pf_result_names[] = {"ok", "WARN", "FAIL", "skipped"};
// The rows every mode has; a mode's own checks follow, named by its entry.
static const char *const pf_check_names[PF_MODE_ROWS] = {"world", "backend", "memory", "pinned memory",
                                                         "peer access", "/dev/shm", "nccl"};

static const char *pf_check_name(const mode_def *mode, int check) {
    return check < PF_MODE_ROWS ? pf_check_names[check] : mode->preflight->checks[check - PF_MODE_ROWS].name;
}

// ----------------------------------------------------------------------------- world and backend

static void pf_world(pf_ctx *x) {
    world *w = x->w;
    const config *cfg = x->cfg;
    const mode_preflight *pf = x->mode->preflight;
    world_want want; // the roles exactly as the run assigns them (the mode's rule, world.h)
    world_want_make(x->mode->roles, cfg, &want);
    if (world_assign_roles(w, w->rank, w->size, &want)) {
        char msg[PF_DETAIL];
        snprintf(msg, sizeof msg, "%s", error_msg());
        world_roles(w, w->rank, w->size, -1, 1); // to go on with the other checks
        if (w->rank == 0)
            pf_add(x, PF_WORLD, -1, PF_FAIL, "%s; the rows below assume %d teacher(s) + 1 student", msg, w->teachers);
        return;
    }
    // teacher groups (world.teacher_group_size): the teacher ranks a multiple of G, as the run forms them
    char groups[96] = "";
    if (world_set_groups(w, want.group_size)) {
        char msg[PF_DETAIL];
        snprintf(msg, sizeof msg, "%s", error_msg());
        world_set_groups(w, 1); // to go on with the other checks
        if (w->rank == 0) pf_add(x, PF_WORLD, -1, PF_FAIL, "%s; the rows below assume teachers of one rank", msg);
        return;
    }
    if (w->group_size > 1)
        snprintf(groups, sizeof groups, " in %d group(s) of %d stage rank(s)", w->groups, w->group_size);
    int cross = 0; // every group on one host, unless asked otherwise: the run's check at start (collective)
    if (w->group_size > 1) {
        watchdog_wait_begin(0, w->size - 1, 5, "the other ranks' host names");
        cross = world_check_group_hosts(w, cfg->teacher_group_cross_node);
        watchdog_wait_end();
    }
    if (w->rank != 0) return;
    if (cross)
        pf_add(x, PF_WORLD, -1, PF_FAIL, "%s", error_msg());
    else if (pf && pf->roles && pf->roles(w, cfg)) // the run's own check of its roles (the mode's entry)
        pf_add(x, PF_WORLD, -1, PF_FAIL, "%s", error_msg());
    else
        pf_add(x, PF_WORLD, -1, PF_OK, "%d rank(s): %d teacher(s)%s + %d student(s), mode %s%s", w->size, w->teachers,
               groups, w->students, cfg->mode, x->offline ? " (offline features)" : "");
}

static void pf_backend(pf_ctx *x, const char *host) {
    world *w = x->w;
    x->have_be = backend_open(&x->be, x->cfg->device, w->local_rank) == 0;
    if (!x->have_be) {
        pf_add(x, PF_BACKEND, w->rank, PF_FAIL, "%s %d on %s: %s", role_name(w->role), w->role_index, host, error_msg());
        return;
    }
    int fell_back = !x->be.caps.device && backend_compiled_cuda() && strcmp(x->cfg->device, "auto") == 0;
    pf_add(x, PF_BACKEND, w->rank, fell_back ? PF_WARN : PF_OK, "%s %d on %s (local rank %d): %s%s", role_name(w->role),
           w->role_index, host, w->local_rank, x->be.name,
           fell_back ? "; run.device auto found no usable GPU (see the log line above), so this rank runs on the CPU" : "");
}

// What this rank tells the others: its host, its device, its role's memory plan (plan_detail and
// *plan_res when it has none) and its pinned host memory, as the mode's entry plans them.
static void pf_plan(pf_ctx *x, const char *host, pf_info *me, char *plan_detail, size_t n, pf_result *plan_res) {
    const world *w = x->w;
    const mode_preflight *pf = x->mode->preflight;
    snprintf(me->host, sizeof me->host, "%s", host);
    me->role = w->role;
    me->need = -1;
    me->pinned = -1;
    if (!x->have_be) {
        snprintf(plan_detail, n, "no backend (see the backend row)");
        return;
    }
    me->cuda = x->be.caps.device;
    me->device_id = x->be.device_id;
    if (me->cuda && gpu_pci_bus_id(x->be.device_id, me->bus, sizeof me->bus)) me->bus[0] = '\0';
    size_t fr = 0, tot = 0;
    backend_mem_info(&x->be, &fr, &tot);
    me->free_b = (int64_t)fr, me->total_b = (int64_t)tot;
    if (!x->have_contract) {
        snprintf(plan_detail, n, "no memory plan without the target's shape (see the target row)");
        return;
    }
    pf_need_fn need = w->role == ROLE_TEACHER ? pf->teacher : pf->student;
    if (need) me->need = need(x, plan_detail, n, plan_res);
    else snprintf(plan_detail, n, "mode %s plans no memory for a %s", x->cfg->mode, role_name(w->role));
    me->pinned = pf->pinned ? pf->pinned(x) : 0; // (dump-features and regenerate pin nothing)
}

// The mode's own checks, each where its entry says it runs.
static void pf_mode_checks(pf_ctx *x, const char *host) {
    const world *w = x->w;
    const mode_preflight *pf = x->mode->preflight;
    int first_student = w->teachers < w->size ? w->teachers : 0;
    for (int i = 0; pf && i < PF_MODE_CHECKS && pf->checks[i].name; i++) {
        const pf_check *c = &pf->checks[i];
        int here = c->where == PF_ON_EACH_HOST ? w->local_rank == 0 : c->where == PF_ON_RANK0 ? w->rank == 0
                                                                                             : w->rank == first_student;
        if (!here) continue;
        x->check = PF_MODE_ROWS + i;
        c->run(x, host);
    }
}

// ----------------------------------------------------------------------------- the table

static int pf_row_cmp(const void *a, const void *b) {
    const pf_row *x = a, *y = b;
    if (x->check != y->check) return x->check < y->check ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int pf_print(const mode_def *mode, const pf_rows *all, int size) {
    int n = 0;
    for (int r = 0; r < size; r++) n += all[r].n;
    pf_row *rows = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *rows);
    n = 0;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < all[r].n; i++) rows[n++] = all[r].row[i];
    qsort(rows, (size_t)n, sizeof *rows, pf_row_cmp);
    int fails = 0, warns = 0;
    printf("%-12s %4s  %-7s  %s\n", "check", "rank", "result", "detail");
    for (int i = 0; i < n; i++) {
        char rank[16];
        if (rows[i].rank < 0) snprintf(rank, sizeof rank, "-");
        else snprintf(rank, sizeof rank, "%d", rows[i].rank);
        printf("%-12s %4s  %-7s  %s\n", pf_check_name(mode, rows[i].check), rank, pf_result_names[rows[i].result],
               rows[i].detail);
        fails += rows[i].result == PF_FAIL;
        warns += rows[i].result == PF_WARN;
    }
    if (fails) printf("preflight: %d problem(s)%s\n", fails, warns ? " and warnings (see FAIL and WARN above)" : " (see FAIL above)");
    else if (warns) printf("preflight: ok (%d warning(s): see WARN above)\n", warns);
    else printf("preflight: ok\n");
    fflush(stdout);
    free(rows);
    return fails;
}

int preflight_run(world *w, const config *cfg, const mode_def *mode) {
    static const mode_preflight none = {0}; // a mode without an entry: the rows every mode has
    mode_def m = *mode;
    if (!m.preflight) m.preflight = &none;
    pf_ctx *x = xcalloc(1, sizeof *x);
    x->w = w;
    x->cfg = cfg;
    x->mode = &m;
    world_want want;
    world_want_make(mode->roles, cfg, &want);
    x->offline = want.offline;
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    mpi_check(MPI_Get_processor_name(host, &len));

    // Local checks that the others need to know about.
    pf_world(x);
    pf_backend(x, host);
    if (m.preflight->shape) m.preflight->shape(x);
    pf_info *me = xcalloc(1, sizeof *me);
    char plan_detail[PF_DETAIL] = "";
    pf_result plan_res = PF_SKIP;
    pf_plan(x, host, me, plan_detail, sizeof plan_detail, &plan_res);
    pf_info *all = xcalloc((size_t)w->size, sizeof *all);
    watchdog_allgather(me, all, (int)sizeof *me, MPI_BYTE, MPI_COMM_WORLD, 0, w->size - 1, 5,
                       "the other ranks' preflight checks");

    pf_memory(x, all, plan_detail, plan_res);
    if (w->local_rank == 0) pf_pinned(x, all);
    pf_peer(x, all);
    pf_nccl(x, all);
    if (w->local_rank == 0) pf_shm(x, host); // once per host
    pf_mode_checks(x, host);

    pf_rows *gathered = w->rank == 0 ? xmalloc((size_t)w->size * sizeof *gathered) : NULL;
    watchdog_gather(&x->rows, gathered, (int)sizeof x->rows, 0, "the other ranks' preflight rows");
    int fails = 0;
    if (w->rank == 0) {
        printf("preflight: dflash_rank %s, %d rank(s), mode %s\n", DFLASH_VERSION, w->size, cfg->mode);
        fails = pf_print(&m, gathered, w->size);
    }
    watchdog_bcast(&fails, (int)sizeof fails, 0, "the preflight table");
    if (x->have_be) backend_close(&x->be);
    free(x->mode_state);
    free(gathered);
    free(all);
    free(me);
    free(x);
    return fails && w->rank == 0 ? 1 : 0; // rank 0's exit is the one mpirun names (as mode_exit)
}
