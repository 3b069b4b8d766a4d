// regen_shards.c: regenerate's shards: their size and reply buffer, and their claims (see
// regen_shards.h).
#include "teacher/regen_shards.h"
#include "common/core/config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/comm/watchdog.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"

// a * b, or -1 when the product passes INT64_MAX.
static int64_t mul_i64(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

int regen_shards_plan(regen *g) {
    const config *cfg = g->cfg;
    g->shard_prompts = cfg->regen_shard_prompts < g->prompts.n ? cfg->regen_shard_prompts : g->prompts.n;
    g->n_shards = (g->prompts.n + g->shard_prompts - 1) / g->shard_prompts;
    // a shard's reply buffer: the most reply tokens any shard can need (each prompt at most
    // max_new_tokens, fewer when its cache fills first), every sum and product checked, refused
    // past this machine's memory before anything is allocated
    g->reply_cap = 0;
    for (int64_t s = 0; s < g->n_shards; s++) {
        int64_t need = 0, end = (s + 1) * g->shard_prompts < g->prompts.n ? (s + 1) * g->shard_prompts : g->prompts.n;
        for (int64_t i = s * g->shard_prompts; i < end; i++) need += regen_reply_need(g, i); // <= n * 2^30: no overflow
        if (need > g->reply_cap) g->reply_cap = need;
    }
    int64_t bytes = mul_i64(g->reply_cap, (int64_t)sizeof(int32_t)), phys = (int64_t)sysconf(_SC_PHYS_PAGES);
    int64_t mem = phys > 0 ? mul_i64(phys, (int64_t)sysconf(_SC_PAGESIZE)) : -1;
    if (bytes < 0 || (mem > 0 && bytes > mem / 2))
        return error_set("regenerate.shard_prompts %lld x regenerate.max_new_tokens %d: a shard's replies need up to %lld "
                         "tokens (%.3g GB), past half of this machine's memory (%.3g GB): lower regenerate.shard_prompts "
                         "or regenerate.max_new_tokens", (long long)cfg->regen_shard_prompts, g->max_new,
                         (long long)g->reply_cap, (double)g->reply_cap * 4 / 1e9, (double)mem / 1e9);
    return 0;
}

// This job's claims directory, made by rank 0 (the claims of earlier, interrupted jobs removed:
// a shard they claimed but did not finish has no part and is claimed again), its name given to
// every rank. Collective.
int regen_shards_claims_dir(regen *g, const world *w) {
    char nonce[32] = "";
    int rc = 0;
    if (w->rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(nonce, sizeof nonce, "%llx-%x", (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec,
                 (unsigned)getpid());
        DIR *d = opendir(g->parts);
        struct dirent *e;
        char old[CONFIG_STR + 300];
        while (d && (e = readdir(d)))
            if (strncmp(e->d_name, "claims-", 7) == 0) {
                snprintf(old, sizeof old, "%s/%s", g->parts, e->d_name);
                if (fs_remove_tree(old) != 0) log_warn("regenerate: could not remove %s", old);
            }
        if (d) closedir(d);
        snprintf(g->claims, sizeof g->claims, "%s/claims-%s", g->parts, nonce);
        if (fs_mkdirs(g->claims) < 0) {
            rc = -1;
            nonce[0] = '\0';
        }
    }
    watchdog_bcast(nonce, (int)sizeof nonce, 0, "rank 0 to make the claims directory");
    if (!nonce[0]) return rc < 0 ? -1 : error_set("regenerate: rank 0 could not make the claims directory in %s", g->parts);
    snprintf(g->claims, sizeof g->claims, "%s/claims-%s", g->parts, nonce);
    return 0;
}

// Claim shard s for this teacher: 1 when it is ours (its claim file made here), 0 when another
// teacher has it, -1 on an error. Claims are files made with O_EXCL in this job's claims
// directory, so each shard is decoded once, by the first teacher free to take it.
int regen_shards_claim(const regen *g, int64_t s) {
    char path[CONFIG_STR + 96];
    snprintf(path, sizeof path, "%s/%05lld", g->claims, (long long)s);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return close(fd), 1;
    if (errno == EEXIST) return 0;
    return error_set("regenerate: cannot claim shard %lld (%s): %s", (long long)s, path, strerror(errno));
}

// Settings: the keys of --mode regenerate's shards (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key regen_shards_keys[] = {
    {"regenerate.shard_prompts", CFG_INT, CONFIG_F(regen_shard_prompts), "64", "--mode regenerate: prompts per shard, the unit of work among teachers (a teacher that finishes one claims the next) and of resuming", NULL, 1, 1e12},
};
const config_key_set regen_shards_settings = CONFIG_KEY_SET(regen_shards_keys, NULL);
