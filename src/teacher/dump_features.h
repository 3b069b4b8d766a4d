// dump_features.h: `dflash_rank --mode dump-features`: every rank is a teacher; together they write
// the offline feature file (featfile.h) of the training set data.path into features.dir.
//
// The usable samples are cut into shards of features.shard_samples consecutive samples, shard s
// going to rank s mod world size. Each shard is one file, features-SSSSS-of-NNNNN.h5, written under a
// temporary name and renamed when complete; a rerun skips every shard already there (after checking
// it was made with the same settings), so an interrupted dump resumes where it stopped. Rank 0 then
// writes features.json, the index of the shards. The features are what target_forward gives: HF
// hidden_states[id + 1], the last layer's after the final norm (target.h); features.json records it
// as "feature_convention": "hidden_states[id+1]". Samples are packed into batches of up to
// teacher.max_tokens tokens (attention never crosses a sample), each batch one target forward.
#pragma once

#include "common/backend/backend.h"
#include "common/comm/payload_link.h"
#include "common/comm/world.h"
#include "common/core/config.h"

// teacher_dump_features: a collective call (every rank); 0 on success, -1 when any rank failed
// (a rank's own failure is logged by that rank).
// With world.teacher_group_size = G > 1 each teacher is a group of G ranks (pipeline stages,
// teacher_group.h): shard s goes to group s mod (ranks / G), whose first stage reads the samples and
// whose last writes the file; links (payload_link.h) carry the activations from stage to stage.
int teacher_dump_features(const world *w, const config *cfg, backend *be, payload_link *links);
