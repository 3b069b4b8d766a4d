// regen_identity.c: the settings text that names regenerate's inputs, the tokenizer attribute, and
// the comparison of a recorded settings text with this run's (see regen_identity.h).
#include "teacher/regen_identity.h"
#include "common/core/config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/data/identity.h"
#include "common/data/trainset.h"

// The inputs by content: what the parts and the set record and a resume compares.
int regen_identity_make(regen *g) {
    const config *cfg = g->cfg;
    const target_config *c = &g->target.cfg;
    char cpath[CONFIG_STR + 16];
    snprintf(cpath, sizeof cpath, "%s/config.json", cfg->target_path);
    int64_t wcrc = identity_weights_crc(cfg->target_path); // (none readable: 0, as before; the loader names why)
    g->weights_crc = wcrc < 0 ? 0 : (uint32_t)wcrc;
    if (crc32c_file(cpath, &g->config_crc) < 0) return -1;
    int n = snprintf(g->settings, sizeof g->settings,
                     "target_weights=%08x target_config=%08x vocab=%lld prompts=%lld prompts_bytes=%lld "
                     "prompts_crc32c=%08x max_new_tokens=%d max_len=%d temperature=%.17g top_p=%.17g top_k=%lld "
                     "seed=%llu shard_prompts=%lld stop_ids=[", g->weights_crc, g->config_crc, (long long)c->vocab,
                     (long long)g->prompts.n, (long long)g->prompts.bytes, g->prompts.crc, g->max_new, g->max_len,
                     cfg->regen_temperature, cfg->regen_top_p, (long long)cfg->regen_top_k,
                     (unsigned long long)cfg->regen_seed, (long long)g->shard_prompts);
    for (int i = 0; i < g->stops.n && n < (int)sizeof g->settings - 24; i++)
        n += snprintf(g->settings + n, sizeof g->settings - (size_t)n, "%s%lld", i ? "," : "", (long long)g->stops.id[i]);
    snprintf(g->settings + n, sizeof g->settings - (size_t)n, "]");
    // the tokenizer attribute: the target's tokenizer.json by content (else the target's real path),
    // so that one model named two ways gives one tokenizer
    char tpath[CONFIG_STR + 32], real[PATH_MAX];
    uint32_t tcrc;
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", cfg->target_path);
    if (access(tpath, F_OK) == 0 && crc32c_file(tpath, &tcrc) == 0)
        snprintf(g->tokenizer, sizeof g->tokenizer, "regenerate(tokenizer.json crc32c %08x)", tcrc);
    else
        snprintf(g->tokenizer, sizeof g->tokenizer, "regenerate(%s)", realpath(cfg->target_path, real) ? real : cfg->target_path);
    return 0;
}

// The key=value fields of a settings text that differ from another's, as "KEY X there, Y here"
// (the first few, in one line).
void regen_identity_diff(const char *there, const char *here, char *out, size_t n) {
    out[0] = '\0';
    size_t at = 0;
    int shown = 0;
    for (const char *p = here; *p && shown < 4;) {
        const char *end = strchr(p, ' '), *eq = strchr(p, '=');
        if (!end) end = p + strlen(p);
        if (eq && eq < end) {
            size_t klen = (size_t)(eq - p) + 1; // "key="
            const char *q = there, *found = NULL;
            while (q && *q) {
                if (strncmp(q, p, klen) == 0) { found = q; break; }
                q = strchr(q, ' ');
                if (q) q++;
            }
            const char *fend = found ? strchr(found, ' ') : NULL;
            if (found && !fend) fend = found + strlen(found);
            if (!found || (size_t)(fend - found) != (size_t)(end - p) || strncmp(found, p, (size_t)(end - p)) != 0) {
                int w = snprintf(out + at, n - at, "%s%.*s %.*s there, %.*s here", shown ? "; " : "", (int)(klen - 1), p,
                                 found ? (int)(fend - found - (long)klen) : 13, found ? found + klen : "none recorded",
                                 (int)(end - eq - 1), eq + 1);
                if (w < 0 || (size_t)w >= n - at) break;
                at += (size_t)w;
                shown++;
            }
        }
        p = *end ? end + 1 : end;
    }
    if (!shown) snprintf(out, n, "settings \"%s\" there, \"%s\" here", there, here);
}

// regenerate.out as found at the start: absent (0), a set made with these settings (1: nothing to
// do), or one made with other settings (-1 naming the fields that differ, unless run.overwrite: 0,
// replaced at the end). What is not a set regenerate made (a directory, a prompts file, another
// file, a set with no settings record) the mode's claim refused before the job started
// (teacher/regen_output.h, src/modes/mode_regenerate.c).
int regen_identity_check_out(const regen *g) {
    const config *cfg = g->cfg;
    if (access(cfg->regen_out, F_OK) != 0) return 0;
    trainset ts;
    char have[REGEN_SETTINGS_MAX] = "";
    int rc = trainset_open(&ts, cfg->regen_out, 0) < 0 ? -1 : trainset_attr_str(&ts, "settings", have, sizeof have);
    if (rc >= 0) trainset_close(&ts);
    if (rc == 1 && strcmp(have, g->settings) == 0) return 1;
    if (cfg->overwrite) return 0;
    if (rc == 1) {
        char diff[1024];
        regen_identity_diff(have, g->settings, diff, sizeof diff);
        return error_set("regenerate.out %s exists, made with other settings (%s); set run.overwrite=true to replace it",
                         cfg->regen_out, diff);
    }
    return error_set("regenerate.out %s exists and is not a set regenerate made (%s); set run.overwrite=true to replace it",
                     cfg->regen_out, rc < 0 ? error_msg() : "no settings attribute");
}

// Settings: the keys of --mode regenerate's sampling (the set's identity records them) (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key regen_sampling_keys[] = {
    {"regenerate.temperature", CFG_FLOAT, CONFIG_F(regen_temperature), "0", "--mode regenerate: sampling temperature; 0 = greedy", NULL, 0, 100},
    {"regenerate.top_p", CFG_FLOAT, CONFIG_F(regen_top_p), "1", "--mode regenerate: nucleus sampling share (with a temperature > 0); 1 = no cut", NULL, 1e-9, 1},
    {"regenerate.top_k", CFG_INT, CONFIG_F(regen_top_k), "0", "--mode regenerate: sample among the k most probable tokens (with a temperature > 0); 0 = no cut", NULL, 0, 1e9},
    {"regenerate.seed", CFG_INT, CONFIG_F(regen_seed), "0", "--mode regenerate: sampling seed; prompt i's draws are the Philox stream of (seed, i), whichever rank or slot decodes it", NULL, 0, 9.2e18},
};
const config_key_set regen_sampling_settings = CONFIG_KEY_SET(regen_sampling_keys, NULL);
