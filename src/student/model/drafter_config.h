// drafter_config.h: the drafter's shape, its kind and its DFlash settings (SPEC §3), read from and
// written to the config.json that the z-lab `dflash` package loads (a Qwen3Config with a
// "dflash_config" object: target_layer_ids, mask_token_id, block_size; plus num_target_layers,
// layer_types, sliding_window; a kind's own keys through its config_parse / config_write).
#pragma once
#include <stdint.h>

#include "student/model/drafter_kind.h"

#define DRAFTER_MAX_LAYERS 64
#define DRAFTER_MAX_FEAT 64

typedef struct drafter_config {
    const drafter_kind *kind;   // the kind (drafter.kind; from "architectures" when parsed)
    int64_t n_layers;           // num_hidden_layers
    int64_t hidden;             // hidden_size H (= the target's)
    int64_t intermediate;       // intermediate_size
    int64_t n_heads, n_kv_heads, head_dim;
    int64_t vocab;              // vocab_size (= the target's)
    double rms_eps;             // rms_norm_eps
    double rope_theta;
    int64_t max_positions;      // max_position_embeddings
    int layer_sliding[DRAFTER_MAX_LAYERS]; // layer_types: 1 = "sliding_attention", 0 = "full_attention"
    int64_t sliding_window;     // W for sliding layers; 0 = no window (no layer slides, or the config
                                // gives sliding layers no window: use_sliding_window false / window null)
    int sliding_causal;         // block mask of sliding layers: 1 causal (slots <= k; the default), 0
                                // bidirectional ("is_causal": false). Full layers are always bidirectional.
    int64_t block_size;         // B
    int64_t mask_token_id;
    int n_feat;                 // len(target_layer_ids)
    int64_t target_layer_ids[DRAFTER_MAX_FEAT];
    int64_t num_target_layers;  // 0 when the config does not say
    // DFlash2 (drafter_dflash2.c; 0 for other kinds): dflash_config conv_kernel_size K,
    // conv_group_size G (channels per group; H % G == 0), selector_top_k, selector_rank.
    int64_t conv_kernel, conv_group, selector_top_k, selector_rank;
    char torch_dtype[16];       // "torch_dtype"/"dtype" as read ("" when absent); drafter_config_to_json writes it, or
                                // "float32" when empty: set it to "bfloat16" before a bf16 export
} drafter_config;

// drafter_config_parse / _load: -1 with error_set naming the file and the field. Keys and defaults
// are those of transformers' Qwen3Config and the dflash package (see drafter_config.c). Checks:
// heads divide, head_dim even, layer_types length = num_hidden_layers, window >= block_size when a
// sliding layer has one, block_size >= 2, mask_token_id inside the vocabulary, target_layer_ids
// present (or derivable from num_target_layers, as the package does), features the package would
// apply and we do not (biases, logit scaling, non-default RoPE) refused. c->kind: the kind
// whose architecture "architectures" names (drafter_kind_default() when absent).
int drafter_config_parse(drafter_config *c, const char *json, const char *source);
int drafter_config_load(drafter_config *c, const char *path);
// drafter_config_to_json: config.json for export (architectures and model_type of c->kind, e.g.
// ["DFlashDraftModel"] and "qwen3", the Qwen3 keys, dflash_config, the kind's own keys). Caller frees.
char *drafter_config_to_json(const drafter_config *c);
