// regenerate.c: the target answers prompts, written as a training set (see regenerate.h).
#include "teacher/regenerate.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/json_util.h"
#include "common/core/log.h"
#include "common/core/stop.h"
#include "common/core/rng.h"
#include "common/data/jsonl_sample.h"
#include "common/data/trainset.h"
#include "common/kernels/ops.h"
#include "teacher/decode_sample.h"
#include "teacher/regen_link.h"
#include "teacher/target.h"
#include "teacher/target_decode.h"
#include "teacher/teacher_group.h"

#define REGEN_RNG_ID 0x5247u      // "RG": prompt i's sampling stream is (seed, i, REGEN_RNG_ID)
#define REGEN_MAX_STOP 64
#define REGEN_AUTO_SEQS_CAP 64    // regenerate.max_seqs = 0 with a memory budget: at most this many
#define REGEN_AUTO_SEQS_NOBUDGET 8
#define REGEN_PROGRESS_S 10.0
#define REGEN_MAX_STAGES 64

enum { FINISH_STOP = 0, FINISH_LENGTH = 1 };

// The prompts file, indexed once: where each prompt's line starts and how long the prompt is.
typedef struct {
    FILE *f;
    int64_t n;
    int64_t *at;      // [n] byte offset of prompt i's line
    int64_t *line_no; // [n] its line number (1-based)
    int32_t *len;     // [n] its tokens
    int64_t longest;
    char *line;
    size_t line_cap;
    jsonl_sample s;
} prompt_index;

typedef struct {
    const config *cfg;
    target_model m;
    target_decoder dec;
    regen_link link;  // the decoder's calls along the stages of a teacher group
    nccl_links *links; // the job's NCCL links (NULL: none)
    int G;            // world.teacher_group_size
    prompt_index pi;
    int64_t stop[REGEN_MAX_STOP];
    int n_stop;
    int max_len, max_seqs, max_new;
    decode_sampling smp;
    char settings[4096]; // every setting that changes the output, as text (parts record it)
    char parts[CONFIG_STR + 16];
    int64_t n_shards, per;
} regen;

// ----------------------------------------------------------------------------- inputs

static int prompts_index(prompt_index *pi, const char *path, int64_t vocab) {
    memset(pi, 0, sizeof *pi);
    pi->f = fs_fopen_regular(path, "regenerate.prompts");
    if (!pi->f) return -1;
    int64_t cap = 0, line_no = 0;
    ssize_t got;
    for (;;) {
        long at = ftell(pi->f);
        if ((got = getline(&pi->line, &pi->line_cap, pi->f)) == -1) break;
        line_no++;
        if (jsonl_line_blank(pi->line, (size_t)got)) continue;
        if (jsonl_sample_parse(pi->line, (size_t)got, vocab, &pi->s) < 0)
            return error_prefix("regenerate.prompts %s line %lld", path, (long long)line_no);
        if (pi->n == cap) {
            cap = cap ? 2 * cap : 1024;
            pi->at = xrealloc(pi->at, (size_t)cap * sizeof *pi->at);
            pi->line_no = xrealloc(pi->line_no, (size_t)cap * sizeof *pi->line_no);
            pi->len = xrealloc(pi->len, (size_t)cap * sizeof *pi->len);
        }
        pi->at[pi->n] = at;
        pi->line_no[pi->n] = line_no;
        pi->len[pi->n] = (int32_t)pi->s.n;
        if (pi->s.n > pi->longest) pi->longest = pi->s.n;
        pi->n++;
    }
    if (ferror(pi->f)) return error_set("regenerate.prompts %s: read error after line %lld", path, (long long)line_no);
    if (pi->n == 0) return error_set("regenerate.prompts %s: no prompt (the file has no non-blank line)", path);
    return 0;
}

// Prompt i's ids into pi->s (the file was checked by prompts_index).
static int prompts_read(prompt_index *pi, int64_t i, const char *path) {
    ssize_t got;
    if (fseek(pi->f, (long)pi->at[i], SEEK_SET) != 0 || (got = getline(&pi->line, &pi->line_cap, pi->f)) == -1 ||
        jsonl_sample_parse(pi->line, (size_t)got, 0, &pi->s) < 0 || pi->s.n != pi->len[i])
        return error_set("regenerate.prompts %s line %lld: changed while regenerating", path, (long long)pi->line_no[i]);
    return 0;
}

static void prompts_free(prompt_index *pi) {
    if (pi->f) fclose(pi->f);
    free(pi->at);
    free(pi->line_no);
    free(pi->len);
    free(pi->line);
    jsonl_sample_free(&pi->s);
    memset(pi, 0, sizeof *pi);
}

static int stop_add(regen *g, int64_t id, const char *from) {
    if (id < 0 || id >= g->m.cfg.vocab)
        return error_set("%s: stop id %lld is outside the target vocabulary [0, %lld)", from, (long long)id,
                         (long long)g->m.cfg.vocab);
    for (int i = 0; i < g->n_stop; i++)
        if (g->stop[i] == id) return 0;
    if (g->n_stop == REGEN_MAX_STOP) return error_set("%s: more than %d stop ids", from, REGEN_MAX_STOP);
    int i = g->n_stop++; // kept sorted
    while (i > 0 && g->stop[i - 1] > id) g->stop[i] = g->stop[i - 1], i--;
    g->stop[i] = id;
    return 0;
}

// The stop ids: eos_token_id of TARGET/generation_config.json (one id or a list; the file is
// optional) and regenerate.stop_ids.
static int stops_load(regen *g) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/generation_config.json", g->cfg->target_path);
    if (access(path, F_OK) == 0) { // optional; when there, a regular file (file_read_text)
        char *text = file_read_text(path, 1 << 20);
        if (!text) return -1;
        cJSON *root = json_parse_object(text, path, "generation config");
        free(text);
        if (!root) return -1;
        const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), *v;
        int rc = 0;
        if (cJSON_IsNumber(eos)) {
            rc = stop_add(g, (int64_t)eos->valuedouble, path);
        } else if (cJSON_IsArray(eos)) {
            cJSON_ArrayForEach(v, eos) {
                if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
                    rc = error_set("%s: eos_token_id holds a value that is not a token id", path);
                    break;
                }
                if ((rc = stop_add(g, (int64_t)v->valuedouble, path)) < 0) break;
            }
        } else if (eos && !cJSON_IsNull(eos)) {
            rc = error_set("%s: eos_token_id is neither a token id nor a list of them", path);
        }
        cJSON_Delete(root);
        if (rc < 0) return -1;
    }
    for (int64_t i = 0; i < g->cfg->regen_stop_ids.n; i++)
        if (stop_add(g, g->cfg->regen_stop_ids.v[i], "regenerate.stop_ids") < 0) return -1;
    return 0;
}

static int is_stop(const regen *g, int32_t t) {
    for (int i = 0; i < g->n_stop; i++)
        if (g->stop[i] == t) return 1;
    return 0;
}

// Slots: regenerate.max_seqs, or as many as teacher.mem_budget holds next to the weights.
static int regen_slots(regen *g) {
    const config *cfg = g->cfg;
    int64_t cap = cfg->regen_max_seqs > 0 ? cfg->regen_max_seqs : REGEN_AUTO_SEQS_NOBUDGET;
    if (cfg->regen_max_seqs == 0 && cfg->teacher_mem_budget > 0) { // the fewest any stage of a group holds
        int64_t bounds[REGEN_MAX_STAGES + 1] = {0, 0}, b0 = g->m.layer_begin, b1 = g->m.layer_end;
        if (g->G > REGEN_MAX_STAGES) return error_set("regenerate: teacher groups of at most %d ranks", REGEN_MAX_STAGES);
        if (g->G > 1 && target_stage_split(&g->m.cfg, ops_act_dtype(g->m.be), g->G, bounds) < 0) return -1;
        size_t budget = (size_t)cfg->teacher_mem_budget;
        for (int k = 0; k < g->G; k++) {
            g->m.layer_begin = bounds[k];
            g->m.layer_end = bounds[k + 1];
            size_t weights = target_model_weight_bytes(&g->m);
            int64_t c = 0;
            for (int s = 1; s <= REGEN_AUTO_SEQS_CAP; s++)
                if (weights + target_decoder_bytes(&g->m, s, g->max_len, (int)cfg->teacher_vocab_tile, &g->smp) <= budget) c = s;
            if (c == 0) {
                size_t one = target_decoder_bytes(&g->m, 1, g->max_len, (int)cfg->teacher_vocab_tile, &g->smp);
                g->m.layer_begin = b0;
                g->m.layer_end = b1;
                return error_set("teacher.mem_budget %lld bytes does not hold the weights (%zu bytes) and one sequence "
                                 "of %d cached positions (%zu bytes)%s", (long long)cfg->teacher_mem_budget, weights,
                                 g->max_len, one, g->G > 1 ? " on a stage of the teacher group" : "");
            }
            if (k == 0 || c < cap) cap = c;
        }
        g->m.layer_begin = b0;
        g->m.layer_end = b1;
    }
    if (cap > g->per) cap = g->per; // never more slots than a shard has prompts
    g->max_seqs = (int)cap;
    return 0;
}

static int regen_setup(regen *g, const world *w) {
    const config *cfg = g->cfg;
    g->G = w->group_size > 1 ? w->group_size : 1;
    if (!cfg->target_path[0]) return error_set("regenerate needs target.path (the target model directory)");
    if (!cfg->regen_prompts[0]) return error_set("regenerate needs regenerate.prompts (JSONL, {\"input_ids\": [...]} per line)");
    if (!cfg->regen_out[0]) return error_set("regenerate needs regenerate.out (the training set to write)");
    if (target_config_load(&g->m.cfg, cfg->target_path) || teacher_stage_select(w, &g->m) ||
        target_load_stage(&g->m, cfg->target_path, g->m.be, g->m.layer_begin, g->m.layer_end > 0 ? g->m.layer_end : -1))
        return -1;
    const target_config *c = &g->m.cfg;
    if (stops_load(g) < 0) return -1;
    if (prompts_index(&g->pi, cfg->regen_prompts, c->vocab) < 0) return -1;
    g->max_new = (int)cfg->regen_max_new_tokens;
    int64_t L = cfg->regen_max_len > 0 ? cfg->regen_max_len : g->pi.longest + g->max_new - 1;
    if (cfg->regen_max_len == 0 && L > c->max_positions) L = c->max_positions;
    if (L > INT32_MAX / 2) L = INT32_MAX / 2;
    g->max_len = (int)L;
    for (int64_t i = 0; i < g->pi.n; i++)
        if (g->pi.len[i] > g->max_len || g->pi.len[i] > c->max_positions)
            return error_set("regenerate.prompts %s line %lld: the prompt has %d tokens, longer than the cache of %d "
                             "positions per sequence (%s; the target's max_position_embeddings is %lld)",
                             cfg->regen_prompts, (long long)g->pi.line_no[i], g->pi.len[i], g->max_len,
                             cfg->regen_max_len > 0 ? "regenerate.max_len" : "the longest prompt + max_new_tokens - 1",
                             (long long)c->max_positions);
    g->per = cfg->regen_shard_prompts;
    g->n_shards = (g->pi.n + g->per - 1) / g->per;
    g->smp = (decode_sampling){.temperature = (float)cfg->regen_temperature, .top_p = (float)cfg->regen_top_p,
                               .top_k = (int)cfg->regen_top_k};
    if (regen_slots(g) < 0) return -1;
    snprintf(g->parts, sizeof g->parts, "%s.parts", cfg->regen_out);
    int n = snprintf(g->settings, sizeof g->settings,
                     "target=%s prompts=%s n=%lld max_new_tokens=%d max_len=%d temperature=%.17g top_p=%.17g top_k=%lld "
                     "seed=%llu shard_prompts=%lld stop_ids=[", cfg->target_path, cfg->regen_prompts,
                     (long long)g->pi.n, g->max_new, g->max_len, cfg->regen_temperature, cfg->regen_top_p,
                     (long long)cfg->regen_top_k, (unsigned long long)cfg->regen_seed, (long long)g->per);
    for (int i = 0; i < g->n_stop && n < (int)sizeof g->settings - 24; i++)
        n += snprintf(g->settings + n, sizeof g->settings - (size_t)n, "%s%lld", i ? "," : "", (long long)g->stop[i]);
    snprintf(g->settings + n, sizeof g->settings - (size_t)n, "]");
    if (target_decoder_init(&g->dec, &g->m, g->max_seqs, g->max_len, (int)cfg->teacher_vocab_tile, &g->smp)) return -1;
    regen_link_init(&g->link, w, &g->dec, g->links);
    return 0;
}

// ----------------------------------------------------------------------------- one shard

// A shard's replies: prompt j of the shard (0 .. cnt-1) holds reply[j * max_new ..], rlen[j] tokens.
typedef struct {
    int64_t first, cnt;
    int32_t *reply;
    int32_t *rlen;
    uint8_t *finish;
    rng *r;            // [cnt] each prompt's sampling stream
    int64_t *slot_of;  // [max_seqs] the shard prompt in each slot
    int32_t *cur;      // [max_seqs] each slot's newest token (fed at the next step)
    int32_t *next;     // [max_seqs]
    double *u;         // [max_seqs] a step's draws, one per slot (sampling only)
    int64_t tokens;    // generated so far (all shards of this rank)
} shard_state;

// Record token t for shard prompt j (in slot s); 1 when its reply has ended.
static int regen_emit(regen *g, shard_state *st, int64_t j, int32_t t) {
    int32_t n = st->rlen[j];
    st->reply[j * g->max_new + n] = t;
    st->rlen[j] = ++n;
    st->tokens++;
    int P = g->pi.len[st->first + j];
    if (is_stop(g, t)) st->finish[j] = FINISH_STOP;
    else if (n >= g->max_new || P + n - 1 >= g->max_len) st->finish[j] = FINISH_LENGTH; // no room to feed t
    else return 0;
    return 1;
}

// The draw of shard prompt j's next token from its stream (sampling), the one number decode_sample's
// rule takes from it per token.
static void regen_draw(regen *g, shard_state *st, int64_t j, double *u) {
    if (g->smp.temperature > 0.0f) *u = rng_uniform(&st->r[j]);
}

// Decode the shard's prompts with continuous batching: a free slot takes the next waiting prompt.
static int regen_decode_shard(regen *g, shard_state *st, progress *pg, int64_t *done) {
    target_decoder *d = &g->dec;
    int sampling = g->smp.temperature > 0.0f;
    int64_t waiting = 0, finished = 0;
    regen_link_reset(&g->link);
    while (finished < st->cnt) {
        while (d->n_seq < g->max_seqs && waiting < st->cnt) { // refill the free slots
            int64_t j = waiting++;
            rng_init(&st->r[j], (uint64_t)g->cfg->regen_seed, (uint64_t)(st->first + j), REGEN_RNG_ID);
            if (prompts_read(&g->pi, st->first + j, g->cfg->regen_prompts) < 0) return -1;
            double u = 0;
            regen_draw(g, st, j, &u);
            int s = regen_link_add(&g->link, g->pi.s.ids, (int)g->pi.s.n, sampling ? &u : NULL, &st->cur[d->n_seq]);
            if (s < 0) return -1;
            st->slot_of[s] = j;
            if (regen_emit(g, st, j, st->cur[s])) {
                regen_link_remove(&g->link, s); // s is the last slot: nothing moves
                finished++;
                (*done)++;
                progress_update(pg, *done);
            }
        }
        if (d->n_seq == 0) continue;
        int n = d->n_seq;
        for (int s = 0; s < n; s++) regen_draw(g, st, st->slot_of[s], &st->u[s]);
        if (regen_link_step(&g->link, st->cur, sampling ? st->u : NULL, st->next) < 0) return -1;
        uint8_t ended[4096];
        for (int s = 0; s < n; s++) {
            st->cur[s] = st->next[s];
            ended[s] = (uint8_t)regen_emit(g, st, st->slot_of[s], st->cur[s]);
        }
        for (int s = n - 1; s >= 0; s--) { // from the top: the sequence moved into s has been handled
            if (!ended[s]) continue;
            int last = d->n_seq - 1;
            regen_link_remove(&g->link, s);
            if (s != last) {
                st->slot_of[s] = st->slot_of[last];
                st->cur[s] = st->cur[last];
            }
            finished++;
            (*done)++;
            progress_update(pg, *done);
        }
    }
    return 0;
}

static void part_path(char *buf, size_t n, const regen *g, int64_t s) {
    snprintf(buf, n, "%s/part-%05lld-of-%05lld.h5", g->parts, (long long)s, (long long)g->n_shards);
}

// 1 when shard s's part is already there (made with these settings), 0 when not, -1 on a mismatch.
static int part_done(const regen *g, int64_t s, int64_t cnt) {
    char path[CONFIG_STR + 64], have[4096];
    part_path(path, sizeof path, g, s);
    if (access(path, F_OK) != 0) return 0;
    trainset ts;
    if (trainset_open(&ts, path, 0) < 0) return -1;
    int rc = trainset_attr_str(&ts, "settings", have, sizeof have);
    int64_t n = ts.n_raw;
    trainset_close(&ts);
    if (rc < 0) return -1;
    if (rc == 0 || strcmp(have, g->settings) != 0 || n != cnt)
        return error_set("%s was made with other settings (%s); this run has %s. Remove %s to start over", path,
                         rc ? have : "none recorded", g->settings, g->parts);
    return 1;
}

static int part_write(regen *g, shard_state *st, int64_t s) {
    char path[CONFIG_STR + 64];
    part_path(path, sizeof path, g, s);
    trainset_writer w;
    if (trainset_writer_open(&w, path, g->m.cfg.vocab, "") < 0) return -1;
    int32_t *ids = xmalloc(((size_t)g->pi.longest + (size_t)g->max_new) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)g->pi.longest + (size_t)g->max_new);
    int rc = 0;
    for (int64_t j = 0; rc == 0 && j < st->cnt; j++) {
        if ((rc = prompts_read(&g->pi, st->first + j, g->cfg->regen_prompts)) < 0) break;
        int64_t P = g->pi.s.n, R = st->rlen[j];
        memcpy(ids, g->pi.s.ids, (size_t)P * sizeof(int32_t));
        memcpy(ids + P, st->reply + j * g->max_new, (size_t)R * sizeof(int32_t));
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

static void regen_progress_line(const regen *g, int64_t done, int64_t mine, int64_t tokens, double secs) {
    double tps = secs > 0 ? (double)tokens / secs : 0, rate = secs > 0 ? (double)done / secs : 0;
    double eta = rate > 0 ? (double)(mine - done) / rate : 0;
    (void)g;
    log_info("regenerate: %lld/%lld prompts of this rank, %lld tokens generated, %.1f tokens/s, ETA %.0f s",
             (long long)done, (long long)mine, (long long)tokens, tps, eta);
}

// This rank's shards.
static int regen_run_shards(regen *g, const world *w) {
    int64_t per = g->per, mine = 0, done = 0;
    for (int64_t s = w->group; s < g->n_shards; s += w->groups) mine += s + 1 < g->n_shards ? per : g->pi.n - s * per;
    shard_state st = {0};
    st.reply = xmalloc((size_t)per * (size_t)g->max_new * sizeof(int32_t));
    st.rlen = xmalloc((size_t)per * sizeof(int32_t));
    st.finish = xmalloc((size_t)per);
    st.r = xmalloc((size_t)per * sizeof(rng));
    st.slot_of = xmalloc((size_t)g->max_seqs * sizeof(int64_t));
    st.cur = xmalloc((size_t)g->max_seqs * sizeof(int32_t));
    st.next = xmalloc((size_t)g->max_seqs * sizeof(int32_t));
    st.u = xmalloc((size_t)g->max_seqs * sizeof(double));
    progress pg;
    progress_start(&pg, "regenerate (prompts)", mine);
    double t0 = time_now(), t_line = t0;
    int64_t skipped = 0, tokens0 = 0, said = -1; // said: prompts done at the last tokens/s line
    int rc = 0;
    for (int64_t s = w->group; rc == 0 && s < g->n_shards; s += w->groups) {
        if (stop_requested()) break; // a signal: the parts written are kept for the resume (stop.h)
        st.first = s * per;
        st.cnt = st.first + per < g->pi.n ? per : g->pi.n - st.first;
        int have = part_done(g, s, st.cnt);
        if (have < 0) {
            rc = -1;
            break;
        }
        if (have) {
            skipped++;
            done += st.cnt;
            tokens0 = st.tokens;
            progress_update(&pg, done);
            continue;
        }
        memset(st.rlen, 0, (size_t)st.cnt * sizeof(int32_t));
        rc = regen_decode_shard(g, &st, &pg, &done);
        if (rc == 0) rc = part_write(g, &st, s);
        double now = time_now();
        if (rc == 0 && now - t_line >= REGEN_PROGRESS_S) {
            regen_progress_line(g, done, mine, st.tokens - tokens0, now - t0);
            t_line = now;
            said = done;
        }
    }
    if (rc == 0) {
        progress_end(&pg);
        if (said != done) regen_progress_line(g, done, mine, st.tokens - tokens0, time_now() - t0); // (not twice)
        if (skipped) log_info("regenerate: %lld shard(s) of this rank were done by an earlier run", (long long)skipped);
    }
    free(st.reply);
    free(st.rlen);
    free(st.finish);
    free(st.r);
    free(st.slot_of);
    free(st.cur);
    free(st.next);
    free(st.u);
    return rc;
}

// ----------------------------------------------------------------------------- merge (rank 0)

static int regen_merge(regen *g) {
    const config *cfg = g->cfg;
    char tok[CONFIG_STR + 32];
    snprintf(tok, sizeof tok, "regenerate(%s)", cfg->target_path);
    trainset_writer w;
    if (trainset_writer_open(&w, cfg->regen_out, g->m.cfg.vocab, tok) < 0) return -1;
    uint8_t *finish = xmalloc((size_t)g->pi.n);
    int32_t *ids = xmalloc(((size_t)g->pi.longest + (size_t)g->max_new) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)g->pi.longest + (size_t)g->max_new);
    int64_t at = 0, n_stop = 0;
    int rc = 0;
    for (int64_t s = 0; rc == 0 && s < g->n_shards; s++) {
        char path[CONFIG_STR + 64];
        part_path(path, sizeof path, g, s);
        trainset ts;
        if ((rc = trainset_open(&ts, path, 0)) < 0) break;
        if (ts.n != ts.n_raw || at + ts.n_raw > g->pi.n) rc = error_set("%s: %lld samples, not what its shard holds", path, (long long)ts.n_raw);
        if (rc == 0) rc = trainset_read_u8(&ts, "/finish_reason", finish + at);
        for (int64_t i = 0; rc == 0 && i < ts.n; i++) {
            int64_t len = trainset_len(&ts, i);
            if ((rc = trainset_read(&ts, i, ids, mask)) == 0) rc = trainset_writer_append(&w, ids, mask, len);
            n_stop += finish[at + i] == FINISH_STOP;
        }
        at += ts.n_raw;
        trainset_close(&ts);
    }
    free(ids);
    free(mask);
    if (rc == 0 && at != g->pi.n) rc = error_set("%s: the parts hold %lld samples, the prompts are %lld", g->parts, (long long)at, (long long)g->pi.n);
    int64_t *held = xmalloc((size_t)g->pi.n * sizeof(int64_t)), n_held = 0;
    char rule[512];
    if (rc == 0) rc = trainset_writer_dataset(&w, "/finish_reason", 1, finish, g->pi.n);
    if (rc == 0 && cfg->regen_heldout > 0) {
        n_held = trainset_heldout_draw(g->pi.n, cfg->regen_heldout, (uint64_t)cfg->regen_seed, held, rule, sizeof rule);
        rc = trainset_writer_dataset(&w, "/heldout", 0, held, n_held);
        if (rc == 0) rc = trainset_writer_attr(&w, "heldout_rule", rule, NULL, 0, NULL);
    }
    int64_t i64;
    double f;
    if (rc == 0) rc = trainset_writer_attr(&w, "target", cfg->target_path, NULL, 0, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "prompts", cfg->regen_prompts, NULL, 0, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "stop_ids", NULL, g->stop, g->n_stop, NULL);
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
                 "held out -> %s", (long long)g->pi.n, (long long)n_stop, (long long)(g->pi.n - n_stop),
                 (long long)w.n_tokens, (long long)n_held, cfg->regen_out);
        if (fs_remove_tree(g->parts) != 0) log_warn("regenerate: could not remove %s", g->parts);
    }
    free(held);
    free(finish);
    return rc;
}

// ----------------------------------------------------------------------------- the mode

int teacher_regenerate(const world *w, const config *cfg, backend *be, nccl_links *links) {
    regen *g = xcalloc(1, sizeof *g);
    g->cfg = cfg;
    g->m.be = be;
    g->links = links;
    int rc = regen_setup(g, w);
    if (rc == 0 && fs_mkdirs(g->parts) < 0) rc = error_prefix("regenerate.out");
    if (rc == 0 && w->rank == 0)
        log_info("regenerate: %lld prompts (longest %lld tokens) in %lld shard(s) over %d teacher(s) of %d rank(s); %d "
                 "slots of %d positions; max_new_tokens %d; %d stop id(s); %s", (long long)g->pi.n,
                 (long long)g->pi.longest, (long long)g->n_shards, w->groups, g->G, g->max_seqs, g->max_len, g->max_new, g->n_stop,
                 g->smp.temperature > 0 ? "sampling" : "greedy");
    if (rc == 0 && w->rank == 0 && g->G > 1)
        log_info("regenerate: the stages pass their rows %s", g->link.links ? "over NCCL, GPU to GPU" : "over MPI from host memory");
    // Every rank set up, or none runs (a later stage waiting on a first stage that failed would hang).
    int set_up = rc == 0, all_set_up = 0;
    mpi_check(MPI_Allreduce(&set_up, &all_set_up, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all_set_up) {
        // the ranks that failed report below; the others have nothing to run
    } else if (rc == 0 && g->link.first) { // a group's first stage drives its decoder; the others follow its calls
        rc = regen_run_shards(g, w);
        regen_link_stop(&g->link);
    } else if (rc == 0 && regen_link_follow(&g->link) < 0) {
        fatal("%s", error_msg()); // an internal failure on a later stage: the first stage waits for it
    }
    // The first failing rank says why; every rank then agrees to stop.
    int me = rc ? w->rank : w->size, first = w->size;
    mpi_check(MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    int stop = stop_requested() ? 1 : 0, stopped = 0; // a signal on any rank: no merge yet (stop.h)
    mpi_check(MPI_Allreduce(&stop, &stopped, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (first < w->size) {
        if (w->rank == first) log_error("%s", error_msg());
        rc = -1;
    } else if (stopped) {
        if (w->rank == 0)
            log_info("regenerate: stopped by %s: the complete parts are kept in %s, %s is written once every part is; "
                     "resume with the same command", stop_signal_name(stop_requested()), g->parts, cfg->regen_out);
    } else if (w->rank == 0) {
        rc = regen_merge(g);
        if (rc) log_error("%s", error_msg());
    }
    regen_link_free(&g->link);
    target_decoder_free(&g->dec);
    prompts_free(&g->pi);
    target_free(&g->m);
    free(g);
    int st = rc ? 1 : 0, any = 0;
    mpi_check(MPI_Allreduce(&st, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return any ? -1 : 0;
}
