// drafter_layout.h: where each tensor of the drafter's trunk sits in d->params (and so in the flat
// buffers): the one place that says it. The trunk is what every kind shares and the step's shared
// machinery reads (the context's fc, hidden_norm and per-layer k/v projections, the final norm):
//   0                 fc.weight
//   1                 hidden_norm.weight
//   2 + 11 l + j      layer l's tensor j (drafter_layer_tensor, the z-lab dflash export order)
//   2 + 11 L          norm.weight (the final norm)
// A kind lists these first, in this order (drafter_dflash_param_list), and its own tensors from
// drafter_p_own(L) on, placing them by its own offsets from there.
#pragma once

#include "common/core/tensor.h"
#include "common/kernels/ops.h"
#include "student/model/drafter.h"

typedef enum {
    DRAFTER_T_INPUT_NORM, // input_layernorm
    DRAFTER_T_Q,          // self_attn.q_proj
    DRAFTER_T_K,          // self_attn.k_proj (also the context's keys)
    DRAFTER_T_V,          // self_attn.v_proj (also the context's values)
    DRAFTER_T_O,          // self_attn.o_proj
    DRAFTER_T_Q_NORM,     // self_attn.q_norm
    DRAFTER_T_K_NORM,     // self_attn.k_norm (also the context's keys)
    DRAFTER_T_POST_NORM,  // post_attention_layernorm
    DRAFTER_T_GATE,       // mlp.gate_proj
    DRAFTER_T_UP,         // mlp.up_proj
    DRAFTER_T_DOWN,       // mlp.down_proj
    DRAFTER_LAYER_TENSORS // 11
} drafter_layer_tensor;

#define DRAFTER_P_FC 0
#define DRAFTER_P_HIDDEN_NORM 1
// drafter_p_layer: the index of layer l's tensor j.
static inline int drafter_p_layer(int l, int j) { return 2 + l * DRAFTER_LAYER_TENSORS + j; }
// drafter_p_norm: the final norm's index, after the n_layers layers.
static inline int drafter_p_norm(int n_layers) { return 2 + n_layers * DRAFTER_LAYER_TENSORS; }
// drafter_p_own: the number of trunk tensors: the index of a kind's first own tensor.
static inline int drafter_p_own(int n_layers) { return drafter_p_norm(n_layers) + 1; }

// drafter_grad: the fp32 gradient of parameter i (an index above) in d->grad.
static inline float *drafter_grad(drafter *d, int i) { return d->grad + d->params[i].offset; }
// drafter_weight: parameter i in the compute copy (act dtype; the fp32 master on the CPU).
static inline void *drafter_weight(const drafter *d, int i) {
    return (char *)d->compute + (size_t)d->params[i].offset * dtype_size(ops_act_dtype(d->be));
}
