// regen_prompts.c: regenerate's prompts file indexed and read back checked, and its stop ids (see
// regen_prompts.h).
#include "teacher/regen_prompts.h"
#include "common/core/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/json_util.h"

int regen_prompts_index(prompt_index *pi, const char *path, int64_t vocab) {
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
// regen_prompts_index; one changed since is refused, naming the line).
int regen_prompts_read(prompt_index *pi, int64_t i, const char *path) {
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
int regen_prompts_check_shard(prompt_index *pi, int64_t first, int64_t cnt, const char *path) {
    for (int64_t i = first; i < first + cnt; i++)
        if (regen_prompts_read(pi, i, path) < 0) return -1;
    return 0;
}

void regen_prompts_free(prompt_index *pi) {
    if (pi->f) fclose(pi->f);
    void *arrays[] = {pi->at, pi->line_no, pi->len, pi->line_bytes, pi->line_crc, pi->line}; // the index, the line buffer
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
    jsonl_sample_free(&pi->s);
    memset(pi, 0, sizeof *pi);
}

static int stop_add(regen_stops *st, int64_t vocab, int64_t id, const char *from) {
    if (id < 0 || id >= vocab)
        return error_set("%s: stop id %lld is outside the target vocabulary [0, %lld)", from, (long long)id,
                         (long long)vocab);
    for (int i = 0; i < st->n; i++)
        if (st->id[i] == id) return 0;
    if (st->n == REGEN_MAX_STOP) return error_set("%s: more than %d stop ids", from, REGEN_MAX_STOP);
    int i = st->n++; // kept sorted
    while (i > 0 && st->id[i - 1] > id) st->id[i] = st->id[i - 1], i--;
    st->id[i] = id;
    return 0;
}

// One eos_token_id value: an integer in the target's vocabulary (1.5 or 1e20 are not ids).
static int stop_add_json(regen_stops *st, int64_t vocab, const cJSON *v, const char *path) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return error_set("%s: eos_token_id holds %s, not a token id", path,
                         cJSON_IsNumber(v) ? "a number with a fraction" : "a value that is not a number");
    if (v->valuedouble < 0 || v->valuedouble >= (double)vocab)
        return error_set("%s: eos_token_id %.17g is outside the target vocabulary [0, %lld)", path, v->valuedouble,
                         (long long)vocab);
    return stop_add(st, vocab, (int64_t)v->valuedouble, path);
}

// The stop ids: eos_token_id of TARGET/generation_config.json (one id or a list; the file is
// optional) and regenerate.stop_ids. Read as transformers reads it (Python's json): a key given
// twice counts with its last value.
int regen_stops_load(regen_stops *st, const config *cfg, int64_t vocab) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/generation_config.json", cfg->target_path);
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
            rc = stop_add_json(st, vocab, eos, path);
        } else if (cJSON_IsArray(eos)) {
            cJSON_ArrayForEach(v, eos) if ((rc = stop_add_json(st, vocab, v, path)) < 0) break;
        } else if (eos && !cJSON_IsNull(eos)) {
            rc = error_set("%s: eos_token_id is neither a token id nor a list of them", path);
        }
        cJSON_Delete(root);
        if (rc < 0) return -1;
    }
    for (int64_t i = 0; i < cfg->regen_stop_ids.n; i++)
        if (stop_add(st, vocab, cfg->regen_stop_ids.v[i], "regenerate.stop_ids") < 0) return -1;
    return 0;
}

int regen_stops_has(const regen_stops *st, int32_t t) {
    for (int i = 0; i < st->n; i++)
        if (st->id[i] == t) return 1;
    return 0;
}

// Settings: the keys of --mode regenerate's prompts and stop ids (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key regen_prompts_keys[] = {
    {"regenerate.prompts", CFG_STRING, CONFIG_F(regen_prompts), "", "--mode regenerate: the prompts, JSONL with one {\"input_ids\": [...]} per line (already templated: tools/prepare_data.py --prompts-only makes it from chat messages)", NULL, CONFIG_NOLIM},
    {"regenerate.stop_ids", CFG_INT_LIST, CONFIG_F(regen_stop_ids), "", "--mode regenerate: token ids that end a reply, besides eos_token_id of the target's generation_config.json (the stop token is the reply's last token, loss 1)", NULL, 0, 2147483647},
};
const config_key_set regen_prompts_settings = CONFIG_KEY_SET(regen_prompts_keys, NULL);
