// featfile.h: the offline feature file of SPEC §7, written by teacher ranks (--mode dump-features).
//
// A feature file is a training set (trainset.h: /tokens, /offsets, /loss_mask and their attributes)
// plus, per token, what the teacher computed:
//   /features  uint16 [N, n_feat*H]  bf16 bit patterns of the hidden states after target_layer_ids
//   /topk_idx  int32  [N, k]         top-k vocabulary ids, logits descending
//   /topk_val  fp32   [N, k]         their logits
//   /lse       fp32   [N]            log-sum-exp of the full-vocabulary logits
//   /crc32c    uint32 [n, 6]         per sample, the CRC32C of its rows of /tokens, /loss_mask,
//                                    /features, /topk_idx, /topk_val, /lse (as little-endian bytes),
//                                    verified by every read (featreader.h)
// and root attributes target (model directory), target_architecture, target_layer_ids (int64
// array), hidden_size, topk, feature_dtype = "bfloat16", and the target by content (identity.h):
// target_config_crc32c, target_weights_crc32c (int64, each when known; a shard written before they
// were recorded has neither, and is not compared on them). Written like a training set: to a temporary
// name, renamed when complete, so a file under its final name is always whole.
#pragma once
#include <stdint.h>

#include "common/data/trainset.h"

typedef struct {
    int64_t vocab_size;
    char tokenizer[256];
    char target[512];
    char target_arch[64];
    int n_feat;
    int64_t layer_ids[64];
    int64_t hidden;
    int topk;
    int target_by_content;      // 1: the two below are set (identity.h; -1 each: unknown), else not recorded
    int64_t target_config_crc;  // CRC32C of the target's config.json
    int64_t target_weights_crc; // its weights' fingerprint (identity_weights_crc)
} featfile_info;

typedef struct {
    trainset_writer ts;
    featfile_info info;
    int64_t d_features, d_topk_idx, d_topk_val, d_lse, d_crc; // hid_t
    int64_t rows;                                      // tokens written to the per-token datasets
    int64_t samples;                                   // samples written (rows of /crc32c)
} featfile_writer;

// The parts of a sample /crc32c covers, in its column order.
enum { FEATFILE_TOKENS, FEATFILE_MASK, FEATFILE_FEATURES, FEATFILE_TOPK_IDX, FEATFILE_TOPK_VAL, FEATFILE_LSE, FEATFILE_N_PARTS };
// featfile_sample_crc: one sample's /crc32c row into crc (returned); a NULL part gets 0 (mask NULL:
// all ones). features [n, D], topk_* [n, k].
uint32_t *featfile_sample_crc(const int32_t *tokens, const uint8_t *mask, int64_t n, const uint16_t *features, int64_t D,
                               const int32_t *topk_idx, const float *topk_val, int64_t k, const float *lse,
                               uint32_t crc[FEATFILE_N_PARTS]);
// featfile_writer_open: -1 with error_set (no file left) on failure.
int featfile_writer_open(featfile_writer *w, const char *path, const featfile_info *info);
// featfile_writer_append: one sample of n tokens with its teacher outputs (host arrays):
// features [n, n_feat*H] bf16 bits, topk_idx/topk_val [n, k], lse [n].
int featfile_writer_append(featfile_writer *w, const int32_t *tokens, const uint8_t *mask, int64_t n,
                           const uint16_t *features, const int32_t *topk_idx, const float *topk_val, const float *lse);
int featfile_writer_close(featfile_writer *w);
void featfile_writer_abort(featfile_writer *w);

// featfile_check: does path hold a complete feature file made with these settings and n_samples
// samples of these lengths and tokens (tokens_crc: CRC32C of their int32 tokens in order; the run's
// samples the shard covers; identity.h compares them, so a shard of another training set is
// refused; so is one made from another model at target.path, config.json or weights, when both
// sides know it)? 1 yes, 0 no such file, -1 (error_set naming both values) a file made differently.
int featfile_check(const char *path, const featfile_info *info, const int64_t *lengths, int64_t n_samples,
                   uint32_t tokens_crc);
