// drafter.h: the drafter's parameters on one student rank (SPEC §3), laid out by its kind
// (cfg.kind, drafter_kind.h).
//
// Every trainable tensor lives in one flat fp32 buffer (the master weights), with its gradient and
// the optimizer state in buffers of the same layout, so AdamW, clipping and the all-reduce see one
// vector. The GPU computes with a bf16 copy (refreshed after each update); the CPU computes on the
// fp32 master itself. The target's embedding and lm_head are frozen and kept in the compute dtype.
// Tensor names are those of the z-lab dflash package (export format).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/data/safetensors.h"
#include "student/model/drafter_config.h"

// DRAFTER_ALIGN: elements; every tensor starts 256-byte aligned in f32, 128 in bf16 (the kinds
// lay their tensors out on it).
#define DRAFTER_ALIGN 64

typedef struct drafter_param {
    char name[96];
    int ndim;           // 1..3
    int64_t shape[3];   // unused dimensions 1
    int64_t numel;
    int64_t offset;     // elements into the flat buffers
    int is_norm;        // RMSNorm weight (initialised to 1)
    int is_delta;       // a conv base kernel [2, K, H] (initialised to the identity: 1 at offset 0, else 0)
} drafter_param;

// drafter_param_push: for a kind's param_list: the tensor `name` of shape[ndim] at *off (then
// advanced to the next DRAFTER_ALIGN boundary), written to list[*n] when list is not NULL; ++*n.
void drafter_param_push(drafter_param *list, int *n, int64_t *off, const char *name, int ndim, const int64_t *shape,
                        int is_norm, int is_delta);

// A trunk layer's tensors (drafter_layout.h) in the compute copy; a kind's own tensors have no
// pointers here: its code reads them by index (drafter_layout.h's drafter_weight / drafter_grad).
typedef struct {
    void *input_norm, *wq, *wk, *wv, *wo, *q_norm, *k_norm, *post_norm, *w_gate, *w_up, *w_down;
} drafter_layer;

typedef struct drafter {
    drafter_config cfg;
    backend *be;
    int n_params;
    drafter_param *params;     // in export order
    int64_t numel;             // trainable elements
    arena mem;                 // everything below
    float *master;             // [numel] f32, device
    float *grad;               // [numel] f32, device (accumulated; the step zeroes it)
    void *compute;             // [numel] act: == master on the CPU, a bf16 copy on CUDA
    drafter_layer *layers;     // pointers into compute (set by cfg.kind->bind)
    void *fc, *hidden_norm, *norm;
    void *embed, *lm_head;     // [V, H] act, frozen (lm_head == embed when the target ties them)
    float embed_scale;         // the target's embedding scale (Gemma: sqrt(H), target_config.embed_scale); 0: none.
                               // The block's embedding is the target's embed_tokens(ids), scale included, as the
                               // dflash package and the engines compute it
    float *inv_freq;           // [head_dim/2] f32, device
} drafter;

// drafter_bytes: device bytes of drafter_init for this config (weights, grads, compute copy, frozen
// embed/lm_head; `tied` = the target ties lm_head to the embedding).
size_t drafter_bytes(const drafter_config *c, const backend *be, int tied);
// drafter_param_numel: elements of the flat parameter buffer (padding included).
int64_t drafter_param_numel(const drafter_config *c);
// drafter_init: allocate and lay out; weights initialised from seed (normal(0, 0.02) for matrices,
// 1 for norms, the identity for a conv base kernel: drafter_param.is_delta), embed/lm_head from the given host tensors (F32/BF16/F16, [V, H]; lm_head may be
// NULL = tied). -1 with error_set on a shape mismatch or out of memory.
int drafter_init(drafter *d, const drafter_config *c, backend *be, uint64_t seed, tensor embed, const tensor *lm_head);
void drafter_free(drafter *d);
const drafter_param *drafter_find(const drafter *d, const char *name);
// drafter_load_weights: every trainable tensor from a safetensors file by its export name (then
// drafter_sync_compute). -1 naming the tensor when one is missing, mis-shaped or of another dtype.
int drafter_load_weights(drafter *d, const st_file *f);
// drafter_sync_compute: refresh the compute copy from the master weights (no-op on the CPU).
void drafter_sync_compute(drafter *d);
// drafter_export: config.json + model.safetensors (fp32 master, or bf16 when bf16 = 1) into dir,
// written to a temporary directory and renamed, loadable by the dflash package.
int drafter_export(const drafter *d, const char *dir, int bf16);