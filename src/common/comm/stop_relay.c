// stop_relay.c: a stop heard by any rank reaches every rank (see stop_relay.h).
#include "common/comm/stop_relay.h"

#include <mpi.h>
#include <stdlib.h>

#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/stop.h"

static struct {
    int open, rank, size;
    MPI_Comm comm;
    int told;          // this rank told the others (its own signal)
    int own;           // the signal it told them
    int heard;         // the first signal another rank told this one (0: none yet)
    int *in;           // [size] the signal each peer sends (one message at most per peer)
    MPI_Request *recv; // [size] the receive posted for each peer (MPI_REQUEST_NULL: self, or done)
    MPI_Request *send; // [size] this rank's messages to each peer
} sr;

void stop_relay_open(void) {
    int size = 1, rank = 0;
    mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size));
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (sr.open || size < 2) return;
    MPI_Request req;
    mpi_check(MPI_Comm_idup(MPI_COMM_WORLD, &sr.comm, &req));
    watchdog_mpi_wait(&req, NULL, 0, size - 1, 5, "the other ranks to start (the stop relay)");
    sr.rank = rank, sr.size = size, sr.told = 0, sr.own = 0, sr.heard = 0;
    sr.in = xcalloc((size_t)size, sizeof(int));
    sr.recv = xmalloc((size_t)size * sizeof(MPI_Request));
    sr.send = xmalloc((size_t)size * sizeof(MPI_Request));
    for (int r = 0; r < size; r++) {
        sr.recv[r] = sr.send[r] = MPI_REQUEST_NULL;
        if (r != rank) mpi_check(MPI_Irecv(&sr.in[r], 1, MPI_INT, r, 0, sr.comm, &sr.recv[r]));
    }
    sr.open = 1;
    watchdog_on_finalize(stop_relay_close); // every exit of a started job goes through watchdog_finalize
}

int stop_relay_poll(void) {
    int sig = stop_requested();
    if (!sr.open) return sig;
    if (sig && !sr.told) { // this rank heard it: every other rank is told, once
        sr.own = sig;
        for (int r = 0; r < sr.size; r++)
            if (r != sr.rank) mpi_check(MPI_Isend(&sr.own, 1, MPI_INT, r, 0, sr.comm, &sr.send[r]));
        sr.told = 1;
    }
    if (!sr.heard) {
        int idx = MPI_UNDEFINED, done = 0;
        mpi_check(MPI_Testany(sr.size, sr.recv, &idx, &done, MPI_STATUS_IGNORE));
        if (done && idx != MPI_UNDEFINED) sr.heard = sr.in[idx] ? sr.in[idx] : -1;
    }
    return sig ? sig : sr.heard;
}

void stop_relay_close(void) {
    if (!sr.open) return;
    sr.open = 0;
    // Who told the others: their messages are (or will be) here, the other receives match nothing.
    int *told = xcalloc((size_t)sr.size, sizeof(int)), me = sr.told;
    MPI_Request req;
    mpi_check(MPI_Iallgather(&me, 1, MPI_INT, told, 1, MPI_INT, sr.comm, &req));
    watchdog_mpi_wait(&req, NULL, 0, sr.size - 1, 5, "the other ranks to finish");
    for (int r = 0; r < sr.size; r++) {
        if (r == sr.rank || sr.recv[r] == MPI_REQUEST_NULL) continue;
        if (!told[r]) mpi_check(MPI_Cancel(&sr.recv[r]));
        watchdog_mpi_wait(&sr.recv[r], NULL, r, r, 5, "a stop message from another rank");
    }
    for (int r = 0; r < sr.size; r++)
        if (sr.send[r] != MPI_REQUEST_NULL) watchdog_mpi_wait(&sr.send[r], NULL, r, r, 5, "another rank to take this rank's stop message");
    free(told);
    free(sr.in);
    free(sr.recv);
    free(sr.send);
    sr.in = NULL, sr.recv = sr.send = NULL;
    mpi_check(MPI_Comm_free(&sr.comm));
}
