// memory_plan.h: the student's memory planner (SPEC §5).
//
// Given a budget in bytes, the planner takes, among the plans that fit, the one with the least
// estimated step time (plan_step_seconds): for each anchors per chunk C (one per number of chunks),
// the loss mode ROWS (2 GEMMs) with the most rows per loss chunk that fit, and TILES (vocabulary
// tiles, two passes, 3 GEMMs) at each tile width with the most rows that fit. Every byte it counts
// comes from the same carving code the run uses (dry arenas), so the plan is the allocation. An
// infeasible budget is refused before anything large is allocated, with the smallest budget that works.
#pragma once
#include <stddef.h>
#include <stdio.h>

#include "common/backend/backend.h"
#include "student/model/drafter_config.h"
#include "student/model/step.h"

typedef struct {
    size_t budget;            // bytes for the student's device memory (0 = no limit: C = max_anchors)
    int max_tokens, max_seqs; // the largest packed batch
    int max_anchors;          // anchors per micro-batch
    int k;                    // teacher top-k
    int adam;                 // count AdamW moments (training), 0 for step-dump
    int ema;                  // count an EMA copy on the device
    size_t optim_scratch;     // the optimizer's device scratch beyond its moments (train.optimizer muon:
                              // optim_muon_plan_bytes, the Newton-Schulz matrices); 0 for AdamW
    int tied;                 // the target ties lm_head to the embedding
    int force_chunk;          // > 0: use this C (tests), still checked against the budget
    int force_mode;           // -1 planner's choice, else LOSS_MODE_ROWS / LOSS_MODE_TILES
    int force_row_chunk;      // > 0: rows per loss chunk (a multiple of B-1)
    int force_vocab_tile;     // > 0: vocabulary tile in mode TILES
    size_t link_bytes;        // the NCCL receive ring (GPU memory; 0 when the payloads come over MPI)
    size_t host_payload;      // pinned host memory beside the plan: the payload buffers
                              // (batch_source_pinned_bytes) ...
    size_t host_grads;        // ... and the MPI gradient ring on a GPU (students_grads_pinned_bytes):
                              // reported, never in the device's total
} plan_request;

typedef struct {
    size_t weights_master, grads, weights_compute, adam, ema, frozen; // drafter state
    size_t optim_scratch;                                             // plan_request's
    size_t receive, context, chunk, loss;                             // step work (student_work_parts)
    size_t library;                                                   // cuBLAS workspace (CUDA)
    size_t links;                                                     // NCCL receive ring
    size_t total;
    size_t host_payload, host_grads; // pinned host memory (plan_request's), not in total
    size_t host_pinned;       // their sum
    double est_s;             // the chosen plan's estimated step time (plan_step_seconds)
    int anchors;              // ... for this many anchors per step
    int has_runner_up;        // the fastest plan of another C or loss mode that fits
    student_plan runner_up;
    double runner_up_s;
} plan_breakdown;

// plan_make: -1 with error_set ("needs at least N bytes") when the budget cannot hold C = 1 with
// the smallest loss workspace.
int plan_make(const drafter_config *c, const backend *be, const plan_request *r, student_plan *out, plan_breakdown *bd);
// plan_step_seconds: the estimated time of one student step of r->max_anchors anchors under plan p:
// GEMM FLOPs of the drafter layers (forward, dX, dW) at the chunk's tokens, the attention over the
// keys an anchor sees on average (half its sequence, capped by a sliding window, plus its block),
// the loss (2 lm_head GEMMs in mode ROWS, 3 in TILES, at the efficiency of the rows or tile width
// per GEMM, and one or two scans of the logits), a fixed cost per op of each chunk and loss
// sub-chunk, and the context's projections; rates from a table per backend kind (memory_plan.c).
double plan_step_seconds(const drafter_config *c, const backend *be, const plan_request *r, const student_plan *p);
// plan_print: the per-rank breakdown, one line per part (then pinned host memory, when there is
// any, on a line of its own outside the device's total), then the chosen C and loss mode.
void plan_print(FILE *f, const plan_breakdown *bd, const student_plan *p, size_t budget);
// plan_print_titled: the same under another first line (--plan names the ranks and the device).
void plan_print_titled(FILE *f, const char *title, const plan_breakdown *bd, const student_plan *p, size_t budget);
