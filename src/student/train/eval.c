// eval.c: the drafter --mode eval evaluates, and its result (see eval.h).
#include "student/train/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/core/json_util.h"
#include "common/data/identity.h"
#include "common/data/safetensors.h"
#include "student/train/checkpoint.h"
#include "student/train/optim.h"
#include "student/train/train_log.h"

int eval_load_drafter(drafter *d, const config *cfg) {
    char path[CONFIG_STR + 32];
    // a checkpoint (state.json, no config.json) is verified against its checksums first
    snprintf(path, sizeof path, "%s/config.json", cfg->eval_drafter);
    int is_checkpoint = access(path, F_OK) != 0;
    snprintf(path, sizeof path, "%s/state.json", cfg->eval_drafter);
    int verified = 0;
    if (is_checkpoint && access(path, F_OK) == 0) {
        if (checkpoint_verify(cfg->eval_drafter, &verified)) return error_prefix("eval.drafter");
        if (!verified) log_warn("eval.drafter %s carries no checksums (a checkpoint of an older trainer): read unverified", cfg->eval_drafter);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", cfg->eval_drafter);
    st_file f;
    if (safetensors_open(&f, path)) return error_prefix("eval.drafter");
    int rc = drafter_load_weights(d, &f);
    // a tensor the config's kind does not have (a DFlash2 export whose config.json names
    // DFlashDraftModel: its selector and convolutions would be ignored): refused, naming both
    for (int i = 0; rc == 0 && i < f.n; i++) {
        int known = 0;
        for (int j = 0; !known && j < d->n_params; j++) known = strcmp(f.entries[i].name, d->params[j].name) == 0;
        if (!known)
            rc = error_set("%s: tensor %s is not one of a %s drafter's (drafter.kind %s, from %s/config.json "
                           "\"architectures\"): the config and the weights disagree (another kind's export?)",
                           path, f.entries[i].name, d->cfg.kind->architecture, d->cfg.kind->name, cfg->eval_drafter);
    }
    safetensors_close(&f);
    if (rc) return error_prefix("eval.drafter");
    if (!isfinite(optim_sum_squares(d->be, d->master, d->numel)))
        return error_set("eval.drafter %s: the weights hold a non-finite value (NaN or inf)", path);
    log_info("eval: drafter %s (%lld layer(s), block %lld, target layers %d)", cfg->eval_drafter,
             (long long)d->cfg.n_layers, (long long)d->cfg.block_size, d->cfg.n_feat);
    return 0;
}

int eval_check_heldout(const config *cfg, const run_identity *now) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/config.json", cfg->eval_drafter);
    if (access(path, F_OK) == 0) return 0; // an export records no identity
    snprintf(path, sizeof path, "%s/state.json", cfg->eval_drafter);
    char *text = file_read_text(path, 64 << 20);
    if (!text) return error_prefix("eval.drafter");
    cJSON *root = json_parse_text(text, path);
    free(text);
    if (!root) return error_prefix("eval.drafter");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "identity");
    run_identity rec;
    int rc = o ? identity_from_json(o, path, &rec) : 0;
    cJSON_Delete(root);
    if (rc || !o) return rc ? error_prefix("eval.drafter") : 0;
    // the same training set (samples and lengths), another held-out split: refused
    if (rec.heldout_crc < 0 || rec.data_samples != now->data_samples || rec.data_lengths_crc != now->data_lengths_crc ||
        (rec.heldout_samples == now->heldout_samples && rec.heldout_crc == now->heldout_crc))
        return 0;
    return error_set("eval.drafter %s was trained on this training set holding out %lld samples (CRC32C of their indices "
                     "%08llx); this evaluation's /heldout holds %lld (%08llx): it would evaluate on samples the drafter "
                     "trained on", cfg->eval_drafter, (long long)rec.heldout_samples, (unsigned long long)rec.heldout_crc,
                     (long long)now->heldout_samples, (unsigned long long)now->heldout_crc);
}

int eval_write_result(const config *cfg, const step_stats *st, const loss_config *lc, int B, int64_t samples) {
    char *text = NULL, path[CONFIG_STR + 32];
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return error_set("eval: cannot build eval.json: out of memory");
    fprintf(f, "{");
    train_stats_json(f, st, lc, B);
    fprintf(f, ", \"tokens\": %lld, \"samples\": %lld, \"drafter\": \"", (long long)st->ctx_tokens, (long long)samples);
    for (const char *c = cfg->eval_drafter; *c; c++) // a path as a JSON string
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if ((unsigned char)*c < 0x20) fprintf(f, "\\u%04x", (unsigned char)*c);
        else fputc(*c, f);
    fprintf(f, "\"}\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/eval.json", cfg->run_dir);
    int rc = fs_write_text(path, text);
    free(text);
    if (rc) return error_prefix("eval");
    char what[CONFIG_STR + 64];
    snprintf(what, sizeof what, "eval: %lld samples, %lld tokens:", (long long)samples, (long long)st->ctx_tokens);
    train_log_eval_text(what, st, lc);
    log_info("eval: results in %s", path);
    return 0;
}
