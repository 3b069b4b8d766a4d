// regen_output.c: what regenerate writes: its parts, their merge into regenerate.out, the output's
// claim and its tidy-up after a successful end (see regen_output.h).
#include "teacher/regen_output.h"
#include "common/core/config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/core/run_dir.h"
#include "common/data/trainset.h"
#include "teacher/regen_identity.h"

// What regenerate writes in OUT.parts: a part (part-SSSSS-of-NNNNN.h5, or one being written), a
// file, and a job's shard claims (claims-NONCE/, a directory of empty files named by shard;
// regen_shards.h). Anything else there is refused as not regenerate's: a new kind of entry regenerate
// writes there is named here too.
static int regen_parts_entry(const char *name, const struct stat *st) {
    if (S_ISREG(st->st_mode)) return fs_h5_name(name, "part-");
    return S_ISDIR(st->st_mode) && strncmp(name, "claims-", 7) == 0;
}

// regen_parts_only_ours: 0 when the directory parts holds only regenerate's entries; -1 with
// error_set naming the first other one.
static int regen_parts_only_ours(const config *cfg, const char *parts) {
    struct stat st;
    DIR *dp = opendir(parts);
    if (!dp) return error_set("regenerate.out %s: cannot read %s: %s", cfg->regen_out, parts, strerror(errno));
    struct dirent *e;
    int rc = 0;
    char path[CONFIG_STR + 300];
    while (rc == 0 && (e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", parts, e->d_name);
        if (lstat(path, &st) != 0 || !regen_parts_entry(e->d_name, &st))
            rc = error_set("regenerate.out %s: %s holds %s, which regenerate did not write; move it away", cfg->regen_out,
                           parts, e->d_name);
    }
    closedir(dp);
    return rc;
}

// The parts directory: only regenerate's parts in it; with overwrite (not dry) they go.
static int regen_parts_claim(const config *cfg, int dry) {
    char parts[CONFIG_STR + 16];
    snprintf(parts, sizeof parts, "%s.parts", cfg->regen_out);
    struct stat st;
    if (lstat(parts, &st) != 0) return 0; // lstat: a symbolic link is not followed into a directory not ours
    if (!S_ISDIR(st.st_mode))
        return error_set("regenerate.out %s: %s is there and is not regenerate's parts directory (a directory, "
                         "not a link); move it away",
                         cfg->regen_out, parts);
    int rc = regen_parts_only_ours(cfg, parts);
    if (rc || dry || !cfg->overwrite) return rc; // without overwrite the parts are resumed (or refused, settings differing)
    if (fs_remove_tree(parts) != 0)
        return error_set("regenerate.out %s: run.overwrite: cannot remove %s: %s", cfg->regen_out, parts, strerror(errno));
    return 0;
}

int regen_output_claim(const config *cfg, int dry) {
    const char *out = cfg->regen_out;
    if (!out[0]) return error_set("regenerate needs regenerate.out (the training set to write)");
    struct stat st;
    if (stat(out, &st) != 0) {
        if (errno != ENOENT) return error_set("regenerate.out %s: %s", out, strerror(errno));
        return regen_parts_claim(cfg, dry);
    }
    if (S_ISDIR(st.st_mode))
        return error_set("regenerate.out %s is a directory: it names the training set file to write (e.g. %s/regenerated.h5)",
                         out, out);
    if (!S_ISREG(st.st_mode)) return fs_check_regular(out, "regenerate.out");
    trainset ts;
    if (trainset_open(&ts, out, 0) < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", error_msg());
        return error_set("regenerate.out %s exists and is not a training set (%s): regenerate replaces only a training "
                         "set this project wrote, even with run.overwrite; choose another regenerate.out or move the "
                         "file away", out, why);
    }
    char have[REGEN_SETTINGS_MAX];
    int rc = trainset_attr_str(&ts, "settings", have, sizeof have);
    trainset_close(&ts);
    if (rc < 0) return error_prefix("regenerate.out");
    if (rc == 0 && !cfg->overwrite)
        return error_set("regenerate.out %s is a training set that regenerate did not make (no settings record): "
                         "--run.overwrite=true replaces it; or choose another regenerate.out", out);
    return regen_parts_claim(cfg, dry);
}

void regen_output_tidy(const config *cfg) {
    char parts[CONFIG_STR + 16], dir[CONFIG_STR], *slash;
    snprintf(parts, sizeof parts, "%s.parts", cfg->regen_out);
    struct stat st;
    if (lstat(parts, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (regen_parts_only_ours(cfg, parts) != 0) log_warn("regenerate: %s left in place: %s", parts, error_msg());
        else if (fs_remove_tree(parts) != 0) log_warn("regenerate: could not remove %s: %s", parts, strerror(errno));
    }
    snprintf(dir, sizeof dir, "%s", cfg->regen_out);
    slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    if (slash == dir) slash[1] = '\0', base = cfg->regen_out + 1; // "/x.h5": in "/"
    else if (slash) *slash = '\0';
    run_dir_remove_leftovers(slash ? dir : ".", base, NULL);
}

// ----------------------------------------------------------------------------- parts

static void part_path(char *buf, size_t n, const regen *g, int64_t s) {
    snprintf(buf, n, "%s/part-%05lld-of-%05lld.h5", g->parts, (long long)s, (long long)g->n_shards);
}

// The job's prompts whose parts are on disk now, whoever decoded them: what the progress line counts
// from when a shard begins (a part is renamed into place complete, so its presence is its end).
int64_t regen_output_prompts_done(const regen *g) {
    char path[CONFIG_STR + 96];
    int64_t n = 0;
    for (int64_t s = 0; s < g->n_shards; s++) {
        part_path(path, sizeof path, g, s);
        if (access(path, F_OK) == 0) n += (s + 1) * g->shard_prompts < g->prompts.n ? g->shard_prompts : g->prompts.n - s * g->shard_prompts;
    }
    return n;
}

int regen_output_part_found(const regen *g, int64_t s, int64_t cnt) {
    char path[CONFIG_STR + 64], have[REGEN_SETTINGS_MAX];
    part_path(path, sizeof path, g, s);
    if (access(path, F_OK) != 0) return 0;
    trainset ts;
    if (trainset_open(&ts, path, 0) < 0) return -1;
    int rc = trainset_attr_str(&ts, "settings", have, sizeof have);
    int64_t n = ts.n_raw;
    trainset_close(&ts);
    if (rc < 0) return -1;
    if (rc == 1 && strcmp(have, g->settings) == 0 && n == cnt) return 1;
    char diff[1024];
    if (rc == 1 && strcmp(have, g->settings) == 0) snprintf(diff, sizeof diff, "%lld samples there, %lld here", (long long)n, (long long)cnt);
    else regen_identity_diff(rc == 1 ? have : "", g->settings, diff, sizeof diff);
    return error_set("%s was made with other settings (%s). Remove %s to start over", path, diff, g->parts);
}

int regen_output_part_write(regen *g, const shard_state *st, int64_t s) {
    char path[CONFIG_STR + 64];
    part_path(path, sizeof path, g, s);
    trainset_writer w;
    if (trainset_writer_open(&w, path, g->target.cfg.vocab, g->tokenizer) < 0) return -1;
    int32_t *ids = xmalloc((size_t)regen_sample_cap(g) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)regen_sample_cap(g));
    int rc = 0;
    for (int64_t j = 0; rc == 0 && j < st->cnt; j++) {
        if ((rc = regen_prompts_read(&g->prompts, st->first + j, g->cfg->regen_prompts)) < 0) break;
        int64_t P = g->prompts.s.n, R = st->rlen[j];
        memcpy(ids, g->prompts.s.ids, (size_t)P * sizeof(int32_t));
        memcpy(ids + P, st->reply + st->at[j], (size_t)R * sizeof(int32_t));
        memset(mask, 0, (size_t)P);
        memset(mask + P, 1, (size_t)R);
        rc = trainset_writer_append(&w, ids, mask, P + R);
    }
    free(ids);
    free(mask);
    if (rc == 0) rc = trainset_writer_dataset(&w, "/finish_reason", 1, st->finish, st->cnt);
    if (rc == 0) rc = trainset_writer_attr(&w, "settings", g->settings, NULL, 0, NULL);
    if (rc == 0) return trainset_writer_close(&w);
    trainset_writer_abort(&w);
    return -1;
}

// ----------------------------------------------------------------------------- merge (rank 0)

int regen_output_merge(regen *g) {
    const config *cfg = g->cfg;
    trainset_writer w;
    if (trainset_writer_open(&w, cfg->regen_out, g->target.cfg.vocab, g->tokenizer) < 0) return -1;
    uint8_t *finish = xmalloc((size_t)g->prompts.n);
    int32_t *ids = xmalloc((size_t)regen_sample_cap(g) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)regen_sample_cap(g));
    int64_t at = 0, n_stop = 0;
    int rc = 0;
    for (int64_t s = 0; rc == 0 && s < g->n_shards; s++) {
        char path[CONFIG_STR + 64];
        part_path(path, sizeof path, g, s);
        // each part read is this run's (its settings and count checked again: another job's part
        // would not fit the buffers sized for these settings), each sample bounded before it is read
        int64_t cnt = (s + 1) * g->shard_prompts < g->prompts.n ? g->shard_prompts : g->prompts.n - s * g->shard_prompts;
        int have = regen_output_part_found(g, s, cnt);
        if (have <= 0) {
            rc = have < 0 ? -1 : error_set("%s: missing (every shard's part should be there)", path);
            break;
        }
        trainset ts;
        if ((rc = trainset_open(&ts, path, 0)) < 0) break;
        if (ts.n != ts.n_raw || at + ts.n_raw > g->prompts.n) rc = error_set("%s: %lld samples, not what its shard holds", path, (long long)ts.n_raw);
        if (rc == 0) rc = trainset_read_u8(&ts, "/finish_reason", finish + at);
        for (int64_t i = 0; rc == 0 && i < ts.n; i++) {
            int64_t len = trainset_len(&ts, i);
            if (len > regen_sample_cap(g))
                rc = error_set("%s: sample %lld has %lld tokens, more than a prompt and its reply can (%lld)", path,
                               (long long)i, (long long)len, (long long)regen_sample_cap(g));
            else if ((rc = trainset_read(&ts, i, ids, mask)) == 0) rc = trainset_writer_append(&w, ids, mask, len);
            n_stop += finish[at + i] == FINISH_STOP;
        }
        at += ts.n_raw;
        trainset_close(&ts);
    }
    free(ids);
    free(mask);
    if (rc == 0 && at != g->prompts.n) rc = error_set("%s: the parts hold %lld samples, the prompts are %lld", g->parts, (long long)at, (long long)g->prompts.n);
    int64_t *held = xmalloc((size_t)g->prompts.n * sizeof(int64_t)), n_held = 0;
    char rule[512];
    if (rc == 0) rc = trainset_writer_dataset(&w, "/finish_reason", 1, finish, g->prompts.n);
    if (rc == 0 && cfg->regen_heldout > 0) {
        n_held = trainset_heldout_draw(g->prompts.n, cfg->regen_heldout, (uint64_t)cfg->regen_seed, held, rule, sizeof rule);
        rc = trainset_writer_dataset(&w, "/heldout", 0, held, n_held);
        if (rc == 0) rc = trainset_writer_attr(&w, "heldout_rule", rule, NULL, 0, NULL);
    }
    int64_t i64;
    double f;
    if (rc == 0) rc = trainset_writer_attr(&w, "target", cfg->target_path, NULL, 0, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "prompts", cfg->regen_prompts, NULL, 0, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "target_weights_crc32c", NULL, (i64 = g->weights_crc, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "target_config_crc32c", NULL, (i64 = g->config_crc, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "prompts_crc32c", NULL, (i64 = g->prompts.crc, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "prompts_bytes", NULL, (i64 = g->prompts.bytes, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "stop_ids", NULL, g->stops.id, g->stops.n, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "max_new_tokens", NULL, (i64 = g->max_new, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "max_len", NULL, (i64 = g->max_len, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "temperature", NULL, NULL, 0, (f = cfg->regen_temperature, &f));
    if (rc == 0) rc = trainset_writer_attr(&w, "top_p", NULL, NULL, 0, (f = cfg->regen_top_p, &f));
    if (rc == 0) rc = trainset_writer_attr(&w, "top_k", NULL, (i64 = cfg->regen_top_k, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "seed", NULL, (i64 = cfg->regen_seed, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "settings", g->settings, NULL, 0, NULL);
    if (rc == 0) rc = trainset_writer_close(&w);
    else trainset_writer_abort(&w);
    if (rc == 0) {
        log_info("regenerate: %lld samples (%lld ended at a stop id, %lld at the length limit), %lld tokens, %lld "
                 "held out -> %s", (long long)g->prompts.n, (long long)n_stop, (long long)(g->prompts.n - n_stop),
                 (long long)w.n_tokens, (long long)n_held, cfg->regen_out);
        regen_output_tidy(cfg); // OUT.parts, and what killed merges left (OUT.tmp.PID)
    }
    free(held);
    free(finish);
    return rc;
}

// Settings: the keys of --mode regenerate's output, the training set (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key regen_output_keys[] = {
    {"regenerate.out", CFG_STRING, CONFIG_F(regen_out), "", "--mode regenerate: the training set written (prompt loss_mask 0, the target's reply 1, /finish_reason, /heldout; written atomically); its parts while it runs are in OUT.parts/", NULL, CONFIG_NOLIM},
    {"regenerate.heldout", CFG_FLOAT, CONFIG_F(regen_heldout), "16", "--mode regenerate: held-out samples recorded in the set's /heldout (>= 1: a count, below 1: a fraction of the prompts; drawn from regenerate.seed; a rule that takes every prompt is refused); 0 = none (training then holds out its last data.heldout_samples)", NULL, 0, 1e12},
};
const config_key_set regen_output_settings = CONFIG_KEY_SET(regen_output_keys, NULL);
