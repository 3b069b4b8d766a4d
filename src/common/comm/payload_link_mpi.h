// payload_link_mpi.h: the MPI transport's host messages (payload_link_mpi.c: msg.h's any-size
// MPI_Isend / MPI_Irecv in MPI_COMM_WORLD), for the transports whose host messages go over MPI too.
#pragma once
#include <mpi.h>
#include <stddef.h>

void payload_link_mpi_post_send(void *impl, int peer, int tag, const void *buf, size_t bytes, MPI_Request *req);
void payload_link_mpi_post_recv(void *impl, int peer, int tag, void *buf, size_t cap, MPI_Request *req);
