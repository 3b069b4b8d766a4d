// train_setup.c: what a training job reads before its first step: the target's shape and
// embedding, the drafter's shape, and the batch plan over the data (see train_setup.h).
#include "student/train/train_setup.h"
#include "common/core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/core/log.h"
#include "common/data/dataset.h"
#include "common/data/identity.h"
#include "student/loss/loss_config.h"

// The MASK token when drafter.mask_token_id is -1: a row of the target's vocabulary that no text
// uses (docs/config.md, "Drafter defaults"). The Qwen3.5 / Qwen3.6 vocabulary (248320 rows): 248070,
// <|audio_start|>, which a text job never sees and which the public z-lab drafters of the family use
// (so their config.json and ours agree); any other target: its last row, vocab_size - 1 (a padding
// or reserved row in the Qwen and Llama vocabularies).
static int64_t train_default_mask_token(const target_config *tc) {
    return target_config_mask_token(tc); // the architecture's table says (target_arch.h)
}

// The drafter's shape: from drafter.config (a DFlash config.json: a published drafter's, or one an
// earlier run exported) when it is set, else from the target's config and the drafter.* keys. A
// config file must fit the target (hidden size, vocabulary, number of target layers) and ask for
// the target layers the teachers send (target.layer_ids); the drafter.* shape keys are then unused
// (a warning names those set to something else).
int train_drafter_config(const config *cfg, const target_config *tc, const teacher_contract *ct, drafter_config *dc) {
    const drafter_kind *kind = drafter_kind_find(cfg->drafter_kind);
    if (!kind) return -1;
    if (cfg->drafter_config_path[0]) {
        char path[CONFIG_STR + 16];
        struct stat st; // a drafter directory (run.dir/drafter, a downloaded drafter) stands for its config.json
        snprintf(path, sizeof path, "%s%s", cfg->drafter_config_path,
                 stat(cfg->drafter_config_path, &st) == 0 && S_ISDIR(st.st_mode) ? "/config.json" : "");
        if (drafter_config_load(dc, path)) return error_prefix("drafter.config");
        if (dc->kind != kind)
            return error_set("drafter.config %s: a %s drafter (kind %s) but drafter.kind is \"%s\"", path,
                             dc->kind->architecture, dc->kind->name, kind->name);
        const char *fields[3] = {"hidden_size", "vocab_size", "num_target_layers"};
        const char *target_fields[3] = {"hidden_size", "vocab_size", "num_hidden_layers"};
        int64_t mine[3] = {dc->hidden, dc->vocab, dc->num_target_layers}, theirs[3] = {tc->hidden, tc->vocab, tc->n_layers};
        for (int i = 0; i < 3; i++)
            if (mine[i] != theirs[i] && !(i == 2 && mine[i] == 0)) // num_target_layers may be absent
                return error_set("drafter.config %s: '%s' is %lld but the target's '%s' is %lld (target.path %s): the "
                                 "drafter must be made for this target", path, fields[i], (long long)mine[i],
                                 target_fields[i], (long long)theirs[i], cfg->target_path);
        dc->num_target_layers = tc->n_layers;
        int same = dc->n_feat == ct->n_feat;
        for (int i = 0; same && i < ct->n_feat; i++) same = dc->target_layer_ids[i] == ct->layer_ids[i];
        if (!same) {
            char want[256] = "", have[256] = "";
            int nw = 0, nh = 0;
            for (int i = 0; i < dc->n_feat && nw < (int)sizeof want - 24; i++)
                nw += snprintf(want + nw, sizeof want - (size_t)nw, "%s%lld", i ? "," : "", (long long)dc->target_layer_ids[i]);
            for (int i = 0; i < ct->n_feat && nh < (int)sizeof have - 24; i++)
                nh += snprintf(have + nh, sizeof have - (size_t)nh, "%s%lld", i ? "," : "", (long long)ct->layer_ids[i]);
            return error_set("drafter.config %s: 'target_layer_ids' is [%s] but the teachers send layers [%s] "
                             "(target.layer_ids); run with --target.layer_ids=%s", path, want, have, want);
        }
        snprintf(dc->torch_dtype, sizeof dc->torch_dtype, "float32"); // the master weights; export sets its own
        // drafter.* keys set to something the file overrides: say so once, not silently.
        char ignored[512] = "";
        int n = 0;
        const struct { const char *key; int64_t value, def, file; } keys[] = {
            {"drafter.layers", cfg->drafter_layers, 1, dc->n_layers},
            {"drafter.block_size", cfg->block_size, 16, dc->block_size},
            {"drafter.intermediate", cfg->drafter_intermediate, 0, dc->intermediate},
            {"drafter.heads", cfg->drafter_heads, 0, dc->n_heads},
            {"drafter.kv_heads", cfg->drafter_kv_heads, 0, dc->n_kv_heads},
            {"drafter.head_dim", cfg->drafter_head_dim, 0, dc->head_dim},
            {"drafter.mask_token_id", cfg->mask_token_id, -1, dc->mask_token_id},
            {"drafter.sliding_window", cfg->sliding_window, 0, dc->sliding_window},
        };
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && n < (int)sizeof ignored - 80; i++)
            if (keys[i].value != keys[i].def && keys[i].value != keys[i].file)
                n += snprintf(ignored + n, sizeof ignored - (size_t)n, "%s%s = %lld (the file: %lld)", n ? ", " : "",
                              keys[i].key, (long long)keys[i].value, (long long)keys[i].file);
        if (n) log_warn("drafter.config %s sets the drafter's shape; ignored: %s", path, ignored);
        log_info("drafter shape from %s: %lld layer(s), %lld/%lld heads x %lld, intermediate %lld, block size %lld",
                 path, (long long)dc->n_layers, (long long)dc->n_heads, (long long)dc->n_kv_heads,
                 (long long)dc->head_dim, (long long)dc->intermediate, (long long)dc->block_size);
        return 0;
    }
    memset(dc, 0, sizeof *dc);
    dc->kind = kind;
    if (kind->defaults) kind->defaults(dc);
    dc->n_layers = cfg->drafter_layers;
    dc->hidden = tc->hidden;
    // the target's dense MLP width; a target without one (Qwen3.5-MoE: every MLP sparse) gets 3 H
    dc->intermediate = cfg->drafter_intermediate > 0 ? cfg->drafter_intermediate
                       : tc->intermediate > 0         ? tc->intermediate
                                                      : 3 * tc->hidden;
    dc->n_heads = cfg->drafter_heads > 0 ? cfg->drafter_heads : tc->n_heads;
    dc->n_kv_heads = cfg->drafter_kv_heads > 0 ? cfg->drafter_kv_heads : tc->n_kv_heads;
    dc->head_dim = cfg->drafter_head_dim > 0 ? cfg->drafter_head_dim : tc->head_dim;
    dc->vocab = tc->vocab;
    dc->rms_eps = tc->rms_eps;
    dc->rope_theta = tc->rope_theta;
    dc->max_positions = tc->max_positions;
    dc->block_size = cfg->block_size;
    dc->mask_token_id = cfg->mask_token_id >= 0 ? cfg->mask_token_id : train_default_mask_token(tc);
    dc->sliding_window = cfg->sliding_window;
    dc->sliding_causal = 1;
    for (int64_t l = 0; l < dc->n_layers; l++) dc->layer_sliding[l] = cfg->sliding_window > 0 && l + 1 < dc->n_layers;
    dc->n_feat = ct->n_feat;
    for (int i = 0; i < ct->n_feat; i++) dc->target_layer_ids[i] = ct->layer_ids[i];
    dc->num_target_layers = tc->n_layers;
    snprintf(dc->torch_dtype, sizeof dc->torch_dtype, "float32");
    if (dc->n_heads % dc->n_kv_heads || dc->head_dim % 2)
        return error_set("drafter: %lld query heads do not group over %lld kv heads, or head_dim %lld is odd",
                         (long long)dc->n_heads, (long long)dc->n_kv_heads, (long long)dc->head_dim);
    if (dc->mask_token_id >= dc->vocab) return error_set("drafter.mask_token_id %lld is outside the vocabulary of %lld",
                                                         (long long)dc->mask_token_id, (long long)dc->vocab);
    return 0;
}

// The target's shape and its embedding (and lm_head) entries, the teachers' contract and the
// drafter's shape. On success td is open (the caller closes it).
int train_target_open(const config *cfg, target_config *tc, teacher_contract *ct, drafter_config *dc, st_dir *td,
                      const st_entry **e_emb, const st_entry **e_head) {
    if (target_config_load(tc, cfg->target_path)) return -1;
    if (teacher_contract_make(cfg, tc->n_layers, ct)) return -1;
    if (train_drafter_config(cfg, tc, ct, dc)) return -1;
    if (safetensors_dir_open(td, cfg->target_path)) return error_prefix("target");
    char emb[96]; // model.embed_tokens.weight, or under the multimodal wrappers' prefix
    target_names_resolve(tc, td);
    snprintf(emb, sizeof emb, "%sembed_tokens.weight", target_tensor_prefix(tc));
    *e_emb = safetensors_dir_find(td, emb);
    *e_head = tc->tie_embeddings ? NULL : safetensors_dir_find(td, target_head_name(tc));
    if (!*e_emb || (!tc->tie_embeddings && !*e_head)) {
        safetensors_dir_close(td);
        return error_set("target %s: missing %s", cfg->target_path, *e_emb ? target_head_name(tc) : emb);
    }
    return 0;
}

// The batch plan over the usable samples: of the training sets (live; their vocabulary checked
// against the target's) or of the offline feature directory (*fr stays open for reading).
// The run's identity (identity.h): the target, the layers the teachers send, the feature convention.
// The target by content (its config.json's CRC and its weights' fingerprint): a resume, or a
// student-only run, under the same target.path with another model is refused (identity_check).
static void train_identity(const config *cfg, const target_config *tc, const teacher_contract *ct, run_identity *id) {
    identity_init(id);
    identity_set_target(id, tc->arch_name, tc->hidden, tc->n_layers, tc->vocab, cfg->target_path);
    id->n_layer_ids = ct->n_feat;
    for (int i = 0; i < ct->n_feat; i++) id->layer_ids[i] = ct->layer_ids[i];
    snprintf(id->feature_convention, sizeof id->feature_convention, "%s", "hidden_states[id+1]");
}

int train_data_plan(const config *cfg, const target_config *tc, const teacher_contract *ct, batchplan *bp,
                    featreader **fr, run_identity *id) {
    run_identity mine;
    if (!id) id = &mine;
    train_identity(cfg, tc, ct, id);
    int64_t n_samples;
    int64_t *lengths;
    batchplan_set sets[CONFIG_MAX_SETS];
    int n_sets;
    *fr = NULL;
    dataset ds = {0}; // open until the plan is built: a set's recorded held-out split lives in it
    if (!cfg->data_features[0]) {
        if (dataset_open(&ds, cfg, cfg->min_loss_tokens)) return -1;
        if (ds.vocab_size > tc->vocab) {
            int64_t v = ds.vocab_size;
            dataset_close(&ds);
            return error_set("training set %s has vocab_size %lld, larger than the target's %lld (%s)",
                             config_data_path(cfg, 0, NULL), (long long)v, (long long)tc->vocab, cfg->target_path);
        }
        n_samples = ds.n;
        lengths = xmalloc((size_t)(n_samples + 1) * sizeof(int64_t));
        for (int64_t i = 0; i < n_samples; i++) lengths[i] = dataset_len(&ds, i);
        n_sets = ds.n_sets;
        dataset_plan_sets(&ds, sets);
    } else {
        if (featreader_open(fr, cfg->data_features)) return -1;
        if (featreader_topk(*fr) != ct->topk || featreader_feat_dim(*fr) != ct->n_feat * tc->hidden) {
            int rc = error_set("data.features %s has top-%d and %d feature columns, the run expects top-%d and %lld",
                               cfg->data_features, featreader_topk(*fr), featreader_feat_dim(*fr), ct->topk,
                               (long long)(ct->n_feat * tc->hidden));
            featreader_close(*fr);
            *fr = NULL;
            return rc;
        }
        // every identity the features recorded against this run's (the data part once the lengths are known)
        char what[CONFIG_STR + 32];
        snprintf(what, sizeof what, "data.features %s", cfg->data_features);
        run_identity rec = *featreader_identity(*fr), now = *id;
        rec.data_samples = rec.data_lengths_crc = -1;
        if (identity_check(&rec, what, &now, "dump the features again for this target and target.layer_ids, or use the "
                           "target and layer ids they were dumped with")) {
            featreader_close(*fr);
            *fr = NULL;
            return -1;
        }
        int n_ids;
        const int64_t *ids = featreader_layer_ids(*fr, &n_ids);
        for (int i = 0; i < n_ids; i++)
            if (ids[i] == tc->n_layers - 1 && !featreader_post_norm_last(*fr)) {
                int rc = error_set("data.features %s was dumped before the last layer's features were taken after the final "
                                   "norm (hidden_states[id+1], what the engines feed the drafter; SPEC §2): its layer %lld "
                                   "features are not what serving sees; dump them again", cfg->data_features,
                                   (long long)ids[i]);
                featreader_close(*fr);
                *fr = NULL;
                return rc;
            }
        // the features hold the samples usable under the dump's rule: another rule here would train on
        // (and hold out) other samples than it says
        int64_t rule = featreader_min_loss_tokens(*fr);
        if (rule != cfg->min_loss_tokens && (rule >= 0 || cfg->min_loss_tokens != 2)) {
            int rc = rule >= 0
                         ? error_set("data.min_loss_tokens %lld: data.features %s was dumped with data.min_loss_tokens "
                                     "%lld, so it holds the samples usable under that rule; dump the features again "
                                     "with %lld, or train with %lld", (long long)cfg->min_loss_tokens,
                                     cfg->data_features, (long long)rule, (long long)cfg->min_loss_tokens, (long long)rule)
                         : error_set("data.min_loss_tokens %lld: data.features %s records no data.min_loss_tokens (dumped "
                                     "before 2026-12); dump the features again with %lld", (long long)cfg->min_loss_tokens,
                                     cfg->data_features, (long long)cfg->min_loss_tokens);
            featreader_close(*fr);
            *fr = NULL;
            return rc;
        }
        n_samples = featreader_samples(*fr);
        lengths = xmalloc((size_t)(n_samples + 1) * sizeof(int64_t));
        for (int64_t i = 0; i < n_samples; i++) lengths[i] = featreader_len(*fr, i);
        if ((n_sets = dataset_feature_sets(cfg, *fr, sets)) < 0) {
            free(lengths);
            featreader_close(*fr);
            *fr = NULL;
            return -1;
        }
    }
    identity_set_data(id, lengths, n_samples);
    int rc = 0;
    if (*fr) { // the shards' samples against what the index recorded at dump time
        char what[CONFIG_STR + 32];
        snprintf(what, sizeof what, "data.features %s", cfg->data_features);
        rc = identity_check(featreader_identity(*fr), what, id, "its shards do not hold the samples its index lists: dump them again");
    }
    if (rc == 0)
        rc = batchplan_build(bp, lengths, n_samples, sets, n_sets, cfg->heldout_samples, cfg->max_tokens_per_batch,
                             cfg->bucket_size, (uint64_t)cfg->seed);
    if (rc == 0) identity_set_heldout(id, bp->heldout_storage, bp->n_heldout); // (compared on resume)
    free(lengths);
    if (ds.sets) dataset_close(&ds);
    if (rc && *fr) {
        featreader_close(*fr);
        *fr = NULL;
    }
    return rc;
}

int train_check_roles(const world *w, const config *cfg) {
    if (w->students < 1) return error_set("a training job needs a student rank (world.students)");
    if (!cfg->eval_only && cfg->batches_per_step % w->students) // (eval: no step)
        return error_set("train.batches_per_step = %lld is not a multiple of the %d student(s)",
                         (long long)cfg->batches_per_step, w->students);
    if (!cfg->data_features[0] && w->teachers == 0)
        return error_set("no teacher ranks and no data.features: nothing would produce batches");
    return 0;
}

int train_check_inputs(const world *w, const config *cfg) {
    if (train_check_roles(w, cfg)) return -1;
    target_config tc;
    teacher_contract ct;
    drafter_config dc;
    st_dir td;
    const st_entry *e_emb, *e_head;
    if (train_target_open(cfg, &tc, &ct, &dc, &td, &e_emb, &e_head)) return -1;
    safetensors_dir_close(&td);
    batchplan bp;
    featreader *fr = NULL;
    if (train_data_plan(cfg, &tc, &ct, &bp, &fr, NULL)) return -1;
    batchplan_free(&bp);
    if (fr) featreader_close(fr);
    return 0;
}


int eval_config_prepare(config *cfg) {
    char path[CONFIG_STR + 32];
    struct stat st;
    if (stat(cfg->eval_drafter, &st) != 0 || !S_ISDIR(st.st_mode))
        return error_set("eval.drafter %s: not a directory (an exported drafter or a checkpoint)", cfg->eval_drafter);
    snprintf(path, sizeof path, "%s/model.safetensors", cfg->eval_drafter);
    if (access(path, R_OK) != 0) return error_set("eval.drafter %s: no readable model.safetensors (%s)", cfg->eval_drafter, strerror(errno));
    snprintf(path, sizeof path, "%s/config.json", cfg->eval_drafter);
    if (access(path, R_OK) == 0) { // an exported drafter: its config.json is the shape, and the layers it reads
        drafter_config dc;
        if (drafter_config_load(&dc, path)) return error_prefix("eval.drafter");
        snprintf(cfg->drafter_config_path, sizeof cfg->drafter_config_path, "%s", cfg->eval_drafter);
        snprintf(cfg->drafter_kind, sizeof cfg->drafter_kind, "%s", dc.kind->name); // the file's kind
        if (cfg->target_layer_ids.n == 0) { // the teachers send what the drafter reads
            cfg->target_layer_ids.n = dc.n_feat;
            for (int i = 0; i < dc.n_feat; i++) cfg->target_layer_ids.v[i] = dc.target_layer_ids[i];
        }
        cfg->block_size = dc.block_size;
    } else { // a checkpoint: the kind, shape, layers and loss of the run that wrote it (its state.json)
        snprintf(path, sizeof path, "%s/state.json", cfg->eval_drafter);
        char *text = file_read_text(path, 64 << 20);
        if (!text)
            return error_set("eval.drafter %s: neither config.json (an exported drafter) nor state.json (a checkpoint)",
                             cfg->eval_drafter);
        cJSON *root = json_parse_text(text, path); // unparseable: the file and the line
        free(text);
        if (!root) return error_prefix("eval.drafter");
        const cJSON *saved = cJSON_GetObjectItemCaseSensitive(root, "config");
        char *json = cJSON_IsObject(saved) ? cJSON_PrintUnformatted(saved) : NULL;
        cJSON_Delete(root);
        if (!json) return error_set("eval.drafter: %s holds no configuration (a checkpoint of an older version)", path);
        config run;
        config_defaults(&run);
        int rc = config_load_json(&run, json, path);
        cJSON_free(json);
        if (rc) return error_prefix("eval.drafter");
        config_copy_keys(cfg, &run, "drafter."); // drafter.kind among them: a DFlash2 checkpoint is DFlash2
        config_copy_keys(cfg, &run, "target.layer_ids");
        config_copy_keys(cfg, &run, "target.n_features");
        loss_config_copy_keys(cfg, &run);
    }
    cfg->heldout_samples = BATCHPLAN_ALL_HELDOUT; // every sample of the data counts
    cfg->eval_batches = 0;
    cfg->eval_only = 1; // what the job's lower floors ask (train_check_roles, student_train), not the mode's name
    return 0;
}

// Settings: the keys of --mode eval's drafter (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key eval_keys[] = {
    {"eval.drafter", CFG_STRING, CONFIG_F(eval_drafter), "", "--mode eval: the drafter to evaluate: an exported drafter directory (config.json + model.safetensors, the dflash package's format, e.g. run.dir/drafter or a published one) or a checkpoint directory (run.dir/checkpoints/step-N)", NULL, CONFIG_NOLIM},
};
const config_key_set eval_settings = CONFIG_KEY_SET(eval_keys, NULL);
