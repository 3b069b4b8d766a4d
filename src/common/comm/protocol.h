// protocol.h: the request/reply protocol of a training job between students and teachers (SPEC
// §8), and every message tag of the job, in one place. It rides on payload_link.h.
//
//   student -> a teacher group's first stage, TAG_REQUEST:  int64[PROTOCOL_REQUEST] = kind
//              (WIRE_TRAIN, WIRE_HELDOUT, or WIRE_STOP: this student is done), the batch's index,
//              the student's world rank (where the payload goes)
//   the group's last stage -> that student, TAG_DATA:      the payload (wire.h), then, when the
//              link carries device blocks, the features as one device block (features_on_link)
//   stage -> next stage, TAG_STAGE:                         a batch on its way (teacher_group.h)
//   regenerate's stage -> next stage and back, TAG_REGEN:   the decoder's calls (regen_link.h)
//   transport-test, TAG_TRANSPORT_TEST:                     its payloads (transport_test.h)
//
// Credits: a student keeps at most protocol_credits requests outstanding per teacher; a credit
// comes back when the payload lands (batch_source.h); a teacher's send ring holds every student's
// credits and one more to compute into (protocol_send_buffers).
#pragma once
#include <stdint.h>

#include "common/comm/payload_link.h"
#include "common/core/config.h"

enum { TAG_REQUEST = 101, TAG_DATA = 102, TAG_STAGE = 103, TAG_REGEN = 104, TAG_TRANSPORT_TEST = 201 };

#define PROTOCOL_REQUEST 3 // int64 words of a request

typedef struct {
    int64_t kind, index; // WIRE_TRAIN / WIRE_HELDOUT / WIRE_STOP, and the batch's index in its plan
    int64_t student;     // the requesting student's world rank
} protocol_request;

// protocol_request_send: request r to world rank `teacher` (blocking: a request is 24 bytes).
void protocol_request_send(payload_link *l, int teacher, const protocol_request *r);
// protocol_request_recv: the next request from any student (a sleeping wait; the caller times it
// under the watchdog); *from = the sender's world rank. -1 (error_set) on a malformed request.
int protocol_request_recv(payload_link *l, protocol_request *r, int *from);

// protocol_credits: the requests a student keeps outstanding per teacher: transport.slots, plus
// G - 1 for a group of G stages, so that every stage has a batch while the last one's travels.
int protocol_credits(const config *cfg, int G);
// protocol_send_buffers: the batches a teacher rank may have in flight at once (its send ring):
// every student's credits, and one more to compute into.
int protocol_send_buffers(const config *cfg, int G, int students);
