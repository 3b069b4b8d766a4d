// mode_regenerate.c: `--mode regenerate`: every rank a teacher; the target answers the prompts of
// regenerate.prompts, written as the training set regenerate.out (teacher/regenerate.h). The
// frame locks regenerate.out (OUT.lock beside it) and refuses what regenerate did not write
// (teacher/regen_output.h); regenerate compares an earlier output's settings with its own.
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/comm/watchdog.h"
#include "common/core/bytes.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/kernels/ops.h"
#include "modes/mode_claim.h"
#include "teacher/regen_output.h"
#include "teacher/regenerate.h"
#include "teacher/target.h"
#include "teacher/target_config.h"

static void regen_inputs(const config *cfg, mode_paths *in) {
    mode_paths_add(in, "target.path", cfg->target_path, 1);
    mode_paths_add(in, "regenerate.prompts", cfg->regen_prompts, 0);
}

// regenerate.out, and what the job makes beside it: its lock and its parts directory.
static void regen_outputs(const config *cfg, mode_paths *out) {
    mode_paths_add(out, "regenerate.out", cfg->regen_out, 0);
    mode_paths_add_beside(out, "regenerate.out's lock", "regenerate.out", cfg->regen_out, ".lock", 0);
    mode_paths_add_beside(out, "regenerate.out's parts", "regenerate.out", cfg->regen_out, ".parts", 1);
}

static int regen_needs(const config *cfg) {
    if (!cfg->target_path[0]) return error_set("regenerate needs target.path (the target model directory)");
    if (!cfg->regen_prompts[0]) return error_set("regenerate needs regenerate.prompts (JSONL, {\"input_ids\": [...]} per line)");
    if (!cfg->regen_out[0]) return error_set("regenerate needs regenerate.out (the training set to write)");
    return 0;
}

static int regen_claim(const config *cfg, int dry) {
    struct stat st;
    if (stat(cfg->regen_out, &st) == 0 && S_ISDIR(st.st_mode)) return regen_output_claim(cfg, dry); // (refused)
    if (mode_claim_lock_file("regenerate.out", cfg->regen_out, dry)) return -1;
    return regen_output_claim(cfg, dry);
}

static int regen_check_inputs(const world *w, const config *cfg) {
    if (fs_check_regular(cfg->regen_prompts, "regenerate.prompts")) return -1;
    return mode_groups_check(w, cfg);
}

// --plan: the roles and the target's weights; the decode's caches depend on the prompts' lengths
// (regenerate.max_len, or the longest prompt + regenerate.max_new_tokens): --preflight plans them.
static int regen_plan(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print) {
    if (!cfg->target_path[0])
        return error_set("--plan needs target.path, the target model directory (its config.json is enough: no weight is read)");
    world w;
    backend be;
    if (mode_plan_roles(cfg, want, world_size, ranks_on_host, print, &w, &be)) return -1;
    target_config tc;
    if (target_config_load(&tc, cfg->target_path)) return -1;
    if (print) {
        char b[32];
        printf("teacher memory plan (each of %d teacher rank(s), %s)\n  %-26s %12s%s\n"
               "  the decode's KV caches depend on the prompts' lengths: --preflight plans them\n",
               w.teachers, be.name, "target weights", bytes_format(target_weight_bytes(&tc, ops_act_dtype(&be)), b, sizeof b),
               w.group_size > 1 ? "  (the whole target: a teacher group's stages share it)" : "");
        fflush(stdout);
    }
    return 0;
}

static int regen_run(mode_job *j) { return mode_run_teachers(j, teacher_regenerate); }

const mode_def mode_regenerate = {
    .name = "regenerate",
    .what = "every rank a teacher: the target answers regenerate.prompts, written as the training set regenerate.out",
    .roles = WORLD_RULE_TEACHERS,
    .preflight = MODE_PF_TARGET | MODE_PF_PROMPTS | MODE_PF_OUTPUT | MODE_PF_DECODE,
    .stops = 1,
    .inputs = regen_inputs,
    .outputs = regen_outputs,
    .needs = regen_needs,
    .claim = regen_claim,
    .check_inputs = regen_check_inputs,
    .plan = regen_plan,
    .run = regen_run,
};
