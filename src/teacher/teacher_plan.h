// teacher_plan.h: what a training job's teacher computes (the contract teachers and students derive
// alike) and how much memory it takes, from the target's config.json alone: per stage when the
// teacher is a group of ranks (world.teacher_group_size = G, target_stage_split).
//
// A stage's memory on its device is its weights (target_stage_weight_bytes of its layers: the
// embedding on the first stage, the final norm and lm_head on the last), its forward work
// (target_work_bytes for its range: no lm_head logits tile before the last stage) and, when NCCL
// carries the activations and payloads, its device buffers for them (teacher_stage_ring_bytes).
#pragma once

#include <stdint.h>

#include "common/backend/backend.h"
#include "common/comm/world.h"
#include "common/core/config.h"
#include "teacher/target.h"

// The settings teachers and students must agree on, derived the same way on both sides.
typedef struct {
    int n_feat;
    long long layer_ids[64];
    int topk;
    int max_tokens;
} teacher_contract;

// One stage's memory (G = 1: the whole teacher, stage 0 of 1).
typedef struct {
    int stage, G;
    int64_t l0, l1;  // its layers [l0, l1)
    int tokens;      // the batch the work is counted for
    size_t weights;  // target_stage_weight_bytes(l0, l1) in the backend's compute dtype
    size_t work;     // target_work_bytes of the range at `tokens`
    size_t ring;     // teacher_stage_ring_bytes
    size_t reserve;  // teacher_stage_reserve_bytes: the CUDA context, cuBLAS, its NCCL communicators
    size_t total;    // weights + work + ring + reserve
} teacher_stage_mem;

// teacher_contract_make: layer ids (configured or SPEC §2 default for the target's depth), top-k
// and batch size. -1 with error_set.
int teacher_contract_make(const config *cfg, long long n_target_layers, teacher_contract *c);
// teacher_train_outputs: the outputs a training job's teacher produces from target m (its config
// read, m->be set). -1 with error_set.
int teacher_train_outputs(const config *cfg, const target_model *m, teacher_contract *tc, target_outputs *o);

// teacher_stage_ring_bytes: the device buffers of stage `stage` of a group of G for the NCCL path
// (0 when nccl is 0: over MPI they live in host memory), T = ct->max_tokens, D = n_feat * H, bf16:
//   a stage before the last: its send ring to the next stage, n_buf buffers of T * (H + D)
//     elements (the residual stream and the features so far), n_buf = (transport.slots + G - 1) *
//     students + 1 (students = 0, dump-features: 2);
//   a stage after the first: one receive buffer of T * (H + D) elements;
//   the last stage (and a teacher of one rank) with students: the payload feature ring, n_buf
//     buffers of T * D elements (G = 1: transport.slots * students + 1, as teacher_serve has it).
size_t teacher_stage_ring_bytes(const config *cfg, const target_config *tc, const teacher_contract *ct, int G,
                                int stage, int students, int nccl);

// teacher_payload_bytes: one buffer of a teacher's payload ring: a batch of T tokens with top-k k
// (wire_bytes), with its features (D per token, bf16) unless they go GPU to GPU as device blocks
// (on_link: the link chosen, payload_link_device): then only the tokens, top-k and LSE cross the host.
size_t teacher_payload_bytes(int T, int64_t k, int64_t D, int on_link);
// teacher_pinned_bytes: the page-locked host memory stage `stage` of a group of G on backend be asks
// for (0 on the CPU backend): the last stage (or a teacher of one rank) with students its payload
// ring, protocol_send_buffers buffers of teacher_payload_bytes (T = ct->max_tokens, D = n_feat x
// hidden), each backend_host_bytes; and a stage with MoE layers the expert counts' download buffer
// (ops_moe_cuda.cu: max(E, 64) + 1 int32s, cudaHostAlloc'd at its first MoE block). What
// teacher_serve allocates, and what --plan counts. -1 cast to size_t never: a G past the layers
// plans the split of the layers it has (target_stage_split's error is --plan's to report).
size_t teacher_pinned_bytes(const backend *be, const config *cfg, const target_config *tc, const teacher_contract *ct,
                            int G, int stage, int students, int on_link);
// teacher_moe_pinned_bytes: the MoE part of it alone (0 without a MoE layer in [l0, l1) or on the CPU).
size_t teacher_moe_pinned_bytes(const backend *be, const target_config *tc, int64_t l0, int64_t l1);

// teacher_group_mem: the memory of every stage of a group of G on backend be (its kind decides the
// dtype) for batches of T tokens: stages[G] (the split of target_stage_split). -1 with error_set
// naming world.teacher_group_size when G is not in [1, n_layers].
int teacher_group_mem(const config *cfg, const target_config *tc, backend *be, const target_outputs *o, int T, int G,
                      int students, int nccl, teacher_stage_mem *stages);

// teacher_stage_reserve_bytes: what stage s of G takes on its GPU besides its plan (gpu_reserve.h;
// 0 on the CPU): a teacher budget holds its weights, work, NCCL buffers and this.
size_t teacher_stage_reserve_bytes(const backend *be, int G, int s, int students, int nccl);

// teacher_plan_min_group: the smallest G in [1, n_layers] whose every stage (weights + work + ring)
// fits budget; *largest gets that G's largest stage total. 0 when no G fits: *largest then gets the
// smallest largest-stage total over every G, and *best_G that G (either may be NULL).
int teacher_plan_min_group(const config *cfg, const target_config *tc, backend *be, const target_outputs *o, int T,
                           int students, int nccl, size_t budget, size_t *largest, int *best_G);

// teacher_stage_budget: with teacher.mem_budget set, m's stage (its layer range; the whole model when
// none is set) must hold its weights, the work of a batch of T tokens and its NCCL buffers
// (teacher_stage_ring_bytes for G = world.teacher_group_size, the given students and nccl). Sets
// o->vocab_tile to the tile of the work. -1 with error_set naming both keys; the whole model that
// does not fit names the smallest world.teacher_group_size that does ("set world.teacher_group_size
// to N (its largest stage then takes X of Y)"), a stage that does not fit names the stage, its
// layers and bytes (and that group size).
int teacher_stage_budget(const config *cfg, const target_model *m, target_outputs *o, int T, int students, int nccl);
// teacher_group_budget: teacher_stage_budget for every stage of a group of G (target config tc on
// backend be), so every rank of the job finds the same error: the first stage that does not fit.
int teacher_group_budget(const config *cfg, const target_config *tc, backend *be, target_outputs *o, int T, int G,
                         int students, int nccl);

// teacher_plan_print: the teacher's memory (weights + work for data.max_tokens_per_batch) from the
// target's config.json alone, printed by the first teacher (--plan); no weight is read. With
// w->group_size = G > 1 one row per stage (layers, weights, forward work, NCCL buffers, total,
// against teacher.mem_budget), the split's balance, and one "teacher_stage_bytes S L0 L1 WEIGHTS
// WORK RING TOTAL" line per stage. The NCCL buffers are counted for G > 1 when be is CUDA and
// transport.payload is not mpi.
int teacher_plan_print(const world *w, const config *cfg, backend *be);
