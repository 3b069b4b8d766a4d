// target_config.h: a target model's shape, read from a Hugging Face config.json (SPEC §2).
//
// Supported: "Qwen3ForCausalLM" (per-head q_norm/k_norm before RoPE) and "LlamaForCausalLM"
// (rope_scaling.rope_type "llama3" or none). Anything else — another architecture, attention or MLP
// biases, a rope_scaling type we do not implement, sliding-window attention in use — is refused with
// a one-line error naming the field and its value, as is a key given twice or a NUL (\u0000) in a string.
#pragma once
#include <stdint.h>

typedef enum { ARCH_QWEN3 = 0, ARCH_LLAMA = 1 } target_arch;

typedef struct {
    target_arch arch;
    char arch_name[64];       // "Qwen3ForCausalLM"
    int64_t n_layers;         // num_hidden_layers
    int64_t hidden;           // hidden_size H
    int64_t intermediate;     // intermediate_size I
    int64_t n_heads;          // num_attention_heads
    int64_t n_kv_heads;       // num_key_value_heads (default n_heads)
    int64_t head_dim;         // head_dim (default hidden / n_heads)
    int64_t vocab;            // vocab_size V
    int64_t max_positions;    // max_position_embeddings
    double rms_eps;           // rms_norm_eps
    double rope_theta;        // rope_theta (default 10000)
    int tie_embeddings;       // tie_word_embeddings (default: Qwen3 false, Llama false); true: the embedding is the
                              // output head, an lm_head.weight in the files is not used (target_load warns, as transformers ties)
    // rope_scaling (llama3); rope_llama3 = 0 when absent
    int rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_positions;
    char torch_dtype[16];     // "bfloat16" | "float16" | "float32" (informational)
} target_config;

// target_config_load: dir/config.json. -1 with error_set naming the file and the field.
int target_config_load(target_config *c, const char *dir);
// target_config_parse: the same from JSON text (source names it in messages).
int target_config_parse(target_config *c, const char *json, const char *source);
// target_config_to_json: a config.json that transformers loads as the named architecture
// (used by dflash_tool make-target). Caller frees.
char *target_config_to_json(const target_config *c);
// target_rope_inv_freq: inv_freq[head_dim/2] as transformers computes it, llama3 scaling included.
void target_rope_inv_freq(const target_config *c, float *inv_freq);
// target_default_layer_ids: SPEC §2 default: round(1 + i*(L-4)/(n-1)), i < n (n = 1: L/2), Python's
// round-half-even. -1 (error_set) when n < 1 or the rule leaves [0, L) (targets of 1-2 layers); a
// short target (L < n + 3) may get repeated ids, as z-lab's build_target_layer_ids gives them.
int target_default_layer_ids(int64_t n_layers, int n, int64_t *ids);
