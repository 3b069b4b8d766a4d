// msg.h: MPI messages and all-reduces of any size (64-bit byte and element counts).
//
// An MPI count is an int: a message of more than INT_MAX (2 GiB - 1) bytes cannot be sent as bytes.
// Point to point, such a message goes as one element of a datatype that spans it (pieces of
// 1 GiB, then the rest, all MPI_BYTE), so it is still one MPI message: the order between a pair of
// ranks, tags and MPI_ANY_SOURCE work as for any other, and a receive posted for `cap` bytes takes
// any message up to cap (a longer one is MPI's truncation error). Messages up to INT_MAX bytes go as
// plain MPI_BYTE counts, as before. The bytes received are read back with MPI_Get_elements_x on
// MPI_BYTE (every datatype here is made of MPI_BYTE; Open MPI answers MPI_UNDEFINED for a partly
// filled derived type, but counts its bytes right).
// An all-reduce of more than INT_MAX elements goes in pieces of MSG_REDUCE_PIECE elements, one
// collective each, in order on every rank.
// Every function here is fatal (mpi_check) on an MPI error, like the calls it replaces.
#pragma once
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

// The elements of one all-reduce piece (2^30: 4 GiB of fp32).
#define MSG_REDUCE_PIECE ((int64_t)1 << 30)

// msg_isend: MPI_Isend of `bytes` bytes from buf.
void msg_isend(const void *buf, size_t bytes, int dest, int tag, MPI_Comm comm, MPI_Request *req);
// msg_send: the blocking form (MPI_Send).
void msg_send(const void *buf, size_t bytes, int dest, int tag, MPI_Comm comm);
// msg_irecv: MPI_Irecv of up to `cap` bytes into buf (src may be MPI_ANY_SOURCE).
void msg_irecv(void *buf, size_t cap, int src, int tag, MPI_Comm comm, MPI_Request *req);
// msg_recv: the blocking form (MPI_Recv; st may be NULL).
void msg_recv(void *buf, size_t cap, int src, int tag, MPI_Comm comm, MPI_Status *st);
// msg_bytes: the bytes a completed receive took (from its status).
size_t msg_bytes(const MPI_Status *st);
// msg_iallreduce: in place over comm, n elements of type (a predefined datatype) with op; the
// requests of its pieces go to req[0 .. *n_req-1] (room for msg_reduce_pieces(n) of them).
int msg_reduce_pieces(int64_t n);
void msg_iallreduce(void *buf, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request *req, int *n_req);
// msg_allreduce: msg_iallreduce, then a sleeping wait (world_wait) for each piece.
void msg_allreduce(void *buf, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
