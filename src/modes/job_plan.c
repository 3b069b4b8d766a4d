// job_plan.c: --plan: every role's memory plan from the configuration and the target's
// config.json, in one process, no device opened (see job_plan.h).
#include "modes/job_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/backend/gpu_reserve.h"
#include "common/backend/threads.h"
#include "common/comm/world.h"
#include "common/core/bytes.h"
#include "common/core/error.h"
#include "student/train/batch_source.h"
#include "student/train/optim.h"
#include "student/train/students.h"
#include "student/model/memory_plan.h"
#include "student/train/train_setup.h"
#include "teacher/teacher_plan.h"

// The backend a rank of the job would open, described but not opened: the kind decides the
// dtypes and the library workspace the planners count; threads the CPU work buffers.
void job_plan_backend(const config *cfg, int ranks_here, backend *be, char *how, size_t n) {
    int gpus = strcmp(cfg->device, "auto") == 0 ? backend_cuda_devices() : 0;
    int cuda = strcmp(cfg->device, "cuda") == 0 || gpus > 0;
    // threads as dflash_rank sets them (threads.h)
    backend_describe(be, cuda ? "cuda" : "cpu", threads_choose((int)cfg->threads, ranks_here, NULL, 0));
    if (cuda) snprintf(be->name, sizeof be->name, "cuda, bf16, planned: no device opened");
    else snprintf(be->name, sizeof be->name, "cpu, fp32, %d thread(s) per rank, planned", be->threads);
    if (strcmp(cfg->device, "auto") != 0)
        snprintf(how, n, "planned for %s (run.device %s; no device opened)", cuda ? "cuda" : "cpu", cfg->device);
    else if (cuda)
        snprintf(how, n, "planned for cuda (run.device auto: %d GPU(s) visible; no device opened)", gpus);
    else
        snprintf(how, n, "planned for cpu (run.device auto: no GPU visible here; --device cuda plans for GPUs)");
}

// "[1, 16, 31]" into buf.
static const char *plan_ids(const int64_t *v, int n, char *buf, size_t size) {
    size_t m = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && m < size; i++) m += (size_t)snprintf(buf + m, size - m, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (m < size) snprintf(buf + m, size - m, "]");
    return buf;
}

// What the plans are made of: the world, the device, the target and the drafter, one line each.
static void plan_header(const config *cfg, const world *w, int t_known, const char *how, const target_config *tc,
                        const drafter_config *dc) {
    char groups[96] = "";
    if (w->group_size > 1) snprintf(groups, sizeof groups, " in %d group(s) of %d", w->groups, w->group_size);
    printf("plan: %d teacher(s)%s + %d student(s), mode %s; %s\n", w->teachers, groups, w->students, cfg->mode, how);
    if (!t_known)
        printf("  world.teachers = -1 (the world size less world.students) and no launcher: planned with 1 teacher%s; "
               "set world.teachers, or run under mpirun -np N\n", w->group_size > 1 ? " (one group of stage ranks)" : "");
    int64_t linear = 0, sparse = 0;
    for (int64_t l = 0; l < tc->n_layers; l++) linear += target_layer_is_linear(tc, l), sparse += target_layer_is_sparse(tc, l);
    char mix[96] = "", moe[128] = "";
    if (linear) snprintf(mix, sizeof mix, " (%lld Gated DeltaNet + %lld gated attention)", (long long)linear,
                         (long long)(tc->n_layers - linear));
    if (sparse)
        snprintf(moe, sizeof moe, " (%lld MoE MLPs: %lld experts x %lld, top %lld%s)", (long long)sparse,
                 (long long)tc->n_experts, (long long)tc->moe_intermediate, (long long)tc->n_experts_tok,
                 tc->shared_intermediate > 0 ? " + a shared expert" : "");
    printf("  target %s: %s, %lld layers%s%s, hidden %lld, vocab %lld (config.json only: no weight is read)\n",
           cfg->target_path, tc->arch_name, (long long)tc->n_layers, mix, moe, (long long)tc->hidden, (long long)tc->vocab);
    int sliding = 0;
    for (int64_t l = 0; l < dc->n_layers; l++) sliding += dc->layer_sliding[l];
    char types[64] = "", ids[DRAFTER_MAX_FEAT * 8];
    if (sliding) snprintf(types, sizeof types, " (%d sliding, window %lld)", sliding, (long long)dc->sliding_window);
    printf("  drafter: %lld layer(s)%s, %lld/%lld heads x %lld, intermediate %lld, block %lld, mask token %lld, "
           "target layers %s\n", (long long)dc->n_layers, types, (long long)dc->n_heads, (long long)dc->n_kv_heads,
           (long long)dc->head_dim, (long long)dc->intermediate, (long long)dc->block_size, (long long)dc->mask_token_id,
           plan_ids(dc->target_layer_ids, dc->n_feat, ids, sizeof ids));
}

// ----------------------------------------------------------------------------- pinned host memory

void job_plan_links(const config *cfg, const world *w, const backend *be, int offline, int eval, int *on_link, int *grad_mpi) {
    int links = be->caps.device_links;
    *on_link = !offline && links && strcmp(cfg->payload, "mpi") != 0 && w->teachers > 0 && w->students > 0;
    *grad_mpi = links && w->students > 1 && !eval && strcmp(cfg->grad_allreduce, "mpi") == 0;
}

size_t job_plan_pinned_rank(const config *cfg, const world *w, int r, const backend *be, const target_config *tc,
                            const teacher_contract *ct, const drafter_config *dc, int on_link, int grad_mpi, int offline) {
    if (r < w->teachers) {
        int G = w->group_size > 0 ? w->group_size : 1;
        return teacher_pinned_bytes(be, cfg, tc, ct, G, G > 1 ? r % G : 0, w->students, on_link);
    }
    size_t bytes = offline ? 0 : batch_source_pinned_bytes(be, cfg, w, ct->topk, (int64_t)ct->n_feat * tc->hidden, on_link);
    if (grad_mpi) bytes += students_grads_pinned_bytes(be, drafter_param_numel(dc));
    return bytes;
}

// The host section of --plan: each role's pinned host memory per rank, and per host (the launcher's
// ranks per host in consecutive blocks; without one every rank on one host): the fullest host.
static void plan_host(const config *cfg, const world *w, int ranks_on_host, const backend *be, const target_config *tc,
                      const teacher_contract *ct, const drafter_config *dc, int on_link, int grad_mpi, int offline) {
    int n = w->size, per = ranks_on_host > 0 && ranks_on_host < n ? ranks_on_host : n;
    char a[32], b[32], how[200];
    snprintf(how, sizeof how, "%s", !be->caps.pinned_transfers ? "cpu: plain memory, nothing pinned"
                                    : on_link ? "the payloads' features GPU to GPU: tickets, top-k and LSE through the host"
                                              : "the payloads whole through the host, features included");
    printf("host memory plan (pinned host memory, not on the device; %s)\n", how);
    int G = w->group_size > 0 ? w->group_size : 1;
    for (int st = 0; st < (w->teachers > 0 ? G : 0); st++) { // a teacher rank per stage (G = 1: one)
        size_t v = job_plan_pinned_rank(cfg, w, st, be, tc, ct, dc, on_link, grad_mpi, offline);
        char who[48] = "teacher rank";
        if (G > 1) snprintf(who, sizeof who, "teacher rank, stage %d", st);
        printf("  %-26s %12s  (%zu bytes per rank)\n", who, bytes_format(v, a, sizeof a), v);
        printf("pinned_rank_bytes teacher %d %zu\n", st, v);
    }
    if (w->students > 0) {
        size_t v = job_plan_pinned_rank(cfg, w, w->teachers, be, tc, ct, dc, on_link, grad_mpi, offline);
        printf("  %-26s %12s  (%zu bytes per rank)\n", "student rank", bytes_format(v, a, sizeof a), v);
        printf("pinned_rank_bytes student %zu\n", v);
    }
    size_t best = 0;
    int best_h = 0, bt = 0, bs = 0;
    for (int h = 0; h * per < n; h++) {
        size_t sum = 0;
        int t = 0, s = 0;
        for (int r = h * per; r < n && r < (h + 1) * per; r++) {
            sum += job_plan_pinned_rank(cfg, w, r, be, tc, ct, dc, on_link, grad_mpi, offline);
            if (r < w->teachers) t++;
            else s++;
        }
        if (h == 0 || sum > best) best = sum, best_h = h, bt = t, bs = s;
    }
    char where[96];
    if (per < n) snprintf(where, sizeof where, "host %d of %d (%d ranks a host)", best_h, (n + per - 1) / per, per);
    else snprintf(where, sizeof where, "one host");
    printf("  %-26s %12s  (%zu bytes: %d teacher + %d student rank(s) on %s)\n", "host total", bytes_format(best, b, sizeof b),
           best, bt, bs, where);
    printf("pinned_host_bytes %zu\n", best);
    if (be->caps.device_links)
        printf("  (transport.payload %s planned as %s, transport.grad_allreduce %s as %s; --preflight checks `ulimit -l` and "
               "free memory against it)\n", cfg->payload, on_link ? "NCCL" : "MPI", cfg->grad_allreduce,
               grad_mpi ? "MPI (the gradient ring)" : w->students > 1 ? "NCCL (no ring)" : "nothing (one student)");
}

int job_plan_roles(const config *cfg, const world_want *want, int world_size, world *w, int *known) {
    memset(w, 0, sizeof *w);
    *known = 1;
    if (world_size > 0) return world_assign(w, 0, world_size, want); // the launcher's world, as the job checks it
    int size = world_want_size(want, cfg, known);                     // else the configured counts
    return world_assign(w, 0, size, want);
}

int job_plan_train(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print) {
    int eval = cfg->eval_only, offline = want->offline;
    if (!cfg->target_path[0])
        return error_set("--plan needs target.path, the target model directory (its config.json is enough: no weight is read)");

    // The roles and teacher groups, as the job assigns them (the mode's rule: world.h).
    world w;
    int t_known = 1;
    if (job_plan_roles(cfg, want, world_size, &w, &t_known)) return -1;
    if (train_check_roles(&w, cfg)) return -1;
    int T = w.teachers, S = w.students;

    backend be;
    char how[160];
    job_plan_backend(cfg, ranks_on_host > 0 ? ranks_on_host : T + S, &be, how, sizeof how);
    target_config tc;
    teacher_contract ct;
    drafter_config dc;
    if (target_config_load(&tc, cfg->target_path) || teacher_contract_make(cfg, tc.n_layers, &ct) ||
        train_drafter_config(cfg, &tc, &ct, &dc))
        return -1;
    if (print) plan_header(cfg, &w, t_known, how, &tc, &dc);

    // Teachers: weights + forward work of the students' batches, against teacher.mem_budget.
    char teacher_err[1024] = "";
    if (T > 0) {
        world tw = w;
        tw.rank = print ? 0 : 1; // teacher_plan_print prints on rank 0
        tw.teachers = t_known ? T : -1;
        if (teacher_plan_print(&tw, cfg, &be)) snprintf(teacher_err, sizeof teacher_err, "%s", error_msg());
    } else if (print) {
        printf("teacher memory plan: no teacher rank (data.features: the students read offline features)\n");
    }

    // Students: plan_make as student_train calls it.
    plan_request pr = {.budget = (size_t)cfg->train_mem_budget, .max_tokens = (int)cfg->max_tokens_per_batch,
                       .max_seqs = (int)cfg->max_tokens_per_batch, .max_anchors = (int)cfg->max_anchors, .k = ct.topk,
                       .adam = !eval, .ema = !eval && cfg->ema_decay > 0, .tied = tc.tie_embeddings, .force_mode = -1};
    if (!eval && strcmp(cfg->optimizer, "muon") == 0) pr.optim_scratch = optim_muon_plan_bytes(&dc);
    // the NCCL receive ring when the features would travel GPU to GPU (transport.payload auto or nccl)
    int ring = !offline && be.caps.device_links && strcmp(cfg->payload, "mpi") != 0;
    // (batch_source_buffers of them, as student_train counts it)
    if (ring)
        pr.link_bytes = (size_t)batch_source_buffers(cfg, &w) * (size_t)cfg->max_tokens_per_batch *
                        (size_t)(ct.n_feat * tc.hidden) * 2;
    // a budget is all the process may use on its card: the plan gets it less the reserve (gpu_reserve.h)
    gpu_reserve sr;
    int grad_nccl = be.caps.device_links && S > 1 && !eval && strcmp(cfg->grad_allreduce, "mpi") != 0;
    // pinned host memory: the payload buffers and, over MPI on a GPU, the gradient ring
    int on_link, grad_mpi;
    job_plan_links(cfg, &w, &be, offline, eval, &on_link, &grad_mpi);
    if (!offline) pr.host_payload = batch_source_pinned_bytes(&be, cfg, &w, ct.topk, (int64_t)ct.n_feat * tc.hidden, on_link);
    if (grad_mpi) pr.host_grads = students_grads_pinned_bytes(&be, drafter_param_numel(&dc));
    gpu_reserve_make(&sr, be.caps.device, gpu_reserve_student_comms(ring, w.groups, grad_nccl), 0);
    pr.budget = gpu_reserve_usable(pr.budget, &sr);
    student_plan plan;
    plan_breakdown bd;
    char student_err[1024] = "", title[256];
    snprintf(title, sizeof title, "student memory plan (each of %d student rank(s), %s)", S, be.name);
    if (plan_make(&dc, &be, &pr, &plan, &bd)) {
        char a[32], b[32];
        if (sr.total && cfg->train_mem_budget > 0)
            snprintf(student_err, sizeof student_err, "train.mem_budget %s less its GPU reserve %s: %s",
                     bytes_format((size_t)cfg->train_mem_budget, a, sizeof a), bytes_format(sr.total, b, sizeof b), error_msg());
        else snprintf(student_err, sizeof student_err, "train.mem_budget: %s", error_msg());
    }
    if (print) {
        if (!student_err[0]) plan_print_titled(stdout, title, &bd, &plan, pr.budget);
        else printf("%s\n  does not fit (the error below)\n", title);
        char desc[160], a[32], b[32];
        printf("  %-26s %12s  (%s)\nstudent_reserve_bytes %zu\n", "GPU reserve", bytes_format(sr.total, a, sizeof a),
               gpu_reserve_describe(&sr, desc, sizeof desc), sr.total);
        if (cfg->train_mem_budget > 0 && sr.total)
            printf("  %-26s %12s  (the budget above is it less the GPU reserve)\n", "train.mem_budget",
                   bytes_format((size_t)cfg->train_mem_budget, b, sizeof b));
        if (ring)
            printf("  (the NCCL receive ring: transport.payload %s, every rank on its own GPU; --transport.payload=mpi "
                   "plans without it)\n", cfg->payload);
        fflush(stdout);
    }
    if (print) {
        plan_host(cfg, &w, ranks_on_host, &be, &tc, &ct, &dc, on_link, grad_mpi, offline);
        fflush(stdout);
    }
    if (teacher_err[0] && student_err[0]) return error_set("%s; and %s", teacher_err, student_err);
    if (teacher_err[0] || student_err[0]) return error_set("%s", teacher_err[0] ? teacher_err : student_err);
    if (print) {
        char a[32], b[32];
        printf("plan: every role fits (teacher.mem_budget %s, train.mem_budget %s)\n",
               cfg->teacher_mem_budget > 0 ? bytes_format((size_t)cfg->teacher_mem_budget, a, sizeof a) : "0 = no limit",
               cfg->train_mem_budget > 0 ? bytes_format((size_t)cfg->train_mem_budget, b, sizeof b) : "0 = no limit");
        fflush(stdout);
    }
    return 0;
}
