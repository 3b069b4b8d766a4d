// dump_features.c: the teacher-only offline mode (see dump_features.h).
#include "teacher/dump_features.h"
#include "common/core/config.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/backend/arena.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/core/run_dir.h"
#include "common/core/fsutil.h"
#include "common/core/half.h"
#include "common/core/log.h"
#include "common/core/stop.h"
#include "common/data/dataset.h"
#include "common/data/featfile.h"
#include "common/data/identity.h"
#include "common/comm/stop_relay.h"
#include "common/comm/watchdog.h"
#include "common/comm/wire.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/teacher_group.h"

static void shard_path(char *buf, size_t n, const char *dir, int64_t s, int64_t n_shards) {
    snprintf(buf, n, "%s/features-%05lld-of-%05lld.h5", dir, (long long)s, (long long)n_shards);
}

// One packed batch of samples [first, last) of the training data (the mix of its sets, dataset.h)
// through the target; each sample's outputs are appended to the shard in order.
typedef struct {
    target_model *m;
    target_outputs *o;
    target_work *w;
    dataset *ts;
    featfile_writer *fw;
    int32_t *tokens;   // [max_tokens] host
    uint8_t *mask;     // [max_tokens]
    int32_t *cu;       // [max_seqs + 1]
    void *feat_raw;    // [max_tokens, n_feat*H] act dtype (host copy)
    uint16_t *feat_bf16;
    int32_t *topk_idx; // [max_tokens, k]
    float *topk_val;
    float *lse;
    stage_link *link; // a teacher group's stage-to-stage link (NULL: one rank holds the target)
    int64_t first_of_shard; // the first sample of the shard being dumped
} dump_ctx;

#define DUMP_STOPPED 1 // dump_batch: the first stage of the group stopped before this shard (stop.h)

// With a teacher group every stage walks the same shards and batches: the first reads the samples,
// each passes its layers' result on, the last writes the shard (an error there ends the job: the
// other stages would wait on it).
static int dump_batch(dump_ctx *c, int64_t shard, int64_t first, int64_t last) {
    int n_seq = 0, T = 0;
    c->cu[0] = 0;
    if (target_stage_is_first(c->m)) {
        for (int64_t i = first; i < last; i++) {
            int64_t len = dataset_len(c->ts, i);
            if (dataset_read(c->ts, i, c->tokens + T, c->mask + T)) return -1;
            T += (int)len;
            c->cu[++n_seq] = T;
        }
    } else {
        stage_header h;
        int got = stage_recv(c->link, &h, c->tokens, c->cu, c->mask, c->w, 5);
        if (got < 0) return -1;
        if (got == 0 && first == c->first_of_shard) return DUMP_STOPPED; // the first stage stopped (a signal)
        if (got == 0 || h.index != shard || h.n_seq != last - first)
            return error_set("dump-features: the previous stage sent shard %lld (%lld samples), expected shard %lld (%lld)",
                             (long long)h.index, (long long)h.n_seq, (long long)shard, (long long)(last - first));
        T = (int)h.S, n_seq = (int)h.n_seq;
    }
    if (target_forward(c->m, c->o, c->w, c->tokens, c->cu, n_seq, T, NULL, 0, NULL)) return -1;
    if (!target_stage_is_last(c->m)) {
        stage_header h = {.kind = WIRE_TRAIN, .index = shard, .S = T, .n_seq = n_seq};
        return stage_send(c->link, &h, c->tokens, c->cu, c->mask, c->w);
    }
    backend *be = c->m->be;
    dtype act = ops_act_dtype(be);
    int64_t D = (int64_t)c->o->n_feat * c->m->cfg.hidden, k = c->o->topk;
    backend_copy_to_host(be, c->feat_raw, c->w->features, (size_t)T * (size_t)D * dtype_size(act));
    backend_copy_to_host(be, c->topk_idx, c->w->topk_idx, (size_t)T * (size_t)k * sizeof(int32_t));
    backend_copy_to_host(be, c->topk_val, c->w->topk_val, (size_t)T * (size_t)k * sizeof(float));
    backend_copy_to_host(be, c->lse, c->w->lse, (size_t)T * sizeof(float));
    const uint16_t *feat = c->feat_raw; // bf16 already on CUDA
    if (act == DT_F32) {
        const float *f = c->feat_raw;
        for (int64_t i = 0; i < (int64_t)T * D; i++) c->feat_bf16[i] = bf16_from_f32(f[i]);
        feat = c->feat_bf16;
    }
    for (int s = 0; s < n_seq; s++) {
        int64_t t0 = c->cu[s], n = c->cu[s + 1] - c->cu[s];
        if (featfile_writer_append(c->fw, c->tokens + t0, c->mask + t0, n, feat + t0 * D, c->topk_idx + t0 * k,
                                   c->topk_val + t0 * k, c->lse + t0))
            return -1;
    }
    return 0;
}

// A JSON string (quoted, escaped) for the index.
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

// Write the index of the shards (rank 0, after every shard is done). "sets" records the training
// sets in sample order (path, usable samples, weight, and "heldout": the usable indices of the set's
// recorded /heldout split when it has one), for student-only training from the features.
// The index is written whole, sealed (crc32c.h: a flipped bit anywhere in it is refused at load),
// with the run's identity (identity.h) that a student-only run compares with its own.
static int dump_index(const config *cfg, const featfile_info *info, int64_t n_shards, int64_t n_samples,
                      const int64_t *set_samples, const int64_t *const *set_heldout, const int64_t *n_set_heldout,
                      const uint32_t *set_lengths_crc, const run_identity *id) {
    char path[CONFIG_STR + 32], tmp[CONFIG_STR + 48];
    snprintf(path, sizeof path, "%s/features.json", cfg->features_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *body = NULL;
    size_t body_n = 0;
    FILE *f = open_memstream(&body, &body_n);
    if (!f) return error_set("%s: %s", tmp, strerror(errno));
    int n_sets = config_data_count(cfg);
    // "data": data.path, or data.sets as written on the command line (a.h5:2,b.h5:0.5)
    fprintf(f, "{\n  \"format_version\": 1,\n  \"data\": ");
    if (cfg->data_sets.n == 0) {
        json_string(f, cfg->data_path);
    } else {
        size_t cap = (size_t)cfg->data_sets.n * (CONFIG_STR + 32), used = 0;
        char *text = xmalloc(cap);
        text[0] = '\0';
        for (int64_t i = 0; i < cfg->data_sets.n; i++)
            used += (size_t)snprintf(text + used, cap - used, "%s%s:%g", i ? "," : "", cfg->data_sets.v[i].path,
                                     cfg->data_sets.v[i].weight);
        json_string(f, text);
        free(text);
    }
    fprintf(f, ",\n  \"sets\": [\n");
    for (int i = 0; i < n_sets; i++) {
        double w;
        const char *p = config_data_path(cfg, i, &w);
        fprintf(f, "    {\"path\": ");
        json_string(f, p);
        fprintf(f, ", \"samples\": %lld, \"lengths_crc32c\": %u, \"weight\": %.17g", (long long)set_samples[i],
                (unsigned)set_lengths_crc[i], w);
        if (n_set_heldout[i] >= 0) {
            fprintf(f, ", \"heldout\": [");
            for (int64_t j = 0; j < n_set_heldout[i]; j++) fprintf(f, "%s%lld", j ? ", " : "", (long long)set_heldout[i][j]);
            fprintf(f, "]");
        }
        fprintf(f, "}%s\n", i + 1 < n_sets ? "," : "");
    }
    fprintf(f, "  ],\n  \"target\": ");
    json_string(f, info->target);
    fprintf(f, ",\n  \"target_architecture\": ");
    json_string(f, info->target_arch);
    fprintf(f, ",\n");
    fprintf(f, "  \"target_layer_ids\": [");
    for (int i = 0; i < info->n_feat; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)info->layer_ids[i]);
    // features = HF hidden_states[id + 1] (target.h): the last layer's after the final norm
    // min_loss_tokens: the rule that chose the samples (data.min_loss_tokens), which training compares
    fprintf(f, "],\n  \"feature_convention\": \"hidden_states[id+1]\",\n  \"hidden_size\": %lld,\n  \"topk\": %d,\n  \"samples\": %lld,\n  \"min_loss_tokens\": %lld,\n  \"shards\": [\n",
            (long long)info->hidden, info->topk, (long long)n_samples, (long long)cfg->min_loss_tokens);
    for (int64_t s = 0; s < n_shards; s++) {
        char p[CONFIG_STR + 64];
        shard_path(p, sizeof p, ".", s, n_shards);
        fprintf(f, "    \"%s\"%s\n", p + 2, s + 1 < n_shards ? "," : "");
    }
    char *idj = identity_to_json(id);
    fprintf(f, "  ],\n  \"identity\": %s\n}\n", idj);
    free(idj);
    if (fclose(f) != 0) {
        free(body);
        return error_set("%s: out of memory", path);
    }
    char *text = crc32c_seal_json(body);
    free(body);
    FILE *out = fopen(tmp, "w");
    int ok = out && fputs(text, out) >= 0;
    if (out && fclose(out) != 0) ok = 0;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        remove(tmp);
        return error_set("%s: %s", path, strerror(err));
    }
    return 0;
}

// What the index needs from a rank's run.
typedef struct {
    featfile_info info;
    run_identity id;
    int64_t n_shards, n_samples;
    int stopped, shards_done;             // stopped by a signal (stop.h) with shards_done of its shards complete
    int writer;                           // this rank writes shards (a group's last stage)
    int64_t set_samples[CONFIG_MAX_SETS]; // usable samples per training set
    uint32_t set_lengths_crc[CONFIG_MAX_SETS]; // the CRC32C of their lengths (int64 LE): the set's content identity
    const int64_t *set_heldout[CONFIG_MAX_SETS]; // the set's recorded held-out split (usable indices)
    int64_t n_set_heldout[CONFIG_MAX_SETS];      // its length; -1 = the set records none
} dump_result;

// This rank's part of the run: its stage of the target (the whole target when G = 1), the outputs
// asked for, the training data, the batch size and the target's work buffers, and what describes
// the run (featfile.h's info for every shard, identity.h's identity for the index).
typedef struct {
    target_model m;
    target_outputs o;
    dataset ts;
    int max_tokens, max_seqs, tile;
    arena work;
    target_work tw;
    featfile_info info;
    run_identity id;
    int64_t *lengths; // [ts.n] the samples' lengths
} dump_rank;

// dump_open_target: this rank's stage of the target and the outputs (layer ids, top-k) checked
// against it. -1 with nothing left open.
static int dump_open_target(const world *w, const config *cfg, backend *be, dump_rank *d) {
    d->m = (target_model){.be = be};
    target_model *m = &d->m;
    if (target_config_load(&m->cfg, cfg->target_path) || teacher_stage_select(w, m) ||
        target_load_stage(m, cfg->target_path, be, m->layer_begin, m->layer_end > 0 ? m->layer_end : -1))
        return -1;
    d->o = (target_outputs){.topk = (int)cfg->teacher_topk, .vocab_tile = (int)cfg->teacher_vocab_tile};
    target_outputs *o = &d->o;
    int rc = 0;
    if (cfg->target_layer_ids.n > 0) {
        o->n_feat = (int)cfg->target_layer_ids.n;
        for (int i = 0; i < o->n_feat; i++) o->layer_ids[i] = cfg->target_layer_ids.v[i];
    } else {
        o->n_feat = (int)cfg->n_features;
        rc = target_default_layer_ids(m->cfg.n_layers, o->n_feat, o->layer_ids);
    }
    if (rc == 0) rc = target_outputs_check(m, o);
    if (rc) target_free(m);
    return rc ? -1 : 0;
}

// dump_open_data: the training data, whose tokens must be the target's. -1 with it closed.
static int dump_open_data(const config *cfg, dump_rank *d) {
    if (dataset_open(&d->ts, cfg, cfg->min_loss_tokens)) return -1;
    if (d->ts.vocab_size > d->m.cfg.vocab) {
        int rc = error_set("training set %s has vocab_size %lld, larger than the target's %lld (%s)",
                           dataset_path(&d->ts, 0), (long long)d->ts.vocab_size, (long long)d->m.cfg.vocab,
                           cfg->target_path);
        dataset_close(&d->ts);
        return rc;
    }
    return 0;
}

// dump_size_batch: the batch size, teacher.max_tokens, which must hold the longest sample and fit
// the memory budget when one is given; then the work buffers for it. -1 with nothing allocated.
static int dump_size_batch(const config *cfg, backend *be, dump_rank *d) {
    const dataset *ts = &d->ts;
    d->max_tokens = (int)cfg->teacher_max_tokens, d->max_seqs = d->max_tokens, d->tile = d->o.vocab_tile;
    int rc = 0, max_tokens = d->max_tokens;
    int64_t longest = 0, at = 0;
    for (int64_t i = 0; i < ts->n; i++)
        if (dataset_len(ts, i) > longest) longest = dataset_len(ts, i), at = i;
    if (longest > max_tokens) rc = error_set("training set %s has a sample of %lld tokens, more than teacher.max_tokens = %d",
                                             dataset_path(ts, dataset_set_of(ts, at)), (long long)longest, max_tokens);
    if (rc == 0 && cfg->teacher_mem_budget > 0) {
        int fit = target_plan_tokens(&d->m, &d->o, (size_t)cfg->teacher_mem_budget, d->max_seqs, &d->tile);
        if (fit < max_tokens) {
            char b1[32], b2[32];
            rc = error_set("teacher.mem_budget %s holds batches of %d tokens, less than teacher.max_tokens = %d "
                           "(weights alone take %s)", bytes_format((size_t)cfg->teacher_mem_budget, b1, sizeof b1), fit,
                           max_tokens, bytes_format(target_model_weight_bytes(&d->m), b2, sizeof b2));
        }
    }
    if (rc) return -1;
    if (arena_init(&d->work, "teacher work", be, target_work_bytes(&d->m, &d->o, max_tokens, d->max_seqs, d->tile)))
        return error_append("its batches are teacher.max_tokens = %d tokens: lower it (or teacher.vocab_tile); "
                            "teacher.mem_budget checks the plan at start", max_tokens);
    target_work_carve(&d->tw, &d->work, &d->m, &d->o, max_tokens, d->max_seqs, d->tile);
    return 0;
}

// dump_describe: what every shard records (info) and the run's identity, recorded in the index and
// compared with existing shards (identity.h); d->lengths for both.
static void dump_describe(const config *cfg, dump_rank *d) {
    const dataset *ts = &d->ts;
    const target_outputs *o = &d->o;
    featfile_info *info = &d->info;
    *info = (featfile_info){.vocab_size = ts->vocab_size, .n_feat = o->n_feat, .hidden = d->m.cfg.hidden, .topk = o->topk};
    snprintf(info->tokenizer, sizeof info->tokenizer, "%s", ts->tokenizer);
    snprintf(info->target, sizeof info->target, "%s", cfg->target_path);
    snprintf(info->target_arch, sizeof info->target_arch, "%s", d->m.cfg.arch_name);
    for (int i = 0; i < o->n_feat; i++) info->layer_ids[i] = o->layer_ids[i];

    d->lengths = xmalloc((size_t)(ts->n + 1) * sizeof *d->lengths);
    for (int64_t i = 0; i < ts->n; i++) d->lengths[i] = dataset_len(ts, i);
    run_identity *id = &d->id;
    identity_init(id);
    identity_set_target(id, d->m.cfg.arch_name, d->m.cfg.hidden, d->m.cfg.n_layers, d->m.cfg.vocab, cfg->target_path);
    // every shard records the target by content too: a resume under the same target.path with
    // another model (other weights, another config.json) refuses the shards the first one made
    info->target_by_content = 1;
    info->target_config_crc = id->target_config_crc, info->target_weights_crc = id->target_weights_crc;
    id->n_layer_ids = o->n_feat;
    for (int i = 0; i < o->n_feat; i++) id->layer_ids[i] = o->layer_ids[i];
    snprintf(id->feature_convention, sizeof id->feature_convention, "%s", "hidden_states[id+1]");
    identity_set_data(id, d->lengths, ts->n);
}

// dump_rank_close: what dump_open_target .. dump_describe opened.
static void dump_rank_close(dump_rank *d) {
    free(d->lengths);
    arena_free(&d->work);
    dataset_close(&d->ts);
    target_free(&d->m);
}

// dump_ctx_open: the batch's host buffers and, in a teacher group, the link to the next stage (two
// batches in flight; held in *link). -1 with nothing allocated.
static int dump_ctx_open(dump_ctx *c, dump_rank *d, const world *w, backend *be, payload_link *links, stage_link *link) {
    int64_t D = (int64_t)d->o.n_feat * d->m.cfg.hidden;
    size_t max_tokens = (size_t)d->max_tokens, k = (size_t)d->o.topk;
    *c = (dump_ctx){.m = &d->m, .o = &d->o, .w = &d->tw, .ts = &d->ts};
    if (w->group_size > 1) {
        if (stage_link_init(link, w, be, links, 2, d->max_tokens, d->m.cfg.hidden, D)) return -1;
        c->link = link;
    }
    c->tokens = xmalloc(max_tokens * sizeof(int32_t));
    c->mask = xmalloc(max_tokens);
    c->cu = xmalloc(((size_t)d->max_seqs + 1) * sizeof(int32_t));
    c->feat_raw = xmalloc(max_tokens * (size_t)D * dtype_size(ops_act_dtype(be)));
    c->feat_bf16 = xmalloc(max_tokens * (size_t)D * sizeof(uint16_t));
    c->topk_idx = xmalloc(max_tokens * k * sizeof(int32_t));
    c->topk_val = xmalloc(max_tokens * k * sizeof(float));
    c->lse = xmalloc(max_tokens * sizeof(float));
    return 0;
}

static void dump_ctx_close(dump_ctx *c) {
    if (c->link) stage_link_free(c->link);
    free(c->tokens);
    free(c->mask);
    free(c->cu);
    free(c->feat_raw);
    free(c->feat_bf16);
    free(c->topk_idx);
    free(c->topk_val);
    free(c->lse);
}

// dump_shard_have: 1 when an earlier run left shard `path` (samples [first, last)) complete with
// this run's settings and tokens, 0 when it is to be dumped, -1 on an error (featfile_check).
static int dump_shard_have(dump_rank *d, dump_ctx *c, const char *path, int64_t first, int64_t last) {
    uint32_t tokens_crc = 0; // the run's tokens of this shard, for a shard an earlier run left
    struct stat st;
    for (int64_t i = first; i < last && stat(path, &st) == 0; i++) {
        if (dataset_read(&d->ts, i, c->tokens, NULL)) return -1;
        tokens_crc = crc32c_update(tokens_crc, c->tokens, (size_t)dataset_len(&d->ts, i) * sizeof(int32_t));
    }
    return featfile_check(path, &d->info, d->lengths + first, last - first, tokens_crc);
}

// The walk over this rank's shards: its progress line (on the writer) and what it did.
typedef struct {
    progress p;
    int writer; // this rank writes the shards (a group's last stage)
    int64_t done_samples;
} dump_walk;

// dump_shard_write: samples [first, last) of shard s in batches into the shard file path (the
// writer's; the other stages pass their layers on). 0 when written, DUMP_STOPPED when the first
// stage stopped before it (nothing of it written), -1 on an error; an error of a group's stage ends
// the job (the other stages would wait on it).
static int dump_shard_write(const world *w, dump_rank *d, dump_ctx *c, dump_walk *k, const char *path, int64_t s,
                            int64_t first, int64_t last) {
    c->first_of_shard = first;
    c->fw = &(featfile_writer){0};
    if (k->writer && featfile_writer_open(c->fw, path, &d->info)) return -1;
    int rc = 0;
    int64_t i = first;
    while (i < last && rc == 0) {
        int64_t j = i, T = 0; // pack samples i .. j-1 into one batch
        while (j < last && T + dataset_len(&d->ts, j) <= d->max_tokens) T += dataset_len(&d->ts, j++);
        rc = dump_batch(c, s, i, j);
        if (rc == DUMP_STOPPED) break;
        if (rc && c->link) fatal("dump-features, teacher group %d stage %d: %s", w->group, w->stage, error_msg());
        k->done_samples += j - i;
        if (k->writer) progress_update(&k->p, k->done_samples);
        i = j;
    }
    if (rc == DUMP_STOPPED) { // nothing of this shard came: nothing of it is written
        if (k->writer) featfile_writer_abort(c->fw);
        return DUMP_STOPPED;
    }
    if (!k->writer) return rc;
    if (rc == 0) rc = featfile_writer_close(c->fw);
    else featfile_writer_abort(c->fw);
    if (rc && c->link) fatal("dump-features, teacher group %d stage %d: %s", w->group, w->stage, error_msg());
    return rc;
}

// dump_shards: this rank's shards, shard s to teacher s mod (number of teachers) (a group's stages
// all walk its shards), at most features.shard_samples samples per shard, the shard count a
// multiple of the teachers' (each gets the same work: 384 samples on 2 teachers are 2 shards of 192,
// not 1 of 384 and an idle rank). A shard an earlier run finished is skipped; a stop (a signal) is
// taken before a shard that needs dumping.
static int dump_shards(const world *w, const config *cfg, dump_rank *d, dump_ctx *c, dump_result *res) {
    int64_t n = d->ts.n, me = w->group, n_teachers = w->groups > 0 ? w->groups : 1;
    int64_t n_shards = (n + cfg->features_shard_samples - 1) / cfg->features_shard_samples;
    if (n >= n_teachers) n_shards = (n_shards + n_teachers - 1) / n_teachers * n_teachers;
    int64_t per = n_shards > 0 ? (n + n_shards - 1) / n_shards : 1;
    n_shards = (n + per - 1) / per;
    res->n_shards = n_shards;
    int64_t mine = 0, skipped = 0, my_samples = 0;
    for (int64_t s = me; s < n_shards; s += n_teachers) my_samples += (s + 1) * per < n ? per : n - s * per;
    dump_walk k = {.writer = target_stage_is_last(&d->m)};
    res->writer = k.writer;
    if (k.writer) progress_start(&k.p, "dump-features (samples)", my_samples);
    int first_stage = target_stage_is_first(&d->m), rc = 0;
    for (int64_t s = me; s < n_shards; s += n_teachers) {
        int64_t first = s * per, last = first + per < n ? first + per : n;
        char path[CONFIG_STR + 64];
        shard_path(path, sizeof path, cfg->features_dir, s, n_shards);
        int have = dump_shard_have(d, c, path, first, last);
        if (have < 0) {
            rc = -1;
            break;
        }
        mine++;
        if (have == 1) { // finished by an earlier run (every stage of a group sees the same file)
            skipped++;
            k.done_samples += last - first;
            if (k.writer) progress_update(&k.p, k.done_samples);
            continue;
        }
        // A stop (a signal): before a shard that needs dumping (every stage skips the same done ones),
        // decided by a group's first stage, which tells the later stages (they stop at this shard).
        if (first_stage && stop_relay_poll()) { // a signal on any rank (stop_relay.h)
            res->stopped = 1;
            if (c->link) stage_send_stop(c->link);
            break;
        }
        rc = dump_shard_write(w, d, c, &k, path, s, first, last);
        if (rc == 0) config_test_slow(cfg, w->rank); // testing: a slow teacher
        if (rc == DUMP_STOPPED) {
            rc = 0, res->stopped = 1;
            break;
        }
        if (rc) break;
        if (k.writer) res->shards_done++;
    }
    if (rc == 0 && k.writer && !res->stopped) progress_end(&k.p);
    if (rc == 0 && mine && k.writer && !res->stopped)
        log_info("dump-features: %lld shard(s) of %lld on this rank, %lld already done", (long long)mine,
                 (long long)n_shards, (long long)skipped);
    return rc;
}

// dump_sets: what the index records of each training set: its usable samples, the CRC32C of their
// lengths (int64 LE: the set's content identity) and a copy of its held-out split (the set closes
// before the index is written).
static void dump_sets(const dataset *ts, dump_result *res) {
    res->n_samples = ts->n;
    for (int i = 0; i < ts->n_sets; i++) {
        const trainset *t = &ts->sets[i];
        res->set_samples[i] = ts->first[i + 1] - ts->first[i];
        uint32_t crc = 0;
        for (int64_t k = ts->first[i]; k < ts->first[i + 1]; k++) {
            unsigned char le[8];
            for (int b = 0; b < 8; b++) le[b] = (unsigned char)((uint64_t)dataset_len(ts, k) >> (8 * b));
            crc = crc32c_update(crc, le, 8);
        }
        res->set_lengths_crc[i] = crc;
        res->n_set_heldout[i] = t->n_heldout >= 0 ? t->n_heldout_usable : -1;
        if (res->n_set_heldout[i] > 0) {
            int64_t *h = xmalloc((size_t)t->n_heldout_usable * sizeof *h);
            memcpy(h, t->heldout_usable, (size_t)t->n_heldout_usable * sizeof *h);
            res->set_heldout[i] = h;
        }
    }
}

// This rank's shards; no collective calls, so an early failure cannot leave peers waiting.
static int dump_run(const world *w, const config *cfg, backend *be, payload_link *links, dump_result *res) {
    if (!cfg->target_path[0]) return error_set("dump-features needs target.path (the target model directory)");
    if (config_data_count(cfg) == 0) return error_set("dump-features needs data.path (the training set) or data.sets");
    if (!cfg->features_dir[0]) return error_set("dump-features needs features.dir (where the feature files go)");
    if (fs_mkdirs(cfg->features_dir)) return error_prefix("features.dir");

    dump_rank d;
    memset(&d, 0, sizeof d);
    if (dump_open_target(w, cfg, be, &d)) return -1;
    if (dump_open_data(cfg, &d)) {
        target_free(&d.m);
        return -1;
    }
    if (dump_size_batch(cfg, be, &d)) {
        dataset_close(&d.ts);
        target_free(&d.m);
        return -1;
    }
    dump_describe(cfg, &d);
    dump_ctx c;
    stage_link link;
    if (dump_ctx_open(&c, &d, w, be, links, &link)) {
        dump_rank_close(&d);
        return -1;
    }
    int rc = dump_shards(w, cfg, &d, &c, res);
    dump_ctx_close(&c);
    res->info = d.info;
    res->id = d.id;
    dump_sets(&d.ts, res);
    dump_rank_close(&d);
    return rc;
}

int teacher_dump_features(const world *w, const config *cfg, backend *be, payload_link *links) {
    dump_result res;
    memset(&res, 0, sizeof res);
    for (int i = 0; i < CONFIG_MAX_SETS; i++) res.n_set_heldout[i] = -1;
    int rc = dump_run(w, cfg, be, links, &res);
    if (rc) log_error("%s", error_msg());
    // Every rank finished, stopped or failed: rank 0 writes the index only when all of them finished.
    int worst = watchdog_agree(rc ? 2 : res.stopped ? 1 : 0, "the other ranks to finish their shards");
    if (worst == 2) {
        for (int i = 0; i < CONFIG_MAX_SETS; i++) free((void *)res.set_heldout[i]);
        return rc ? -1 : error_set("dump-features: another rank failed (see its message)");
    }
    if ((res.stopped || worst == 1) && res.writer) // each writer says what it left; the index waits for the last shard
        log_info("dump-features: stopped by %s with %d new shard(s) of this rank complete in %s (features.json is "
                 "written once every shard is); resume with the same command: the complete shards are kept",
                 stop_signal_name(stop_relay_poll()), res.shards_done, cfg->features_dir);
    if (w->rank == 0 && worst == 0) {
        rc = dump_index(cfg, &res.info, res.n_shards, res.n_samples, res.set_samples, res.set_heldout, res.n_set_heldout,
                        res.set_lengths_crc, &res.id);
        if (rc == 0) {
            log_info("dump-features: %lld samples in %lld shard(s) -> %s/features.json", (long long)res.n_samples,
                     (long long)res.n_shards, cfg->features_dir);
            run_dir_remove_leftovers(cfg->features_dir, "features-*", NULL); // killed writers' shard temporaries
        }
    }
    for (int i = 0; i < CONFIG_MAX_SETS; i++) free((void *)res.set_heldout[i]);
    return rc;
}

// Settings: the keys of the offline feature files (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key features_keys[] = {
    {"features.dir", CFG_STRING, CONFIG_F(features_dir), "", "directory of the offline feature files (written by dump-features)", NULL, CONFIG_NOLIM},
    {"features.shard_samples", CFG_INT, CONFIG_F(features_shard_samples), "1024", "at most this many samples per feature shard (the unit of work and of resuming); the shard count is rounded up to a multiple of the teachers so each does the same work (a resume with another teacher count makes other shards)", NULL, 1, 1e12},
};
const config_key_set features_settings = CONFIG_KEY_SET(features_keys, NULL);
