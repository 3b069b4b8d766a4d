// students.h: collectives among the student ranks, each under the watchdog: a student that died
// or hangs ends the job with its rank named instead of leaving the others in the collective forever.
#pragma once
#include "common/backend/backend.h"
#include <mpi.h>
#include <stdint.h>

#include "student/model/drafter.h"
#include "student/model/step.h"

// students_set_ranks: the students are world ranks first..last (whom the watchdog names).
void students_set_ranks(int first, int last);
// students_allreduce: in place over comm (the students' communicator), n elements of any count
// (msg_allreduce: pieces below INT_MAX); `what` names the wait.
void students_allreduce(void *buf, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *what);
// students_allgather_i64: every student's `mine`, in student order, into all[S].
void students_allgather_i64(int64_t mine, int64_t *all, MPI_Comm comm, const char *what);
// students_grads: how the students sum their un-normalised fp32 gradients before each update
// (transport.grad_allreduce). NCCL: GPU to GPU on its own stream, bucket by bucket
// (grad_buckets.h) as the last micro-batch's backward finishes each, so the sum overlaps the rest
// of the backward. MPI on the CPU backend: the whole gradient at once, in place. MPI on a GPU (MPI
// need not be CUDA-aware): the same buckets, each as the backward finishes it, cut into pieces of
// at most one chunk of a ring of STUDENTS_GRAD_CHUNKS pinned host chunks; each piece is copied to its
// chunk asynchronously (after the backward queued so far), MPI_Iallreduce'd in place there (on a
// duplicate of comm, every student starting the pieces in the same order) and copied back
// asynchronously, while the backward goes on; a piece that finds the ring full stays pending until a
// chunk is free (the backward never waits; the finish does, under the watchdog). The sums are those
// of one all-reduce of the whole gradient: MPI_SUM of fp32 is element by element, and Open MPI's
// in-place MPI_Iallreduce adds every element in the same order whatever the count, so cutting the
// gradient into pieces changes which message carries an element, not what is added to it (bit for
// bit with two students, whose sum is one addition, in any MPI; see docs/distributed.md).
#define STUDENTS_GRAD_CHUNKS 4
#define STUDENTS_GRAD_CHUNK_MAX ((int64_t)16 << 20) // elements of one chunk at most (64 MiB of fp32)
// students_grads_chunk: the elements of one chunk for a gradient of numel elements: a quarter of it
// (rounded up to 64 elements), at most STUDENTS_GRAD_CHUNK_MAX.
int64_t students_grads_chunk(int64_t numel);
// students_grads_pinned_bytes: the pinned host memory of the ring (STUDENTS_GRAD_CHUNKS chunks, each
// backend_host_bytes) that the MPI path on backend be takes for a gradient of numel elements (0 on
// the CPU backend); host memory, not the device's (--plan reports it beside the device's parts).
// When the system refuses to pin it, the ring is pinned at smaller chunks (halving down to
// STUDENTS_GRAD_CHUNK_MIN elements, the same on every student): still asynchronous; when not even
// those, it is pageable and its copies wait for the end of the step's backward (the backward never
// waits on a copy); either with one warning (backend_host_warn).
#define STUDENTS_GRAD_CHUNK_MIN ((int64_t)1024)
size_t students_grads_pinned_bytes(const backend *be, int64_t numel);
typedef struct students_grads students_grads;
// students_grads_open: collective over comm (the students). want: "auto" (NCCL when every student
// has a GPU of its own, else MPI), "mpi" or "nccl" (-1, error_set naming the key and the reason,
// when NCCL cannot be had). The CPU backend uses MPI unless nccl is asked for. log = 1 (the first
// student): one log line saying which path and why. -1 (error_set) the same on every student.
int students_grads_open(students_grads **out, drafter *d, MPI_Comm comm, const char *want, int log);
// students_grads_arm: on = 1 before the last micro-batch of an optimizer step (its student_step then
// starts each bucket's sum as soon as its backward is queued), 0 before any other. No-op on the CPU
// backend's MPI path.
void students_grads_arm(students_grads *g, student_work *w, int on);
// students_grads_finish: after the step's micro-batches, before the update: the buckets not started
// yet (all of them after a last micro-batch without anchors), in the same order on every student,
// then d->grad holds the sum on the backend's stream. Waits under the watchdog. 0 or -1 (error_set).
int students_grads_finish(students_grads *g);
// students_grads_close: abort = 1 after an error (a peer may never issue its part). NULL: no-op.
// Otherwise the first student logs how many bucket sums started during the backward (NCCL, and
// MPI on a GPU).
void students_grads_close(students_grads *g, int abort);
