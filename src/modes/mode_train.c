// mode_train.c: `--mode train`: teachers serve batches, students train the drafter (with
// data.features: every rank a student, reading the offline features). run.dir is checked by the
// table's claim (rank 0 before the run, and --preflight) and taken by the first student for the
// run's life (student_train: run_dir_take, the same code; docs/faults.md).
#include "modes/mode_train.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/run_dir.h"
#include "common/data/dataset.h"
#include "student/train/checkpoint.h"
#include "modes/job_plan.h"
#include "modes/preflight_job.h"
#include "student/train/train.h"
#include "student/train/train_setup.h"
#include "teacher/teacher_loop.h"

void mode_train_inputs(const config *cfg, mode_paths *in) {
    mode_paths_add(in, "target.path", cfg->target_path, 1);
    mode_paths_data(in, cfg);
    mode_paths_add(in, "eval.drafter", cfg->eval_drafter, 1); // (set in eval only)
    struct stat st; // the drafter's shape: a config.json, or a directory standing for its config.json
    int dir = cfg->drafter_config_path[0] && stat(cfg->drafter_config_path, &st) == 0 && S_ISDIR(st.st_mode);
    mode_paths_add(in, "drafter.config", cfg->drafter_config_path, dir);
}

// What a job writes, replaces or removes in run.dir (run_dir.h): a training job's files, an evaluation's eval.json.
static int train_ours(const char *name) { return run_dir_ours(name, 0); }
static int eval_ours(const char *name) { return run_dir_ours(name, 1); }

void mode_train_outputs(const config *cfg, mode_paths *out) { mode_paths_add_dir(out, "run.dir", cfg->run_dir, train_ours); }
void mode_eval_outputs(const config *cfg, mode_paths *out) { mode_paths_add_dir(out, "run.dir", cfg->run_dir, eval_ours); }

// Always dry here: the lock is the first student's, who holds it for the run (a teacher rank 0
// may end before the students' last export); run_dir_take makes the same checks there, for real.
int mode_train_claim(const config *cfg, int dry) {
    (void)dry;
    return run_dir_take(cfg->run_dir, cfg->resume, cfg->overwrite, 0, 1, NULL);
}

int mode_eval_claim(const config *cfg, int dry) {
    (void)dry;
    return run_dir_take(cfg->run_dir, cfg->resume, cfg->overwrite, 1, 1, NULL);
}

int mode_train_prepare(config *cfg) {
    if (!cfg->run_dir[0]) return error_set("run.dir is empty: a training job needs a run directory");
    if (run_dir_refuse_unsafe("run.dir", cfg->run_dir)) return -1;
    if (!cfg->data_features[0] && cfg->max_tokens_per_batch > cfg->teacher_max_tokens)
        return error_set("data.max_tokens_per_batch = %lld is more than teacher.max_tokens = %lld: in train mode the "
                         "teachers run the students' packed batches whole (lower the one or raise the other)",
                         (long long)cfg->max_tokens_per_batch, (long long)cfg->teacher_max_tokens);
    return 0;
}

int mode_train_needs(const config *cfg) {
    if (!cfg->target_path[0] || (!config_data_count(cfg) && !cfg->data_features[0]))
        return error_set("%s needs target.path (the target model directory) and data.path (a training set), "
                         "data.sets (several) or data.features (an offline feature directory)", cfg->mode);
    return 0;
}

int mode_train_check_inputs(const world *w, const config *cfg) {
    int offline = cfg->data_features[0] != '\0';
    if (!offline && dataset_preflight(cfg)) return -1; // the training sets exist (cheap, one line)
    if (train_check_inputs(w, cfg)) return -1;
    return offline ? 0 : mode_groups_check(w, cfg);
}

int mode_train_plan(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print) {
    return job_plan_train(cfg, want, world_size, ranks_on_host, print);
}

static void train_report(const config *cfg, char *buf, size_t n) {
    int found = 0;
    int64_t step = checkpoint_latest(cfg->run_dir, &found);
    if (found)
        snprintf(buf, n, "last checkpoint: step %lld in %s/checkpoints (resume with the same command and --run.resume=true)",
                 (long long)step, cfg->run_dir);
    else if (cfg->ckpt_every > 0)
        snprintf(buf, n, "no checkpoint yet in %s/checkpoints", cfg->run_dir);
    else
        snprintf(buf, n, "no checkpoints (checkpoint.every = 0)");
}

// Who watches whom in a training job: a student every rank, a teacher the students and the other
// stages of its group.
static int run_teachers, run_group_size = 1;
static int train_watches(int watcher, int peer) {
    return watcher >= run_teachers || peer >= run_teachers || watcher / run_group_size == peer / run_group_size;
}

int mode_train_run(mode_job *j) {
    world *w = j->w;
    const config *cfg = j->cfg;
    int offline = cfg->data_features[0] != '\0';
    if (w->size > 1) {
        run_teachers = w->teachers, run_group_size = w->group_size;
        watchdog_set_watchers(train_watches);
        mode_watch_gradients(); // the students' gradient communicators (links: below)
    }
    payload_link *links = NULL; // offline: the MPI transport, unused
    if (mode_payload_links(w, offline ? "mpi" : cfg->payload, j->be, &links)) {
        watchdog_finalize();
        return 1;
    }
    MPI_Comm role_comm; // the students' all-reduce runs among students only
    watchdog_wait_begin(0, w->size - 1, 5, "the other ranks to split the roles");
    mpi_check(MPI_Comm_split(MPI_COMM_WORLD, w->role, w->rank, &role_comm));
    watchdog_wait_end();
    int rc = w->role == ROLE_TEACHER ? teacher_serve(w, cfg, j->be, links) : student_train(w, cfg, j->be, role_comm, links);
    if (rc == WORLD_REPORTED_ELSEWHERE) { // another rank of the role prints the reason and ends the job
        for (int i = 0; i < 600; i++) {
            struct timespec pause = {0, 100 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        fatal("the rank that stopped the job did not end it within 60 s");
    }
    if (rc) fatal("%s", error_msg()); // one line naming the rank; MPI_Abort so no peer waits forever
    for (int r = 0; r < w->size; r++) watchdog_watch(r, 0); // the peers finish now: their exit is no news
    watchdog_add_check(NULL, NULL);                        // before the links it polls are closed
    payload_link_close(links);
    mpi_check(MPI_Comm_free(&role_comm));
    backend_close(j->be);
    watchdog_finalize();
    return 0;
}

const mode_preflight mode_train_preflight = {
    .roles = train_check_roles, // the run's own check of a training job's roles
    .shape = pf_job_shape,
    .teacher = pf_job_teacher,
    .student = pf_job_student,
    .pinned = pf_job_pinned,
    .checks = {{"target", PF_ON_EACH_HOST, pf_job_target},
               {"data", PF_ON_EACH_HOST, pf_job_data},
               {"run.dir", PF_ON_FIRST_STUDENT, pf_job_run_dir}}, // the first student writes run.dir
};

const mode_def mode_train = {
    .name = "train",
    .what = "teachers serve batches, students train the drafter (data.features: every rank a student)",
    .roles = WORLD_RULE_JOB,
    .preflight = &mode_train_preflight,
    .stops = 1,
    .inputs = mode_train_inputs,
    .outputs = mode_train_outputs,
    .prepare = mode_train_prepare,
    .needs = mode_train_needs,
    .claim = mode_train_claim,
    .check_inputs = mode_train_check_inputs,
    .plan = mode_train_plan,
    .report = train_report,
    .run = mode_train_run,
};
