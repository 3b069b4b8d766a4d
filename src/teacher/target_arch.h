// target_arch.h: what an architecture's file gives target.c (the loader and the forward's frame):
// the tensors its layers hold, and the token mixer of a layer. target.c owns everything the
// architectures share (embedding, pre-norm residual blocks, the SwiGLU MLP, features, the lm_head
// over vocabulary tiles); the dense attention of Qwen3/Llama is in target.c, the Qwen3.5/3.6 hybrid
// layers in target_qwen3_5.c.
#pragma once
#include <stdint.h>

#include "common/data/safetensors.h"
#include "teacher/target.h"

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
} target_tensor;

// A growing list of tensors (target.c frees it).
typedef struct {
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
// target_arch_work_carve: the architecture-specific work buffers (hybrid mixer, MoE), for
// target_work_carve and the decoder's view.
void target_arch_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens, int max_seqs);
// target_swiglu_mlp: out [T, H] = down(silu(gate(w->xn)) * up(w->xn)), width I, through w->gate/up.
void target_swiglu_mlp(const target_model *m, const void *w_gate, const void *w_up, const void *w_down, int I,
                       target_work *w, int T, void *out);
// target_mlp_block: the MLP half of layer l: w->x += mlp(norm(w->x)) (dense SwiGLU or MoE).
void target_mlp_block(const target_model *m, int l, target_work *w, int T);

// target_norm: the model's RMSNorm: zero-centred ((1 + w), Qwen3.5) or plain (w).   act [R, D]
void target_norm(const target_model *m, void *out, const void *in, const void *w, int R, int D);

// y[T, out] = x[T, in] @ W[out, in]^T on the backend (act in, act out).
void target_linear(backend *be, void *y, const void *x, const void *W, int T, int in, int out);

// ----------------------------------------------------------------------------- Qwen3.5 / Qwen3.6 (target_qwen3_5.c)

// target_qwen3_5_layer_tensors: the mixer tensors of layer l (gated attention or Gated DeltaNet)
// under prefix ("model.language_model." or "model.").
void target_qwen3_5_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list);

// target_qwen3_5_work_carve: the hybrid buffers of target_work for max_tokens tokens and max_seqs
// sequences (the dry arena counts them for the memory plan).
void target_qwen3_5_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens, int max_seqs);

// target_qwen3_5_mixer: the token mixer of layer l: w->xn [T, H] (the normed residual stream) in,
// the mixer's output in w->xn (act [T, H]). Packed sequences by w->cu_seqlens / w->pos (device).
// conv_state [n_seq, K-1, C] act and rec_state [n_seq, Hv, dk, dv] f32 are the decoding state of a
// linear layer (NULL in the packed forward: every sequence starts from zero).
void target_qwen3_5_mixer(const target_model *m, int l, target_work *w, int T, int n_seq, void *conv_state,
                          float *rec_state);

// The gated attention of a full_attention layer in two halves around the attention itself (the
// packed forward runs causal attention between them, the decoder its attention over the cache):
// target_qwen3_5_attn_project: w->xn [T, H] in; w->q [T, nq, hd] (q_norm, partial RoPE), w->k
// [T, nkv, hd] (k_norm, partial RoPE), w->v [T, nkv, hd] and w->att_gate [T, nq*hd] out (w->pos).
void target_qwen3_5_attn_project(const target_model *m, int l, target_work *w, int T);
// target_qwen3_5_attn_finish: w->att [T, nq*hd] (the attention's output) in, gated by
// sigmoid(w->att_gate) in place; o_proj of it into w->xn [T, H].
void target_qwen3_5_attn_finish(const target_model *m, int l, target_work *w, int T);

// ----------------------------------------------------------------------------- mixture of experts (target_moe.c)

// target_moe_layer_tensors: the sparse MLP of layer l: router, experts (fused [E, 2I, H] / [E, H, I]
// as in the files, or per expert stacked into those buffers when d holds them per expert; d NULL:
// fused), and the Qwen3.5-MoE shared expert and its gate.
void target_moe_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list,
                              const st_dir *d);
// target_moe_work_carve: the routing and expert buffers of target_work for max_tokens tokens.
void target_moe_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens);
// target_moe_mlp: the MoE MLP of layer l: w->xn [T, H] in, out in w->xn.
void target_moe_mlp(const target_model *m, int l, target_work *w, int T);
