// teacher_group.h: the stage-to-stage link of a teacher group (world.teacher_group_size = G): a
// teacher is G consecutive ranks, stage s holding the target's layers [bounds[s], bounds[s+1])
// (target_stage_split), and each batch passes from stage to stage as one message:
//   header   int64[STAGE_HEADER]: kind, index, S, n_seq, reply rank, largest peak so far, x on link
//   tokens   int32[S], cu int32[n_seq + 1], mask uint8[S]     (padded to 8 bytes)
//   x        act[S, H]          the residual stream after the sender's last layer
//   features act[S, n_feat*H]   the features of the layers so far (the later columns unset)
// It travels as one host message of the payload link (payload_link.h, tag TAG_STAGE); x and the
// features follow it as one device block when the link carries them (NCCL: one two-rank
// communicator per neighbouring pair of stages), else they are in the message, from host memory.
// A sender copies them into the next buffer of a ring and goes on with the next batch while the
// message is in flight, so with several batches requested every stage works at once. A message of
// kind WIRE_STOP ends the pipeline, stage by stage.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/comm/payload_link.h"
#include "common/comm/world.h"
#include "teacher/target.h"

#define STAGE_HEADER 8

// teacher_stage_select: m's layer range (config read, m->be set) for this rank's stage of its group
// (world w; G = 1: the whole model); rank 0 states the split in one line. -1 with error_set.
int teacher_stage_select(const world *w, target_model *m);

// What travels with a batch besides its activations.
typedef struct {
    int64_t kind, index;  // WIRE_TRAIN / WIRE_HELDOUT / WIRE_STOP and the batch's index (dump-features: the shard)
    int64_t S, n_seq;
    int64_t reply;        // the world rank the last stage sends the payload to (a student)
    int64_t peak;         // the largest memory peak of the stages so far (bytes)
} stage_header;

typedef struct {
    const world *w;
    backend *be;
    payload_link *link;      // its device blocks (payload_link_device) carry x and the features, else the message
    int prev, next;          // world ranks of the neighbouring stages (-1: none)
    int64_t H, D;            // hidden size, n_feat * H
    size_t e;                // bytes of an activation element
    int max_tokens;
    int on_link;             // payload_link_device(link)
    size_t max_bytes;        // one host message at max_tokens
    // sending: a ring of n_buf host buffers (and device buffers with device blocks)
    int n_buf, next_slot;
    char **bufs;
    payload_ticket *sends;
    void **dev;              // [n_buf] x then features, act dtype (device blocks only)
    payload_ticket *tickets;
    // receiving
    char *in;                // one message
    void *in_dev;            // x then features (device blocks only)
    payload_ticket in_ticket;
} stage_link;

// stage_link_init (its device memory: teacher_stage_ring_bytes, teacher_plan.h): for this teacher rank of w (stage w->stage of group w->group), n_buf send buffers
// (the batches it may have in flight to the next stage). -1 with error_set when a device buffer does
// not fit.
int stage_link_init(stage_link *l, const world *w, backend *be, payload_link *link, int n_buf, int max_tokens,
                    int64_t H, int64_t D);
// stage_send: the batch h (tokens, cu, mask on the host; tw->x and tw->features on the device) to
// the next stage. -1 with error_set.
int stage_send(stage_link *l, const stage_header *h, const int32_t *tokens, const int32_t *cu, const uint8_t *mask,
               const target_work *tw);
// stage_send_stop: the pipeline ends after the batches already sent.
void stage_send_stop(stage_link *l);
// stage_recv: the next message from the previous stage, waited for under the watchdog with the given
// patience: 1 a batch (h, tokens, cu and mask filled; its x and features copied into tw->x and
// tw->features), 0 the stop, -1 with error_set on a malformed message or a failed transfer.
int stage_recv(stage_link *l, stage_header *h, int32_t *tokens, int32_t *cu, uint8_t *mask, target_work *tw,
               double patience);
// stage_link_free: waits for the sends still in flight, then frees.
void stage_link_free(stage_link *l);
