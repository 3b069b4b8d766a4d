// payload_link_mpi.c: the "mpi" transport of payload_link.h: host messages over MPI (msg.h: any
// size, MPI_COMM_WORLD, the peer's world rank); no device blocks, so the callers copy device data
// into their host messages. It always opens and holds no state.
#include "common/comm/payload_link_mpi.h"

#include "common/comm/msg.h"
#include "common/comm/payload_link.h"
#include "common/comm/payload_link_ops.h"

static int mpi_open(void **impl, const world *w, int device, char *why, size_t n) {
    (void)w, (void)device, (void)why, (void)n;
    *impl = NULL;
    return 1;
}

static void mpi_close(void *impl) { (void)impl; }

void payload_link_mpi_post_send(void *impl, int peer, int tag, const void *buf, size_t bytes, MPI_Request *req) {
    (void)impl;
    msg_isend(buf, bytes, peer, tag, MPI_COMM_WORLD, req);
}

void payload_link_mpi_post_recv(void *impl, int peer, int tag, void *buf, size_t cap, MPI_Request *req) {
    (void)impl;
    msg_irecv(buf, cap, peer == LINK_ANY ? MPI_ANY_SOURCE : peer, tag, MPI_COMM_WORLD, req);
}

const payload_link_ops payload_link_mpi_ops = {
    .name = "mpi",
    .label = "MPI",
    .title = "MPI, host memory",
    .says = "over MPI from host memory",
    .device = 0,
    .open = mpi_open,
    .close = mpi_close,
    .post_send = payload_link_mpi_post_send,
    .post_recv = payload_link_mpi_post_recv,
};
