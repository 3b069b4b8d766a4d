// regen_link.h: the KV-cached decoder of --mode regenerate across a teacher group
// (world.teacher_group_size = G): stage k of the group holds the target's layers of its range
// (teacher_stage_select) and a target_decoder over them (target_decode.h: a stage caches its own
// layers only, embeds only on the first stage, computes the next tokens only on the last).
//
// The group's first stage drives: regenerate.c calls regen_link_add_batch / _step / _remove / _reset
// there as it would call the decoder, and each call is applied on this stage, then sent on to the
// next stage as one host message of the payload link (payload_link.h; below), applied there and sent on, so every stage's decoder goes
// through the same calls in the same order and holds the same slots. The last stage sends the
// chosen token ids back to the first. G = 1: the calls go straight to the decoder.
//
// A message from stage k to k+1 (world ranks, tag TAG_REGEN, protocol.h):
//   int64[4]  op (ADD, STEP, REMOVE, RESET, STOP), R, n, has_u
//   int32[R]  ADD: the n prompts packed (R = their tokens); STEP: the step's tokens (R = n = n_seq)
//             (padded to 8)
//   int32[n]  ADD only: the prompts' lengths (padded to 8)
//   f64[n]    the draws when has_u (sampling; only the last stage uses them)
//   act[R, H] the residual stream after stage k's layers (ADD, STEP), copied from the device
// REMOVE carries the slot in n; the reply of the last stage is int32[n] (ADD: one per prompt).
// When the link carries device blocks (NCCL: every rank on a GPU of its own) the rows go GPU to GPU
// instead, as a device block right after the message (which then ends before them), from and into
// the decoder's w.x.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/comm/payload_link.h"
#include "common/comm/world.h"
#include "teacher/target_decode.h"

typedef struct {
    target_decoder *d;
    int G, first, last;    // the group's size; this rank is its first / last stage
    int prev, next, head;  // world ranks: previous stage, next stage (-1: none), the group's first stage
    size_t x_bytes;        // one row of the residual stream
    payload_link *link;    // the stages' messages (NULL: G = 1, none)
    int on_link;           // its device blocks carry the rows (else they are in the message, from host memory)
    char *buf;             // one message of the largest size
    size_t cap;
} regen_link;

// regen_link_init: the link of this rank of w over decoder d (made on this rank's stage); link:
// the job's payload link (used when G > 1).
void regen_link_init(regen_link *l, const world *w, target_decoder *d, payload_link *link);
void regen_link_free(regen_link *l);

// On the first stage, as target_decoder_add_batch / _step_sample / _remove / _reset (target_decode.h):
int regen_link_add_batch(regen_link *l, int k, const int32_t *ids, const int *plen, const double *u, int32_t *next);
int regen_link_step(regen_link *l, const int32_t *tokens, const double *u, int32_t *next);
void regen_link_remove(regen_link *l, int s);
void regen_link_reset(regen_link *l);
// regen_link_stop: the other stages return from regen_link_follow.
void regen_link_stop(regen_link *l);

// regen_link_follow: on a stage after the first: apply the first stage's calls until it stops. -1
// with error_set when a call fails here (the first stage checked its inputs, so only an internal
// failure can).
int regen_link_follow(regen_link *l);
