// watchdog.h: no rank waits forever on a peer that died or hangs (SPEC §8, faults).
//
// watchdog_start (collective) tells every rank every other rank's host and process id, then starts
// a thread that checks, every 100 ms:
//   - that each watched peer running on the same host is alive: its /proc entry exists, is not a
//     zombie, and has the start time it had at start (so a reused pid is not taken for the peer);
//     a peer on another host is covered by the timeout only;
//   - that the wait this rank is in (between watchdog_wait_begin and watchdog_wait_end) has not
//     lasted longer than the timeout (run.rank_timeout; 0 = no limit);
//   - an added check (NCCL's asynchronous errors), so a broken link is not a silent hang.
// On either it prints one line, "error: teacher rank 0 (pid 123 on host) died while this rank
// waited for a batch; last checkpoint: ...; resume with ...", and ends this process with exit
// status 1, which makes mpirun (or srun) end the whole job. The thread calls no MPI function
// (MPI runs MPI_THREAD_FUNNELED), so it works while the main thread is blocked inside MPI.
// A rank that was itself stopped (SIGSTOP; the thread sees a pause of more than a second between
// its polls) reports nothing for 5 s after it resumes, and its clocks leave out the time it was
// stopped: when mpirun ends the job (it sends SIGCONT before SIGTERM and SIGKILL to a stopped
// rank), the rank the others named does not blame a healthy one (a peer that exited meanwhile, a
// wait that outlasted the timeout while it was stopped) in a second line.
#pragma once
#include <mpi.h>
#include <stddef.h>

#include "common/comm/world.h"

// What the message says about the run's state, e.g. "last checkpoint: step 40 in runs/x".
typedef void (*watchdog_report_fn)(char *buf, size_t n);

// watchdog_begin: starts the thread, before MPI_Init (it calls no MPI function), and times MPI's
// start-up as a wait on the other ranks (5 x the timeout): a rank stopped at any moment from then
// on ends the job within the timeout. The thread runs until watchdog_stop (watchdog_finalize).
void watchdog_begin(double timeout_s);
// watchdog_start: collective over MPI_COMM_WORLD (a sleeping wait, timed): every rank learns the
// others' host and pid; no peer is watched until watchdog_watch. No effect without watchdog_begin.
void watchdog_start(const world *w, watchdog_report_fn report);
// watchdog_set_roles: the ranks' roles (teacher/student) are known: messages name them.
void watchdog_set_roles(const world *w);
// world_wait: MPI_Wait(req, st) (st may be NULL) that sleeps between MPI_Tests (10 us doubling to
// 1 ms) instead of polling at 100 % CPU as Open MPI's blocking calls do: a rank waiting on a peer
// (a stopped one) costs no core. Timed when inside watchdog_wait_begin/end.
void world_wait(MPI_Request *req, MPI_Status *st);
// watchdog_mpi_wait: world_wait(req, st) (a sleeping MPI_Wait) as a timed wait on ranks
// first..last (-1: the job's other ranks, before watchdog_start).
void watchdog_mpi_wait(MPI_Request *req, MPI_Status *st, int first, int last, double patience, const char *what);
// watchdog_agree: the largest status of every rank (an MPI_MAX all-reduce) as a sleeping, timed wait
// (5 x: a rank may be loading its inputs).
int watchdog_agree(int status, const char *what);
// The collectives over MPI_COMM_WORLD that the modes use, each as a sleeping wait on every rank,
// timed as watchdog_agree's (5 x): no rank waits untimed in a collective (a peer stopped mid-run
// ends the job within the timeout, run.rank_timeout). watchdog_allreduce: in place, n elements of a
// predefined type; watchdog_bcast: `bytes` bytes from root; watchdog_barrier.
void watchdog_allreduce(void *buf, int n, MPI_Datatype type, MPI_Op op, const char *what);
void watchdog_bcast(void *buf, int bytes, int root, const char *what);
void watchdog_barrier(const char *what);
// watchdog_wait_all: a collective's request (any communicator) completed as a sleeping wait timed
// like those above (on ranks 0..size-1 of the job).
void watchdog_wait_all(MPI_Request *req, const char *what);
// watchdog_allgather: n elements of a predefined type from every rank of comm (mine) into all
// (comm's size x n, in rank order), as a sleeping wait on world ranks first..last timed with
// patience (watchdog_wait_begin): for a collective among some of the ranks (the students').
void watchdog_allgather(const void *mine, void *all, int n, MPI_Datatype type, MPI_Comm comm, int first, int last,
                        double patience, const char *what);
// watchdog_gather: `bytes` bytes from every rank of MPI_COMM_WORLD (mine) into root's all (size x
// bytes, in rank order; unused elsewhere), timed as watchdog_bcast.
void watchdog_gather(const void *mine, void *all, int bytes, int root, const char *what);
// watchdog_bcast_on: watchdog_bcast among the ranks of comm (root is comm's rank), timed the same.
void watchdog_bcast_on(void *buf, int bytes, int root, MPI_Comm comm, const char *what);
// watchdog_finalize: the finalize hook (watchdog_on_finalize), then MPI_Finalize (which waits for
// every rank) as a timed wait, the peers no longer watched (they exit now), then watchdog_stop.
// Every exit of a started job goes through it.
void watchdog_finalize(void);
// watchdog_on_finalize: fn runs first in watchdog_finalize, once, on every rank that set it (the
// same on every rank: it may be collective, e.g. the stop relay's close, stop_relay.h). NULL: none.
void watchdog_on_finalize(void (*fn)(void));
// watchdog_set_watchers: which ranks watch which (watches(watcher, peer)), so that of the ranks that
// see a peer on their host die, only the lowest that watches it reports it (the others wait 5 s for
// the job to end before reporting it themselves). NULL (the default): every rank watches every other.
void watchdog_set_watchers(int (*watches)(int watcher, int peer));
// watchdog_watch: start (on = 1) or stop watching world rank `rank`'s liveness.
void watchdog_watch(int rank, int on);
// watchdog_wait_begin: this rank now waits on world ranks first..last (one rank, or the students
// of a collective) for `what` (a static string, e.g. "a batch"); the timeout runs from now, times
// `patience`: 1 for a wait on the rank that must answer, more for an idle wait that also depends
// on other ranks' progress (a teacher waiting for requests while its student waits on another,
// hung, teacher), so the rank nearest to a hung peer names it first.
void watchdog_wait_begin(int first, int last, double patience, const char *what);
void watchdog_wait_end(void);
// watchdog_timeout: the timeout (run.rank_timeout, seconds) while the thread runs, else 0 (no limit):
// for waits that poll themselves (the NCCL set-up's, backend/nccl_setup_cuda.cuh).
double watchdog_timeout(void);
// watchdog_stopped_peer: for such a wait that timed out: a rank among world ranks first..last on
// this host that is stopped (SIGSTOP) now, named in buf ("student rank 1 (pid 123, on this host,
// stopped by SIGSTOP)"); 1, or 0 when none is (or the peers are not known yet).
int watchdog_stopped_peer(int first, int last, char *buf, size_t n);
// watchdog_mark_ending: this rank ends the job itself, after printing its own error line (fatal,
// or the watchdog): its process name becomes "dflash-ending", which the peers on the same host
// see, so they do not report its exit as a second, misleading error; then it waits 0.3 s (three
// of their polls) for them to see it. No effect before watchdog_start.
void watchdog_mark_ending(void);
// watchdog_add_check: also call check(ctx, msg, n) every 100 ms from the thread; when it returns
// 1 the job ends with msg (e.g. payload_link_check: NCCL's asynchronous errors). One check at most.
void watchdog_add_check(int (*check)(void *ctx, char *msg, size_t n), void *ctx);
// watchdog_stop: ends the thread (before MPI_Finalize).
void watchdog_stop(void);
