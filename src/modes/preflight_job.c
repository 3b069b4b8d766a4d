// preflight_job.c: the `--preflight` checks several modes share (preflight_job.h): the target, the
// training data, the run directory, the teacher's and the student's memory plans, pinned memory.
#include "modes/preflight_job.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/data/batchplan.h"
#include "common/data/featreader.h"
#include "common/data/safetensors.h"
#include "modes/job_plan.h"
#include "modes/mode_claim.h"
#include "student/model/drafter.h"
#include "student/model/memory_plan.h"
#include "student/train/optim.h"
#include "student/train/train_setup.h"
#include "teacher/target.h"

int pf_claim(pf_ctx *x) {
    if (mode_claim_distinct(x->mode, x->cfg)) return -1;
    return x->mode->claim && x->mode->claim(x->cfg, 1) ? -1 : 0; // the run's claim, dry
}

// ----------------------------------------------------------------------------- the target's shape

int pf_target_config(pf_ctx *x) {
    if (!x->cfg->target_path[0]) {
        snprintf(x->target_err, sizeof x->target_err, "target.path is not set");
        return -1;
    }
    x->have_target_cfg = target_config_load(&x->target_cfg, x->cfg->target_path) == 0;
    if (!x->have_target_cfg) snprintf(x->target_err, sizeof x->target_err, "%s", error_msg());
    return x->have_target_cfg ? 0 : -1;
}

void pf_job_shape(pf_ctx *x) {
    if (pf_target_config(x)) return;
    x->have_contract = teacher_contract_make(x->cfg, x->target_cfg.n_layers, &x->contract) == 0;
    if (!x->have_contract) {
        snprintf(x->target_err, sizeof x->target_err, "%s", error_msg());
        return;
    }
    // The drafter's shape as the student derives it (and its checks against the target).
    x->have_drafter_cfg = train_drafter_config(x->cfg, &x->target_cfg, &x->contract, &x->drafter_cfg) == 0;
    if (!x->have_drafter_cfg) snprintf(x->drafter_err, sizeof x->drafter_err, "%s", error_msg());
}

void pf_target_row(pf_ctx *x, const char *host, int layers) {
    const config *cfg = x->cfg;
    if (!cfg->target_path[0]) {
        pf_mode_row(x, x->mode->needs ? PF_FAIL : PF_SKIP, "target.path is not set");
        return;
    }
    if (!x->have_target_cfg || !x->have_contract) {
        pf_mode_row(x, PF_FAIL, "%s: %s", host, x->target_err);
        return;
    }
    st_dir d;
    if (safetensors_dir_open(&d, cfg->target_path)) {
        pf_mode_row(x, PF_FAIL, "%s: %s", host, error_msg());
        return;
    }
    char emb[96]; // model.embed_tokens.weight, or under the multimodal wrappers' prefix
    target_names_resolve(&x->target_cfg, &d);
    snprintf(emb, sizeof emb, "%sembed_tokens.weight", target_tensor_prefix(&x->target_cfg));
    const char *head = target_head_name(&x->target_cfg);
    const char *missing = !safetensors_dir_find(&d, emb)                                      ? emb
                          : !x->target_cfg.tie_embeddings && !safetensors_dir_find(&d, head) ? head
                                                                                      : NULL;
    size_t bytes = 0;
    for (int i = 0; i < d.n; i++) bytes += d.entries[i]->nbytes;
    char b[32], ids[160] = "";
    for (int i = 0; i < x->contract.n_feat; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "", (long long)x->contract.layer_ids[i]);
    if (missing)
        pf_mode_row(x, PF_FAIL, "%s: %s: no tensor %s", host, cfg->target_path, missing);
    else
        pf_mode_row(x, PF_OK, "%s: %s, %lld layers, hidden %lld, vocab %lld; %d tensors, %s in %d file(s)%s%s", host,
                    x->target_cfg.arch_name, (long long)x->target_cfg.n_layers, (long long)x->target_cfg.hidden, (long long)x->target_cfg.vocab, d.n,
                    pf_bytes(bytes, b), d.n_files, layers ? "; feature layers " : "", layers ? ids : "");
    safetensors_dir_close(&d);
}

void pf_job_target(pf_ctx *x, const char *host) { pf_target_row(x, host, 1); }

// ----------------------------------------------------------------------------- memory

int64_t pf_teacher_forward(pf_ctx *x, char *detail, size_t n, pf_result *res, int tokens, int students, int fit_batch) {
    const config *cfg = x->cfg;
    const world *w = x->w;
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = x->target_cfg;
    m.be = &x->be;
    target_outputs o = {.n_feat = x->contract.n_feat, .topk = x->contract.topk, .vocab_tile = (int)cfg->teacher_vocab_tile};
    for (int i = 0; i < x->contract.n_feat; i++) o.layer_ids[i] = x->contract.layer_ids[i];
    if (target_outputs_check(&m, &o)) {
        *res = PF_FAIL;
        snprintf(detail, n, "teacher: %s", error_msg());
        return -1;
    }
    int G = w->group_size > 1 ? w->group_size : 1, stage = G > 1 ? w->stage : 0;
    // the stages' activations and payloads over NCCL: device links, unless transport.payload = mpi
    int nccl = G > 1 && x->be.caps.device_links && strcmp(cfg->payload, "mpi") != 0;
    teacher_stage_mem *st = xmalloc((size_t)G * sizeof *st);
    if (teacher_group_mem(cfg, &x->target_cfg, &x->be, &o, tokens, G, students, nccl, st)) {
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
    if (fit_batch && cfg->teacher_mem_budget > 0) { // dump-features refuses what does not fit its budget
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
    } else if (!fit_batch && cfg->teacher_mem_budget > 0 &&
               teacher_group_budget(cfg, &x->target_cfg, &x->be, &o, tokens, G, students, nccl)) { // the run's own check
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

// The teacher of a training job: the students' packed batches (the contract's max_tokens).
int64_t pf_job_teacher(pf_ctx *x, char *detail, size_t n, pf_result *res) {
    return pf_teacher_forward(x, detail, n, res, x->contract.max_tokens, x->w->students, 0);
}

// The student's memory: plan_make exactly as student_train calls it.
int64_t pf_job_student(pf_ctx *x, char *detail, size_t n, pf_result *res) {
    const config *cfg = x->cfg;
    if (!x->have_drafter_cfg) {
        *res = PF_FAIL;
        snprintf(detail, n, "%s", x->drafter_err);
        return -1;
    }
    plan_request pr = {.budget = (size_t)cfg->train_mem_budget, .max_tokens = (int)cfg->max_tokens_per_batch,
                       .max_seqs = (int)cfg->max_tokens_per_batch, .max_anchors = (int)cfg->max_anchors,
                       .k = x->contract.topk, .adam = 1, .ema = cfg->ema_decay > 0, .tied = x->target_cfg.tie_embeddings,
                       .force_mode = -1};
    if (strcmp(cfg->optimizer, "muon") == 0) pr.optim_scratch = optim_muon_plan_bytes(&x->drafter_cfg);
    student_plan plan;
    plan_breakdown bd;
    if (plan_make(&x->drafter_cfg, &x->be, &pr, &plan, &bd)) {
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
    // The GEMM library's workspace in bd.library was allocated when the backend opened: no longer free.
    return (int64_t)(bd.total - bd.library);
}

// A training job's pinned host memory: the payload buffers and the gradient ring, as --plan plans them.
int64_t pf_job_pinned(pf_ctx *x) {
    const world *w = x->w;
    if (w->role != ROLE_TEACHER && !x->have_drafter_cfg) return -1;
    int on_link = 0, grad_mpi = 0;
    job_plan_links(x->cfg, w, &x->be, x->offline, x->cfg->eval_only, &on_link, &grad_mpi);
    return (int64_t)job_plan_pinned_rank(x->cfg, w, w->rank, &x->be, &x->target_cfg, &x->contract, &x->drafter_cfg, on_link, grad_mpi,
                                         x->offline);
}

// ----------------------------------------------------------------------------- the training data

// The data row's verdict: the batch plan of the n samples (lengths len) the job would build.
static void pf_batch_plan_row(pf_ctx *x, const char *what, const int64_t *len, int64_t n, const batchplan_set *sets,
                              int n_sets) {
    const config *cfg = x->cfg;
    batchplan bp;
    if (batchplan_build(&bp, len, n, sets, n_sets, cfg->heldout_samples, cfg->max_tokens_per_batch, cfg->bucket_size,
                        (uint64_t)cfg->seed)) {
        pf_mode_row(x, PF_FAIL, "%s: %s", what, error_msg());
        return;
    }
    pf_mode_row(x, PF_OK, "%s; %lld training batch(es) per epoch, %lld held-out", what,
                (long long)batchplan_epoch_size(&bp, 0), (long long)bp.n_heldout_batches);
    batchplan_free(&bp);
}

static void pf_data_features(pf_ctx *x, const char *host) {
    featreader *fr = NULL;
    if (featreader_open(&fr, x->cfg->data_features)) {
        pf_mode_row(x, PF_FAIL, "%s: %s", host, error_msg());
        return;
    }
    const config *cfg = x->cfg;
    int64_t want_d = x->have_contract && x->have_target_cfg ? x->contract.n_feat * x->target_cfg.hidden : -1, n = featreader_samples(fr);
    char what[256];
    snprintf(what, sizeof what, "%s: data.features %s: %lld sample(s) from %d set(s), top-%d, %d feature columns", host,
             cfg->data_features, (long long)n, featreader_n_sets(fr), featreader_topk(fr), featreader_feat_dim(fr));
    batchplan_set sets[CONFIG_MAX_SETS];
    int n_sets = 0;
    int64_t *len = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) len[i] = featreader_len(fr, i);
    if (want_d >= 0 && (featreader_topk(fr) != x->contract.topk || featreader_feat_dim(fr) != want_d))
        pf_mode_row(x, PF_FAIL, "%s; the run expects top-%d and %lld", what, x->contract.topk, (long long)want_d);
    else if (n == 0)
        pf_mode_row(x, PF_FAIL, "%s: no sample to train on", what);
    else if ((n_sets = dataset_feature_sets(cfg, fr, sets)) < 0)
        pf_mode_row(x, PF_FAIL, "%s: %s", what, error_msg());
    else
        pf_batch_plan_row(x, what, len, n, sets, n_sets);
    free(len);
    featreader_close(fr);
}

int pf_data_sets(pf_ctx *x, const char *host, dataset *ds, char *what, size_t n, int64_t **len, int64_t *longest) {
    const config *cfg = x->cfg;
    if (config_data_count(cfg) <= 0) {
        pf_mode_row(x, x->mode->needs ? PF_FAIL : PF_SKIP, "%s",
                    config_data_count(cfg) < 0 ? error_msg() : "neither data.path nor data.sets is set");
        return 1;
    }
    if (dataset_open(ds, cfg, cfg->min_loss_tokens)) {
        pf_mode_row(x, PF_FAIL, "%s: %s", host, error_msg());
        return 1;
    }
    int64_t tokens = 0, loss_tokens = 0, raw = 0, rej_ids = 0, rej_short = 0, rej_off = 0;
    for (int i = 0; i < ds->n_sets; i++) {
        tokens += ds->sets[i].n_tokens, loss_tokens += ds->sets[i].loss_tokens, raw += ds->sets[i].n_raw;
        rej_off += ds->sets[i].rejected_offsets, rej_ids += ds->sets[i].rejected_ids, rej_short += ds->sets[i].rejected_short;
    }
    snprintf(what, n, "%s: %d set(s), %lld usable sample(s) of %lld (%lld tokens, %lld loss tokens), vocab %lld", host,
             ds->n_sets, (long long)ds->n, (long long)raw, (long long)tokens, (long long)loss_tokens,
             (long long)ds->vocab_size);
    *len = xmalloc((size_t)(ds->n > 0 ? ds->n : 1) * sizeof(int64_t));
    *longest = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        (*len)[i] = dataset_len(ds, i);
        if ((*len)[i] > *longest) *longest = (*len)[i];
    }
    int done = 1;
    if (ds->n == 0)
        pf_mode_row(x, PF_FAIL, "%s: no sample with a valid anchor, %lld loss tokens (data.min_loss_tokens) and "
                                "valid ids (rejected: %lld bad offsets, %lld bad ids, %lld short)",
                    what, (long long)cfg->min_loss_tokens, (long long)rej_off, (long long)rej_ids, (long long)rej_short);
    else if (x->have_target_cfg && ds->vocab_size > x->target_cfg.vocab)
        pf_mode_row(x, PF_FAIL, "%s, larger than the target's %lld", what, (long long)x->target_cfg.vocab);
    else
        done = 0;
    if (done) {
        free(*len);
        *len = NULL;
        dataset_close(ds);
    }
    return done;
}

// The training set(s): readable, usable samples, vocabulary within the target's, a batch plan; or
// the offline features (data.features) to a batch plan.
void pf_job_data(pf_ctx *x, const char *host) {
    if (x->offline) {
        pf_data_features(x, host);
        return;
    }
    dataset ds;
    char what[256];
    int64_t *len = NULL, longest = 0;
    if (pf_data_sets(x, host, &ds, what, sizeof what, &len, &longest)) return;
    batchplan_set sets[CONFIG_MAX_SETS];
    dataset_plan_sets(&ds, sets);
    pf_batch_plan_row(x, what, len, ds.n, sets, ds.n_sets);
    free(len);
    dataset_close(&ds);
}

// ----------------------------------------------------------------------------- the run directory

int pf_dir_writable(pf_ctx *x, const char *key, const char *dir, pf_result unset, int *created, size_t *avail,
                    int *have_vs) {
    if (!dir[0]) {
        pf_mode_row(x, unset, "%s is not set", key);
        return 1;
    }
    if (pf_claim(x)) {
        pf_mode_row(x, PF_FAIL, "%s", error_msg());
        return 1;
    }
    struct stat st; // created as the run would (one level)
    *created = 0;
    if (stat(dir, &st) != 0) {
        if (mkdir(dir, 0755) != 0) {
            pf_mode_row(x, PF_FAIL, "%s %s: cannot create it: %s", key, dir, strerror(errno));
            return 1;
        }
        *created = 1;
    } else if (!S_ISDIR(st.st_mode)) {
        pf_mode_row(x, PF_FAIL, "%s %s: not a directory", key, dir);
        return 1;
    }
    char probe[CONFIG_STR + 64]; // a probe file written, fsynced and removed
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
    *have_vs = statvfs(dir, &vs) == 0;
    if (*created) rmdir(dir);
    if (!ok) {
        pf_mode_row(x, PF_FAIL, "%s %s: cannot %s a file there: %s", key, dir, step, strerror(err));
        return 1;
    }
    *avail = *have_vs ? (size_t)vs.f_bavail * vs.f_frsize : 0;
    return 0;
}

// run.dir: writable, and its free space against what the run keeps there: checkpoint.keep + 1
// checkpoints (the newest is complete before the oldest goes) and the exported drafter.
void pf_job_run_dir(pf_ctx *x, const char *host) {
    (void)host;
    const config *cfg = x->cfg;
    const char *key = "run.dir", *dir = cfg->run_dir;
    int created = 0, have_vs = 0;
    size_t avail = 0;
    if (pf_dir_writable(x, key, dir, PF_SKIP, &created, &avail, &have_vs)) return;
    char f[32], n1[32], n2[32];
    if (!x->have_drafter_cfg) {
        pf_mode_row(x, PF_OK, "%s %s: writable%s, %s free%s", key, dir, created ? " (created)" : "", pf_bytes(avail, f),
                    "; size of the checkpoints unknown (target unreadable)");
        return;
    }
    size_t numel = (size_t)drafter_param_numel(&x->drafter_cfg);
    size_t per_ckpt = numel * sizeof(float) * (3 + (cfg->ema_decay > 0)); // weights, Adam m and v, EMA
    size_t n_ckpt = cfg->ckpt_every > 0 ? (size_t)cfg->ckpt_keep + 1 : 0;
    size_t need = n_ckpt * per_ckpt + numel * sizeof(float);                // + the export (fp32 at most)
    char ckpts[160];
    if (n_ckpt)
        snprintf(ckpts, sizeof ckpts, "%zu checkpoint(s) of %s (checkpoint.keep = %lld, + 1 while writing)", n_ckpt,
                 pf_bytes(per_ckpt, n1), (long long)cfg->ckpt_keep);
    else
        snprintf(ckpts, sizeof ckpts, "no checkpoints (checkpoint.every = 0)");
    pf_mode_row(x, have_vs && avail < need ? PF_FAIL : PF_OK,
                "%s %s: writable%s, %s free, needs %s: %s and the exported drafter (%lld parameters)%s", key, dir,
                created ? " (created)" : "", pf_bytes(avail, f), pf_bytes(need, n2), ckpts, (long long)numel,
                have_vs && avail < need ? ": not enough space" : "");
}
