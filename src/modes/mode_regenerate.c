// mode_regenerate.c: `--mode regenerate`: every rank a teacher; the target answers the prompts of
// regenerate.prompts, written as the training set regenerate.out (teacher/regenerate.h). The
// frame locks regenerate.out (OUT.lock beside it) and refuses what regenerate did not write
// (teacher/regen_output.h); regenerate compares an earlier output's settings with its own.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/comm/watchdog.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/kernels/ops.h"
#include "common/data/jsonl_sample.h"
#include "modes/mode_claim.h"
#include "modes/preflight_job.h"
#include "teacher/regen_output.h"
#include "teacher/regenerate.h"
#include "teacher/target.h"
#include "teacher/target_config.h"
#include "teacher/target_decode.h"

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

// ----------------------------------------------------------------------------- --preflight

// What the prompts row and the decode's memory read: regenerate.prompts scanned once.
typedef struct {
    int64_t prompts, longest; // the prompts and the longest's tokens (longest -1: unreadable)
    char err[PF_DETAIL];
} regen_pf_prompts;

// regenerate.prompts read as regenerate reads it: every non-blank line a prompt whose ids lie in
// the target's vocabulary; the count and the longest into p (longest -1 and err on an error).
static void regen_pf_scan(pf_ctx *x, regen_pf_prompts *p) {
    const config *cfg = x->cfg;
    p->longest = -1;
    if (!cfg->regen_prompts[0]) {
        snprintf(p->err, sizeof p->err, "regenerate.prompts is not set");
        return;
    }
    FILE *f = fs_fopen_regular(cfg->regen_prompts, "regenerate.prompts");
    if (!f) {
        snprintf(p->err, sizeof p->err, "%s", error_msg());
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int64_t line_no = 0, n = 0, longest = 0;
    jsonl_sample smp;
    memset(&smp, 0, sizeof smp);
    int bad = 0;
    while (!bad && (got = getline(&line, &cap, f)) != -1) {
        line_no++;
        if (jsonl_line_blank(line, (size_t)got)) continue;
        if (jsonl_sample_parse(line, (size_t)got, x->have_target_cfg ? x->target_cfg.vocab : 0, &smp) < 0) {
            snprintf(p->err, sizeof p->err, "regenerate.prompts %s line %lld: %s", cfg->regen_prompts,
                     (long long)line_no, error_msg());
            bad = 1;
            break;
        }
        n++;
        if (smp.n > longest) longest = smp.n;
    }
    if (!bad && ferror(f))
        bad = 1, snprintf(p->err, sizeof p->err, "regenerate.prompts %s: read error", cfg->regen_prompts);
    if (!bad && n == 0)
        bad = 1, snprintf(p->err, sizeof p->err, "regenerate.prompts %s: no prompt (the file has no non-blank line)",
                          cfg->regen_prompts);
    free(line);
    jsonl_sample_free(&smp);
    fclose(f);
    if (bad) return;
    p->prompts = n, p->longest = longest;
}

// The shape: the target's config alone (the decode has no feature layers and no drafter), then the prompts.
static void regen_pf_shape(pf_ctx *x) {
    if (pf_target_config(x) == 0) x->have_contract = 1;
    regen_pf_prompts *p = xcalloc(1, sizeof *p);
    x->mode_state = p;
    regen_pf_scan(x, p);
}

// The teacher: its stage's weights + the decoder's arena (the KV caches of its slots) as
// regenerate sizes them: regenerate.max_seqs slots (0: 8, or with teacher.mem_budget at least one)
// of regenerate.max_len positions (0: the longest prompt + regenerate.max_new_tokens - 1, at most
// the target's positions).
static int64_t regen_pf_teacher(pf_ctx *x, char *detail, size_t n, pf_result *res) {
    const config *cfg = x->cfg;
    const world *w = x->w;
    const regen_pf_prompts *p = x->mode_state;
    if (p->longest < 0) {
        *res = PF_SKIP;
        snprintf(detail, n, "teacher: no decode plan without the prompts (see the prompts row)");
        return -1;
    }
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = x->target_cfg;
    m.be = &x->be;
    int G = w->group_size > 1 ? w->group_size : 1;
    char who[96] = "teacher";
    if (G > 1) {
        int64_t *bounds = xmalloc(((size_t)G + 1) * sizeof *bounds);
        int rc = target_stage_split(&x->target_cfg, ops_act_dtype(&x->be), G, bounds);
        m.layer_begin = bounds[w->stage], m.layer_end = bounds[w->stage + 1];
        free(bounds);
        if (rc) {
            *res = PF_FAIL;
            snprintf(detail, n, "teacher: %s", error_msg());
            return -1;
        }
        snprintf(who, sizeof who, "teacher stage %d/%d, layers %lld-%lld", w->stage, G, (long long)m.layer_begin,
                 (long long)m.layer_end - 1);
    }
    int64_t L = cfg->regen_max_len > 0 ? cfg->regen_max_len : p->longest + cfg->regen_max_new_tokens - 1;
    if (cfg->regen_max_len == 0 && L > x->target_cfg.max_positions) L = x->target_cfg.max_positions;
    if (L > INT32_MAX / 2) L = INT32_MAX / 2;
    int64_t seqs = cfg->regen_max_seqs > 0 ? cfg->regen_max_seqs : cfg->teacher_mem_budget > 0 ? 1 : 8;
    if (seqs > cfg->regen_shard_prompts) seqs = cfg->regen_shard_prompts;
    decode_sampling smp = {.temperature = (float)cfg->regen_temperature, .top_p = (float)cfg->regen_top_p,
                           .top_k = (int)cfg->regen_top_k};
    size_t weights = target_model_weight_bytes(&m);
    size_t cache = target_decoder_bytes(&m, (int)seqs, (int)L, (int)cfg->teacher_vocab_tile, &smp);
    char a[32], b[32], c[32];
    if (cfg->teacher_mem_budget > 0 && weights + cache > (size_t)cfg->teacher_mem_budget) {
        *res = PF_FAIL;
        snprintf(detail, n, "%s: teacher.mem_budget %s does not hold the weights (%s) and %lld sequence(s) of %lld cached "
                            "positions (%s)", who, pf_bytes((size_t)cfg->teacher_mem_budget, a), pf_bytes(weights, b),
                 (long long)seqs, (long long)L, pf_bytes(cache, c));
        return -1;
    }
    snprintf(detail, n, "%s: weights %s + decode %s (%lld slot(s) of %lld positions) = %s", who, pf_bytes(weights, a),
             pf_bytes(cache, b), (long long)seqs, (long long)L, pf_bytes(weights + cache, c));
    return (int64_t)(weights + cache);
}

static void regen_pf_target(pf_ctx *x, const char *host) { pf_target_row(x, host, 0); }

static void regen_pf_prompts_row(pf_ctx *x, const char *host) {
    const regen_pf_prompts *p = x->mode_state;
    if (p->longest < 0) {
        pf_mode_row(x, PF_FAIL, "%s: %s", host, p->err);
        return;
    }
    pf_mode_row(x, PF_OK, "%s: %s: %lld prompt(s), the longest %lld tokens", host, x->cfg->regen_prompts,
                (long long)p->prompts, (long long)p->longest);
}

// regenerate.out: not an input, no input under what it makes, claimable (no other job holds it,
// nothing there regenerate did not write: the claim, dry), its directory writable or creatable.
// One row per output key (not for what the job makes beside it: its lock, its parts).
static void regen_pf_output(pf_ctx *x, const char *host) {
    (void)host;
    const config *cfg = x->cfg;
    if (pf_claim(x)) {
        pf_mode_row(x, PF_FAIL, "%s", error_msg());
        return;
    }
    mode_paths out = {0};
    x->mode->outputs(cfg, &out);
    for (int i = 0; i < out.n; i++) {
        const mode_path *o = &out.v[i];
        if (o->set != o->key) continue; // made beside an output (OUT.lock, OUT.parts): claimed with it
        char dir[CONFIG_STR + 8];
        snprintf(dir, sizeof dir, "%s", o->path);
        char *slash = strrchr(dir, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else if (slash == dir) dir[1] = '\0';
        else *slash = '\0';
        struct stat st; // the nearest existing directory above it must be writable
        char probe[CONFIG_STR + 8];
        snprintf(probe, sizeof probe, "%s", dir);
        while (stat(probe, &st) != 0) {
            char *s2 = strrchr(probe, '/');
            if (!s2) { snprintf(probe, sizeof probe, "."); break; }
            if (s2 == probe) s2[1] = '\0';
            else *s2 = '\0';
        }
        const char *up = probe;
        if (access(up, W_OK) != 0) {
            pf_mode_row(x, PF_FAIL, "%s %s: cannot write in %s: %s", o->key, o->path, up, strerror(errno));
            continue;
        }
        struct statvfs vs;
        char f[32];
        size_t avail = statvfs(up, &vs) == 0 ? (size_t)vs.f_bavail * vs.f_frsize : 0;
        pf_mode_row(x, PF_OK, "%s %s: %s, free to write; %s free", o->key, o->path,
                    stat(o->path, &st) == 0 ? "replaces an earlier output of this mode (if its settings are the same)" : "new",
                    pf_bytes(avail, f));
    }
}

static const mode_preflight regen_preflight = {
    .shape = regen_pf_shape,
    .teacher = regen_pf_teacher, // the decode's memory (weights + KV caches), not a forward's
    .checks = {{"target", PF_ON_EACH_HOST, regen_pf_target},
               {"prompts", PF_ON_EACH_HOST, regen_pf_prompts_row},
               {"output", PF_ON_RANK0, regen_pf_output}},
};

const mode_def mode_regenerate = {
    .name = "regenerate",
    .what = "every rank a teacher: the target answers regenerate.prompts, written as the training set regenerate.out",
    .roles = WORLD_RULE_TEACHERS,
    .preflight = &regen_preflight,
    .stops = 1,
    .inputs = regen_inputs,
    .outputs = regen_outputs,
    .needs = regen_needs,
    .claim = regen_claim,
    .check_inputs = regen_check_inputs,
    .plan = regen_plan,
    .run = regen_run,
};
