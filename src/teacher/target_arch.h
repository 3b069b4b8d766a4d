// target_arch.h: the table an architecture fills (struct target_arch), all the teacher knows of it.
//
// target.c (the loader and the forward's frame: embedding, pre-norm residual blocks, features, the
// lm_head over vocabulary tiles), target_config.c (config.json's shared keys) and target_decode.c
// (the KV-cached decoder) call an architecture only through its table; target_registry.c lists the
// tables. An architecture is two parts and its data:
//   the token mixer of a layer (target_mixer): its config keys, its tensors, its work buffers, its
//     forward over a packed batch, and for attention layers the two halves around the attention
//     (the decoder runs its attention over the cache between them);
//   the MLP of a layer (target_mlp): its config keys, its tensors, its work buffers, its forward;
//   the defaults its transformers config class gives absent keys, the names it serves, its
//   default MASK token.
// Files: target_dense.c (the Qwen3 / Llama attention, tables qwen3 and llama), target_qwen3_5.c (the
// Qwen3.5 / Qwen3.6 hybrid mixer, table qwen3_5), target_moe.c (the mixture-of-experts MLP, tables
// qwen3_moe and qwen3_5_moe, which reuse the dense and hybrid mixers through their parts below);
// the SwiGLU MLP every dense layer has is target.c's (target_mlp_swiglu). docs/teacher.md, "Adding
// an architecture", says how to add one.
//
// This header includes nothing of the teacher (target_config.c includes it; target_config.h is below
// it): the model's types are named by their struct tags.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/arena.h"
#include "common/data/safetensors.h"

struct cJSON;
struct target_config;
struct target_model;
struct target_work;
struct target_tensor_list;
struct target_arch;

// The token mixer of a layer. Every hook reads its shapes from m->cfg; l is the global layer id.
typedef struct {
    // parse: the mixer's config.json keys after the shared ones (root: the text model's object; src
    // names it in messages); sets the flags its layer code reads. -1 with error_set naming the key.
    int (*parse)(struct target_config *c, const struct cJSON *root, const char *src);
    // layer_tensors: layer l's mixer tensors under prefix ("model." or "model.language_model."),
    // with the shapes config.json implies (target_tensor_add).
    void (*layer_tensors)(struct target_model *m, int64_t l, const char *prefix, struct target_tensor_list *list);
    // work_carve: its buffers of target_work beyond the shared ones for max_tokens tokens and max_seqs
    // sequences (NULL: none); a dry arena counts them for the memory plan.
    void (*work_carve)(struct target_work *w, arena *a, const struct target_model *m, int max_tokens, int max_seqs);
    // forward: the mixer of layer l over T packed tokens (w->cu_seqlens, w->pos on the device):
    // w->xn [T, H] (the normed residual stream) in, its output in w->xn. conv_state / rec_state: the
    // decoding state of a recurrent layer (target_layer_is_linear; NULL in the packed forward: every
    // sequence starts from zero), unused by attention layers.
    void (*forward)(const struct target_model *m, int l, struct target_work *w, int T, int n_seq, void *conv_state,
                    float *rec_state);
    // An attention layer in two halves, as forward runs it around causal attention:
    // attn_project: w->xn [T, H] in; w->q [T, nq, hd], w->k, w->v [T, nkv, hd] (after the
    // architecture's norms and RoPE at w->pos) out, and whatever attn_finish needs.
    void (*attn_project)(const struct target_model *m, int l, struct target_work *w, int T);
    // attn_finish: w->att [T, nq*hd] (the attention's output) in, the mixer's output in w->xn [T, H].
    void (*attn_finish)(const struct target_model *m, int l, struct target_work *w, int T);
    // to_json: a config.json of c that transformers loads as table A's class (the layout is the
    // mixer family's; A->mlp->to_json adds the MLP's keys). Caller frees (target_config_to_json).
    char *(*to_json)(const struct target_config *c, const struct target_arch *A);
} target_mixer;

// The MLP of a layer (its input norm and the residual add are the frame's).
typedef struct {
    // parse: the MLP's config.json keys (NULL: none), as target_mixer.parse.
    int (*parse)(struct target_config *c, const struct cJSON *root, const char *src);
    // layer_tensors: layer l's MLP tensors (d: the checkpoint, for layouts that vary by file; NULL
    // when only sizing).
    void (*layer_tensors)(struct target_model *m, int64_t l, const char *prefix, struct target_tensor_list *list,
                          const st_dir *d);
    // work_carve: its buffers of target_work beyond the shared ones (NULL: none).
    void (*work_carve)(struct target_work *w, arena *a, const struct target_model *m, int max_tokens);
    // forward: layer l's MLP: w->xn [T, H] (normed) in, its output in w->xn.
    void (*forward)(const struct target_model *m, int l, struct target_work *w, int T);
    // to_json: the MLP's keys into config.json object o (the text model's).
    void (*to_json)(struct cJSON *o, const struct target_config *c);
} target_mlp;

// A transformers model class the table serves: config.json's "architectures" entry, the
// "model_type" it goes with, and whether it is a multimodal wrapper (the text model's keys under
// text_config, its tensors under model.language_model.).
typedef struct {
    const char *class_name;
    const char *model_type;
    int multimodal;
} target_arch_class;

#define TARGET_ARCH_MAX_CLASSES 4

// target_arch_class_of: A's class with that multimodal flag (the first class when none has it).
static inline const target_arch_class *target_arch_class_of(const struct target_arch *A, int multimodal);

typedef struct target_arch {
    const char *name;            // "qwen3": for messages and docs
    int family;                  // target_config.arch (ARCH_*): the attention family the config reports
    int moe;                     // target_config.moe: the MLPs may be mixtures of experts
    target_arch_class classes[TARGET_ARCH_MAX_CLASSES]; // the classes it serves (class_name NULL ends)
    // The config class's defaults for absent keys (transformers' *Config __init__):
    int64_t default_kv_heads;    // > 0: the config class defaults num_key_value_heads (to a published model's
                                 // value): the key is required; 0: absent = num_attention_heads
    int64_t default_head_dim;    // > 0: the class defaults head_dim: required; 0: absent = hidden_size / heads
    int64_t default_max_positions; // max_position_embeddings
    double default_partial_rotary; // partial_rotary_factor; 0: none (RoPE on the whole head, a factor must be 1)
    double default_rope_theta;   // rope_theta when absent; 0: 10000
    double default_rope_theta_local; // > 0: the family's sliding layers have a RoPE base of their own
                                 // (rope_local_base_freq, rope_parameters.sliding_attention), this when absent
    int no_intermediate;         // 1: no intermediate_size (every MLP is sparse)
    int default_tie;             // tie_word_embeddings when absent (Gemma: true)
    // The MASK token of a drafter whose mask_token_id is -1, for a vocabulary of mask_vocab rows
    // (0: the rule's fallback, the last row)
    int64_t mask_vocab, mask_token;
    const target_mixer *mixer;
    const target_mlp *mlp;
} target_arch;

// The parts the architecture files define, for the tables that combine them.
extern const target_mixer target_mixer_qwen3;   // target_dense.c: per-head q_norm/k_norm before RoPE
extern const target_mixer target_mixer_llama;   // target_dense.c: no per-head norms
extern const target_mixer target_mixer_qwen3_5; // target_qwen3_5.c: gated attention + Gated DeltaNet
extern const target_mlp target_mlp_swiglu;      // target.c: down(act(gate(x)) * up(x)) (silu, or GeGLU: cfg.mlp_act)

// target_dense.c: the dense attention's parts, for the families that use it with their own parse
// (Gemma 3, GLM-4.5, gpt-oss): tensors (biases, q/k norms, sinks as the config says), the
// projections with RoPE, the output projection, and the whole mixer (target_attention between).
void target_dense_layer_tensors(struct target_model *m, int64_t l, const char *prefix, struct target_tensor_list *list);
void target_dense_attn_project(const struct target_model *m, int l, struct target_work *w, int T);
void target_dense_attn_finish(const struct target_model *m, int l, struct target_work *w, int T);
void target_dense_forward(const struct target_model *m, int l, struct target_work *w, int T, int n_seq,
                          void *conv_state, float *rec_state);
// target_moe.c: the shared parts of the mixture-of-experts MLPs.
// target_moe_required: a positive integer under any of names (NULL-terminated; aliases must agree);
// missing is an error naming the first.
int target_moe_required(const struct cJSON *root, const char *src, const char *const *names, int64_t *out);
// target_moe_expert_tensors: layer l's experts mlp.experts.gate_up_proj [E, 2Ie, H] (gate rows then
// up rows per expert) and down_proj [E, H, Ie] into L->exp_gate_up / exp_down: fused as in the
// files, or per expert (mlp.experts.{e}.{gate,up,down}_proj.weight) stacked into those buffers when d
// holds them so (d NULL: fused).
void target_moe_expert_tensors(struct target_model *m, int64_t l, const char *prefix,
                               struct target_tensor_list *list, const st_dir *d);
// target_moe_experts: after a route (w->moe_offsets, moe_perm of layer l's router), the routed rows
// of w->xn through their experts' SwiGLU (gather, gate_up, silu(gate) * up, down): w->moe_ys [R, H].
void target_moe_experts(const struct target_model *m, int l, struct target_work *w, int T);
// target_moe_work_carve: the routed rows' buffers of target_work (router logits, the route, the
// gathered rows, the experts' products) for cfg.n_experts, n_experts_tok, moe_intermediate.
void target_moe_work_carve(struct target_work *w, arena *a, const struct target_model *m, int max_tokens);
// target_moe_sigmoid.c: the MoE MLP of DeepSeek-V3 / Kimi-K2 and GLM-4.5 (sigmoid routing with a
// score-correction bias within the best expert groups, scaled weights, shared experts added), with
// the dense SwiGLU on the first first_k_dense_replace layers; tables deepseek_v3 and glm4_moe.
extern const target_mlp target_mlp_moe_sigmoid;
// TARGET_DENSE_PARTS: the dense attention's hooks for a target_mixer initializer:
//   const target_mixer mixer_x = {.parse = x_parse, TARGET_DENSE_PARTS, .to_json = x_to_json};
#define TARGET_DENSE_PARTS                                                                                   \
    .layer_tensors = target_dense_layer_tensors, .forward = target_dense_forward,                             \
    .attn_project = target_dense_attn_project, .attn_finish = target_dense_attn_finish
// target_parse_window: 'sliding_window' (absent or null: 0, else a positive count of keys).
int target_parse_window(const struct cJSON *root, const char *src, int64_t *window);
// target_parse_layer_types: 'layer_types' (when given): full_attention, or sliding_attention when
// window > 0 (that layer's cfg.layer_window = window); anything else refused naming the entry.
int target_parse_layer_types(struct target_config *c, const struct cJSON *root, const char *src, int64_t window);

static inline const target_arch_class *target_arch_class_of(const target_arch *A, int multimodal) {
    for (const target_arch_class *k = A->classes; k->class_name; k++)
        if (k->multimodal == multimodal) return k;
    return &A->classes[0];
}
