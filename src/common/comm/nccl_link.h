// nccl_link.h: the payload links between teacher GPUs and student GPUs over NCCL (SPEC §8), in
// plain C.
//
// One NCCL communicator over all ranks is split into one two-rank communicator per (teacher,
// student) pair (a teacher group's last stage, world.h) and per pair of neighbouring stages of a
// teacher group, each with its own CUDA stream on both sides: the transfers of different pairs
// never queue behind one another, and a pair's transfers arrive in the order they were sent, which
// is the order the student asked for them (the control messages stay on MPI). NCCL needs one GPU
// per rank, so nccl_links_open first checks over MPI that no two ranks share a GPU (host and PCI
// bus id) and otherwise declines, leaving the payloads on MPI.
//
// nccl_link.cu implements it (builds with DFLASH_HAVE_CUDA); nccl_link.c is the stub of CPU-only
// builds, whose nccl_links_open declines.
#pragma once
#include <stddef.h>

#include "common/comm/world.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nccl_links nccl_links;

// A transfer in flight: its completion event (NULL: nothing pending).
typedef struct {
    void *event;
} nccl_ticket;

// nccl_links_open: collective over MPI_COMM_WORLD (every rank calls it, with its CUDA device
// ordinal, or -1 when it is not on a GPU). *out = the links, or NULL with the reason in
// why[n] when NCCL cannot carry the payloads (a rank off the GPU, two ranks on one GPU, a CPU-only
// build); -1 (error_set) on an NCCL failure, the same on every rank.
int nccl_links_open(nccl_links **out, const world *w, int device, char *why, size_t n);
// nccl_link_send / nccl_link_recv: enqueue `bytes` from / into device memory on the stream of the
// pair (this rank, peer world rank), after the work already on `after_stream` (a cudaStream_t of
// the caller, NULL = none), and record the completion in *t. -1 (error_set) on failure.
int nccl_link_send(nccl_links *l, int peer, const void *dev, size_t bytes, void *after_stream, nccl_ticket *t);
int nccl_link_recv(nccl_links *l, int peer, void *dev, size_t bytes, nccl_ticket *t);
// nccl_ticket_done: 1 when the transfer has completed (or none is pending), 0 while it runs, -1
// (error_set) on a CUDA error. nccl_ticket_wait blocks; nccl_ticket_free releases the event.
int nccl_ticket_done(nccl_ticket *t);
int nccl_ticket_wait(nccl_ticket *t);
void nccl_ticket_free(nccl_ticket *t);
// nccl_links_check: for the watchdog thread: 1 with msg naming the peer rank and NCCL's reason
// when a communicator reports an asynchronous error (ncclCommGetAsyncError), else 0.
int nccl_links_check(nccl_links *l, char *msg, size_t n);
void nccl_links_close(nccl_links *l);

#ifdef __cplusplus
}
#endif
