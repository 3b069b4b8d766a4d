// preflight_rows.c: the rows of `--preflight` every mode has (preflight_rows.h): the memory plan
// against the device, pinned host memory per host, peer access between a student's GPU and its
// host's teacher GPUs, NCCL among the GPU ranks, /dev/shm; and the row format the checks share.
#include "modes/preflight_rows.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include "common/backend/gpu_info.h"
#include "common/comm/watchdog.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"

#define PF_SHM_MIN ((size_t)1 << 30) // /dev/shm below this: WARN
#define PF_NCCL_TIMEOUT_S 60.0

__attribute__((format(printf, 5, 0))) static void pf_addv(pf_ctx *x, int check, int rank, pf_result result, const char *fmt, va_list ap) {
    if (x->rows.n >= PF_MAX_ROWS) return;
    pf_row *r = &x->rows.row[x->rows.n++];
    r->check = check;
    r->rank = rank;
    r->result = result;
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
}

void pf_add(pf_ctx *x, int check, int rank, pf_result result, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pf_addv(x, check, rank, result, fmt, ap);
    va_end(ap);
}

void pf_mode_row(pf_ctx *x, pf_result result, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pf_addv(x, x->check, x->w->rank, result, fmt, ap);
    va_end(ap);
}

const char *pf_bytes(size_t b, char *buf) { return bytes_format(b, buf, 32); }

// ----------------------------------------------------------------------------- memory

static int pf_same_device(const pf_info *a, const pf_info *b) {
    return strcmp(a->host, b->host) == 0 && a->cuda == b->cuda && (!a->cuda || strcmp(a->bus, b->bus) == 0);
}

void pf_memory(pf_ctx *x, const pf_info *all, const char *plan_detail, pf_result plan_res) {
    world *w = x->w;
    const pf_info *me = &all[w->rank];
    if (me->need < 0) {
        pf_add(x, PF_MEMORY, w->rank, plan_res, "%s", plan_detail);
        return;
    }
    int64_t sum = 0;
    int sharing = 0;
    for (int r = 0; r < w->size; r++)
        if (all[r].need >= 0 && pf_same_device(me, &all[r])) sum += all[r].need, sharing++;
    char f[32], t[32], s[32], dev[64], together[96] = "";
    if (me->cuda) snprintf(dev, sizeof dev, "cuda:%d", me->device_id);
    else snprintf(dev, sizeof dev, "host RAM");
    if (sharing > 1) snprintf(together, sizeof together, "; %d ranks share it: %s together", sharing, pf_bytes((size_t)sum, s));
    pf_result res = PF_OK;
    const char *why = "";
    if (me->cuda) {
        if (sum > me->free_b) res = PF_FAIL, why = ": does not fit in the free GPU memory";
        else if ((double)sum > 0.9 * (double)me->free_b) res = PF_WARN, why = ": less than 10% of the free memory left over";
    } else {
        if (sum > me->total_b) res = PF_FAIL, why = ": more than the host's RAM";
        else if (sum > me->free_b) res = PF_WARN, why = ": more than the RAM available now";
    }
    pf_add(x, PF_MEMORY, w->rank, res, "%s; %s %s free of %s%s%s", plan_detail, dev, pf_bytes((size_t)me->free_b, f),
           pf_bytes((size_t)me->total_b, t), together, why);
}

// ----------------------------------------------------------------------------- pinned host memory

// MemAvailable of /proc/meminfo in bytes (-1: unreadable).
static int64_t pf_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

// Once per host: the pinned host memory the plan gives the host's ranks (job_plan_pinned_rank) against
// the locked-memory limit of a process (RLIMIT_MEMLOCK, `ulimit -l`; WARN below the largest rank's:
// past it the buffers are pageable, the job slower) and the host's MemAvailable (FAIL below the sum:
// page-locked memory cannot be swapped; WARN past 90% of it).
void pf_pinned(pf_ctx *x, const pf_info *all) {
    world *w = x->w;
    const pf_info *me = &all[w->rank];
    int64_t sum = 0, most = 0;
    int ranks = 0, unknown = 0;
    for (int r = 0; r < w->size; r++) {
        if (strcmp(all[r].host, me->host) != 0) continue;
        ranks++;
        if (all[r].pinned < 0) unknown++;
        else sum += all[r].pinned, most = all[r].pinned > most ? all[r].pinned : most;
    }
    char a[32], b[32], c[32], lim[64], unk[64] = "";
    if (unknown) snprintf(unk, sizeof unk, " (%d rank(s) without a plan: see the memory row)", unknown);
    if (sum == 0) {
        pf_add(x, PF_PINNED, w->rank, unknown ? PF_SKIP : PF_OK, "%s: no pinned host memory planned for its %d rank(s)%s",
               me->host, ranks, unk);
        return;
    }
    struct rlimit rl;
    int limited = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
    if (limited) snprintf(lim, sizeof lim, "`ulimit -l` %s a process", pf_bytes((size_t)rl.rlim_cur, c));
    else snprintf(lim, sizeof lim, "`ulimit -l` unlimited");
    int64_t avail = pf_mem_available();
    pf_result res = PF_OK;
    char why[200] = "";
    if (avail >= 0 && sum > avail)
        res = PF_FAIL, snprintf(why, sizeof why, ": more than the host's available memory (page-locked memory is never "
                                                 "swapped): fewer ranks here, or transport.slots lower");
    else if (limited && (uint64_t)most > (uint64_t)rl.rlim_cur)
        res = PF_WARN, snprintf(why, sizeof why, ": a rank's %s is past `ulimit -l`: the rest would be pageable, its copies "
                                                 "synchronous (raise `ulimit -l`, e.g. unlimited in the container)",
                                pf_bytes((size_t)most, b));
    else if (avail >= 0 && (double)sum > 0.9 * (double)avail)
        res = PF_WARN, snprintf(why, sizeof why, ": less than 10%% of the available memory left over");
    char av[32] = "unknown";
    if (avail >= 0) pf_bytes((size_t)avail, av);
    pf_add(x, PF_PINNED, w->rank, res, "%s: %d rank(s) pin %s (the largest %s; as --plan plans them, transport.payload %s); "
           "%s; MemAvailable %s%s%s", me->host, ranks, pf_bytes((size_t)sum, a), pf_bytes((size_t)most, b), x->cfg->payload,
           lim, av, unk, why);
}

// ----------------------------------------------------------------------------- GPUs: peer access, NCCL

// A student GPU and the teacher GPUs on the same host: can they copy to each other directly?
void pf_peer(pf_ctx *x, const pf_info *all) {
    world *w = x->w;
    int any_cuda = 0;
    for (int r = 0; r < w->size; r++) any_cuda |= all[r].cuda;
    if (!any_cuda) {
        if (w->rank == 0) pf_add(x, PF_PEER, -1, PF_SKIP, "no rank runs on a GPU");
        return;
    }
    const pf_info *me = &all[w->rank];
    if (w->role != ROLE_STUDENT || !me->cuda) return;
    int n = 0, yes = 0;
    char no[160] = "", unknown[160] = "";
    for (int t = 0; t < w->size; t++) {
        if (all[t].role != ROLE_TEACHER || !all[t].cuda || strcmp(all[t].host, me->host) != 0) continue;
        n++;
        int p = gpu_peer_access(x->be.device_id, all[t].bus);
        char *list = p == 1 ? NULL : p == 0 ? no : unknown;
        if (p == 1) yes++;
        else snprintf(list + strlen(list), 160 - strlen(list), "%s%d", list[0] ? " " : "", t);
    }
    if (n == 0) {
        pf_add(x, PF_PEER, w->rank, PF_SKIP, "no teacher GPU on this host (payloads come over the network)");
        return;
    }
    if (yes == n) {
        pf_add(x, PF_PEER, w->rank, PF_OK, "cuda:%d (%s) reaches the GPUs of all %d teacher(s) on this host directly",
               me->device_id, me->bus, n);
        return;
    }
    char detail[PF_DETAIL];
    size_t used = (size_t)snprintf(detail, sizeof detail, "cuda:%d (%s):", me->device_id, me->bus);
    if (no[0] && used < sizeof detail)
        used += (size_t)snprintf(detail + used, sizeof detail - used, " no peer access to teacher rank(s) %s: payloads "
                                 "go through host memory (slower); if NCCL hangs or fails, NCCL_P2P_DISABLE=1;", no);
    if (unknown[0] && used < sizeof detail)
        used += (size_t)snprintf(detail + used, sizeof detail - used, " the GPU of teacher rank(s) %s is not visible "
                                 "to this rank (CUDA_VISIBLE_DEVICES), not checked;", unknown);
    if (used < sizeof detail) snprintf(detail + used, sizeof detail - used, " see launch/lxc/README.md");
    pf_add(x, PF_PEER, w->rank, PF_WARN, "%s", detail);
}

// NCCL among the GPU ranks: init, one all-reduce, destroy. Every rank calls this (the split is
// collective); only GPU ranks talk NCCL.
void pf_nccl(pf_ctx *x, const pf_info *all) {
    world *w = x->w;
    int n_gpu = 0;
    for (int r = 0; r < w->size; r++) n_gpu += all[r].cuda;
    MPI_Comm gc;
    watchdog_wait_begin(0, w->size - 1, 5, "the other ranks to split off the GPU ranks");
    mpi_check(MPI_Comm_split(MPI_COMM_WORLD, all[w->rank].cuda ? 0 : MPI_UNDEFINED, w->rank, &gc));
    watchdog_wait_end();
    if (n_gpu < 2) {
        if (w->rank == 0)
            pf_add(x, PF_NCCL, -1, PF_SKIP, n_gpu == 0 ? "no rank runs on a GPU" : "one GPU rank: nothing to communicate");
        if (gc != MPI_COMM_NULL) mpi_check(MPI_Comm_free(&gc));
        return;
    }
    // NCCL wants one GPU per rank: ranks that share one (more ranks than GPUs on a host) cannot
    // form a communicator, so it is not tried.
    for (int a = 0; a < w->size; a++)
        for (int b = a + 1; b < w->size; b++)
            if (all[a].cuda && all[b].cuda && pf_same_device(&all[a], &all[b])) {
                if (w->rank == 0)
                    pf_add(x, PF_NCCL, -1, PF_WARN, "ranks %d and %d share cuda:%d (%s) on %s: NCCL needs a GPU per rank, "
                                                    "so it was not tried (more ranks than GPUs on that host)",
                           a, b, all[a].device_id, all[a].bus, all[a].host);
                if (gc != MPI_COMM_NULL) mpi_check(MPI_Comm_free(&gc));
                return;
            }
    if (gc == MPI_COMM_NULL) return;
    int gr = 0;
    mpi_check(MPI_Comm_rank(gc, &gr));
    struct {
        int32_t ok, pad;
        char id[GPU_NCCL_ID_BYTES];
        char why[256];
    } msg;
    memset(&msg, 0, sizeof msg);
    if (gr == 0) {
        msg.ok = gpu_nccl_unique_id(msg.id) == 0;
        if (!msg.ok) snprintf(msg.why, sizeof msg.why, "%s", error_msg());
    }
    // timed: a stopped GPU rank ends the preflight within the rank timeout
    watchdog_bcast_on(&msg, (int)sizeof msg, 0, gc, "the first GPU rank's NCCL id");
    char ver[32];
    gpu_nccl_version(ver, sizeof ver);
    if (!msg.ok)
        pf_add(x, PF_NCCL, w->rank, PF_FAIL, "NCCL %s: %s", ver, msg.why);
    else if (gpu_nccl_check(msg.id, n_gpu, gr, x->be.device_id, PF_NCCL_TIMEOUT_S))
        pf_add(x, PF_NCCL, w->rank, PF_FAIL, "NCCL %s, %d GPU rank(s): %s (NCCL_DEBUG=INFO says more)", ver, n_gpu,
               error_msg());
    else
        pf_add(x, PF_NCCL, w->rank, PF_OK, "NCCL %s: communicator of %d GPU rank(s) and one all-reduce", ver, n_gpu);
    mpi_check(MPI_Comm_free(&gc));
}

// ----------------------------------------------------------------------------- host: /dev/shm

void pf_shm(pf_ctx *x, const char *host) {
    struct statvfs s;
    int rank = x->w->rank;
    if (statvfs("/dev/shm", &s) != 0) {
        pf_add(x, PF_SHM, rank, PF_WARN, "%s: /dev/shm: %s; NCCL and Open MPI keep shared-memory buffers there "
                                         "(NCCL_SHM_DISABLE=1 avoids it for NCCL)", host, strerror(errno));
        return;
    }
    size_t size = (size_t)s.f_blocks * s.f_frsize, avail = (size_t)s.f_bavail * s.f_frsize;
    char a[32], b[32], c[32];
    if (size < PF_SHM_MIN)
        pf_add(x, PF_SHM, rank, PF_WARN,
               "%s: %s (%s free), below %s: NCCL and Open MPI shared memory may run out; Docker: --shm-size=16g, "
               "LXC: a tmpfs mount with size= (launch/lxc/README.md), or NCCL_SHM_DISABLE=1",
               host, pf_bytes(size, a), pf_bytes(avail, b), pf_bytes(PF_SHM_MIN, c));
    else
        pf_add(x, PF_SHM, rank, PF_OK, "%s: %s (%s free)", host, pf_bytes(size, a), pf_bytes(avail, b));
}
