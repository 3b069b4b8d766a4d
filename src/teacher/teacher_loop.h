// teacher_loop.h: a teacher rank in a training job (SPEC §8).
//
// The teacher waits for requests from the students (protocol.h), builds the named batch from the
// batch plan that every rank derives from the seed, runs the target forward and sends the payload
// (wire.h) back over the payload link (payload_link.h) from a ring of pinned host buffers, filled
// by asynchronous copies after the forward (backend.h), so it computes the next batch while the
// last one is in flight. It stops when every
// student has sent WIRE_STOP, and logs how many batches it served. A teacher of G ranks
// (world.teacher_group_size) is a pipeline: its first stage takes the requests and reads the
// batches, each stage runs its layers and passes the batch on (teacher_group.h), the last sends
// the payload; the stop travels down the stages.
#pragma once

#include "common/backend/backend.h"
#include "common/comm/payload_link.h"
#include "common/comm/world.h"
#include "common/core/config.h"

// teacher_serve: answer the students' requests until every student has stopped, over link (with
// device blocks it carries the features GPU to GPU, the rest of each payload in the host message).
// 0, -1 with error_set, or WORLD_REPORTED_ELSEWHERE on every teacher but the first for an error all
// find alike.
int teacher_serve(const world *w, const config *cfg, backend *be, payload_link *link);
