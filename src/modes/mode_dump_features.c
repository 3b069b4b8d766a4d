// mode_dump_features.c: `--mode dump-features`: every rank a teacher; the offline feature file of
// data.path (or data.sets) into features.dir, sharded over the teachers, resumable
// (teacher/dump_features.h). The frame locks features.dir and refuses one holding files that
// dump-features does not write (unless run.overwrite; then only its own files are removed).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/data/dataset.h"
#include "modes/mode_claim.h"
#include "modes/preflight_job.h"
#include "teacher/dump_features.h"
#include "teacher/teacher_plan.h"

static void dump_inputs(const config *cfg, mode_paths *in) {
    mode_paths_add(in, "target.path", cfg->target_path, 1);
    mode_paths_add(in, "data.path", cfg->data_path, 0);
    for (int64_t i = 0; i < cfg->data_sets.n; i++) mode_paths_add(in, "data.sets", cfg->data_sets.v[i].path, 0);
}


static int dump_needs(const config *cfg) {
    if (!cfg->target_path[0]) return error_set("dump-features needs target.path (the target model directory)");
    if (config_data_count(cfg) == 0) return error_set("dump-features needs data.path (the training set) or data.sets");
    if (!cfg->features_dir[0]) return error_set("dump-features needs features.dir (where the feature files go)");
    return 0;
}

// The files dump-features writes in features.dir: its index, the shards, their temporaries, the lock.
static int dump_file(const char *name) {
    return strcmp(name, ".lock") == 0 || strcmp(name, "features.json") == 0 || strcmp(name, "features.json.tmp") == 0 ||
           fs_h5_name(name, "features-");
}

// features.dir: an input named like its files there is refused (run.overwrite would remove it).
static void dump_outputs(const config *cfg, mode_paths *out) {
    mode_paths_add_dir(out, "features.dir", cfg->features_dir, dump_file);
}

static int dump_claim(const config *cfg, int dry) {
    if (mode_claim_lock_dir("features.dir", cfg->features_dir, dry)) return -1;
    char name[300];
    if (mode_claim_foreign(cfg->features_dir, dump_file, name, sizeof name)) {
        if (!cfg->overwrite)
            return error_set("features.dir %s holds %s, which dump-features did not write: give features.dir a "
                             "directory of its own (--run.overwrite=true writes beside it)", cfg->features_dir, name);
    }
    if (cfg->overwrite && !dry) return mode_claim_remove_ours(cfg->features_dir, dump_file); // start over
    return 0;
}

static int dump_check_inputs(const world *w, const config *cfg) {
    if (dataset_preflight(cfg)) return -1;
    return mode_groups_check(w, cfg);
}

static int dump_plan(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print) {
    if (!cfg->target_path[0])
        return error_set("--plan needs target.path, the target model directory (its config.json is enough: no weight is read)");
    world w;
    backend be;
    if (mode_plan_roles(cfg, want, world_size, ranks_on_host, print, &w, &be)) return -1;
    config *c = xmalloc(sizeof *c); // the teachers' batches are teacher.max_tokens here
    *c = *cfg;
    c->max_tokens_per_batch = cfg->teacher_max_tokens;
    world tw = w;
    tw.rank = print ? 0 : 1; // teacher_plan_print prints on rank 0
    int rc = teacher_plan_print(&tw, c, &be);
    free(c);
    return rc;
}

static int dump_run(mode_job *j) { return mode_run_teachers(j, teacher_dump_features); }

// --preflight: the teacher's memory for batches of teacher.max_tokens, each of which its
// teacher.mem_budget must hold whole (the job refuses what does not fit).
static int64_t dump_pf_teacher(pf_ctx *x, char *detail, size_t n, pf_result *res) {
    return pf_teacher_forward(x, detail, n, res, (int)x->cfg->teacher_max_tokens, 0, 1);
}

// The training sets as dump-features reads them: every sample within teacher.max_tokens.
static void dump_pf_data(pf_ctx *x, const char *host) {
    dataset ds;
    char what[256];
    int64_t *len = NULL, longest = 0, max_tokens = x->cfg->teacher_max_tokens;
    if (pf_data_sets(x, host, &ds, what, sizeof what, &len, &longest)) return;
    if (longest > max_tokens)
        pf_mode_row(x, PF_FAIL, "%s: a sample of %lld tokens, more than teacher.max_tokens = %lld", what,
                    (long long)longest, (long long)max_tokens);
    else
        pf_mode_row(x, PF_OK, "%s; longest sample %lld tokens", what, (long long)longest);
    free(len);
    dataset_close(&ds);
}

// features.dir (the row of the directory the job writes: run.dir's): set, claimable, writable.
static void dump_pf_dir(pf_ctx *x, const char *host) {
    (void)host;
    int created = 0, have_vs = 0;
    size_t avail = 0;
    const char *dir = x->cfg->features_dir;
    if (pf_dir_writable(x, "features.dir", dir, PF_FAIL, &created, &avail, &have_vs)) return;
    char f[32];
    pf_mode_row(x, PF_OK, "features.dir %s: writable%s, %s free", dir, created ? " (created)" : "", pf_bytes(avail, f));
}

static const mode_preflight dump_preflight = {
    .shape = pf_job_shape, // the teachers' contract (feature layers, top-k) as a training job's
    .teacher = dump_pf_teacher,
    .checks = {{"target", PF_ON_EACH_HOST, pf_job_target},
               {"data", PF_ON_EACH_HOST, dump_pf_data},
               {"run.dir", PF_ON_RANK0, dump_pf_dir}},
};

const mode_def mode_dump_features = {
    .name = "dump-features",
    .what = "every rank a teacher: the offline feature file of the training data into features.dir (resumable)",
    .roles = WORLD_RULE_TEACHERS,
    .preflight = &dump_preflight,
    .stops = 1,
    .inputs = dump_inputs,
    .outputs = dump_outputs,
    .needs = dump_needs,
    .claim = dump_claim,
    .check_inputs = dump_check_inputs,
    .plan = dump_plan,
    .run = dump_run,
};
