// regenerate.c: the target answers prompts, written as a training set (see regenerate.h).
#include "teacher/regenerate.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common/comm/stop_relay.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/json_util.h"
#include "common/core/log.h"
#include "common/core/stop.h"
#include "common/core/rng.h"
#include "common/data/identity.h"
#include "common/data/jsonl_sample.h"
#include "common/data/trainset.h"
#include "common/kernels/ops.h"
#include "teacher/decode_sample.h"
#include "teacher/regen_link.h"
#include "teacher/regen_output.h"
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

// The prompts file, indexed once: where each prompt's line starts, how long the prompt is and the
// CRC32C of its line's bytes, which every later read of the line is checked against (a file
// rewritten in place while the job runs, even with lines of the same lengths, is refused, not mixed
// into the set that records the indexed file's CRC).
typedef struct {
    FILE *f;
    int64_t n;
    int64_t *at;      // [n] byte offset of prompt i's line
    int64_t *line_no; // [n] its line number (1-based)
    int32_t *len;     // [n] its tokens
    int64_t *line_bytes; // [n] its line's bytes (line end included)
    uint32_t *line_crc;  // [n] their CRC32C
    int64_t longest;
    int64_t bytes;    // the file's size and the CRC32C of its bytes: its identity
    uint32_t crc;
    char *line;
    size_t line_cap;
    jsonl_sample s;
} prompt_index;

typedef struct {
    const config *cfg;
    target_model m;
    target_decoder dec;
    regen_link link;  // the decoder's calls along the stages of a teacher group
    payload_link *links; // the job's payload link (the stages' messages)
    int G;            // world.teacher_group_size
    prompt_index pi;
    int64_t stop[REGEN_MAX_STOP];
    int n_stop;
    int max_len, max_seqs, max_new;
    decode_sampling smp;
    char settings[4096]; // every setting that changes the output, as text (parts record it)
    char parts[CONFIG_STR + 16];
    char claims[CONFIG_STR + 64]; // this job's claim files: OUT.parts/claims-NONCE/SSSSS
    char tokenizer[CONFIG_STR + 64];
    uint32_t weights_crc, config_crc; // the target's identity by content
    int64_t n_shards, per;
    int64_t reply_cap;   // reply tokens a shard's buffer holds: the most any shard can need
    int done_already;    // regenerate.out exists, made with these settings
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
        pi->crc = crc32c_update(pi->crc, pi->line, (size_t)got);
        pi->bytes += got;
        line_no++;
        if (jsonl_line_blank(pi->line, (size_t)got)) continue;
        if (jsonl_sample_parse(pi->line, (size_t)got, vocab, &pi->s) < 0)
            return error_prefix("regenerate.prompts %s line %lld", path, (long long)line_no);
        if (pi->n == cap) {
            cap = cap ? 2 * cap : 1024;
            pi->at = xrealloc(pi->at, (size_t)cap * sizeof *pi->at);
            pi->line_no = xrealloc(pi->line_no, (size_t)cap * sizeof *pi->line_no);
            pi->len = xrealloc(pi->len, (size_t)cap * sizeof *pi->len);
            pi->line_bytes = xrealloc(pi->line_bytes, (size_t)cap * sizeof *pi->line_bytes);
            pi->line_crc = xrealloc(pi->line_crc, (size_t)cap * sizeof *pi->line_crc);
        }
        pi->line_bytes[pi->n] = got;
        pi->line_crc[pi->n] = crc32c_update(0, pi->line, (size_t)got);
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

// Prompt i's ids into pi->s: its line's bytes read again from the file (pread: not a stdio buffer
// that may hold the bytes indexed) and checked against the index's CRC (the file was checked by
// prompts_index; one changed since is refused, naming the line).
static int prompts_read(prompt_index *pi, int64_t i, const char *path) {
    size_t want = (size_t)pi->line_bytes[i], have = 0;
    if (pi->line_cap < want + 1) pi->line = xrealloc(pi->line, pi->line_cap = want + 1);
    int fd = fileno(pi->f);
    while (have < want) {
        ssize_t r = pread(fd, pi->line + have, want - have, (off_t)(pi->at[i] + (int64_t)have));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        have += (size_t)r;
    }
    pi->line[have] = '\0';
    ssize_t got = have == want ? (ssize_t)want : -1;
    uint32_t crc = got > 0 ? crc32c_update(0, pi->line, (size_t)got) : 0;
    if (got <= 0 || crc != pi->line_crc[i])
        return error_set("regenerate.prompts %s line %lld: changed since the job indexed it (%s): the set would mix two "
                         "files' prompts; leave the prompts file unchanged until the job ends, and run it again",
                         path, (long long)pi->line_no[i], got <= 0 ? "the file is shorter" : "its bytes' CRC32C differs");
    if (jsonl_sample_parse(pi->line, (size_t)got, 0, &pi->s) < 0) // (the bytes indexed: not reached)
        return error_prefix("regenerate.prompts %s line %lld", path, (long long)pi->line_no[i]);
    return 0;
}

// The prompts of shard [first, first + cnt) checked against the index when the shard starts, before
// anything of it is decoded (each is checked again when it is read).
static int prompts_check_shard(prompt_index *pi, int64_t first, int64_t cnt, const char *path) {
    for (int64_t i = first; i < first + cnt; i++)
        if (prompts_read(pi, i, path) < 0) return -1;
    return 0;
}

static void prompts_free(prompt_index *pi) {
    if (pi->f) fclose(pi->f);
    free(pi->at);
    free(pi->line_no);
    free(pi->len);
    free(pi->line_bytes);
    free(pi->line_crc);
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

// One eos_token_id value: an integer in the target's vocabulary (1.5 or 1e20 are not ids).
static int stop_add_json(regen *g, const cJSON *v, const char *path) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return error_set("%s: eos_token_id holds %s, not a token id", path,
                         cJSON_IsNumber(v) ? "a number with a fraction" : "a value that is not a number");
    if (v->valuedouble < 0 || v->valuedouble >= (double)g->m.cfg.vocab)
        return error_set("%s: eos_token_id %.17g is outside the target vocabulary [0, %lld)", path, v->valuedouble,
                         (long long)g->m.cfg.vocab);
    return stop_add(g, (int64_t)v->valuedouble, path);
}

// The stop ids: eos_token_id of TARGET/generation_config.json (one id or a list; the file is
// optional) and regenerate.stop_ids. Read as transformers reads it (Python's json): a key given
// twice counts with its last value.
static int stops_load(regen *g) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/generation_config.json", g->cfg->target_path);
    if (access(path, F_OK) == 0) { // optional; when there, a regular file (file_read_text)
        char *text = file_read_text(path, 1 << 20);
        if (!text) return -1;
        cJSON *root = json_parse_object(text, path, "generation config");
        free(text);
        if (!root) return -1;
        const cJSON *eos = NULL, *v;
        cJSON_ArrayForEach(v, root) if (v->string && strcmp(v->string, "eos_token_id") == 0) eos = v; // the last
        int rc = 0;
        if (cJSON_IsNumber(eos)) {
            rc = stop_add_json(g, eos, path);
        } else if (cJSON_IsArray(eos)) {
            cJSON_ArrayForEach(v, eos) if ((rc = stop_add_json(g, v, path)) < 0) break;
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

// ----------------------------------------------------------------------------- identities

// The key=value fields of a settings text that differ from another's, as "KEY X there, Y here"
// (the first few, in one line).
static void settings_diff(const char *there, const char *here, char *out, size_t n) {
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

// a * b, or -1 when the product passes INT64_MAX.
static int64_t mul_i64(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

// The reply tokens prompt i can need: max_new_tokens, or fewer when its cache fills first.
static int64_t reply_need(const regen *g, int64_t i) {
    int64_t room = (int64_t)g->max_len - g->pi.len[i] + 1;
    return room < g->max_new ? room : g->max_new;
}

// The longest sample a set can hold: a prompt and its reply, at most max_len + 1 tokens.
static int64_t sample_cap(const regen *g) {
    int64_t a = g->pi.longest + g->max_new, b = (int64_t)g->max_len + 1;
    return a < b ? a : b;
}

// regenerate.out as found at the start: absent (0), a set made with these settings (1: nothing to
// do), or one made with other settings (-1 naming the fields that differ, unless run.overwrite: 0,
// replaced at the end). What is not a set regenerate made (a directory, a prompts file, another
// file, a set with no settings record) the mode's claim refused before the job started
// (teacher/regen_output.h, src/modes/mode_regenerate.c).
static int regen_check_out(regen *g) {
    const config *cfg = g->cfg;
    if (access(cfg->regen_out, F_OK) != 0) return 0;
    trainset ts;
    char have[4096] = "";
    int rc = trainset_open(&ts, cfg->regen_out, 0) < 0 ? -1 : trainset_attr_str(&ts, "settings", have, sizeof have);
    if (rc >= 0) trainset_close(&ts);
    if (rc == 1 && strcmp(have, g->settings) == 0) return 1;
    if (cfg->overwrite) return 0;
    if (rc == 1) {
        char diff[1024];
        settings_diff(have, g->settings, diff, sizeof diff);
        return error_set("regenerate.out %s exists, made with other settings (%s); set run.overwrite=true to replace it",
                         cfg->regen_out, diff);
    }
    return error_set("regenerate.out %s exists and is not a set regenerate made (%s); set run.overwrite=true to replace it",
                     cfg->regen_out, rc < 0 ? error_msg() : "no settings attribute");
}

static int regen_setup(regen *g, const world *w) {
    const config *cfg = g->cfg;
    g->G = w->group_size > 1 ? w->group_size : 1;
    // (target.path, regenerate.prompts and regenerate.out are set and claimed: the mode's needs and
    // claim, src/modes/mode_regenerate.c) the weights are loaded last, once the inputs and the output are known to be usable
    if (target_config_load(&g->m.cfg, cfg->target_path) || teacher_stage_select(w, &g->m)) return -1;
    const target_config *c = &g->m.cfg;
    if (stops_load(g) < 0) return -1;
    if (prompts_index(&g->pi, cfg->regen_prompts, c->vocab) < 0) return -1;
    if (cfg->regen_max_len > c->max_positions)
        return error_set("regenerate.max_len %lld is past the target's max_position_embeddings %lld (%s/config.json)",
                         (long long)cfg->regen_max_len, (long long)c->max_positions, cfg->target_path);
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
    // the held-out rule must leave samples to train on
    double h = cfg->regen_heldout;
    int64_t held = h >= 1 ? (h < (double)g->pi.n ? (int64_t)h : g->pi.n) : h > 0 ? (int64_t)floor(h * (double)g->pi.n) : 0;
    if (h > 0 && held < 1) held = 1;
    if (held >= g->pi.n)
        return error_set("regenerate.heldout %g holds out all %lld prompts of %s, leaving none to train on: set "
                         "regenerate.heldout below %lld (a count) or below 1 (a fraction), or 0 for none",
                         h, (long long)g->pi.n, cfg->regen_prompts, (long long)g->pi.n);
    g->per = cfg->regen_shard_prompts < g->pi.n ? cfg->regen_shard_prompts : g->pi.n;
    g->n_shards = (g->pi.n + g->per - 1) / g->per;
    // a shard's reply buffer: the most reply tokens any shard can need (each prompt at most
    // max_new_tokens, fewer when its cache fills first), every sum and product checked, refused
    // past this machine's memory before anything is allocated
    g->reply_cap = 0;
    for (int64_t s = 0; s < g->n_shards; s++) {
        int64_t need = 0, end = (s + 1) * g->per < g->pi.n ? (s + 1) * g->per : g->pi.n;
        for (int64_t i = s * g->per; i < end; i++) need += reply_need(g, i); // <= n * 2^30: no overflow
        if (need > g->reply_cap) g->reply_cap = need;
    }
    int64_t bytes = mul_i64(g->reply_cap, (int64_t)sizeof(int32_t)), phys = (int64_t)sysconf(_SC_PHYS_PAGES);
    int64_t mem = phys > 0 ? mul_i64(phys, (int64_t)sysconf(_SC_PAGESIZE)) : -1;
    if (bytes < 0 || (mem > 0 && bytes > mem / 2))
        return error_set("regenerate.shard_prompts %lld x regenerate.max_new_tokens %d: a shard's replies need up to %lld "
                         "tokens (%.3g GB), past half of this machine's memory (%.3g GB): lower regenerate.shard_prompts "
                         "or regenerate.max_new_tokens", (long long)cfg->regen_shard_prompts, g->max_new,
                         (long long)g->reply_cap, (double)g->reply_cap * 4 / 1e9, (double)mem / 1e9);
    g->smp = (decode_sampling){.temperature = (float)cfg->regen_temperature, .top_p = (float)cfg->regen_top_p,
                               .top_k = (int)cfg->regen_top_k};
    if (regen_slots(g) < 0) return -1;
    // the inputs by content: what the parts and the set record and a resume compares
    char cpath[CONFIG_STR + 16];
    snprintf(cpath, sizeof cpath, "%s/config.json", cfg->target_path);
    int64_t wcrc = identity_weights_crc(cfg->target_path); // (none readable: 0, as before; the loader names why)
    g->weights_crc = wcrc < 0 ? 0 : (uint32_t)wcrc;
    if (crc32c_file(cpath, &g->config_crc) < 0) return -1;
    snprintf(g->parts, sizeof g->parts, "%s.parts", cfg->regen_out);
    int n = snprintf(g->settings, sizeof g->settings,
                     "target_weights=%08x target_config=%08x vocab=%lld prompts=%lld prompts_bytes=%lld "
                     "prompts_crc32c=%08x max_new_tokens=%d max_len=%d temperature=%.17g top_p=%.17g top_k=%lld "
                     "seed=%llu shard_prompts=%lld stop_ids=[", g->weights_crc, g->config_crc, (long long)c->vocab,
                     (long long)g->pi.n, (long long)g->pi.bytes, g->pi.crc, g->max_new, g->max_len,
                     cfg->regen_temperature, cfg->regen_top_p, (long long)cfg->regen_top_k,
                     (unsigned long long)cfg->regen_seed, (long long)g->per);
    for (int i = 0; i < g->n_stop && n < (int)sizeof g->settings - 24; i++)
        n += snprintf(g->settings + n, sizeof g->settings - (size_t)n, "%s%lld", i ? "," : "", (long long)g->stop[i]);
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
    int out = regen_check_out(g);
    if (out < 0) return -1;
    g->done_already = out;
    if (out) return 0;
    if (target_load_stage(&g->m, cfg->target_path, g->m.be, g->m.layer_begin, g->m.layer_end > 0 ? g->m.layer_end : -1))
        return -1;
    if (target_decoder_init(&g->dec, &g->m, g->max_seqs, g->max_len, (int)cfg->teacher_vocab_tile, &g->smp)) return -1;
    regen_link_init(&g->link, w, &g->dec, g->links);
    return 0;
}

// ----------------------------------------------------------------------------- one shard

// A shard's replies: prompt j of the shard (0 .. cnt-1) holds reply[at[j] ..], rlen[j] tokens (at
// most at[j + 1] - at[j]: what it can need, reply_need).
typedef struct {
    int64_t first, cnt;
    int64_t base; // the job's prompts whose parts were on disk when this shard began (progress)
    int64_t *at;       // [per + 1]
    int32_t *reply;    // [reply_cap]
    int32_t *rlen;
    uint8_t *finish;
    rng *r;            // [cnt] each prompt's sampling stream
    int64_t *slot_of;  // [max_seqs] the shard prompt in each slot
    int32_t *cur;      // [max_seqs] each slot's newest token (fed at the next step)
    int32_t *next;     // [max_seqs]
    double *u;         // [max_seqs] a step's draws, one per slot, or a prefill pack's (sampling only)
    int32_t *pack;     // [decoder rows] a prefill pack's prompts, one after another
    int *plen;         // [max_seqs] their lengths
    int64_t tokens;    // generated so far (all shards of this rank)
} shard_state;

// Record token t for shard prompt j (in slot s); 1 when its reply has ended.
static int regen_emit(regen *g, shard_state *st, int64_t j, int32_t t) {
    int32_t n = st->rlen[j];
    st->reply[st->at[j] + n] = t;
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

// Decode the shard's prompts with continuous batching: the free slots take the next waiting prompts,
// prefilled together as one pack (target_decoder_add_batch).
// done counts this rank's prompts; the progress line counts the job's: the shards claim in order,
// so every prompt before this shard's is claimed by some rank, and its rate and ETA are the job's.
static int regen_decode_shard(regen *g, shard_state *st, progress *pg, int64_t *done) {
    target_decoder *d = &g->dec;
    int sampling = g->smp.temperature > 0.0f;
    int64_t waiting = 0, finished = 0;
    regen_link_reset(&g->link);
    while (finished < st->cnt) {
        while (d->n_seq < g->max_seqs && waiting < st->cnt) { // refill the free slots, one prefill pack
            // the waiting prompts that fit the free slots and the decoder's work buffers (rows tokens;
            // one prompt always fits: it is at most max_len <= rows)
            int s0 = d->n_seq, k = 0, T = 0;
            while (s0 + k < g->max_seqs && waiting < st->cnt && T + g->pi.len[st->first + waiting] <= d->rows) {
                int64_t j = waiting++;
                rng_init(&st->r[j], (uint64_t)g->cfg->regen_seed, (uint64_t)(st->first + j), REGEN_RNG_ID);
                if (prompts_read(&g->pi, st->first + j, g->cfg->regen_prompts) < 0) return -1;
                memcpy(st->pack + T, g->pi.s.ids, (size_t)g->pi.s.n * sizeof(int32_t));
                st->plen[k] = (int)g->pi.s.n;
                T += st->plen[k];
                st->u[k] = 0;
                regen_draw(g, st, j, &st->u[k]);
                st->slot_of[s0 + k++] = j;
            }
            if (regen_link_add_batch(&g->link, k, st->pack, st->plen, sampling ? st->u : NULL, &st->cur[s0]) < 0)
                return -1;
            for (int s = s0 + k - 1; s >= s0; s--) { // from the top: the sequence moved into s has been handled
                if (!regen_emit(g, st, st->slot_of[s], st->cur[s])) continue;
                int last = d->n_seq - 1;
                regen_link_remove(&g->link, s);
                if (s != last) {
                    st->slot_of[s] = st->slot_of[last];
                    st->cur[s] = st->cur[last];
                }
                finished++;
                (*done)++;
                progress_update(pg, st->base + finished);
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
            progress_update(pg, st->base + finished);
        }
    }
    return 0;
}

static void part_path(char *buf, size_t n, const regen *g, int64_t s) {
    snprintf(buf, n, "%s/part-%05lld-of-%05lld.h5", g->parts, (long long)s, (long long)g->n_shards);
}

// The job's prompts whose parts are on disk now, whoever decoded them: what the progress line counts
// from when a shard begins (a part is renamed into place complete, so its presence is its end).
static int64_t regen_parts_done(const regen *g) {
    char path[CONFIG_STR + 96];
    int64_t n = 0;
    for (int64_t s = 0; s < g->n_shards; s++) {
        part_path(path, sizeof path, g, s);
        if (access(path, F_OK) == 0) n += (s + 1) * g->per < g->pi.n ? g->per : g->pi.n - s * g->per;
    }
    return n;
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
    if (rc == 1 && strcmp(have, g->settings) == 0 && n == cnt) return 1;
    char diff[1024];
    if (rc == 1 && strcmp(have, g->settings) == 0) snprintf(diff, sizeof diff, "%lld samples there, %lld here", (long long)n, (long long)cnt);
    else settings_diff(rc == 1 ? have : "", g->settings, diff, sizeof diff);
    return error_set("%s was made with other settings (%s). Remove %s to start over", path, diff, g->parts);
}

static int part_write(regen *g, shard_state *st, int64_t s) {
    char path[CONFIG_STR + 64];
    part_path(path, sizeof path, g, s);
    trainset_writer w;
    if (trainset_writer_open(&w, path, g->m.cfg.vocab, g->tokenizer) < 0) return -1;
    int32_t *ids = xmalloc((size_t)sample_cap(g) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)sample_cap(g));
    int rc = 0;
    for (int64_t j = 0; rc == 0 && j < st->cnt; j++) {
        if ((rc = prompts_read(&g->pi, st->first + j, g->cfg->regen_prompts)) < 0) break;
        int64_t P = g->pi.s.n, R = st->rlen[j];
        memcpy(ids, g->pi.s.ids, (size_t)P * sizeof(int32_t));
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

static void regen_progress_line(int64_t done, int64_t shards, int64_t tokens, double secs) {
    double tps = secs > 0 ? (double)tokens / secs : 0;
    log_info("regenerate: %lld prompts in %lld shard(s) by this rank, %lld tokens generated, %.1f tokens/s",
             (long long)done, (long long)shards, (long long)tokens, tps);
}

// Claim shard s for this teacher: 1 when it is ours (its claim file made here), 0 when another
// teacher has it, -1 on an error. Claims are files made with O_EXCL in this job's claims
// directory, so each shard is decoded once, by the first teacher free to take it.
static int regen_claim(const regen *g, int64_t s) {
    char path[CONFIG_STR + 96];
    snprintf(path, sizeof path, "%s/%05lld", g->claims, (long long)s);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return close(fd), 1;
    if (errno == EEXIST) return 0;
    return error_set("regenerate: cannot claim shard %lld (%s): %s", (long long)s, path, strerror(errno));
}

// This teacher's shards: each shard not claimed yet, claimed in order (a teacher that finishes
// takes the next one: the work balances itself). A shard's part depends only on its prompts and
// the settings, so who decodes it does not change the set.
static int regen_run_shards(regen *g, const world *w) {
    int64_t per = g->per, done = 0, shards = 0;
    shard_state st = {0};
    st.at = xmalloc(((size_t)per + 1) * sizeof(int64_t));
    st.reply = xmalloc((size_t)g->reply_cap * sizeof(int32_t)); // checked at setup
    st.rlen = xmalloc((size_t)per * sizeof(int32_t));
    st.finish = xmalloc((size_t)per);
    st.r = xmalloc((size_t)per * sizeof(rng));
    st.slot_of = xmalloc((size_t)g->max_seqs * sizeof(int64_t));
    st.cur = xmalloc((size_t)g->max_seqs * sizeof(int32_t));
    st.next = xmalloc((size_t)g->max_seqs * sizeof(int32_t));
    st.u = xmalloc((size_t)g->max_seqs * sizeof(double));
    st.pack = xmalloc((size_t)g->dec.rows * sizeof(int32_t));
    st.plen = xmalloc((size_t)g->max_seqs * sizeof(int));
    progress pg;
    progress_start(&pg, "regenerate (the job's prompts: parts on disk + this shard's)", g->pi.n);
    double t0 = time_now(), t_line = t0;
    int64_t skipped = 0, tokens0 = 0, said = -1; // said: prompts done at the last tokens/s line
    int rc = 0;
    for (int64_t s = 0; rc == 0 && s < g->n_shards; s++) {
        if (stop_relay_poll()) break; // a signal on any rank: the parts written are kept for the resume (stop.h)
        int mine = regen_claim(g, s);
        if (mine <= 0) {
            rc = mine;
            continue;
        }
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
            progress_update(&pg, regen_parts_done(g));
            continue;
        }
        if ((rc = prompts_check_shard(&g->pi, st.first, st.cnt, g->cfg->regen_prompts)) < 0) break;
        st.base = regen_parts_done(g);
        progress_update(&pg, st.base);
        st.at[0] = 0;
        for (int64_t j = 0; j < st.cnt; j++) st.at[j + 1] = st.at[j] + reply_need(g, st.first + j);
        memset(st.rlen, 0, (size_t)st.cnt * sizeof(int32_t));
        rc = regen_decode_shard(g, &st, &pg, &done);
        if (rc == 0) rc = part_write(g, &st, s);
        if (rc == 0) shards++;
        if (rc == 0) config_test_slow(g->cfg, w->rank); // testing: a slow teacher
        double now = time_now();
        if (rc == 0 && now - t_line >= REGEN_PROGRESS_S) {
            regen_progress_line(done, shards, st.tokens - tokens0, now - t0);
            t_line = now;
            said = done;
        }
    }
    if (rc == 0) {
        pg.done = g->pi.n; // every shard is claimed (some may still be decoding on other ranks)
        progress_end(&pg);
        if (said != done) regen_progress_line(done, shards, st.tokens - tokens0, time_now() - t0); // (not twice)
        if (skipped) log_info("regenerate: %lld shard(s) of this rank were done by an earlier run", (long long)skipped);
    }
    free(st.at);
    free(st.reply);
    free(st.rlen);
    free(st.finish);
    free(st.r);
    free(st.slot_of);
    free(st.cur);
    free(st.next);
    free(st.u);
    free(st.pack);
    free(st.plen);
    return rc;
}

// This job's claims directory, made by rank 0 (the claims of earlier, interrupted jobs removed:
// a shard they claimed but did not finish has no part and is claimed again), its name given to
// every rank. Collective.
static int regen_claims_setup(regen *g, const world *w) {
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

// ----------------------------------------------------------------------------- merge (rank 0)

static int regen_merge(regen *g) {
    const config *cfg = g->cfg;
    trainset_writer w;
    if (trainset_writer_open(&w, cfg->regen_out, g->m.cfg.vocab, g->tokenizer) < 0) return -1;
    uint8_t *finish = xmalloc((size_t)g->pi.n);
    int32_t *ids = xmalloc((size_t)sample_cap(g) * sizeof(int32_t));
    uint8_t *mask = xmalloc((size_t)sample_cap(g));
    int64_t at = 0, n_stop = 0;
    int rc = 0;
    for (int64_t s = 0; rc == 0 && s < g->n_shards; s++) {
        char path[CONFIG_STR + 64];
        part_path(path, sizeof path, g, s);
        // each part read is this run's (its settings and count checked again: another job's part
        // would not fit the buffers sized for these settings), each sample bounded before it is read
        int64_t cnt = (s + 1) * g->per < g->pi.n ? g->per : g->pi.n - s * g->per;
        int have = part_done(g, s, cnt);
        if (have <= 0) {
            rc = have < 0 ? -1 : error_set("%s: missing (every shard's part should be there)", path);
            break;
        }
        trainset ts;
        if ((rc = trainset_open(&ts, path, 0)) < 0) break;
        if (ts.n != ts.n_raw || at + ts.n_raw > g->pi.n) rc = error_set("%s: %lld samples, not what its shard holds", path, (long long)ts.n_raw);
        if (rc == 0) rc = trainset_read_u8(&ts, "/finish_reason", finish + at);
        for (int64_t i = 0; rc == 0 && i < ts.n; i++) {
            int64_t len = trainset_len(&ts, i);
            if (len > sample_cap(g))
                rc = error_set("%s: sample %lld has %lld tokens, more than a prompt and its reply can (%lld)", path,
                               (long long)i, (long long)len, (long long)sample_cap(g));
            else if ((rc = trainset_read(&ts, i, ids, mask)) == 0) rc = trainset_writer_append(&w, ids, mask, len);
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
    if (rc == 0) rc = trainset_writer_attr(&w, "target_weights_crc32c", NULL, (i64 = g->weights_crc, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "target_config_crc32c", NULL, (i64 = g->config_crc, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "prompts_crc32c", NULL, (i64 = g->pi.crc, &i64), -1, NULL);
    if (rc == 0) rc = trainset_writer_attr(&w, "prompts_bytes", NULL, (i64 = g->pi.bytes, &i64), -1, NULL);
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
        regen_output_tidy(cfg); // OUT.parts, and what killed merges left (OUT.tmp.PID)
    }
    free(held);
    free(finish);
    return rc;
}

// ----------------------------------------------------------------------------- the mode

int teacher_regenerate(const world *w, const config *cfg, backend *be, payload_link *links) {
    regen *g = xcalloc(1, sizeof *g);
    g->cfg = cfg;
    g->m.be = be;
    g->links = links;
    int rc = regen_setup(g, w);
    if (rc == 0 && !g->done_already && fs_mkdirs(g->parts) < 0) rc = error_prefix("regenerate.out");
    if (rc == 0 && w->rank == 0 && !g->done_already)
        log_info("regenerate: %lld prompts (longest %lld tokens) in %lld shard(s) over %d teacher(s) of %d rank(s); %d "
                 "slots of %d positions; max_new_tokens %d; %d stop id(s); %s", (long long)g->pi.n,
                 (long long)g->pi.longest, (long long)g->n_shards, w->groups, g->G, g->max_seqs, g->max_len, g->max_new, g->n_stop,
                 g->smp.temperature > 0 ? "sampling" : "greedy");
    if (rc == 0 && w->rank == 0 && g->G > 1 && !g->done_already)
        log_info("regenerate: the stages pass their rows %s", g->link.on_link ? "over NCCL, GPU to GPU" : "over MPI from host memory");
    // Every rank set up, or none runs (a later stage waiting on a first stage that failed would hang).
    int all_set_up = rc == 0;
    watchdog_allreduce(&all_set_up, 1, MPI_INT, MPI_MIN, "the other ranks to set up");
    int done_already = g->done_already; // rank 0's finding holds for all
    if (all_set_up) watchdog_bcast(&done_already, (int)sizeof done_already, 0, "rank 0 to check the earlier output");
    if (all_set_up && done_already) {
        if (w->rank == 0) log_info("regenerate: %s is already made with these settings: nothing to do", cfg->regen_out);
        if (w->rank == 0) regen_output_tidy(cfg); // an interrupted job's OUT.parts and temporaries
    } else if (all_set_up && regen_claims_setup(g, w) < 0) {
        rc = -1;
    }
    if (!all_set_up || done_already || rc) {
        // the ranks that failed report below; the others have nothing to run
    } else if (g->link.first) { // a group's first stage drives its decoder; the others follow its calls
        rc = regen_run_shards(g, w);
        regen_link_stop(&g->link);
    } else if (regen_link_follow(&g->link) < 0) {
        fatal("%s", error_msg()); // an internal failure on a later stage: the first stage waits for it
    }
    // The first failing rank says why; every rank then agrees to stop.
    int first = rc ? w->rank : w->size;
    watchdog_allreduce(&first, 1, MPI_INT, MPI_MIN, "the other ranks to finish their shards");
    int stopped = stop_relay_poll(); // a signal on any rank: no merge yet (stop.h, stop_relay.h)
    watchdog_allreduce(&stopped, 1, MPI_INT, MPI_MAX, "the other ranks to finish their shards");
    if (first < w->size) {
        if (w->rank == first) log_error("%s", error_msg());
        rc = -1;
    } else if (stopped && !done_already) {
        if (w->rank == 0)
            log_info("regenerate: stopped by %s: the complete parts are kept in %s, %s is written once every part is; "
                     "resume with the same command", stop_signal_name(stopped), g->parts, cfg->regen_out);
    } else if (w->rank == 0 && !done_already) {
        rc = regen_merge(g);
        if (rc) log_error("%s", error_msg());
    }
    regen_link_free(&g->link);
    target_decoder_free(&g->dec);
    prompts_free(&g->pi);
    target_free(&g->m);
    free(g);
    int any = rc ? 1 : 0;
    watchdog_allreduce(&any, 1, MPI_INT, MPI_MAX, "rank 0 to merge the parts");
    return any ? -1 : 0;
}
