// regen_job.h: one `--mode regenerate` job's state, which its files share (regenerate.h): the
// prompts and stop ids (regen_prompts.h), the target and its decoder, the settings that name the
// inputs (regen_identity.h), the shards (regen_shards.h) and their parts (regen_output.h); and a
// shard's replies while it is decoded (regenerate.c) and written (regen_output.h).
#pragma once
#include <stdint.h>

#include "common/comm/payload_link.h"
#include "common/core/config.h"
#include "common/core/rng.h"
#include "teacher/decode_sample.h"
#include "teacher/regen_link.h"
#include "teacher/regen_prompts.h"
#include "teacher/target.h"
#include "teacher/target_decode.h"

#define REGEN_SETTINGS_MAX 4096 // a settings text (regen_identity.h), with its end

enum { FINISH_STOP = 0, FINISH_LENGTH = 1 };

typedef struct regen {
    const config *cfg;
    target_model target;
    target_decoder decoder;
    regen_link link;  // the decoder's calls along the stages of a teacher group
    payload_link *links; // the job's payload link (the stages' messages)
    int group_size;   // world.teacher_group_size
    prompt_index prompts;
    regen_stops stops;
    int max_len, max_seqs, max_new;
    decode_sampling sampling;
    char settings[REGEN_SETTINGS_MAX]; // every setting that changes the output, as text (parts record it)
    char parts[CONFIG_STR + 16];
    char claims[CONFIG_STR + 64]; // this job's claim files: OUT.parts/claims-NONCE/SSSSS
    char tokenizer[CONFIG_STR + 64];
    uint32_t weights_crc, config_crc; // the target's identity by content
    int64_t n_shards, shard_prompts; // regenerate.shard_prompts: prompts per shard
    int64_t reply_cap;   // reply tokens a shard's buffer holds: the most any shard can need
    int done_already;    // regenerate.out exists, made with these settings
} regen;

// A shard's replies: prompt j of the shard (0 .. cnt-1) holds reply[at[j] ..], rlen[j] tokens (at
// most at[j + 1] - at[j]: what it can need, regen_reply_need).
typedef struct {
    int64_t first, cnt;
    int64_t base; // the job's prompts whose parts were on disk when this shard began (progress)
    int64_t *at;       // [shard_prompts + 1]
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

// The reply tokens prompt i can need: max_new_tokens, or fewer when its cache fills first.
static inline int64_t regen_reply_need(const regen *g, int64_t i) {
    int64_t room = (int64_t)g->max_len - g->prompts.len[i] + 1;
    return room < g->max_new ? room : g->max_new;
}

// The longest sample a set can hold: a prompt and its reply, at most max_len + 1 tokens.
static inline int64_t regen_sample_cap(const regen *g) {
    int64_t a = g->prompts.longest + g->max_new, b = (int64_t)g->max_len + 1;
    return a < b ? a : b;
}
