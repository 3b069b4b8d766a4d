// drafter_dflash.h: the DFlash kind's parts (drafter_dflash.c), for kinds that build on it
// (drafter_dflash2.c): its tensors (the trunk, drafter_layout.h) come first in the flat buffer, a
// kind's own after them; its layer's attention and MLP sublayers, which a kind composes into its
// own layer_forward / layer_backward.
#pragma once

struct drafter_config;
struct drafter_param;
struct drafter;
struct student_work;

// drafter_dflash_param_list: the trunk's 2 + 11 * n_layers + 1 tensors (drafter_kind.h param_list).
int drafter_dflash_param_list(const struct drafter_config *c, struct drafter_param *list);
// drafter_dflash_bind: the pointers of those tensors (fc, hidden_norm, layers[l].*, norm).
void drafter_dflash_bind(struct drafter *d);
// drafter_dflash_grad_buckets: the buckets of those tensors; d->n_params must be their count.
int drafter_dflash_grad_buckets(const struct drafter *d, int *bucket_of);

// The sublayers of layer l over a chunk of C anchors (N = C * block_size rows; activations in
// w->saved[l], scratch in w). in: the sublayer's input [N, H] (normed), kept until its backward.
// attn: out [N, H] = o_proj(attention(q, [Kc; kb], [Vc; vb])) with q/k/v projected from in; its
// backward: from dout = d(out), din [N, H] = d(in) (overwritten), the gradients of q/k/v/o_proj and
// q/k_norm added, the context K/V gradients into w->dkc[l], w->dvc[l].
void drafter_dflash_attn_forward(struct drafter *d, struct student_work *w, int l, int C, const void *in, void *out);
void drafter_dflash_attn_backward(struct drafter *d, struct student_work *w, int l, int C, const void *in,
                                  const void *dout, void *din);
// mlp: out [N, H] = down(silu(gate(in)) * up(in)); its backward likewise (gate/up/down_proj's gradients).
void drafter_dflash_mlp_forward(struct drafter *d, struct student_work *w, int l, int C, const void *in, void *out);
void drafter_dflash_mlp_backward(struct drafter *d, struct student_work *w, int l, int C, const void *in,
                                 const void *dout, void *din);
