// batch_source.h: where a student's batches come from, in the order it consumes them.
//
// The schedule: this student's items (one per batch it consumes) in groups that are the same on
// every student (an evaluation, or one optimizer step), so the students' collective calls line up
// even when a group holds no batch of this student: an evaluation first, then each step, with an
// evaluation after every train.eval_interval steps and after the last.
//
// The source: live, each item is requested from a teacher while credits allow (at most `slots`
// outstanding per teacher; the next request goes to the teacher with the fewest), payloads land in
// any order and are consumed in schedule order (protocol.h; over the payload link, payload_link.h);
// when the link carries device blocks the features come GPU to GPU after the payload. Offline, the batch is packed from the feature files (data.features) into the same
// wire layout.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/comm/payload_link.h"
#include "common/comm/wire.h"
#include "common/comm/world.h"
#include "common/core/config.h"
#include "common/data/batchplan.h"
#include "common/data/featreader.h"

typedef struct {
    int64_t kind, index; // WIRE_TRAIN / WIRE_HELDOUT and the batch's index in its plan
} batch_item;

typedef struct {
    int64_t kind;         // WIRE_HELDOUT or WIRE_TRAIN
    int64_t first, count; // items of this student
} batch_group;

// The schedule is computed, not stored: any train.steps costs nothing up front.
typedef struct {
    int student, students;      // this student (s) of S
    int64_t batches_per_step, steps, interval; // G = train.batches_per_step, train.steps, train.eval_interval
    int64_t items_per_step, items_per_eval;     // this student's items per training step (Tc) and per evaluation (e)
    int64_t evals;              // 1 when there are evaluations (held-out batches), else 0
    int64_t n_items, n_groups;
} batch_schedule;

// batch_schedule_make: student s of S; evaluations over min(train.eval_batches, n_heldout_batches)
// batches (train.eval_batches 0: all of them).
void batch_schedule_make(batch_schedule *sc, const config *cfg, int s, int S, int64_t n_heldout_batches);
// batch_schedule_eval_only: no training step, the first evaluation alone (--mode eval).
void batch_schedule_eval_only(batch_schedule *sc);
void batch_schedule_free(batch_schedule *sc);
// batch_schedule_item: item n (0 <= n < n_items) of this student, in consumption order.
batch_item batch_schedule_item(const batch_schedule *sc, int64_t n);
// batch_schedule_group: group gi (0 <= gi < n_groups), in order.
batch_group batch_schedule_group(const batch_schedule *sc, int64_t gi);
// batch_schedule_group_of_step: the index of training step t's group (t < steps).
int64_t batch_schedule_group_of_step(const batch_schedule *sc, int64_t t);

typedef struct {
    int live;
    int teachers, group_size;    // teachers, each a group of ranks: requests to the first, payloads from the last
    int slots, my_rank;
    size_t max_bytes;            // one payload at the largest batch
    // live
    int *outstanding;            // [T]
    int64_t *served;             // [T] batches each teacher sent us
    int n_buf;
    char **bufs;
    int *buf_free;               // [n_buf]
    // per item n in flight, at n mod n_buf:
    int *buf_of;                 // its buffer
    int *teacher_of;             // its teacher
    payload_ticket *recv;        // its payload's receive
    int *landed;                 // its payload (the host message) is here (its teacher's credit is back)
    int *arrived;                // ready to be consumed (with device blocks: its features are here too)
    size_t *bytes_of;            // payload bytes
    int64_t next_request, next_consume;
    double wait_s;               // time spent waiting for data
    int64_t sealed;              // payloads checked against their seals (transport.check_payloads)
    size_t sealed_max;           // the largest of them, bytes
    int64_t last_peak[1024];     // teachers' reported peak bytes
    payload_link *link;          // the teachers' link
    int on_link;                 // its device blocks carry the features (else every payload comes whole)
    backend *be;                 // owns bufs (pinned host memory), feat_dev, the events
    size_t feat_bytes;           // one batch's features, bf16
    void **feat_dev;             // [n_buf] GPU buffers for the features (on_link)
    payload_ticket *tickets;     // [n_buf] their receives
    int *posted;                 // its features' receive is enqueued
    int *blocked;                // [T] scratch of the progress pass
    void *features_dev;          // the batch batch_source_get returned: its features in GPU memory (on_link, up_dev)
    void **uploaded;             // [n_buf] the upload that last read each buffer (an event of be)
    void *up_dev;                // over MPI on a CUDA backend: the device buffer the features are uploaded into
    size_t up_bytes;             // its size
    // offline
    featreader *fr;
    batchplan *bp;
    char *offline_buf;
} batch_source;

// batch_source_buffers: the payload buffers of a live source (in flight and arrived, not yet
// consumed): twice every teacher's credits (protocol_credits, protocol.h), and one more.
int batch_source_buffers(const config *cfg, const world *w);
// batch_source_payload_bytes: one payload buffer of a live source: a batch of
// data.max_tokens_per_batch tokens with top-k k (wire_bytes), with its features (D per token, bf16)
// unless they come GPU to GPU as device blocks (on_link: the link chosen, payload_link_device): then
// only the tokens, top-k ids and logits, LSE and header cross the host.
size_t batch_source_payload_bytes(const config *cfg, int64_t k, int64_t D, int on_link);
// batch_source_pinned_bytes: the page-locked host memory a live source on backend be asks for:
// batch_source_buffers(cfg, w) buffers of batch_source_payload_bytes, each backend_host_bytes (0 on
// the CPU backend). What batch_source_init_live allocates, and what --plan counts.
size_t batch_source_pinned_bytes(const backend *be, const config *cfg, const world *w, int64_t k, int64_t D, int on_link);
// batch_source_init_live: the teachers of world w (w->groups of them: a request goes to a group's
// first rank, its payload comes from the last), `credits` requests outstanding per teacher
// (protocol_credits), n_buf payload buffers (in flight and arrived, not yet consumed: the per-item
// state is a ring of that size), over link; when it carries device blocks, one GPU buffer of
// feat_bytes per payload buffer, from be. The payload buffers are be's pinned host memory
// (backend_host_alloc; plain memory on the CPU), max_bytes each (batch_source_payload_bytes for the
// link); those the system refuses to pin are pageable, with one warning (backend_host_warn).
void batch_source_init_live(batch_source *s, const world *w, int credits, size_t max_bytes, int n_buf,
                            payload_link *link, size_t feat_bytes, backend *be);
// batch_source_upload_into: over MPI (no device blocks) on a CUDA backend, batch_source_get uploads
// each batch's features (bf16, the compute dtype) from its pinned buffer into dev (bytes long; a
// larger batch is an error naming its teacher) asynchronously on the backend's stream, and returns
// dev in features_dev: no host conversion, no wait. Elsewhere a no-op. dev is the step's own
// feature buffer (student_work's features), which the step then uses as it is.
void batch_source_upload_into(batch_source *s, void *dev, size_t bytes);
// batch_source_init_offline: batches packed from fr by the plan bp (fr and bp stay the caller's).
void batch_source_init_offline(batch_source *s, featreader *fr, batchplan *bp, size_t max_bytes);
// batch_source_start_at: the first item to request and consume (a resumed run skips the groups
// before its checkpoint and asks no teacher for their batches).
void batch_source_start_at(batch_source *s, int64_t n);
// batch_source_get: item n as a wire batch (live: wait for its payload, keeping the teachers busy;
// offline: read it). Features in GPU memory (a device block) are left in s->features_dev (NULL when they are
// in the payload, wb->features). 0, or -1 with error_set.
int batch_source_get(batch_source *s, const batch_schedule *sc, int64_t n, wire_batch *wb);
// batch_source_release: item n is consumed; its buffer takes the next payload.
void batch_source_release(batch_source *s, int64_t n);
// batch_source_drain: wait for every payload already requested (a student that stops early still
// has batches in flight; their buffers must outlive the transfers). 0, or -1 with error_set.
int batch_source_drain(batch_source *s);
// batch_source_stop_teachers: tell every teacher this student is done (and stop watching them).
void batch_source_stop_teachers(batch_source *s);
void batch_source_free(batch_source *s);
