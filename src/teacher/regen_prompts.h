// regen_prompts.h: regenerate's inputs read from disk (regenerate.h): the prompts file indexed once,
// each prompt read back and checked against the index, and the stop ids (the target's
// generation_config.json and regenerate.stop_ids).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/core/config.h"
#include "common/data/jsonl_sample.h"

#define REGEN_MAX_STOP 64

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

// regen_prompts_index: the prompts file at path indexed into pi (every id checked against vocab);
// -1 with error_set naming regenerate.prompts, the file and the line.
int regen_prompts_index(prompt_index *pi, const char *path, int64_t vocab);
// regen_prompts_read: prompt i's ids into pi->s, its line read again and checked against the
// index's CRC; -1 with error_set naming the line when the file changed since it was indexed.
int regen_prompts_read(prompt_index *pi, int64_t i, const char *path);
// regen_prompts_check_shard: regen_prompts_read of the prompts [first, first + cnt).
int regen_prompts_check_shard(prompt_index *pi, int64_t first, int64_t cnt, const char *path);
void regen_prompts_free(prompt_index *pi);

// The stop ids, sorted, each once.
typedef struct {
    int64_t id[REGEN_MAX_STOP];
    int n;
} regen_stops;

// regen_stops_load: eos_token_id of cfg->target_path's generation_config.json (one id or a list;
// the file is optional) and regenerate.stop_ids, each in [0, vocab); -1 with error_set naming the
// file or key and the value.
int regen_stops_load(regen_stops *st, const config *cfg, int64_t vocab);
// regen_stops_has: 1 when t is a stop id.
int regen_stops_has(const regen_stops *st, int32_t t);
