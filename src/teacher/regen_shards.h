// regen_shards.h: how regenerate's prompts are cut into shards and how the teachers share them
// (regenerate.h, "shards"): the shards' size and the reply buffer the largest needs, and the claims
// (one file per shard, made with O_EXCL in this job's claims directory, so each shard is decoded
// once, by the first teacher free to take it).
#pragma once
#include <stdint.h>

#include "common/comm/world.h"
#include "teacher/regen_job.h"

// regen_shards_plan: g->per (regenerate.shard_prompts, at most the prompts), g->n_shards and
// g->reply_cap (the reply tokens the most demanding shard can need: each prompt at most
// max_new_tokens, fewer when its cache fills first); -1 with error_set naming the keys when that
// buffer passes half of this machine's memory. Needs g->pi, g->max_len and g->max_new.
int regen_shards_plan(regen *g);

// regen_shards_claims_dir: g->claims, this job's claims directory, made by rank 0 (the claims of
// earlier, interrupted jobs removed: a shard they claimed but did not finish has no part and is
// claimed again), its name given to every rank. Collective (timed, watchdog.h); -1 with error_set on
// every rank when rank 0 could not make it.
int regen_shards_claims_dir(regen *g, const world *w);

// regen_shards_claim: claim shard s for this teacher: 1 when it is ours (its claim file made here),
// 0 when another teacher has it, -1 with error_set on an error.
int regen_shards_claim(const regen *g, int64_t s);
