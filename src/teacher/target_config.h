// target_config.h: a target model's shape, read from a Hugging Face config.json (SPEC §2).
//
// Supported: "Qwen3ForCausalLM" (per-head q_norm/k_norm before RoPE), "LlamaForCausalLM"
// (rope_scaling.rope_type "llama3" or none), and the Qwen3.5 / Qwen3.6 hybrid family (SPEC §2.1):
// "Qwen3_5ForConditionalGeneration" (model_type qwen3_5, the text model's keys under text_config,
// tensors under model.language_model.) and the text-only "Qwen3_5ForCausalLM" (qwen3_5_text); the
// mixture-of-experts targets (SPEC §2.2) "Qwen3MoeForCausalLM" (qwen3_moe) and Qwen3.5/3.6-MoE,
// "Qwen3_5MoeForConditionalGeneration" (qwen3_5_moe) and "Qwen3_5MoeForCausalLM" (qwen3_5_moe_text). Anything else — another architecture, attention or MLP
// biases, a rope_scaling type we do not implement, sliding-window attention in use — is refused with
// a one-line error naming the field and its value, as is a key given twice or a NUL (\u0000) in a string.
#pragma once
#include <stdint.h>

#include "teacher/target_quant.h"

// The attention family a config reports (tests and make-target read it; the teacher's code reads the
// table, target_arch.h).
typedef enum {
    ARCH_QWEN3 = 0, ARCH_LLAMA = 1, ARCH_QWEN3_5 = 2, ARCH_QWEN2 = 3, ARCH_MISTRAL = 4, ARCH_GEMMA3 = 5,
    ARCH_GPT_OSS = 6, ARCH_DEEPSEEK_V3 = 7, ARCH_GLM4_MOE = 8, ARCH_GEMMA4 = 9
} target_family;

struct target_arch;
struct cJSON;

#define TARGET_MAX_LAYERS 1024
// the most experts an MoE target may have (the router and the experts' kernels index them in int;
// published models have up to 512): refused at parse, before any size is computed from it
#define TARGET_MAX_EXPERTS 65536
// Bounds on every other dimension, checked at parse before any size is computed from it (issue 27):
// far above any published model (hidden 16384-25600, widths up to ~53248, vocabularies up to
// ~262144, 128 heads of up to 512), low enough that every product the planners and loaders form
// (tokens x width x top-k, tokens x vocabulary, ...) stays inside 64 bits. The whole model is
// bounded too: TARGET_MAX_PARAMS parameters, counted with checked arithmetic (target_config_params).
#define TARGET_MAX_HIDDEN (1 << 17)
#define TARGET_MAX_WIDTH (1 << 20) // intermediate_size, moe_intermediate_size, shared_expert_intermediate_size
#define TARGET_MAX_HEAD 4096       // heads (query, kv, linear) and head sizes
#define TARGET_MAX_VOCAB (1 << 24)
#define TARGET_MAX_PARAMS (1LL << 45) // 35 T parameters

typedef struct target_config {
    const struct target_arch *table; // the architecture's table (target_arch.h), set by target_config_parse
    target_family arch;
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
    int64_t rope_dim;         // dims of a head under RoPE: head_dim * partial_rotary_factor (head_dim unless Qwen3.5)
    double partial_rotary;    // partial_rotary_factor (1 unless Qwen3.5; its default is 0.25)
    // Qwen3.5 / Qwen3.6 hybrid (ARCH_QWEN3_5); zero for the other architectures
    int multimodal;           // Qwen3_5ForConditionalGeneration: text tensors under "model.language_model."
    int norm_zero_centred;    // every RMSNorm of the model is x * rsqrt(...) * (1 + w)
    int gated_attention;      // q_proj gives [query | gate] per head; output * sigmoid(gate)
    int qk_norm;              // per-head RMSNorm of q and k before RoPE (Qwen3, Qwen3-MoE, Qwen3.5)
    int64_t lin_k_heads;      // linear_num_key_heads
    int64_t lin_v_heads;      // linear_num_value_heads (a multiple of lin_k_heads)
    int64_t lin_k_dim;        // linear_key_head_dim
    int64_t lin_v_dim;        // linear_value_head_dim
    int64_t lin_conv_kernel;  // linear_conv_kernel_dim
    int64_t full_interval;    // full_attention_interval when layer_types was derived from it (0: given)
    uint8_t layer_linear[TARGET_MAX_LAYERS]; // 1: layer i is linear_attention (Gated DeltaNet), 0: full attention
    // Mixture of experts (SPEC §2.2): Qwen3MoeForCausalLM (arch ARCH_QWEN3, moe 1) and Qwen3.5/3.6-MoE
    // (arch ARCH_QWEN3_5, moe 1, a shared expert); zero for dense targets
    int moe;
    int64_t n_experts;        // num_experts E
    int64_t n_experts_tok;    // num_experts_per_tok k
    int64_t moe_intermediate; // moe_intermediate_size: each expert's SwiGLU width
    int64_t shared_intermediate; // shared_expert_intermediate_size (0: no shared expert)
    int norm_topk_prob;       // renormalise the top-k router weights (always for Qwen3.5-MoE)
    int64_t sparse_step;      // decoder_sparse_step (Qwen3-MoE; 1 for Qwen3.5-MoE)
    uint8_t layer_sparse[TARGET_MAX_LAYERS]; // 1: layer i's MLP is the MoE block, 0: the dense SwiGLU MLP
    // The attention and frame variants of the families beyond Qwen / Llama (issue 48); zero: absent.
    // The architecture's parse sets them; the shared parse refuses the keys no architecture took
    // (attention_bias true, a hidden_act other than silu, use_sliding_window true).
    int qkv_bias;             // q/k/v_proj have biases (Qwen2, GLM-4.5 attention_bias, gpt-oss)
    int o_bias;               // o_proj has a bias (gpt-oss)
    int attn_sinks;           // self_attn.sinks [nq]: a per-head logit in the softmax's denominator (gpt-oss)
    int mlp_act;              // TARGET_ACT_*: the dense MLP's activation (0: not set by the architecture: silu)
    int sandwich_norms;       // Gemma: post_attention_layernorm on the mixer's output, pre_/post_feedforward_layernorm
                              // around the MLP (the pre-MLP norm is then pre_feedforward_layernorm)
    double embed_scale;       // the embedding is multiplied by this (Gemma: sqrt(hidden_size)); 0: none
    double final_softcap;     // logits = cap * tanh(logits / cap) before the top-k and LSE (Gemma); 0: none
    double attn_scale;        // the attention's q.k scale; 0: head_dim^-0.5
    double rope_theta_local;  // the sliding layers' RoPE base (Gemma's rope_local_base_freq); 0: rope_theta
    int rope_linear;          // rope_scaling type linear: inv_freq / rope_factor (Gemma 3's global layers)
    // rope_scaling type yarn (gpt-oss, DeepSeek-V3): rope_factor, rope_original_max_positions and these
    int rope_yarn, rope_truncate;
    double rope_beta_fast, rope_beta_slow, rope_mscale, rope_mscale_all_dim;
    double rope_attention_factor; // YaRN's cos/sin factor (1 otherwise: set by target_config_parse)
    // Gemma 4: the full layers' own head size and kv heads (per_layer_config / global_head_dim),
    // values from k_proj on those layers, v normed without a weight, a saved scalar per layer
    int attn_k_eq_v;          // full (non-sliding) layers have no v_proj: v is k_proj's output (before k_norm)
    int v_norm;               // v gets an RMSNorm without a weight (per head)
    int layer_scalar;         // layers.N.layer_scalar [1]: the layer's output (residual included) times it
    int rope_proportional;    // rope_type proportional: the first int(factor * rope_dim / 2) frequencies of
    double rope_proportion;   // base^(-2i / rope_dim), the rest 0 (RoPE over the whole head), all / rope_factor
    int32_t layer_hd[TARGET_MAX_LAYERS];  // > 0: layer i's head_dim (else head_dim)
    int32_t layer_nkv[TARGET_MAX_LAYERS]; // > 0: layer i's kv heads (else n_kv_heads)
    double swiglu_alpha, swiglu_limit; // gpt-oss's clamped SwiGLU (ops_swiglu_clamped): 1.702 and 7 as published
    int64_t mtp_layers;       // num_nextn_predict_layers: multi-token-prediction layers the files hold after the
                              // last decoder layer (DeepSeek-V3, GLM-4.5), which the teacher does not read
    char tensor_prefix[32];   // target_tensor_prefix's answer when the files say other than the default
    char head_name[40];       // target_head_name's likewise
    int32_t layer_window[TARGET_MAX_LAYERS]; // > 0: layer i's attention is a sliding window of that many keys
    // DeepSeek-V3 / Kimi-K2 and GLM-4.5 (target_moe_sigmoid.c, target_deepseek_v3.c); zero otherwise.
    // The sigmoid router: the experts in n_group groups, each token keeps the topk_group best groups;
    // the routed weights times routed_scaling_factor; shared_intermediate = n_shared_experts * moe_intermediate
    int64_t n_group, topk_group;
    double routed_scaling;
    // multi-head latent attention (DeepSeek-V3): q_lora_rank (0: q_proj), kv_lora_rank, qk_nope_head_dim,
    // v_head_dim; head_dim = qk_nope + qk_rope (rope_dim = qk_rope_head_dim), n_kv_heads = n_heads
    int64_t q_lora, kv_lora, qk_nope, v_head;
    int rope_interleave;      // RoPE on the pairs (2i, 2i+1) of the rotary dims (rope_interleave)
    target_quant quant;       // quantization_config: how quantised weights are stored (target_quant.h)
} target_config;

// The dense MLP's activation: down(act(gate(x)) * up(x)).
enum { TARGET_ACT_SILU = 1, TARGET_ACT_GELU_TANH = 2 };

// target_layer_head_dim / target_layer_kv_heads: layer l's attention shape (Gemma 4's full layers
// have their own); target_attn_max: the largest q width (heads x head_dim) and kv width over the layers.
static inline int64_t target_layer_head_dim(const target_config *c, int64_t l) {
    return c->layer_hd[l] > 0 ? c->layer_hd[l] : c->head_dim;
}
static inline int64_t target_layer_kv_heads(const target_config *c, int64_t l) {
    return c->layer_nkv[l] > 0 ? c->layer_nkv[l] : c->n_kv_heads;
}
static inline void target_attn_max(const target_config *c, int64_t *q_width, int64_t *kv_width) {
    *q_width = c->n_heads * c->head_dim, *kv_width = c->n_kv_heads * c->head_dim;
    for (int64_t l = 0; l < c->n_layers; l++) {
        int64_t hd = target_layer_head_dim(c, l), kv = target_layer_kv_heads(c, l) * hd;
        if (c->n_heads * hd > *q_width) *q_width = c->n_heads * hd;
        if (kv > *kv_width) *kv_width = kv;
    }
}

// target_layer_is_sparse: layer l's MLP is the mixture of experts.
static inline int target_layer_is_sparse(const target_config *c, int64_t l) { return c->moe && c->layer_sparse[l]; }

// target_layer_is_linear: layer l is a Gated DeltaNet layer.
static inline int target_layer_is_linear(const target_config *c, int64_t l) { return c->layer_linear[l]; }
// target_tensor_prefix: where the text model's tensors are: "model.", or for a multimodal wrapper
// "model.language_model." (transformers 5's layout, Qwen3.5) or "language_model.model." (the llava
// layout Gemma 3 and Mistral 3 checkpoints are published and saved in), as target_names_resolve
// found in the files.
static inline const char *target_tensor_prefix(const target_config *c) {
    return c->tensor_prefix[0] ? c->tensor_prefix : c->multimodal ? "model.language_model." : "model.";
}
// target_head_name: the untied output head's tensor: "lm_head.weight", or
// "language_model.lm_head.weight" in the llava layout.
static inline const char *target_head_name(const target_config *c) {
    return c->head_name[0] ? c->head_name : "lm_head.weight";
}
struct st_dir;
// target_names_resolve: set c's tensor prefix and head name from the checkpoint's files d (a
// multimodal wrapper in the llava layout); the defaults stay when d holds the usual names.
void target_names_resolve(target_config *c, const struct st_dir *d);

// target_config_load: dir/config.json. -1 with error_set naming the file and the field.
int target_config_load(target_config *c, const char *dir);
// target_config_parse: the same from JSON text (source names it in messages).
int target_config_parse(target_config *c, const char *json, const char *source);
// target_config_params: a bound on the parameter count of the whole model (embedding, head, every
// layer counted with each mixer and MLP its architecture has), in checked arithmetic; -1 when it
// overflows 64 bits. target_config_parse refuses over TARGET_MAX_PARAMS.
int64_t target_config_params(const target_config *c);
// target_config_mask_token: the drafter's MASK token when drafter.mask_token_id is -1: the
// architecture's own for its vocabulary (Qwen3.5's 248320 rows: 248070), else the last row.
int64_t target_config_mask_token(const target_config *c);

// target_config_to_json: a config.json that transformers loads as the named architecture
// (used by dflash_tool make-target). Caller frees.
char *target_config_to_json(const target_config *c);
// target_rope_inv_freq: inv_freq[rope_dim/2] as transformers computes it, llama3 scaling included.
void target_rope_inv_freq(const target_config *c, float *inv_freq);
// target_default_layer_ids: SPEC §2 default: round(1 + i*(L-4)/(n-1)), i < n (n = 1: L/2), Python's
// round-half-even. -1 (error_set) when n < 1 or the rule leaves [0, L) (targets of 1-2 layers); a
// short target (L < n + 3) may get repeated ids, as z-lab's build_target_layer_ids gives them.
int target_default_layer_ids(int64_t n_layers, int n, int64_t *ids);
