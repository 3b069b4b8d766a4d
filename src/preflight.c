// preflight.c: `dflash_rank --preflight` (see preflight.h and docs/preflight.md).
//
// Each rank fills a few rows (check, rank, result, detail); rank 0 gathers them and prints one
// table. Every rank makes the same collective calls in the same order whatever fails locally, so a
// failing check never leaves a peer waiting: info all-gathered, the NCCL test among the GPU ranks
// only, then the rows gathered.
#include "preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/backend/gpu_info.h"
#include "common/comm/watchdog.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/version.h"
#include "common/data/batchplan.h"
#include "common/data/dataset.h"
#include "common/data/featreader.h"
#include "common/data/jsonl_sample.h"
#include "common/data/safetensors.h"
#include "common/kernels/ops.h"
#include "modes/mode.h"
#include "modes/job_plan.h"
#include "modes/mode_claim.h"
#include "student/model/drafter.h"
#include "student/model/memory_plan.h"
#include "student/train/optim.h"
#include "student/train/train_setup.h"
#include "teacher/target.h"
#include "teacher/target_config.h"
#include "teacher/target_decode.h"
#include "teacher/teacher_loop.h"

#define PF_SHM_MIN ((size_t)1 << 30) // /dev/shm below this: WARN
#define PF_NCCL_TIMEOUT_S 60.0

typedef enum { PF_OK = 0, PF_WARN, PF_FAIL, PF_SKIP } pf_result;
static const char *const pf_result_names[] = {"ok", "WARN", "FAIL", "skipped"};

// The checks, in the table's order.
typedef enum { PF_WORLD = 0, PF_BACKEND, PF_MEMORY, PF_PINNED, PF_PEER, PF_SHM, PF_NCCL, PF_TARGET, PF_DATA, PF_PROMPTS,
               PF_DIR, PF_OUTPUT, PF_CHECKS } pf_check;
static const char *const pf_check_names[PF_CHECKS] = {"world", "backend", "memory", "pinned memory", "peer access",
                                                      "/dev/shm", "nccl", "target", "data", "prompts", "run.dir", "output"};

#define PF_MAX_ROWS 16
#define PF_DETAIL 480

typedef struct {
    int32_t check, rank, result, pad; // rank -1: the job as a whole
    char detail[PF_DETAIL];
} pf_row;

typedef struct { // one rank's rows, gathered as bytes
    int32_t n, pad;
    pf_row row[PF_MAX_ROWS];
} pf_rows;

// What every rank tells every other (all-gathered as bytes).
typedef struct {
    char host[MPI_MAX_PROCESSOR_NAME];
    char bus[32];              // the GPU's PCI bus id ("" on the CPU or when unknown)
    int32_t role, cuda, device_id, pad;
    int64_t need;              // bytes this rank's role allocates on its device (-1: unknown)
    int64_t free_b, total_b;   // its device's free and total memory (host RAM on the CPU)
    int64_t pinned;            // page-locked host memory its role asks for (job_plan_pinned_rank; -1: unknown)
} pf_info;

typedef struct {
    world *w;
    const config *cfg;
    const mode_def *mode;      // the mode's table entry: its roles, what to check (mode.h)
    int dump, offline;         // mode dump-features (every rank a teacher); train from data.features
    int regen;                 // the teachers decode (regenerate): their memory is the decode's
    int64_t prompts, longest;  // regenerate.prompts: prompts and the longest's tokens (-1: unreadable)
    char prompts_err[PF_DETAIL];
    backend be;
    int have_be;
    target_config tc;          // the target's config.json
    int have_tc;
    teacher_contract ct;       // layer ids, top-k, batch size
    int have_ct;
    drafter_config dc;         // the drafter's shape (for the student plan and the checkpoint size)
    int have_dc;
    char target_err[PF_DETAIL], drafter_err[PF_DETAIL];
    pf_rows rows;
} pf_ctx;

__attribute__((format(printf, 5, 6))) static void pf_add(pf_ctx *x, pf_check check, int rank, pf_result result,
                                                         const char *fmt, ...) {
    if (x->rows.n >= PF_MAX_ROWS) return;
    pf_row *r = &x->rows.row[x->rows.n++];
    r->check = check;
    r->rank = rank;
    r->result = result;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
}

static const char *pf_bytes(size_t b, char *buf) { return bytes_format(b, buf, 32); }

// ----------------------------------------------------------------------------- world and backend

static void pf_world(pf_ctx *x) {
    world *w = x->w;
    const config *cfg = x->cfg;
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
    else if (x->mode->roles == WORLD_RULE_JOB && train_check_roles(w, cfg)) // the run's own check of a training job's roles
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
    int fell_back = x->be.kind == BACKEND_CPU && backend_compiled_cuda() && strcmp(x->cfg->device, "auto") == 0;
    pf_add(x, PF_BACKEND, w->rank, fell_back ? PF_WARN : PF_OK, "%s %d on %s (local rank %d): %s%s", role_name(w->role),
           w->role_index, host, w->local_rank, x->be.name,
           fell_back ? "; run.device auto found no usable GPU (see the log line above), so this rank runs on the CPU" : "");
}

// ----------------------------------------------------------------------------- the target's shape

// The drafter's shape as the student derives it (and its checks against the target).
static void pf_drafter_shape(pf_ctx *x) {
    x->have_dc = train_drafter_config(x->cfg, &x->tc, &x->ct, &x->dc) == 0;
    if (!x->have_dc) snprintf(x->drafter_err, sizeof x->drafter_err, "%s", error_msg());
}

static void pf_target_shape(pf_ctx *x) {
    const config *cfg = x->cfg;
    if (!cfg->target_path[0]) {
        snprintf(x->target_err, sizeof x->target_err, "target.path is not set");
        return;
    }
    x->have_tc = target_config_load(&x->tc, cfg->target_path) == 0;
    if (x->have_tc && x->regen) { // regenerate decodes: no feature layers, no drafter
        x->have_ct = 1;
        return;
    }
    if (x->have_tc) x->have_ct = teacher_contract_make(cfg, x->tc.n_layers, &x->ct) == 0;
    if (!x->have_tc || !x->have_ct) {
        snprintf(x->target_err, sizeof x->target_err, "%s", error_msg());
        return;
    }
    pf_drafter_shape(x);
}

// ----------------------------------------------------------------------------- memory

// The teacher's memory: target weights + forward work for its batch size (what teacher_plan_print
// and dump-features compute); with teacher groups (world.teacher_group_size > 1) this rank's stage:
// its layers' weights, its work and its NCCL buffers (teacher_plan.h). -1 when it cannot be known
// (detail says why, *res = FAIL or SKIP).
static int64_t pf_teacher_need(pf_ctx *x, char *detail, size_t n, pf_result *res) {
    const config *cfg = x->cfg;
    const world *w = x->w;
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = x->tc;
    m.be = &x->be;
    target_outputs o = {.n_feat = x->ct.n_feat, .topk = x->ct.topk, .vocab_tile = (int)cfg->teacher_vocab_tile};
    for (int i = 0; i < x->ct.n_feat; i++) o.layer_ids[i] = x->ct.layer_ids[i];
    if (target_outputs_check(&m, &o)) {
        *res = PF_FAIL;
        snprintf(detail, n, "teacher: %s", error_msg());
        return -1;
    }
    int tokens = x->dump ? (int)cfg->teacher_max_tokens : x->ct.max_tokens;
    int G = w->group_size > 1 ? w->group_size : 1, stage = G > 1 ? w->stage : 0;
    int students = x->dump ? 0 : w->students;
    int nccl = G > 1 && x->be.kind == BACKEND_CUDA && strcmp(cfg->payload, "mpi") != 0;
    teacher_stage_mem *st = xmalloc((size_t)G * sizeof *st);
    if (teacher_group_mem(cfg, &x->tc, &x->be, &o, tokens, G, students, nccl, st)) {
        *res = PF_FAIL;
        snprintf(detail, n, "teacher: %s", error_msg());
        free(st);
        return -1;
    }
    teacher_stage_mem me = st[stage];
    free(st);
    m.layer_begin = G > 1 ? me.l0 : 0, m.layer_end = G > 1 ? me.l1 : 0;
    char a[32], b[32], c[32], d[32], who[96] = "teacher";
    if (G > 1)
        snprintf(who, sizeof who, "teacher stage %d/%d, layers %lld-%lld", stage, G, (long long)me.l0,
                 (long long)me.l1 - 1);
    if (x->dump && cfg->teacher_mem_budget > 0) { // dump-features refuses what does not fit its budget
        size_t budget = (size_t)cfg->teacher_mem_budget;
        int tile = o.vocab_tile;
        int fit = target_plan_tokens(&m, &o, budget > me.ring ? budget - me.ring : 0, tokens, &tile);
        if (fit < tokens) {
            *res = PF_FAIL;
            snprintf(detail, n, "%s: teacher.mem_budget %s holds batches of %d tokens, less than teacher.max_tokens = %d "
                                "(weights alone take %s)",
                     who, pf_bytes(budget, a), fit, tokens, pf_bytes(me.weights, b));
            return -1;
        }
    } else if (!x->dump && cfg->teacher_mem_budget > 0 &&
               teacher_group_budget(cfg, &x->tc, &x->be, &o, tokens, G, students, nccl)) { // the run's own check
        *res = PF_FAIL;
        snprintf(detail, n, "%s: %s", who, error_msg());
        return -1;
    }
    if (G > 1)
        snprintf(detail, n, "%s: weights %s + forward work %s (%d tokens) + NCCL buffers %s = %s", who,
                 pf_bytes(me.weights, a), pf_bytes(me.work, b), tokens, pf_bytes(me.ring, c), pf_bytes(me.total, d));
    else
        snprintf(detail, n, "teacher: weights %s + forward work %s (%d tokens) = %s", pf_bytes(me.weights, a),
                 pf_bytes(me.work, b), tokens, pf_bytes(me.weights + me.work, c));
    return (int64_t)(G > 1 ? me.total : me.weights + me.work);
}

// regenerate's teacher: its stage's weights + the decoder's arena (the KV caches of its slots) as
// regenerate sizes them: regenerate.max_seqs slots (0: 8, or with teacher.mem_budget at least one)
// of regenerate.max_len positions (0: the longest prompt + regenerate.max_new_tokens - 1, at most
// the target's positions).
static int64_t pf_regen_need(pf_ctx *x, char *detail, size_t n, pf_result *res) {
    const config *cfg = x->cfg;
    const world *w = x->w;
    if (x->longest < 0) {
        *res = PF_SKIP;
        snprintf(detail, n, "teacher: no decode plan without the prompts (see the prompts row)");
        return -1;
    }
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = x->tc;
    m.be = &x->be;
    int G = w->group_size > 1 ? w->group_size : 1;
    char who[96] = "teacher";
    if (G > 1) {
        int64_t *bounds = xmalloc(((size_t)G + 1) * sizeof *bounds);
        int rc = target_stage_split(&x->tc, ops_act_dtype(&x->be), G, bounds);
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
    int64_t L = cfg->regen_max_len > 0 ? cfg->regen_max_len : x->longest + cfg->regen_max_new_tokens - 1;
    if (cfg->regen_max_len == 0 && L > x->tc.max_positions) L = x->tc.max_positions;
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

// The student's memory: plan_make exactly as student_train calls it.
static int64_t pf_student_need(pf_ctx *x, char *detail, size_t n, pf_result *res) {
    const config *cfg = x->cfg;
    plan_request pr = {.budget = (size_t)cfg->train_mem_budget, .max_tokens = (int)cfg->max_tokens_per_batch,
                       .max_seqs = (int)cfg->max_tokens_per_batch, .max_anchors = (int)cfg->max_anchors,
                       .k = x->ct.topk, .adam = 1, .ema = cfg->ema_decay > 0, .tied = x->tc.tie_embeddings,
                       .force_mode = -1};
    if (strcmp(cfg->optimizer, "muon") == 0) pr.optim_scratch = optim_muon_plan_bytes(&x->dc);
    student_plan plan;
    plan_breakdown bd;
    if (plan_make(&x->dc, &x->be, &pr, &plan, &bd)) {
        *res = PF_FAIL;
        snprintf(detail, n, "student plan: %s (train.mem_budget)", error_msg());
        return -1;
    }
    char a[32], b[32], c[32], d[32];
    size_t state = bd.weights_master + bd.grads + bd.weights_compute + bd.adam + bd.ema + bd.frozen;
    size_t work = bd.receive + bd.context + bd.chunk + bd.loss + bd.library;
    snprintf(detail, n, "student: drafter state %s + step work %s = %s (%d anchor(s) per chunk, loss %s; "
                        "train.mem_budget %s)",
             pf_bytes(state, a), pf_bytes(work, b), pf_bytes(bd.total, c), plan.chunk_anchors,
             plan.loss.mode == LOSS_MODE_ROWS ? "rows" : "tiles",
             cfg->train_mem_budget > 0 ? pf_bytes((size_t)cfg->train_mem_budget, d) : "0 = no limit");
    // The cuBLAS workspace in bd.library was allocated when the backend opened: no longer free.
    return (int64_t)(bd.total - bd.library);
}

static int pf_same_device(const pf_info *a, const pf_info *b) {
    return strcmp(a->host, b->host) == 0 && a->cuda == b->cuda && (!a->cuda || strcmp(a->bus, b->bus) == 0);
}

static void pf_memory(pf_ctx *x, const pf_info *all, const char *plan_detail, pf_result plan_res) {
    world *w = x->w;
    const pf_info *me = &all[w->rank];
    if (me->need < 0) {
        pf_add(x, PF_MEMORY, w->rank, plan_res, "%s", plan_detail);
        return;
    }
    int64_t sum = 0;
    int sharing = 0;
    for (int r = 0; r < w->size; r++)
        if (all[r].need >= 0 && pf_same_device(me, &all[r])) sum += all[r].need, sharing++;
    char f[32], t[32], s[32], dev[64], together[96] = "";
    if (me->cuda) snprintf(dev, sizeof dev, "cuda:%d", me->device_id);
    else snprintf(dev, sizeof dev, "host RAM");
    if (sharing > 1) snprintf(together, sizeof together, "; %d ranks share it: %s together", sharing, pf_bytes((size_t)sum, s));
    pf_result res = PF_OK;
    const char *why = "";
    if (me->cuda) {
        if (sum > me->free_b) res = PF_FAIL, why = ": does not fit in the free GPU memory";
        else if ((double)sum > 0.9 * (double)me->free_b) res = PF_WARN, why = ": less than 10% of the free memory left over";
    } else {
        if (sum > me->total_b) res = PF_FAIL, why = ": more than the host's RAM";
        else if (sum > me->free_b) res = PF_WARN, why = ": more than the RAM available now";
    }
    pf_add(x, PF_MEMORY, w->rank, res, "%s; %s %s free of %s%s%s", plan_detail, dev, pf_bytes((size_t)me->free_b, f),
           pf_bytes((size_t)me->total_b, t), together, why);
}

// ----------------------------------------------------------------------------- pinned host memory

// MemAvailable of /proc/meminfo in bytes (-1: unreadable).
static int64_t pf_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

// Once per host: the pinned host memory the plan gives the host's ranks (job_plan_pinned_rank) against
// the locked-memory limit of a process (RLIMIT_MEMLOCK, `ulimit -l`; WARN below the largest rank's:
// past it the buffers are pageable, the job slower) and the host's MemAvailable (FAIL below the sum:
// page-locked memory cannot be swapped; WARN past 90% of it).
static void pf_pinned(pf_ctx *x, const pf_info *all) {
    world *w = x->w;
    const pf_info *me = &all[w->rank];
    int64_t sum = 0, most = 0;
    int ranks = 0, unknown = 0;
    for (int r = 0; r < w->size; r++) {
        if (strcmp(all[r].host, me->host) != 0) continue;
        ranks++;
        if (all[r].pinned < 0) unknown++;
        else sum += all[r].pinned, most = all[r].pinned > most ? all[r].pinned : most;
    }
    char a[32], b[32], c[32], lim[64], unk[64] = "";
    if (unknown) snprintf(unk, sizeof unk, " (%d rank(s) without a plan: see the memory row)", unknown);
    if (sum == 0) {
        pf_add(x, PF_PINNED, w->rank, unknown ? PF_SKIP : PF_OK, "%s: no pinned host memory planned for its %d rank(s)%s",
               me->host, ranks, unk);
        return;
    }
    struct rlimit rl;
    int limited = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
    if (limited) snprintf(lim, sizeof lim, "`ulimit -l` %s a process", pf_bytes((size_t)rl.rlim_cur, c));
    else snprintf(lim, sizeof lim, "`ulimit -l` unlimited");
    int64_t avail = pf_mem_available();
    pf_result res = PF_OK;
    char why[200] = "";
    if (avail >= 0 && sum > avail)
        res = PF_FAIL, snprintf(why, sizeof why, ": more than the host's available memory (page-locked memory is never "
                                                 "swapped): fewer ranks here, or transport.slots lower");
    else if (limited && (uint64_t)most > (uint64_t)rl.rlim_cur)
        res = PF_WARN, snprintf(why, sizeof why, ": a rank's %s is past `ulimit -l`: the rest would be pageable, its copies "
                                                 "synchronous (raise `ulimit -l`, e.g. unlimited in the container)",
                                pf_bytes((size_t)most, b));
    else if (avail >= 0 && (double)sum > 0.9 * (double)avail)
        res = PF_WARN, snprintf(why, sizeof why, ": less than 10%% of the available memory left over");
    char av[32] = "unknown";
    if (avail >= 0) pf_bytes((size_t)avail, av);
    pf_add(x, PF_PINNED, w->rank, res, "%s: %d rank(s) pin %s (the largest %s; as --plan plans them, transport.payload %s); "
           "%s; MemAvailable %s%s%s", me->host, ranks, pf_bytes((size_t)sum, a), pf_bytes((size_t)most, b), x->cfg->payload,
           lim, av, unk, why);
}

// ----------------------------------------------------------------------------- GPUs: peer access, NCCL

// A student GPU and the teacher GPUs on the same host: can they copy to each other directly?
static void pf_peer(pf_ctx *x, const pf_info *all) {
    world *w = x->w;
    int any_cuda = 0;
    for (int r = 0; r < w->size; r++) any_cuda |= all[r].cuda;
    if (!any_cuda) {
        if (w->rank == 0) pf_add(x, PF_PEER, -1, PF_SKIP, "no rank runs on a GPU");
        return;
    }
    const pf_info *me = &all[w->rank];
    if (w->role != ROLE_STUDENT || !me->cuda) return;
    int n = 0, yes = 0;
    char no[160] = "", unknown[160] = "";
    for (int t = 0; t < w->size; t++) {
        if (all[t].role != ROLE_TEACHER || !all[t].cuda || strcmp(all[t].host, me->host) != 0) continue;
        n++;
        int p = gpu_peer_access(x->be.device_id, all[t].bus);
        char *list = p == 1 ? NULL : p == 0 ? no : unknown;
        if (p == 1) yes++;
        else snprintf(list + strlen(list), 160 - strlen(list), "%s%d", list[0] ? " " : "", t);
    }
    if (n == 0) {
        pf_add(x, PF_PEER, w->rank, PF_SKIP, "no teacher GPU on this host (payloads come over the network)");
        return;
    }
    if (yes == n) {
        pf_add(x, PF_PEER, w->rank, PF_OK, "cuda:%d (%s) reaches the GPUs of all %d teacher(s) on this host directly",
               me->device_id, me->bus, n);
        return;
    }
    char detail[PF_DETAIL];
    size_t used = (size_t)snprintf(detail, sizeof detail, "cuda:%d (%s):", me->device_id, me->bus);
    if (no[0] && used < sizeof detail)
        used += (size_t)snprintf(detail + used, sizeof detail - used, " no peer access to teacher rank(s) %s: payloads "
                                 "go through host memory (slower); if NCCL hangs or fails, NCCL_P2P_DISABLE=1;", no);
    if (unknown[0] && used < sizeof detail)
        used += (size_t)snprintf(detail + used, sizeof detail - used, " the GPU of teacher rank(s) %s is not visible "
                                 "to this rank (CUDA_VISIBLE_DEVICES), not checked;", unknown);
    if (used < sizeof detail) snprintf(detail + used, sizeof detail - used, " see launch/lxc/README.md");
    pf_add(x, PF_PEER, w->rank, PF_WARN, "%s", detail);
}

// NCCL among the GPU ranks: init, one all-reduce, destroy. Every rank calls this (the split is
// collective); only GPU ranks talk NCCL.
static void pf_nccl(pf_ctx *x, const pf_info *all) {
    world *w = x->w;
    int n_gpu = 0;
    for (int r = 0; r < w->size; r++) n_gpu += all[r].cuda;
    MPI_Comm gc;
    watchdog_wait_begin(0, w->size - 1, 5, "the other ranks to split off the GPU ranks");
    mpi_check(MPI_Comm_split(MPI_COMM_WORLD, all[w->rank].cuda ? 0 : MPI_UNDEFINED, w->rank, &gc));
    watchdog_wait_end();
    if (n_gpu < 2) {
        if (w->rank == 0)
            pf_add(x, PF_NCCL, -1, PF_SKIP, n_gpu == 0 ? "no rank runs on a GPU" : "one GPU rank: nothing to communicate");
        if (gc != MPI_COMM_NULL) mpi_check(MPI_Comm_free(&gc));
        return;
    }
    // NCCL wants one GPU per rank: ranks that share one (more ranks than GPUs on a host) cannot
    // form a communicator, so it is not tried.
    for (int a = 0; a < w->size; a++)
        for (int b = a + 1; b < w->size; b++)
            if (all[a].cuda && all[b].cuda && pf_same_device(&all[a], &all[b])) {
                if (w->rank == 0)
                    pf_add(x, PF_NCCL, -1, PF_WARN, "ranks %d and %d share cuda:%d (%s) on %s: NCCL needs a GPU per rank, "
                                                    "so it was not tried (more ranks than GPUs on that host)",
                           a, b, all[a].device_id, all[a].bus, all[a].host);
                if (gc != MPI_COMM_NULL) mpi_check(MPI_Comm_free(&gc));
                return;
            }
    if (gc == MPI_COMM_NULL) return;
    int gr = 0;
    mpi_check(MPI_Comm_rank(gc, &gr));
    struct {
        int32_t ok, pad;
        char id[GPU_NCCL_ID_BYTES];
        char why[256];
    } msg;
    memset(&msg, 0, sizeof msg);
    if (gr == 0) {
        msg.ok = gpu_nccl_unique_id(msg.id) == 0;
        if (!msg.ok) snprintf(msg.why, sizeof msg.why, "%s", error_msg());
    }
    MPI_Request req; // timed: a stopped GPU rank ends the preflight within the rank timeout
    mpi_check(MPI_Ibcast(&msg, (int)sizeof msg, MPI_BYTE, 0, gc, &req));
    watchdog_wait_all(&req, "the first GPU rank's NCCL id");
    char ver[32];
    gpu_nccl_version(ver, sizeof ver);
    if (!msg.ok)
        pf_add(x, PF_NCCL, w->rank, PF_FAIL, "NCCL %s: %s", ver, msg.why);
    else if (gpu_nccl_check(msg.id, n_gpu, gr, x->be.device_id, PF_NCCL_TIMEOUT_S))
        pf_add(x, PF_NCCL, w->rank, PF_FAIL, "NCCL %s, %d GPU rank(s): %s (NCCL_DEBUG=INFO says more)", ver, n_gpu,
               error_msg());
    else
        pf_add(x, PF_NCCL, w->rank, PF_OK, "NCCL %s: communicator of %d GPU rank(s) and one all-reduce", ver, n_gpu);
    mpi_check(MPI_Comm_free(&gc));
}

// ----------------------------------------------------------------------------- host: /dev/shm

static void pf_shm(pf_ctx *x, const char *host) {
    struct statvfs s;
    int rank = x->w->rank;
    if (statvfs("/dev/shm", &s) != 0) {
        pf_add(x, PF_SHM, rank, PF_WARN, "%s: /dev/shm: %s; NCCL and Open MPI keep shared-memory buffers there "
                                         "(NCCL_SHM_DISABLE=1 avoids it for NCCL)", host, strerror(errno));
        return;
    }
    size_t size = (size_t)s.f_blocks * s.f_frsize, avail = (size_t)s.f_bavail * s.f_frsize;
    char a[32], b[32], c[32];
    if (size < PF_SHM_MIN)
        pf_add(x, PF_SHM, rank, PF_WARN,
               "%s: %s (%s free), below %s: NCCL and Open MPI shared memory may run out; Docker: --shm-size=16g, "
               "LXC: a tmpfs mount with size= (launch/lxc/README.md), or NCCL_SHM_DISABLE=1",
               host, pf_bytes(size, a), pf_bytes(avail, b), pf_bytes(PF_SHM_MIN, c));
    else
        pf_add(x, PF_SHM, rank, PF_OK, "%s: %s (%s free)", host, pf_bytes(size, a), pf_bytes(avail, b));
}

// ----------------------------------------------------------------------------- files

// regenerate.prompts read as regenerate reads it: every non-blank line a prompt whose ids lie in
// the target's vocabulary; the count and the longest into x (longest -1 and prompts_err on an error).
static void pf_prompts_scan(pf_ctx *x) {
    const config *cfg = x->cfg;
    x->longest = -1;
    if (!cfg->regen_prompts[0]) {
        snprintf(x->prompts_err, sizeof x->prompts_err, "regenerate.prompts is not set");
        return;
    }
    FILE *f = fs_fopen_regular(cfg->regen_prompts, "regenerate.prompts");
    if (!f) {
        snprintf(x->prompts_err, sizeof x->prompts_err, "%s", error_msg());
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
        if (jsonl_sample_parse(line, (size_t)got, x->have_tc ? x->tc.vocab : 0, &smp) < 0) {
            snprintf(x->prompts_err, sizeof x->prompts_err, "regenerate.prompts %s line %lld: %s", cfg->regen_prompts,
                     (long long)line_no, error_msg());
            bad = 1;
            break;
        }
        n++;
        if (smp.n > longest) longest = smp.n;
    }
    if (!bad && ferror(f))
        bad = 1, snprintf(x->prompts_err, sizeof x->prompts_err, "regenerate.prompts %s: read error", cfg->regen_prompts);
    if (!bad && n == 0)
        bad = 1, snprintf(x->prompts_err, sizeof x->prompts_err, "regenerate.prompts %s: no prompt (the file has no "
                                                                 "non-blank line)", cfg->regen_prompts);
    free(line);
    jsonl_sample_free(&smp);
    fclose(f);
    if (bad) return;
    x->prompts = n, x->longest = longest;
}

static void pf_prompts(pf_ctx *x, const char *host) {
    if (x->longest < 0) {
        pf_add(x, PF_PROMPTS, x->w->rank, PF_FAIL, "%s: %s", host, x->prompts_err);
        return;
    }
    pf_add(x, PF_PROMPTS, x->w->rank, PF_OK, "%s: %s: %lld prompt(s), the longest %lld tokens", host,
           x->cfg->regen_prompts, (long long)x->prompts, (long long)x->longest);
}

// A file output (regenerate.out): not an input, no input under what it makes, claimable (no other
// job holds it, nothing there the mode did not write: the mode's own claim, dry), its directory
// writable or creatable. One row per output key (not for what the job makes beside it: its lock).
static void pf_output(pf_ctx *x) {
    const config *cfg = x->cfg;
    if (mode_claim_distinct(x->mode, cfg) || (x->mode->claim && x->mode->claim(cfg, 1))) { // the run's claim, dry
        pf_add(x, PF_OUTPUT, x->w->rank, PF_FAIL, "%s", error_msg());
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
            pf_add(x, PF_OUTPUT, x->w->rank, PF_FAIL, "%s %s: cannot write in %s: %s", o->key, o->path, up, strerror(errno));
            continue;
        }
        struct statvfs vs;
        char f[32];
        size_t avail = statvfs(up, &vs) == 0 ? (size_t)vs.f_bavail * vs.f_frsize : 0;
        pf_add(x, PF_OUTPUT, x->w->rank, PF_OK, "%s %s: %s, free to write; %s free", o->key, o->path,
               stat(o->path, &st) == 0 ? "replaces an earlier output of this mode (if its settings are the same)" : "new",
               pf_bytes(avail, f));
    }
}

static void pf_target(pf_ctx *x, const char *host) {
    int rank = x->w->rank;
    const config *cfg = x->cfg;
    if (!cfg->target_path[0]) {
        pf_add(x, PF_TARGET, rank, x->mode->needs ? PF_FAIL : PF_SKIP, "target.path is not set");
        return;
    }
    if (!x->have_tc || !x->have_ct) {
        pf_add(x, PF_TARGET, rank, PF_FAIL, "%s: %s", host, x->target_err);
        return;
    }
    st_dir d;
    if (safetensors_dir_open(&d, cfg->target_path)) {
        pf_add(x, PF_TARGET, rank, PF_FAIL, "%s: %s", host, error_msg());
        return;
    }
    char emb[96]; // model.embed_tokens.weight, or under the multimodal wrappers' prefix
    target_names_resolve(&x->tc, &d);
    snprintf(emb, sizeof emb, "%sembed_tokens.weight", target_tensor_prefix(&x->tc));
    const char *head = target_head_name(&x->tc);
    const char *missing = !safetensors_dir_find(&d, emb)                                      ? emb
                          : !x->tc.tie_embeddings && !safetensors_dir_find(&d, head) ? head
                                                                                      : NULL;
    size_t bytes = 0;
    for (int i = 0; i < d.n; i++) bytes += d.entries[i]->nbytes;
    char b[32], ids[160] = "";
    for (int i = 0; i < x->ct.n_feat; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "", (long long)x->ct.layer_ids[i]);
    if (missing)
        pf_add(x, PF_TARGET, rank, PF_FAIL, "%s: %s: no tensor %s", host, cfg->target_path, missing);
    else
        pf_add(x, PF_TARGET, rank, PF_OK, "%s: %s, %lld layers, hidden %lld, vocab %lld; %d tensors, %s in %d file(s)%s%s",
               host, x->tc.arch_name, (long long)x->tc.n_layers, (long long)x->tc.hidden, (long long)x->tc.vocab, d.n,
               pf_bytes(bytes, b), d.n_files, x->regen ? "" : "; feature layers ", x->regen ? "" : ids);
    safetensors_dir_close(&d);
}

static void pf_data_features(pf_ctx *x, const char *host) {
    int rank = x->w->rank;
    featreader *fr = NULL;
    if (featreader_open(&fr, x->cfg->data_features)) {
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: %s", host, error_msg());
        return;
    }
    const config *cfg = x->cfg;
    int64_t want_d = x->have_ct && x->have_tc ? x->ct.n_feat * x->tc.hidden : -1, n = featreader_samples(fr);
    char what[256];
    snprintf(what, sizeof what, "%s: data.features %s: %lld sample(s) from %d set(s), top-%d, %d feature columns", host,
             cfg->data_features, (long long)n, featreader_n_sets(fr), featreader_topk(fr), featreader_feat_dim(fr));
    batchplan_set sets[CONFIG_MAX_SETS];
    int n_sets = 0;
    batchplan bp;
    int64_t *len = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) len[i] = featreader_len(fr, i);
    if (want_d >= 0 && (featreader_topk(fr) != x->ct.topk || featreader_feat_dim(fr) != want_d))
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s; the run expects top-%d and %lld", what, x->ct.topk, (long long)want_d);
    else if (n == 0)
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: no sample to train on", what);
    else if ((n_sets = dataset_feature_sets(cfg, fr, sets)) < 0)
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: %s", what, error_msg());
    else if (batchplan_build(&bp, len, n, sets, n_sets, cfg->heldout_samples, cfg->max_tokens_per_batch,
                             cfg->bucket_size, (uint64_t)cfg->seed))
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: %s", what, error_msg());
    else {
        pf_add(x, PF_DATA, rank, PF_OK, "%s; %lld training batch(es) per epoch, %lld held-out", what,
               (long long)batchplan_epoch_size(&bp, 0), (long long)bp.n_heldout_batches);
        batchplan_free(&bp);
    }
    free(len);
    featreader_close(fr);
}

// The training set(s): readable, usable samples, vocabulary within the target's, a batch plan.
static void pf_data(pf_ctx *x, const char *host) {
    int rank = x->w->rank;
    const config *cfg = x->cfg;
    if (x->offline) {
        pf_data_features(x, host);
        return;
    }
    if (config_data_count(cfg) <= 0) {
        pf_add(x, PF_DATA, rank, x->mode->needs ? PF_FAIL : PF_SKIP,
               "%s", config_data_count(cfg) < 0 ? error_msg() : "neither data.path nor data.sets is set");
        return;
    }
    dataset ds;
    if (dataset_open(&ds, cfg, cfg->min_loss_tokens)) {
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: %s", host, error_msg());
        return;
    }
    int64_t tokens = 0, loss_tokens = 0, raw = 0, rej_ids = 0, rej_short = 0, rej_off = 0, longest = 0;
    for (int i = 0; i < ds.n_sets; i++) {
        tokens += ds.sets[i].n_tokens, loss_tokens += ds.sets[i].loss_tokens, raw += ds.sets[i].n_raw;
        rej_off += ds.sets[i].rejected_offsets, rej_ids += ds.sets[i].rejected_ids, rej_short += ds.sets[i].rejected_short;
    }
    char what[256];
    snprintf(what, sizeof what, "%s: %d set(s), %lld usable sample(s) of %lld (%lld tokens, %lld loss tokens), vocab %lld",
             host, ds.n_sets, (long long)ds.n, (long long)raw, (long long)tokens, (long long)loss_tokens,
             (long long)ds.vocab_size);
    int64_t *len = xmalloc((size_t)(ds.n > 0 ? ds.n : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < ds.n; i++) {
        len[i] = dataset_len(&ds, i);
        if (len[i] > longest) longest = len[i];
    }
    batchplan_set sets[CONFIG_MAX_SETS];
    dataset_plan_sets(&ds, sets);
    batchplan bp;
    int64_t max_tokens = x->dump ? cfg->teacher_max_tokens : cfg->max_tokens_per_batch;
    if (ds.n == 0)
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: no sample with a valid anchor, %lld loss tokens (data.min_loss_tokens) and "
                                          "valid ids (rejected: %lld bad offsets, %lld bad ids, %lld short)",
               what, (long long)cfg->min_loss_tokens, (long long)rej_off, (long long)rej_ids, (long long)rej_short);
    else if (x->have_tc && ds.vocab_size > x->tc.vocab)
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s, larger than the target's %lld", what, (long long)x->tc.vocab);
    else if (x->dump && longest > max_tokens)
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: a sample of %lld tokens, more than teacher.max_tokens = %lld", what,
               (long long)longest, (long long)max_tokens);
    else if (x->dump)
        pf_add(x, PF_DATA, rank, PF_OK, "%s; longest sample %lld tokens", what, (long long)longest);
    else if (batchplan_build(&bp, len, ds.n, sets, ds.n_sets, cfg->heldout_samples, max_tokens, cfg->bucket_size,
                             (uint64_t)cfg->seed))
        pf_add(x, PF_DATA, rank, PF_FAIL, "%s: %s", what, error_msg());
    else {
        pf_add(x, PF_DATA, rank, PF_OK, "%s; %lld training batch(es) per epoch, %lld held-out", what,
               (long long)batchplan_epoch_size(&bp, 0), (long long)bp.n_heldout_batches);
        batchplan_free(&bp);
    }
    free(len);
    dataset_close(&ds);
}

// The directory the run writes (run.dir; features.dir in dump-features): created as the run would
// (one level), a probe file written, fsynced and removed, then the free space against what the run
// will keep there: checkpoint.keep + 1 checkpoints (the newest is complete before the oldest goes)
// and the exported drafter.
static void pf_dir(pf_ctx *x) {
    int rank = x->w->rank;
    const config *cfg = x->cfg;
    const char *key = x->dump ? "features.dir" : "run.dir", *dir = x->dump ? cfg->features_dir : cfg->run_dir;
    if (!dir[0]) {
        pf_add(x, PF_DIR, rank, x->dump ? PF_FAIL : PF_SKIP, "%s is not set", key);
        return;
    }
    if (mode_claim_distinct(x->mode, cfg) || (x->mode->claim && x->mode->claim(cfg, 1))) { // the run's claim, dry
        pf_add(x, PF_DIR, rank, PF_FAIL, "%s", error_msg());
        return;
    }
    struct stat st;
    int created = 0;
    if (stat(dir, &st) != 0) {
        if (mkdir(dir, 0755) != 0) {
            pf_add(x, PF_DIR, rank, PF_FAIL, "%s %s: cannot create it: %s", key, dir, strerror(errno));
            return;
        }
        created = 1;
    } else if (!S_ISDIR(st.st_mode)) {
        pf_add(x, PF_DIR, rank, PF_FAIL, "%s %s: not a directory", key, dir);
        return;
    }
    char probe[CONFIG_STR + 64];
    snprintf(probe, sizeof probe, "%s/.preflight-probe.%d", dir, (int)getpid());
    const char *step = "create";
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644), ok = fd >= 0;
    if (ok) {
        char block[4096];
        memset(block, 0x5a, sizeof block);
        step = "write";
        ok = write(fd, block, sizeof block) == (ssize_t)sizeof block;
        if (ok) step = "fsync", ok = fsync(fd) == 0;
    }
    int err = errno;
    if (fd >= 0) close(fd);
    if (fd >= 0 && unlink(probe) != 0 && ok) step = "remove", ok = 0, err = errno;
    struct statvfs vs;
    int have_vs = statvfs(dir, &vs) == 0;
    if (created) rmdir(dir);
    if (!ok) {
        pf_add(x, PF_DIR, rank, PF_FAIL, "%s %s: cannot %s a file there: %s", key, dir, step, strerror(err));
        return;
    }
    char f[32], n1[32], n2[32];
    size_t avail = have_vs ? (size_t)vs.f_bavail * vs.f_frsize : 0;
    if (x->dump || !x->have_dc) {
        pf_add(x, PF_DIR, rank, PF_OK, "%s %s: writable%s, %s free%s", key, dir, created ? " (created)" : "",
               pf_bytes(avail, f), x->dump ? "" : "; size of the checkpoints unknown (target unreadable)");
        return;
    }
    size_t numel = (size_t)drafter_param_numel(&x->dc);
    size_t per_ckpt = numel * sizeof(float) * (3 + (cfg->ema_decay > 0)); // weights, Adam m and v, EMA
    size_t n_ckpt = cfg->ckpt_every > 0 ? (size_t)cfg->ckpt_keep + 1 : 0;
    size_t need = n_ckpt * per_ckpt + numel * sizeof(float);                // + the export (fp32 at most)
    char ckpts[160];
    if (n_ckpt)
        snprintf(ckpts, sizeof ckpts, "%zu checkpoint(s) of %s (checkpoint.keep = %lld, + 1 while writing)", n_ckpt,
                 pf_bytes(per_ckpt, n1), (long long)cfg->ckpt_keep);
    else
        snprintf(ckpts, sizeof ckpts, "no checkpoints (checkpoint.every = 0)");
    pf_add(x, PF_DIR, rank, have_vs && avail < need ? PF_FAIL : PF_OK,
           "%s %s: writable%s, %s free, needs %s: %s and the exported drafter (%lld parameters)%s", key, dir,
           created ? " (created)" : "", pf_bytes(avail, f), pf_bytes(need, n2), ckpts, (long long)numel,
           have_vs && avail < need ? ": not enough space" : "");
}

// ----------------------------------------------------------------------------- the table

static int pf_row_cmp(const void *a, const void *b) {
    const pf_row *x = a, *y = b;
    if (x->check != y->check) return x->check < y->check ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int pf_print(const pf_rows *all, int size) {
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
        printf("%-12s %4s  %-7s  %s\n", pf_check_names[rows[i].check], rank, pf_result_names[rows[i].result],
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
    pf_ctx *x = xcalloc(1, sizeof *x);
    x->w = w;
    x->cfg = cfg;
    x->mode = mode;
    world_want want;
    world_want_make(mode->roles, cfg, &want);
    x->dump = (mode->preflight & MODE_PF_DUMP) != 0;
    x->regen = (mode->preflight & MODE_PF_DECODE) != 0;
    x->offline = want.offline;
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    mpi_check(MPI_Get_processor_name(host, &len));

    // Local checks that the others need to know about.
    pf_world(x);
    pf_backend(x, host);
    pf_target_shape(x);
    if (mode->preflight & MODE_PF_PROMPTS) pf_prompts_scan(x);
    pf_info *me = xcalloc(1, sizeof *me);
    snprintf(me->host, sizeof me->host, "%s", host);
    me->role = w->role;
    me->need = -1;
    me->pinned = -1;
    char plan_detail[PF_DETAIL] = "";
    pf_result plan_res = PF_SKIP;
    if (!x->have_be) {
        snprintf(plan_detail, sizeof plan_detail, "no backend (see the backend row)");
    } else {
        me->cuda = x->be.kind == BACKEND_CUDA;
        me->device_id = x->be.device_id;
        if (me->cuda && gpu_pci_bus_id(x->be.device_id, me->bus, sizeof me->bus)) me->bus[0] = '\0';
        size_t fr = 0, tot = 0;
        backend_mem_info(&x->be, &fr, &tot);
        me->free_b = (int64_t)fr, me->total_b = (int64_t)tot;
        if (!x->have_ct) snprintf(plan_detail, sizeof plan_detail, "no memory plan without the target's shape (see the target row)");
        else if (w->role == ROLE_TEACHER && x->regen) me->need = pf_regen_need(x, plan_detail, sizeof plan_detail, &plan_res);
        else if (w->role == ROLE_TEACHER) me->need = pf_teacher_need(x, plan_detail, sizeof plan_detail, &plan_res);
        else if (!x->have_dc) plan_res = PF_FAIL, snprintf(plan_detail, sizeof plan_detail, "%s", x->drafter_err);
        else me->need = pf_student_need(x, plan_detail, sizeof plan_detail, &plan_res);
        // pinned host memory: a training job's payload buffers and gradient ring (dump-features and
        // regenerate pin nothing)
        if (x->have_ct && (w->role == ROLE_TEACHER || x->have_dc)) {
            int on_link = 0, grad_mpi = 0;
            me->pinned = 0;
            if (!x->dump && !x->regen) {
                job_plan_links(cfg, w, &x->be, x->offline, strcmp(cfg->mode, "eval") == 0, &on_link, &grad_mpi);
                me->pinned = (int64_t)job_plan_pinned_rank(cfg, w, w->rank, &x->be, &x->tc, &x->ct, &x->dc, on_link,
                                                           grad_mpi, x->offline);
            }
        }
    }
    pf_info *all = xcalloc((size_t)w->size, sizeof *all);
    MPI_Request req;
    mpi_check(MPI_Iallgather(me, (int)sizeof *me, MPI_BYTE, all, (int)sizeof *me, MPI_BYTE, MPI_COMM_WORLD, &req));
    watchdog_mpi_wait(&req, NULL, 0, w->size - 1, 5, "the other ranks' preflight checks");

    pf_memory(x, all, plan_detail, plan_res);
    if (w->local_rank == 0) pf_pinned(x, all);
    pf_peer(x, all);
    pf_nccl(x, all);
    if (w->local_rank == 0) { // once per host: what every rank of the host reads the same way
        pf_shm(x, host);
        if (mode->preflight & MODE_PF_TARGET) pf_target(x, host);
        if (mode->preflight & (MODE_PF_DATA | MODE_PF_DUMP)) pf_data(x, host);
        if (mode->preflight & MODE_PF_PROMPTS) pf_prompts(x, host);
    }
    if (mode->preflight & MODE_PF_OUTPUT) { // the rank that writes the outputs
        int writer = x->dump || x->regen ? 0 : w->teachers < w->size ? w->teachers : 0; // train: the first student
        if (w->rank == writer && x->regen) pf_output(x);
        else if (w->rank == writer) pf_dir(x);
    }

    pf_rows *gathered = w->rank == 0 ? xmalloc((size_t)w->size * sizeof *gathered) : NULL;
    mpi_check(MPI_Igather(&x->rows, (int)sizeof x->rows, MPI_BYTE, gathered, (int)sizeof x->rows, MPI_BYTE, 0,
                          MPI_COMM_WORLD, &req));
    watchdog_mpi_wait(&req, NULL, 0, w->size - 1, 5, "the other ranks' preflight rows");
    int fails = 0;
    if (w->rank == 0) {
        printf("preflight: dflash_rank %s, %d rank(s), mode %s\n", DFLASH_VERSION, w->size, cfg->mode);
        fails = pf_print(gathered, w->size);
    }
    mpi_check(MPI_Ibcast(&fails, 1, MPI_INT, 0, MPI_COMM_WORLD, &req));
    watchdog_mpi_wait(&req, NULL, 0, w->size - 1, 5, "the preflight table");
    if (x->have_be) backend_close(&x->be);
    free(gathered);
    free(all);
    free(me);
    free(x);
    return fails && w->rank == 0 ? 1 : 0; // rank 0's exit is the one mpirun names (as mode_exit)
}
