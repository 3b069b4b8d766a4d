// target.h: the frozen target LLM on one teacher rank: weights resident on the backend's device,
// and the forward over a packed batch that yields what the drafter learns from (SPEC §2):
//   features [T, n_feat*H]  for each id of layer_ids, HF hidden_states[id + 1]: the residual stream
//                           after decoder layer id, except id = L-1 (the last layer), whose
//                           features are after the final norm, model.norm(h), as transformers'
//                           last hidden state is; exactly what the dflash package and the engines
//                           feed the drafter (SPEC §2)
//   topk_idx/val [T, k]     the k largest logits of lm_head(norm(h)), sorted descending
//   lse [T]                 log-sum-exp of the full-vocabulary logits
// The lm_head runs over vocabulary tiles with a running top-k and LSE: [T, V] never exists.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "teacher/target_config.h"

#define TARGET_MAX_FEAT 64

typedef struct {
    void *input_norm, *post_norm, *w_gate, *w_up, *w_down; // every layer: the pre-norms and the SwiGLU MLP
    // attention layers: wq [nq*hd, H] ([nq*2*hd, H] with a gate, Qwen3.5), q_norm/k_norm: Qwen3 and Qwen3.5
    void *wq, *wk, *wv, *wo, *q_norm, *k_norm;
    // Gated DeltaNet layers (Qwen3.5 linear_attention), C = 2*Hk*dk + Hv*dv:
    void *w_qkv;              // [C, H]       in_proj_qkv
    void *w_z;                // [Hv*dv, H]   in_proj_z
    void *w_b, *w_a;          // [Hv, H]      in_proj_b, in_proj_a
    void *conv_w;             // [C, K]       conv1d.weight [C, 1, K]
    float *A_log, *dt_bias;   // [Hv] f32
    void *lin_norm;           // [dv]         norm.weight (the gated norm)
    void *w_out;              // [H, Hv*dv]   out_proj
    // MoE layers (target_layer_is_sparse): E experts of width Ie; the shared expert (Qwen3.5-MoE) is
    // w_gate/w_up/w_down above with width shared_intermediate
    void *router;             // [E, H]       mlp.gate.weight
    void *exp_gate_up;        // [E, 2*Ie, H] gate rows then up rows, per expert
    void *exp_down;           // [E, H, Ie]
    void *shared_gate;        // [1, H]       mlp.shared_expert_gate.weight
    // attention biases (cfg.qkv_bias: Qwen2, GLM-4.5, gpt-oss; cfg.o_bias: gpt-oss)
    void *bq, *bk, *bv, *bo;  // [nq*hd], [nkv*hd], [nkv*hd], [H]
    float *sinks;             // [nq] f32     self_attn.sinks (cfg.attn_sinks: gpt-oss)
    float *layer_scalar_dev;  // [1] f32      layer_scalar (cfg.layer_scalar: Gemma 4), and its value on the host:
    float layer_scalar;       //              the layer's output times it
    void *post_mixer_norm;    // [H]          Gemma's post_attention_layernorm (cfg.sandwich_norms); post_norm is
    void *post_mlp_norm;      // [H]          then pre_feedforward_layernorm, this post_feedforward_layernorm
    // MoE variants: the router's bias (gpt-oss) or score-correction bias (DeepSeek-V3, GLM-4.5), the
    // experts' biases (gpt-oss)
    void *router_bias;        // [E]          mlp.router.bias (act)
    float *score_bias;        // [E] f32      mlp.gate.e_score_correction_bias
    void *exp_gate_up_bias;   // [E, 2*Ie]
    void *exp_down_bias;      // [E, H]
    // multi-head latent attention (DeepSeek-V3): q through a low-rank q_a / q_b (or wq when
    // q_lora_rank is null), k and v from a shared latent
    void *w_q_a, *q_a_norm, *w_q_b; // [q_lora, H], [q_lora], [nq*(nope+rope), q_lora]
    void *w_kv_a, *kv_a_norm;       // [kv_lora + rope, H], [kv_lora]
    void *w_kv_b;                   // [nq*(nope+v), kv_lora]
} target_layer;

typedef struct target_model {
    target_config cfg;
    backend *be;
    arena weights;           // every weight, in ops_act_dtype, on the device
    target_layer *layers;    // [n_layers]
    void *embed;             // [V, H]
    void *final_norm;        // [H]
    void *lm_head;           // [V, H] (== embed when tied)
    float *inv_freq;         // [rope_dim/2] f32, device
    float *inv_freq_local;   // the sliding layers' (cfg.rope_theta_local > 0: [head_dim/2]), else == inv_freq
    void *ones;              // [widest q] act, all 1: the weight of an RMSNorm without one (cfg.v_norm)
    // The layers this rank holds, [layer_begin, layer_end): a pipeline stage of a teacher group
    // (world.teacher_group_size); 0, 0 = the whole model. The first stage holds the embedding, the
    // last the final norm and the lm_head (the embedding again when they are tied); m->layers is
    // indexed by the global layer id whatever the range.
    int64_t layer_begin, layer_end;
    // teacher.quant_weights resident (target_quant.h): the layers' quantised tensors stay in the weights
    // arena as stored; their pointers in target_layer point into one layer scratch (scratch_bytes, in the
    // arena too), which target_layer_materialize fills with a layer's de-quantised tensors before it runs
    struct target_quant_job_list *quant_jobs; // NULL: every weight at compute size
    size_t scratch_bytes;
    int64_t scratch_layer;   // the layer the scratch holds (-1: none)
} target_model;

// target_stage_range: m's layers [*l0, *l1) (the whole model when no range is set).
void target_stage_range(const target_model *m, int64_t *l0, int64_t *l1);
static inline int target_stage_is_first(const target_model *m) { return m->layer_begin == 0; }
int target_stage_is_last(const target_model *m);
// target_stage_weight_bytes: the weights of layers [l0, l1) with the embedding when l0 = 0 and the
// final norm + lm_head when l1 = n_layers (target_weight_bytes = the whole range).
// With teacher.quant_weights resident (c->quant.resident), each tensor config.json says is quantised
// (target_quant_planned) counts at its stored size (codes + scales) and the stage adds its layer
// scratch: its largest layer's quantised tensors at compute size (target_stage_weight_scratch).
size_t target_stage_weight_bytes(const target_config *c, dtype dt, int64_t l0, int64_t l1);
// target_stage_weight_scratch: the layer scratch within target_stage_weight_bytes (0: none).
size_t target_stage_weight_scratch(const target_config *c, dtype dt, int64_t l0, int64_t l1);
// target_stage_split: G consecutive non-empty layer ranges, stage s = [bounds[s], bounds[s+1]),
// whose largest weight bytes (as target_stage_weight_bytes counts them) is the smallest possible.
// -1 with error_set naming world.teacher_group_size when G exceeds the target's layers.
int target_stage_split(const target_config *c, dtype dt, int G, int64_t *bounds);

// target_load: config.json + safetensors (single or sharded) from dir onto be. Every tensor's
// presence, dtype (BF16, F16 or F32) and shape is checked first; -1 with error_set naming the tensor.
int target_load(target_model *m, const char *dir, backend *be);
// target_load_stage: the same for layers [l0, l1) only (l1 = -1: to the last layer), what one stage
// of a teacher group holds; no tensor outside the range is read or checked.
int target_load_stage(target_model *m, const char *dir, backend *be, int64_t l0, int64_t l1);
void target_free(target_model *m);
size_t target_weight_bytes(const target_config *c, dtype dt);
// target_model_weight_bytes: what m's stage holds (its range; the whole model when none is set).
size_t target_model_weight_bytes(const target_model *m);

// target_layer_materialize: with resident quantised weights, de-quantise layer l's into the layer
// scratch (ops_quant.h) unless it holds them already; nothing otherwise. Called before a layer runs
// (target_forward's loop, the decoder's), the only places that run layers.
void target_layer_materialize(target_model *m, int64_t l);

// What a forward produces.
typedef struct {
    int n_feat;
    int64_t layer_ids[TARGET_MAX_FEAT]; // decoder layers (0-based) whose hidden_states[id + 1] are the features
    int topk;                           // k (<= OPS_TOPK_MAX)
    int vocab_tile;                     // lm_head vocabulary tile (0 = choose)
} target_outputs;

// target_outputs_check: layer ids inside [0, n_layers) (repeats allowed: the SPEC formula repeats ids
// for targets under 8 layers, as DFlash does); 1 <= k <= min(V, OPS_TOPK_MAX).
int target_outputs_check(const target_model *m, const target_outputs *o);

// Work buffers for batches of up to max_tokens tokens, carved from an arena on the device. The
// architectures' buffers (the hybrid mixer's, the MoE MLP's) are NULL for the others.
typedef struct target_work {
    int max_tokens, max_seqs, vocab_tile;
    void *x, *xn, *q, *k, *v, *att, *gate, *up; // activations
    float *logits;                              // [max_tokens, vocab_tile] f32
    // Qwen3.5 / Qwen3.6 gated attention
    void *qg;                                   // [T, nq, 2*hd] act: q_proj's [query | gate] per head
    void *att_gate;                             // [T, nq*hd] act
    // Gated DeltaNet (C = 2*Hk*dk + Hv*dv)
    void *qkv, *qkv_conv;                       // [T, C] act: in_proj_qkv, after conv + SiLU
    void *z, *core;                             // [T, Hv*dv] act: the output gate, the rule's output
    void *lb, *la;                              // [T, Hv] act: in_proj_b, in_proj_a
    float *beta, *g;                            // [T, Hv] f32
    void *gdn_work;                             // ops_gated_delta_rule's scratch
    // mixture of experts (R = T*k routed rows)
    float *router_logits;                       // [T, E] f32
    int32_t *topk_idx_e;                        // [T, k] i32 the chosen experts
    float *topk_w_e;                            // [T, k] f32 their weights
    int32_t *moe_offsets, *moe_perm, *moe_slot; // [E+1], [R], [R] i32
    void *moe_route_work;                       // ops_moe_route's scratch
    void *moe_xs, *moe_gu, *moe_act, *moe_ys;   // [R, H], [R, 2Ie], [R, Ie], [R, H] act
    void *moe_shared, *moe_sgate;               // [T, H], [T] act: the shared expert's output and gate
    void *router_act;                           // [T, E] act: the router's bias on every row (gpt-oss), before fp32
    int32_t *router_zero;                       // [T] i32 zeros: the rows ops_embed reads the bias into router_act with
    int32_t *tokens, *pos, *cu_seqlens;         // device copies of the batch
    const int32_t *cu_host;                     // the batch's cu_seqlens on the host (the caller's, for the call)
    float *m, *s;                               // running LSE state [max_tokens]
    // outputs (device)
    void *features;     // [max_tokens, n_feat*H] act
    int32_t *topk_idx;  // [max_tokens, k]
    float *topk_val;    // [max_tokens, k]
    float *lse;         // [max_tokens]
} target_work;

// target_work_bytes: bytes target_work_carve takes for these sizes (dry arena).
size_t target_work_bytes(const target_model *m, const target_outputs *o, int max_tokens, int max_seqs, int vocab_tile);
void target_work_carve(target_work *w, arena *a, const target_model *m, const target_outputs *o,
                       int max_tokens, int max_seqs, int vocab_tile);
// target_plan_tokens: the largest packed batch (tokens) whose weights + work fit in budget bytes;
// 0 when even one token does not fit. Also sets *vocab_tile.
int target_plan_tokens(const target_model *m, const target_outputs *o, size_t budget, int max_seqs, int *vocab_tile);

// target_forward: run the packed batch tokens[T] (host) with boundaries cu_seqlens[n_seq+1] (host).
// Results are in w->features/topk_idx/topk_val/lse (device). A stage of a group (m's layer range)
// runs its layers only: a stage after the first starts from the residual stream in w->x [T, H] and
// the features of earlier layers in w->features, which the caller put there (what the previous
// stage left in its own w->x and w->features); a stage before the last stops after its layers,
// leaving w->x and w->features for the next, and computes no top-k or LSE. When logits_rows is not NULL, the full
// fp32 logits of the n_logits rows listed (host indices) are copied to logits_out [n_logits, V] (host)
// as tiles pass by (for checking only). -1 with error_set on a bad batch.
int target_forward(target_model *m, const target_outputs *o, target_work *w, const int32_t *tokens,
                   const int32_t *cu_seqlens, int n_seq, int T, const int *logits_rows, int n_logits,
                   float *logits_out);

// ----------------------------------------------------------------------------- for the architecture files
// The shared parts an architecture's table (target_arch.h) builds on.

// One tensor of the checkpoint: its name, the shape config.json implies, and where its device
// pointer goes. f32: kept in fp32 on every backend (small per-head constants such as A_log).
// A tensor may be a part of another entry's buffer (parent >= 0: the file tensor is copied at
// element offset `offset` of the parent's device buffer; per-expert files stacked into [E, ...]),
// and an entry may be a buffer only (alloc_only: no file tensor of its own, its parts fill it).
typedef struct {
    char name[160];
    int ndim;
    int64_t shape[3];
    int f32;
    void **dst;
    int parent;     // -1, or the index of the entry whose buffer holds this tensor
    int64_t offset; // elements into the parent's buffer
    int alloc_only; // a buffer for parts, not a file tensor
    int64_t layer;  // the decoder layer it belongs to; -1 the embedding, -2 the final norm and lm_head
    int transpose;  // the file holds the last two dims swapped ([..., in, out]: gpt-oss's experts as transformers
                    // saves them); shape is the device's [..., out, in], the swap done at upload. Plain (BF16/F16/
                    // F32) file tensors only: a quantised one (MXFP4 blocks) is stored [..., out, in] already
} target_tensor;

// A growing list of tensors (target.c frees it).
typedef struct target_tensor_list {
    target_tensor *t;
    int n, cap;
} target_tensor_list;

// target_tensor_add: append name (printf-style) with ndim dims of shape s (s[1], s[2] ignored beyond
// ndim); returns its index (for target_tensor_part).
int target_tensor_add(target_tensor_list *l, void **dst, int f32, int ndim, int64_t s0, int64_t s1, int64_t s2,
                      const char *fmt, ...) __attribute__((format(printf, 8, 9)));
// target_tensor_part: make entry i a part of entry parent's buffer, at element offset.
void target_tensor_part(target_tensor_list *l, int i, int parent, int64_t offset);

// target_mlp_width: the widest SwiGLU the work buffers hold: intermediate_size, or the shared expert's.
int64_t target_mlp_width(const target_config *c);
// target_arch_work_carve: the architecture's work buffers (its mixer's and MLP's), for
// target_work_carve and the decoder's view.
void target_arch_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens, int max_seqs);
// target_swiglu_tensors: a SwiGLU MLP's gate/up [I, H] and down [H, I] under name `mlp` (e.g.
// "%slayers.%lld.mlp", prefix, l) into L's w_gate/w_up/w_down.
void target_swiglu_tensors(target_model *m, int64_t l, int64_t I, target_tensor_list *list, const char *mlp);
// target_swiglu_mlp: out [T, H] = down(silu(gate(w->xn)) * up(w->xn)), width I, through w->gate/up.
void target_swiglu_mlp(const target_model *m, const void *w_gate, const void *w_up, const void *w_down, int I,
                       target_work *w, int T, void *out);
// target_mlp_block: the MLP half of layer l: w->x += mlp(norm(w->x)) (the architecture's MLP).
void target_mlp_block(const target_model *m, int l, target_work *w, int T);
// target_mixer_block: the token mixer half of layer l in the packed forward: w->x += mixer(norm(w->x)).
void target_mixer_block(const target_model *m, int l, target_work *w, int T, int n_seq);
// target_mixer_residual: the end of the mixer half: w->x += (post_mixer_norm)(w->xn), the norm when
// the layer has one (Gemma).
void target_mixer_residual(const target_model *m, int l, target_work *w, int T);
// target_attn_scale: the attention's q.k scale: cfg.attn_scale or head_dim^-0.5, times YaRN's
// attention factor squared.
float target_attn_scale(const target_config *c);
// target_layer_inv_freq: the RoPE frequencies of layer l (the sliding layers' own base, Gemma 3).
const float *target_layer_inv_freq(const target_model *m, int l);
// target_attention: causal attention of layer l over w->q, w->k, w->v into w->att, with the
// layer's window (cfg.layer_window), sinks and the model's scale (ops_attention_ext).
void target_attention(const target_model *m, int l, target_work *w, int T, int n_seq);
// target_embed: x [T, H] = the embedding rows of tokens (device), times cfg.embed_scale (Gemma).
void target_embed(const target_model *m, void *x, const int32_t *tokens, int T);
// target_logits_cap: the final soft-cap (cfg.final_softcap) on an f32 logits tile [R, C] (stride ld).
void target_logits_cap(const target_model *m, float *logits, int ld, int R, int C);

// target_norm: the model's RMSNorm: zero-centred ((1 + w), Qwen3.5) or plain (w).   act [R, D]
void target_norm(const target_model *m, void *out, const void *in, const void *w, int R, int D);

// y[T, out] = x[T, in] @ W[out, in]^T on the backend (act in, act out).
void target_linear(backend *be, void *y, const void *x, const void *W, int T, int in, int out);

// ----------------------------------------------------------------------------- for dflash_tool make-target

// target_tensor_names: every tensor of a checkpoint of config c as the loader lists it (the whole
// model, in target_load's order, with the shapes config.json implies as they are on the device):
// fn(ctx, t) for each entry. t->transpose: the file holds the last two dims swapped; an entry with
// alloc_only is a buffer, not a file tensor (its parts, parent >= 0, are). d: the checkpoint whose
// names choose between layouts (the experts fused or per expert: an empty st_dir gives the
// per-expert layout where the MLP has both); NULL: the layouts a sizing pass assumes (fused).
void target_tensor_names(const target_config *c, const struct st_dir *d, void (*fn)(void *ctx, const target_tensor *t),
                         void *ctx);

// target_config_fresh: c was filled by hand (make-target's options), not by target_config_parse
// (which always sets mlp_act): a family's to_json then writes its fixed choices for a new model
// where make-target's options say nothing (Gemma's query_pre_attn_scalar, gpt-oss's YaRN, the
// DeepSeek-V3 latent ranks, ...); for a parsed config it writes what c holds.
static inline int target_config_fresh(const target_config *c) { return c->mlp_act == 0; }

// The keys several families' config.json (their to_json) share, in the spelling transformers 5
// saves (target_dense.c):
// target_json_begin: a new object with architectures (table A's text-only class), model_type,
// vocab_size, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// max_position_embeddings, rms_norm_eps and tie_word_embeddings.
struct cJSON *target_json_begin(const target_config *c, const struct target_arch *A);
// target_json_rope: c's RoPE into object r (rope_theta, rope_type and its parameters: default,
// linear, llama3, yarn, proportional; theta: the base to write).
void target_json_rope(struct cJSON *r, const target_config *c, double theta);
// target_json_window: the sliding layers' window (0: none); target_json_layer_types: layer_types,
// full_attention / sliding_attention per layer as c->layer_window says.
int64_t target_json_window(const target_config *c);
void target_json_layer_types(struct cJSON *o, const target_config *c);
// target_json_end: attention_dropout, initializer_range, use_cache and dtype added, the text
// printed; o freed. who names the caller in the out-of-memory fatal.
char *target_json_end(struct cJSON *o, const target_config *c, const char *who);
// target_json_moe_sigmoid (target_deepseek_v3.c): the keys of target_mlp_moe_sigmoid (DeepSeek-V3,
// GLM-4.5): the routed and shared experts, the groups, the scaling, the leading dense layers. A
// fresh config gets one shared expert, routed_scaling_factor 2.5, the first layer dense (of two or
// more) and, with groups, the experts in up to 4 groups of 2 or more of which half are kept
// (DeepSeek-V3's 8 of 32, 4 kept), else one group (GLM-4.5).
void target_json_moe_sigmoid(struct cJSON *o, const target_config *c, int groups);
