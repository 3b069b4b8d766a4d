// gpu_place.h: where each rank of a communicator computes (host and GPU), for the NCCL paths'
// one question: does every rank have a GPU of its own? (NCCL needs one GPU per rank.)
#pragma once
#include <mpi.h>
#include <stddef.h>

typedef struct {
    int world_rank;
    char host[64];
    char bus[32]; // PCI bus id; "" = not on a GPU
} gpu_place;

// gpu_places_gather: collective over comm: every rank's place (device: its CUDA ordinal, -1 when
// it is not on a GPU), in comm's rank order; the caller frees *all.
void gpu_places_gather(MPI_Comm comm, int device, gpu_place **all, int *n);
// gpu_places_decline: why NCCL cannot join these n ranks ("" = it can): a rank off the GPU, or two
// ranks on one GPU, named by world rank. The same answer on every rank.
void gpu_places_decline(const gpu_place *all, int n, char *why, size_t wn);
