// featreader.h: reading the offline feature files (featfile.h) for student-only training.
//
// Opens the index (features.json) written by dump-features and its shards; sample i of the feature
// set is sample i of the training set it was dumped from (the usable samples, in order), so a batch
// plan built on one applies to the other. When the features were dumped from several training sets
// (data.sets), sample i is sample i of their mix (dataset.h), and the index records each set's
// path, sample count and weight ("sets"; an index without it is one set of weight 1). Reading a
// sample gives its tokens, loss mask, features (bf16 bits), teacher top-k and LSE.
#pragma once
#include <stdint.h>

#include "common/data/identity.h"

typedef struct featreader featreader;

// featreader_open: dir/features.json and every shard; -1 with error_set naming the file and the
// problem (missing shard, shard of another size, datasets missing or of the wrong shape).
int featreader_open(featreader **r, const char *dir);
void featreader_close(featreader *r);
int64_t featreader_samples(const featreader *r);
int64_t featreader_len(const featreader *r, int64_t i);
int featreader_topk(const featreader *r);       // k
int featreader_feat_dim(const featreader *r);   // n_feat * H
int featreader_vocab(const featreader *r);      // vocab_size attribute
// featreader_layer_ids: the target layers of the feature columns (n of them).
const int64_t *featreader_layer_ids(const featreader *r, int *n);
// featreader_post_norm_last: features.json declares the convention hidden_states[id+1] (the last
// layer's features after the final norm, SPEC §2); 0 for directories written before it.
int featreader_post_norm_last(const featreader *r);
// featreader_min_loss_tokens: the data.min_loss_tokens the samples were chosen with at dump time
// (features.json "min_loss_tokens"), or -1 when the index records none (dumps before 2026-12).
int64_t featreader_min_loss_tokens(const featreader *r);
// featreader_identity: the identity the index records (identity.h): its "identity" object, or for an
// index written before it the target architecture, hidden size, layer ids, convention and sample count.
const run_identity *featreader_identity(const featreader *r);
// featreader_verified: 1 when the index is sealed and every shard carries per-sample checksums
// (featfile.h), which featreader_read then verifies; 0 for a dump written before checksums (read
// with one warning, unverified).
int featreader_verified(const featreader *r);
// featreader_n_sets: training sets the features were dumped from (>= 1).
int featreader_n_sets(const featreader *r);
// featreader_set: samples of set i (the next ones after set i-1's); its weight at dump time and
// its path (as the dump's configuration wrote it; "" when unknown) when those pointers are given.
int64_t featreader_set(const featreader *r, int i, double *weight, const char **path);
// featreader_set_heldout: set i's recorded held-out split (its /heldout at dump time, as usable
// indices of the set, increasing; *n of them), or NULL with *n = -1 when the set records none.
const int64_t *featreader_set_heldout(const featreader *r, int i, int64_t *n);
// featreader_read: sample i (its checksums verified: a mismatch is an error naming the shard, the
// sample, the dataset and both CRCs) into the caller's arrays (each sized for featreader_len(i) rows; any
// may be NULL): tokens [n], mask [n], features [n, D] bf16 bits, topk_idx/val [n, k], lse [n].
int featreader_read(featreader *r, int64_t i, int32_t *tokens, uint8_t *mask, uint16_t *features, int32_t *topk_idx,
                    float *topk_val, float *lse);
