// students.h: collectives among the student ranks, each under the watchdog: a student that died
// or hangs ends the job with its rank named instead of leaving the others in the collective forever.
#pragma once
#include <mpi.h>
#include <stdint.h>

#include "student/drafter.h"

// students_set_ranks: the students are world ranks first..last (whom the watchdog names).
void students_set_ranks(int first, int last);
// students_allreduce: in place over comm (the students' communicator); `what` names the wait.
void students_allreduce(void *buf, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *what);
// students_allgather_i64: every student's `mine`, in student order, into all[S].
void students_allgather_i64(int64_t mine, int64_t *all, MPI_Comm comm, const char *what);
// students_allreduce_grads: d's un-normalised gradients summed over the students. On the CPU in
// place; on a GPU through host_grad ([numel] floats), since MPI need not be CUDA-aware (NCCL, which
// is, is the planned GPU path).
void students_allreduce_grads(drafter *d, MPI_Comm comm, float *host_grad);
