// mode_check.c: `--mode check`: every rank starts, takes its role (world.teachers +
// world.students) and backend, opens the inputs it would use (teachers: the target directory;
// students: the training set); rank 0 prints one line per rank. Writes nothing.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/comm/watchdog.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/data/dataset.h"
#include "common/data/safetensors.h"
#include "modes/mode.h"
#include "modes/preflight_job.h"
#include "teacher/target_config.h"

static void check_inputs_of(const config *cfg, mode_paths *in) {
    mode_paths_add(in, "target.path", cfg->target_path, 1);
    mode_paths_data(in, cfg);
}

// What this rank would open, as one line for rank 0's table. Returns 0 or 1.
static int check_line(const world *w, const config *cfg, backend *be, char *line, size_t n) {
    int used = snprintf(line, n, "rank %d  %-7s %d/%d  local %d  backend %s", w->rank, role_name(w->role),
                        w->role_index, w->role == ROLE_TEACHER ? w->teachers : w->students, w->local_rank,
                        be->name);
    if (w->role == ROLE_TEACHER && cfg->target_path[0]) {
        st_dir d;
        target_config tc; // its config.json, as the job reads it (bounds included), then the files
        if (target_config_load(&tc, cfg->target_path) || safetensors_dir_open(&d, cfg->target_path)) {
            snprintf(line + used, n - (size_t)used, "  target: %s", error_msg());
            return 1;
        }
        size_t bytes = 0;
        for (int i = 0; i < d.n; i++) bytes += d.entries[i]->nbytes;
        char b[32];
        snprintf(line + used, n - (size_t)used, "  target: %d tensors, %s in %d file(s)", d.n,
                 bytes_format(bytes, b, sizeof b), d.n_files);
        safetensors_dir_close(&d);
    }
    if (w->role == ROLE_STUDENT && config_data_count(cfg) != 0) { // each training set: its samples and tokens
        dataset ds;
        if (dataset_open(&ds, cfg, cfg->min_loss_tokens)) {
            snprintf(line + used, n - (size_t)used, "  data: %s", error_msg());
            return 1;
        }
        for (int i = 0; i < ds.n_sets && (size_t)used < n; i++) {
            const trainset *ts = &ds.sets[i];
            char name[CONFIG_STR + 48] = "";
            if (ds.n_sets > 1) snprintf(name, sizeof name, " %s (weight %g)", ts->path, ds.weights[i]);
            used += snprintf(line + used, n - (size_t)used, "  data%s: %lld usable samples of %lld, %lld tokens, %lld loss tokens",
                             name, (long long)ts->n, (long long)ts->n_raw, (long long)ts->n_tokens, (long long)ts->loss_tokens);
        }
        dataset_close(&ds);
    }
    return 0;
}

static int check_plan(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print) {
    world w;
    backend be;
    if (mode_plan_roles(cfg, want, world_size, ranks_on_host, print, &w, &be)) return -1;
    if (print) printf("mode check opens the inputs and allocates no model: no memory to plan\n");
    return 0;
}

static int check_run(mode_job *j) {
    world *w = j->w;
    char line[1024] = {0};
    int status = check_line(w, j->cfg, j->be, line, sizeof line);
    char *all = w->rank == 0 ? xmalloc(sizeof line * (size_t)w->size) : NULL;
    watchdog_gather(line, all, (int)sizeof line, 0, "the other ranks' check lines");
    status = watchdog_agree(status, "the other ranks' check lines");
    if (w->rank == 0) {
        for (int r = 0; r < w->size; r++) printf("%s\n", all + (size_t)r * sizeof line);
        printf(status ? "check: FAILED (see the lines above)\n" : "check: every rank is ready\n");
        fflush(stdout);
        free(all);
    }
    backend_close(j->be);
    return mode_exit(w, status);
}

static int check_groups(const world *w, const config *cfg) { return cfg->target_path[0] ? mode_groups_check(w, cfg) : 0; }

// --preflight: the target and the training data, each role's memory plan as a training job's.
static const mode_preflight check_preflight = {
    .shape = pf_job_shape,
    .teacher = pf_job_teacher,
    .student = pf_job_student,
    .pinned = pf_job_pinned,
    .checks = {{"target", PF_ON_EACH_HOST, pf_job_target}, {"data", PF_ON_EACH_HOST, pf_job_data}},
};

const mode_def mode_check = {
    .name = "check",
    .what = "every rank takes its role and backend, opens the inputs it would use, reports one line; writes nothing",
    .roles = WORLD_RULE_CONFIGURED,
    .preflight = &check_preflight,
    .inputs = check_inputs_of,
    .check_inputs = check_groups,
    .plan = check_plan,
    .run = check_run,
};
