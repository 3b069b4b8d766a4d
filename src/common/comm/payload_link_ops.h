// payload_link_ops.h: the table a transport of payload_link.h fills (one file per transport, one
// line in payload_link.c's registry), ggml-backend style: the front (payload_link.c) holds the
// link and the tickets and calls these.
//
// Adding a transport (say "pinned": device blocks staged through rings of pinned host buffers with
// asynchronous copies, the host messages over MPI): payload_link_pinned.c fills a payload_link_ops
// (its host messages may be payload_link_mpi.h's functions), payload_link.c's registry gets its
// line, transport.payload its name (its row in payload_link.c, docs/config.md); transport-test then checks it
// element by element like the others. docs/distributed.md, "The payload link".
#pragma once
#include <mpi.h>
#include <stddef.h>

#include "common/comm/world.h"

typedef struct payload_link_ops {
    const char *name;  // transport.payload's value: "mpi", "nccl"
    const char *label; // in log lines and transport-test's tables: "MPI", "NCCL"
    const char *title; // transport-test's table heading: "MPI, host memory"
    const char *says;  // rank 0's line when a job's payloads take it ("features over NCCL, ...")
    int device;        // 1: device blocks (send_dev ... event_free below); 0: host messages only
    // open: collective over MPI_COMM_WORLD when device; 1 with *impl set (NULL allowed), 0 declined
    // with the reason in why[n] (the same on every rank), -1 (error_set) on a failure.
    int (*open)(void **impl, const world *w, int device, char *why, size_t n);
    void (*close)(void *impl);
    // host messages: any size, posted as an MPI request (the front tests and waits on it)
    void (*post_send)(void *impl, int peer, int tag, const void *buf, size_t bytes, MPI_Request *req);
    void (*post_recv)(void *impl, int peer, int tag, void *buf, size_t cap, MPI_Request *req);
    // device blocks: enqueue, *event records the completion (made on first use, reused after)
    int (*send_dev)(void *impl, int peer, const void *dev, size_t bytes, void **event);
    int (*recv_dev)(void *impl, int peer, void *dev, size_t bytes, void **event);
    int (*event_done)(void *event); // 1 done, 0 running, -1 (error_set)
    int (*event_wait)(void *event); // 0, -1 (error_set)
    void (*event_free)(void *event);
    // check: 1 with msg when the transport failed asynchronously (for the watchdog thread); NULL: none
    int (*check)(void *impl, char *msg, size_t n);
} payload_link_ops;

// The transports (payload_link_mpi.c, payload_link_nccl.c).
extern const payload_link_ops payload_link_mpi_ops;
extern const payload_link_ops payload_link_nccl_ops;
