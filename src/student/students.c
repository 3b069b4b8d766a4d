// students.c: collectives among the student ranks under the watchdog (see students.h).
#include "student/students.h"

#include "common/backend/backend.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"

static int students_first, students_last; // world ranks of the students

void students_set_ranks(int first, int last) { students_first = first, students_last = last; }

void students_allreduce(void *buf, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *what) {
    watchdog_wait_begin(students_first, students_last, 1, what);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, n, type, op, comm));
    watchdog_wait_end();
}

void students_allgather_i64(int64_t mine, int64_t *all, MPI_Comm comm, const char *what) {
    watchdog_wait_begin(students_first, students_last, 1, what);
    mpi_check(MPI_Allgather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, comm));
    watchdog_wait_end();
}

void students_allreduce_grads(drafter *d, MPI_Comm comm, float *host_grad) {
    if (d->be->kind == BACKEND_CPU) {
        students_allreduce(d->grad, (int)d->numel, MPI_FLOAT, MPI_SUM, comm, "the gradient all-reduce");
        return;
    }
    backend_copy_to_host(d->be, host_grad, d->grad, (size_t)d->numel * sizeof(float));
    students_allreduce(host_grad, (int)d->numel, MPI_FLOAT, MPI_SUM, comm, "the gradient all-reduce");
    backend_copy_to_device(d->be, d->grad, host_grad, (size_t)d->numel * sizeof(float));
}
