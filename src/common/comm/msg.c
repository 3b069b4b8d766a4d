// msg.c: MPI messages and all-reduces of any size (see msg.h).
#include "common/comm/msg.h"

#include <limits.h>
#include <stdlib.h>

#include "common/comm/watchdog.h"
#include "common/core/check.h"

#define MSG_PIECE ((size_t)1 << 30)

// The datatype and count that carry `bytes` bytes: MPI_BYTE x bytes up to INT_MAX, else one
// element of a committed type (q pieces of 1 GiB, then r bytes) that msg_type_free frees.
static MPI_Datatype msg_type(size_t bytes, int *count) {
    if (bytes <= (size_t)INT_MAX) {
        *count = (int)bytes;
        return MPI_BYTE;
    }
    size_t q = bytes / MSG_PIECE, r = bytes % MSG_PIECE;
    if (q > (size_t)INT_MAX) fatal("an MPI message of %zu bytes is larger than this program sends", bytes);
    MPI_Datatype piece, body, t;
    mpi_check(MPI_Type_contiguous((int)MSG_PIECE, MPI_BYTE, &piece));
    mpi_check(MPI_Type_contiguous((int)q, piece, &body));
    int len[2] = {1, (int)r};
    MPI_Aint at[2] = {0, (MPI_Aint)(q * MSG_PIECE)};
    MPI_Datatype of[2] = {body, MPI_BYTE};
    mpi_check(MPI_Type_create_struct(r ? 2 : 1, len, at, of, &t));
    mpi_check(MPI_Type_commit(&t));
    mpi_check(MPI_Type_free(&body));
    mpi_check(MPI_Type_free(&piece));
    *count = 1;
    return t;
}

// A datatype may be freed once the operation that uses it is posted (MPI keeps it until it completes).
static void msg_type_free(MPI_Datatype t) {
    if (t != MPI_BYTE) mpi_check(MPI_Type_free(&t));
}

void msg_isend(const void *buf, size_t bytes, int dest, int tag, MPI_Comm comm, MPI_Request *req) {
    int count;
    MPI_Datatype t = msg_type(bytes, &count);
    mpi_check(MPI_Isend(buf, count, t, dest, tag, comm, req));
    msg_type_free(t);
}

void msg_send(const void *buf, size_t bytes, int dest, int tag, MPI_Comm comm) {
    int count;
    MPI_Datatype t = msg_type(bytes, &count);
    mpi_check(MPI_Send(buf, count, t, dest, tag, comm));
    msg_type_free(t);
}

void msg_irecv(void *buf, size_t cap, int src, int tag, MPI_Comm comm, MPI_Request *req) {
    int count;
    MPI_Datatype t = msg_type(cap, &count);
    mpi_check(MPI_Irecv(buf, count, t, src, tag, comm, req));
    msg_type_free(t);
}

void msg_recv(void *buf, size_t cap, int src, int tag, MPI_Comm comm, MPI_Status *st) {
    int count;
    MPI_Datatype t = msg_type(cap, &count);
    mpi_check(MPI_Recv(buf, count, t, src, tag, comm, st ? st : MPI_STATUS_IGNORE));
    msg_type_free(t);
}

size_t msg_bytes(const MPI_Status *st) {
    MPI_Count n = 0;
    mpi_check(MPI_Get_elements_x(st, MPI_BYTE, &n));
    if (n < 0) fatal("MPI could not count the bytes of a received message");
    return (size_t)n;
}

int msg_reduce_pieces(int64_t n) { return n <= MSG_REDUCE_PIECE ? 1 : (int)((n + MSG_REDUCE_PIECE - 1) / MSG_REDUCE_PIECE); }

void msg_iallreduce(void *buf, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request *req, int *n_req) {
    int size = 0;
    mpi_check(MPI_Type_size(type, &size));
    *n_req = 0;
    for (int64_t at = 0; at < n || (n == 0 && *n_req == 0); at += MSG_REDUCE_PIECE) {
        int64_t len = n - at < MSG_REDUCE_PIECE ? n - at : MSG_REDUCE_PIECE;
        mpi_check(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + size_mul(at, size), (int)len, type, op, comm, &req[(*n_req)++]));
    }
}

void msg_allreduce(void *buf, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    int k = msg_reduce_pieces(n), got = 0;
    MPI_Request *req = xmalloc((size_t)k * sizeof(MPI_Request));
    msg_iallreduce(buf, n, type, op, comm, req, &got);
    for (int i = 0; i < got; i++) world_wait(&req[i], NULL);
    free(req);
}
