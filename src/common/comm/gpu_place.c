// gpu_place.c: the ranks' hosts and GPUs over MPI (see gpu_place.h).
#include "common/comm/gpu_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backend/gpu_info.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"

void gpu_places_gather(MPI_Comm comm, int device, gpu_place **all, int *n) {
    gpu_place me;
    memset(&me, 0, sizeof me);
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &me.world_rank));
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    if (device >= 0 && gpu_pci_bus_id(device, me.bus, sizeof me.bus)) me.bus[0] = '\0';
    mpi_check(MPI_Comm_size(comm, n));
    *all = xmalloc((size_t)*n * sizeof(gpu_place));
    MPI_Request req;
    mpi_check(MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, *all, (int)sizeof me, MPI_BYTE, comm, &req));
    watchdog_wait_all(&req, "the other ranks' GPU places");
}

void gpu_places_decline(const gpu_place *all, int n, char *why, size_t wn) {
    why[0] = '\0';
    for (int r = 0; r < n; r++) {
        if (!all[r].bus[0]) {
            snprintf(why, wn, "rank %d is not on a GPU", all[r].world_rank);
            return;
        }
        for (int q = 0; q < r; q++)
            if (strcmp(all[q].host, all[r].host) == 0 && strcmp(all[q].bus, all[r].bus) == 0) {
                snprintf(why, wn, "ranks %d and %d share GPU %s on %s (NCCL needs one GPU per rank)", all[q].world_rank,
                         all[r].world_rank, all[r].bus, all[r].host);
                return;
            }
    }
}
