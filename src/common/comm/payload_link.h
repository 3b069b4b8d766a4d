// payload_link.h: the one seam every point-to-point message of a job goes through (SPEC §8): the
// students' requests, the teachers' payloads, the stages' batches and regenerate's calls.
//
// A payload link is one transport's connection of this rank to every other rank of the job. It
// moves two kinds of things, each as a ticket (one transfer in flight, below):
//   - host messages: bytes in host memory, any size (64-bit), to one peer with a tag, received from
//     one peer or LINK_ANY with a capacity; between a pair of ranks and a tag they arrive in the
//     order they were posted (the requests, the headers, a whole payload on the MPI path);
//   - device blocks (payload_link_device(l) = 1 only): bytes in the backend's device memory, to or
//     from one peer, in the order posted between that pair; a receiver posts a block once it knows
//     its size (from the host message before it). On a transport without them the callers put the
//     device data into their host messages (copied through the host), as the MPI transport needs.
//
// The transports are a table each (payload_link_ops.h), one file per transport, listed in
// payload_link.c's registry: "mpi" (payload_link_mpi.c: host messages over MPI, msg.h; no device
// blocks; always opens) and "nccl" (payload_link_nccl.c: host messages over MPI as "mpi" does,
// device blocks GPU to GPU over NCCL, one two-rank communicator per teacher-student pair and per
// pair of neighbouring stages; declines unless every rank has a GPU of its own and CUDA is built
// in). docs/distributed.md ("The payload link") says how to add one.
//
// The wire formats and tags that ride on it are protocol.h's (requests, credits), wire.h's (the
// payload), teacher_group.h's (a stage's batch) and regen_link.h's (regenerate's calls).
#pragma once
#include <mpi.h>
#include <stddef.h>

#include "common/comm/world.h"

#define LINK_ANY (-1) // a host receive from whichever peer sends first

typedef struct payload_link payload_link;
struct payload_link_ops;

// What a ticket has in flight (zeroed: nothing).
enum { LINK_NONE = 0, LINK_SEND = 1, LINK_RECV = 2, LINK_DEVICE = 3 };

// One transfer in flight. A zeroed ticket holds nothing (test: done; wait: returns at once); a
// completed one may be posted again; payload_link_ticket_free releases what a device block left.
typedef struct {
    int pending;                       // LINK_NONE, LINK_SEND / LINK_RECV (a host message), LINK_DEVICE
    MPI_Request req;                   // a host message
    void *event;                       // a device block's completion (the transport's, kept for reuse)
    const struct payload_link_ops *ops; // the transport that made event
    size_t bytes;                      // a completed host receive: the bytes it took
    int peer;                          // a completed host receive: the sender's world rank
} payload_ticket;

// payload_link_open: the transport named want ("mpi", "nccl", or "auto": the first device transport
// of the registry that opens, else "mpi"), for this rank of w on CUDA device `device` (-1: not on
// a GPU). Collective over MPI_COMM_WORLD when want names a device transport (or auto): every rank
// calls it alike. *out = the link, or NULL with the reason in why[n] when the named transport
// declines (the same on every rank); auto falling back to "mpi" says why in why[n] ("NCCL not
// used: ..."), else why[0] = 0. -1 (error_set) on a failure, the same on every rank; an unknown
// name is an error.
int payload_link_open(payload_link **out, const char *want, const world *w, int device, char *why, size_t n);
// payload_link_close: waits for nothing (the callers waited for their tickets); NULL is a no-op.
void payload_link_close(payload_link *l);
// payload_link_name: the transport's name ("mpi", "nccl"); payload_link_label: how a log line
// names it ("MPI", "NCCL"); payload_link_title: its transport-test table's heading
// ("NCCL, GPU memory to GPU memory"); payload_link_says: rank 0's line on a job's payloads over it;
// payload_link_device: 1 when it carries device blocks (NULL: 0).
const char *payload_link_name(const payload_link *l);
const char *payload_link_label(const payload_link *l);
const char *payload_link_title(const payload_link *l);
const char *payload_link_says(const payload_link *l);
int payload_link_device(const payload_link *l);
// payload_link_kinds / payload_link_kind / payload_link_kind_label: the registry's transports in
// order ("mpi" first): the count, the name and the label of the i-th.
int payload_link_kinds(void);
const char *payload_link_kind(int i);
const char *payload_link_kind_label(int i);
// payload_link_check: for the watchdog thread (watchdog_add_check's signature; ctx = the link, NULL:
// none): 1 with msg naming the peer and the reason when the transport reports an asynchronous
// failure (NCCL's communicators), else 0.
int payload_link_check(void *ctx, char *msg, size_t n);

// Host messages. payload_link_post_send / _post_recv: post, the ticket completes later (test, wait);
// the buffer must stay until then. A receive of a message longer than cap is a fatal MPI error.
void payload_link_post_send(payload_link *l, int peer, int tag, const void *buf, size_t bytes, payload_ticket *t);
void payload_link_post_recv(payload_link *l, int peer, int tag, void *buf, size_t cap, payload_ticket *t);
// payload_link_send: post and wait (a sleeping wait, world_wait). payload_link_recv: the same; the
// bytes received, the sender in *from (may be NULL).
void payload_link_send(payload_link *l, int peer, int tag, const void *buf, size_t bytes);
size_t payload_link_recv(payload_link *l, int peer, int tag, void *buf, size_t cap, int *from);

// Device blocks (payload_link_device(l) = 1): `bytes` of device memory to / from peer, after the
// work already queued on the device. 0, or -1 with error_set naming the peer.
int payload_link_post_send_dev(payload_link *l, int peer, const void *dev, size_t bytes, payload_ticket *t);
int payload_link_post_recv_dev(payload_link *l, int peer, void *dev, size_t bytes, payload_ticket *t);

// payload_link_test: 1 when the ticket's transfer has completed (or it holds none; a host receive
// then has bytes and peer set), 0 while it runs, -1 (error_set) on a device error.
int payload_link_test(payload_ticket *t);
// payload_link_wait: until it completes (a host message: world_wait, sleeping; a device block:
// the transport's wait). 0, or -1 (error_set).
int payload_link_wait(payload_ticket *t);
// payload_link_ticket_free: releases what the ticket keeps (a device block's event); zeroes it.
void payload_link_ticket_free(payload_ticket *t);
