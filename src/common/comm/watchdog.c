// watchdog.c: a thread that ends the job when a peer dies or a wait outlasts the timeout (see
// watchdog.h).
#include "common/comm/watchdog.h"
#include "common/core/config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/log.h"

#define WATCHDOG_HOST 64

typedef struct {
    char host[WATCHDOG_HOST];
    long long pid;
} peer_id;

static struct {
    int running, started, stop; // running: the thread (watchdog_begin); started: the peers known (watchdog_start)
    int roles;                  // the ranks' roles known (watchdog_set_roles)
    world w;
    double timeout_s;
    watchdog_report_fn report;
    peer_id *peers;               // [size]
    unsigned long long *start_ns; // [size] /proc start time of same-host peers; 0 = not checkable
    int *watched;                 // [size]
    int waiting, wait_first, wait_last;
    double wait_patience;
    const char *wait_what;
    double wait_since;
    int *quiet;                   // [size] seen ending the job itself: its exit is no news
    double *deferred;             // [size] when this rank first saw the peer dead and left the report to a lower rank
    double *stopped_since;        // [size] when this rank first saw the same-host peer stopped (state T); 0 = running
    double hang_deferred;         // the same for the wait that timed out (0: not deferred)
    double last_poll;             // when the thread last polled (a longer pause: this process was stopped)
    double resumed;               // when this process resumed after being stopped (0: never stopped)
    int (*watches)(int watcher, int peer); // NULL: every rank watches every other
    int (*check)(void *ctx, char *msg, size_t n);
    void *check_ctx;
    void (*on_finalize)(void); // watchdog_on_finalize
    pthread_t thread;
    pthread_mutex_t mu;
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// The name a rank takes when it ends the job itself (watchdog_mark_ending): at most 15 characters.
#define WATCHDOG_ENDING_NAME "dflash-ending"
// The name a rank takes once MPI has ended on it and it only exits (watchdog_finalize).
#define WATCHDOG_DONE_NAME "dflash-done"

static void proc_set_name(const char *name) {
    int fd = open("/proc/self/comm", O_WRONLY); // the main thread's name whichever thread writes it
    if (fd >= 0) {
        ssize_t ignored = write(fd, name, strlen(name));
        (void)ignored;
        close(fd);
    }
}

// Field 22 of /proc/PID/stat (start time in clock ticks), the state letter and the command name;
// 0 when the process is gone. The name (field 2) is in parentheses and may hold spaces and ')':
// the fields after it are parsed from the last ')'.
static unsigned long long proc_start(long long pid, char *state, char *comm, size_t comm_n) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'), *open = strchr(buf, '(');
    if (!p || !open || open > p) return 0;
    if (comm) snprintf(comm, comm_n, "%.*s", (int)(p - open - 1), open + 1);
    char st = 0;
    unsigned long long start = 0;
    // after ')': state, then fields 4..22; start time is the 20th value after the state
    if (sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", &st, &start) != 2)
        return 0;
    if (state) *state = st;
    return start;
}

// 1 alive, 0 dead. A peer seen under WATCHDOG_ENDING_NAME is ending the job itself with its own
// error line: it is marked quiet, and its exit is not reported as a death.
static int peer_alive(int r) {
    if (!wd.start_ns[r]) return 1; // another host (or not visible from here): the timeout covers it
    char st = 0, comm[64] = "";
    unsigned long long start = proc_start(wd.peers[r].pid, &st, comm, sizeof comm);
    if (start == wd.start_ns[r] && strcmp(comm, WATCHDOG_ENDING_NAME) == 0) wd.quiet[r] = 1;
    return start == wd.start_ns[r] && st != 'Z' && st != 'X';
}

// One rank reports a death (or a hang), not every rank that sees it: the lowest live rank on this host (all of
// them see a same-host death within 0.1 s) of those that watch the dead one. Another defers to it, and reports itself only if the
// job has not ended WATCHDOG_DEFER_S later (the lower rank may not watch the dead one, or be hung).
#define WATCHDOG_DEFER_S 5.0
static int watchdog_defer(int peer, double *since) {
    if (!wd.started || peer < 0) return 0; // the ranks do not know each other yet: no one to defer to
    double now = now_s();
    // Another rank here is ending the job with its own line: this one says nothing, and once that
    // rank has had time to write its line (it waits 0.3 s first: watchdog_mark_ending) this one ends
    // too, without a line (mpirun would end it, but maybe only after a grace period).
    static double quiet_seen;
    for (int q = 0; q < wd.w.size; q++)
        if (q != wd.w.rank && wd.start_ns[q] && (peer_alive(q), wd.quiet[q])) {
            if (quiet_seen == 0) quiet_seen = now;
            if (now - quiet_seen > 2.0) _exit(1);
            return 1;
        }
    if (*since > 0) return now - *since < WATCHDOG_DEFER_S;
    for (int q = 0; q < wd.w.rank; q++)
        if (q != peer && wd.start_ns[q] && (!wd.watches || wd.watches(q, peer)) && peer_alive(q)) {
            *since = now;
            return 1;
        }
    return 0;
}

static const char *rank_role_name(int r);

// The job's ranks on this host before MPI has started (the peers are not known yet): the other
// processes of this executable with this process's parent (mpirun, orted or slurmstepd started them
// all), their rank read from their environment. Each is checked for being stopped (state T) below.
#define WATCHDOG_SIBLINGS 64
static struct {
    long long pid;
    int rank;
    double stopped_since;
} sib[WATCHDOG_SIBLINGS];
static int n_sib;
static double sib_scanned;

static int proc_rank(long long pid) {
    char path[64], buf[1 << 15];
    snprintf(path, sizeof path, "/proc/%lld/environ", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK=", "PMIX_RANK=", "PMI_RANK=", "SLURM_PROCID="};
    for (char *e = buf; e < buf + n; e += strlen(e) + 1)
        for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
            if (strncmp(e, vars[v], strlen(vars[v])) == 0) return atoi(e + strlen(vars[v]));
    return -1;
}

static void siblings_scan(void) {
    char self_exe[512], exe[512], path[64];
    ssize_t m = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (m <= 0) return;
    self_exe[m] = 0;
    long long parent = (long long)getppid(), me = (long long)getpid();
    DIR *d = opendir("/proc");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && n_sib < WATCHDOG_SIBLINGS) {
        char *end;
        long long pid = strtoll(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == me) continue;
        int known = 0;
        for (int i = 0; i < n_sib && !known; i++) known = sib[i].pid == pid;
        if (known) continue;
        snprintf(path, sizeof path, "/proc/%lld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char buf[512];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        long long ppid = -1;
        if (!p || sscanf(p + 1, " %*c %lld", &ppid) != 1 || ppid != parent) continue;
        snprintf(path, sizeof path, "/proc/%lld/exe", pid);
        ssize_t k = readlink(path, exe, sizeof exe - 1);
        if (k <= 0) continue;
        exe[k] = 0;
        if (strcmp(exe, self_exe) != 0) continue;
        sib[n_sib].pid = pid, sib[n_sib].rank = proc_rank(pid), sib[n_sib].stopped_since = 0;
        n_sib++;
    }
    closedir(d);
}

// A rank on this host stopped (SIGSTOP: state T) for the timeout while this rank waits: it is
// hung, whatever the wait's patience (which allows for slow peers, not stopped ones). Before the
// peers are known (MPI start-up), the ranks of this host are found as siblings (above). 1 with msg.
static int peer_stopped(double now, const char *what, char *msg, size_t n) {
    if (wd.started) {
        for (int r = 0; r < wd.w.size; r++) {
            if (r == wd.w.rank || !wd.start_ns[r]) continue;
            char st = 0;
            if (proc_start(wd.peers[r].pid, &st, NULL, 0) != wd.start_ns[r] || st != 'T') {
                wd.stopped_since[r] = 0;
                continue;
            }
            if (wd.stopped_since[r] == 0) wd.stopped_since[r] = now;
            if (now - wd.stopped_since[r] < wd.timeout_s || watchdog_defer(r, &wd.deferred[r])) continue;
            snprintf(msg, n, "%srank %d (pid %lld on %s) has been stopped (SIGSTOP) for %.0f s while this rank waited "
                     "for %s (run.rank_timeout %g s): it is hung or unreachable", rank_role_name(r), r, wd.peers[r].pid,
                     wd.peers[r].host, now - wd.stopped_since[r], what, wd.timeout_s);
            return 1;
        }
        return 0;
    }
    if (now - sib_scanned >= 0.5) { // new siblings: the launcher starts them one by one
        siblings_scan();
        sib_scanned = now;
    }
    for (int i = 0; i < n_sib; i++) {
        char st = 0;
        if (proc_start(sib[i].pid, &st, NULL, 0) == 0 || st != 'T') {
            sib[i].stopped_since = 0;
            continue;
        }
        if (sib[i].stopped_since == 0) sib[i].stopped_since = now;
        if (now - sib[i].stopped_since < wd.timeout_s) continue;
        snprintf(msg, n, "rank %d (pid %lld, on this host) has been stopped (SIGSTOP) for %.0f s while this rank waited "
                 "for %s (run.rank_timeout %g s): it is hung or unreachable", sib[i].rank, sib[i].pid,
                 now - sib[i].stopped_since, what, wd.timeout_s);
        return 1;
    }
    return 0;
}

// A rank among first..last (first < 0: any rank of this host) that is stopped (state T) now: the
// wait's timeout names it, when the peer was stopped before this rank began to wait (peer_stopped
// counts the stop from the wait's first look, which comes later). -1 when none; its pid in *pid.
static int stopped_now(int first, int last, long long *pid) {
    char st = 0;
    if (wd.started) {
        int lo = first < 0 ? 0 : first, hi = first < 0 || last >= wd.w.size ? wd.w.size - 1 : last;
        for (int r = lo; r <= hi; r++)
            if (r != wd.w.rank && wd.start_ns[r] && proc_start(wd.peers[r].pid, &st, NULL, 0) == wd.start_ns[r] &&
                st == 'T')
                return *pid = wd.peers[r].pid, r;
        return -1;
    }
    for (int i = 0; i < n_sib; i++)
        if ((first < 0 || (sib[i].rank >= first && sib[i].rank <= last)) && proc_start(sib[i].pid, &st, NULL, 0) &&
            st == 'T')
            return *pid = sib[i].pid, sib[i].rank;
    return -1;
}

static const char *rank_role_name(int r) { return !wd.roles ? "" : r < wd.w.teachers ? "teacher " : "student "; }

// One line, then exit 1: mpirun ends the job when a rank exits without MPI_Finalize.
static _Noreturn void watchdog_fail(const char *what_happened) {
    watchdog_mark_ending();
    char state[512] = "";
    if (wd.report) wd.report(state, sizeof state);
    char line[1536]; // one write, so lines of ranks failing at once do not interleave
    int n = snprintf(line, sizeof line, "[r%d] error: %s%s%s\n", wd.w.rank, what_happened, state[0] ? "; " : "", state);
    ssize_t ignored = write(STDERR_FILENO, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
    (void)ignored;
    _exit(1);
}

// This process was stopped itself (SIGSTOP: the thread's 100 ms pause lasted more than
// WATCHDOG_FROZEN_S): the time it was stopped is no peer's silence (the wait's clock and each
// peer's stop count leave it out), and nothing is reported for WATCHDOG_RESUMED_QUIET_S, long enough
// for the SIGTERM and SIGKILL that follow mpirun's SIGCONT when the job is ending because of this
// rank. 1 while quiet. Under wd.mu.
#define WATCHDOG_FROZEN_S 1.0
#define WATCHDOG_RESUMED_QUIET_S 5.0
static int watchdog_resumed(double now) {
    double gap = wd.last_poll > 0 ? now - wd.last_poll : 0;
    wd.last_poll = now;
    if (gap > WATCHDOG_FROZEN_S) { // every clock moves past the time this process was stopped
        wd.resumed = now;
        if (wd.waiting) wd.wait_since += gap;
        if (wd.hang_deferred > 0) wd.hang_deferred += gap;
        for (int r = 0; wd.started && r < wd.w.size; r++) {
            if (wd.stopped_since[r] > 0) wd.stopped_since[r] += gap;
            if (wd.deferred[r] > 0) wd.deferred[r] += gap;
        }
        for (int i = 0; i < n_sib; i++)
            if (sib[i].stopped_since > 0) sib[i].stopped_since += gap;
    }
    return wd.resumed > 0 && now - wd.resumed < WATCHDOG_RESUMED_QUIET_S;
}

static void *watchdog_loop(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&wd.mu);
        if (wd.stop) {
            pthread_mutex_unlock(&wd.mu);
            return NULL;
        }
        if (watchdog_resumed(now_s())) {
            pthread_mutex_unlock(&wd.mu);
            continue;
        }
        const char *what = wd.wait_what ? wd.wait_what : "its next message";
        int waiting = wd.waiting;
        char msg[768];
        for (int r = 0; r < wd.w.size; r++) {
            if (!wd.watched[r] || peer_alive(r)) continue;
            if (wd.quiet[r]) { // it ended the job with its own error line; mpirun ends this rank too
                wd.watched[r] = 0;
                continue;
            }
            if (watchdog_defer(r, &wd.deferred[r])) continue;
            snprintf(msg, sizeof msg, "%srank %d (pid %lld on %s) died%s%s", rank_role_name(r), r, wd.peers[r].pid,
                     wd.peers[r].host, waiting ? " while this rank waited for " : "", waiting ? what : "");
            pthread_mutex_unlock(&wd.mu);
            watchdog_fail(msg);
        }
        if (waiting && wd.timeout_s > 0 && peer_stopped(now_s(), what, msg, sizeof msg)) {
            pthread_mutex_unlock(&wd.mu);
            watchdog_fail(msg);
        }
        if (wd.check && wd.check(wd.check_ctx, msg, sizeof msg)) {
            pthread_mutex_unlock(&wd.mu);
            watchdog_fail(msg);
        }
        double waited = waiting ? now_s() - wd.wait_since : 0;
        // a wait that timed out: the same rule (the teachers of a hung student time out together)
        if (waiting && wd.timeout_s > 0 && waited > wd.timeout_s * wd.wait_patience &&
            !watchdog_defer(wd.wait_first, &wd.hang_deferred)) {
            int f = wd.wait_first, l = wd.wait_last, t;
            long long tpid = 0;
            if ((t = stopped_now(f, l, &tpid)) >= 0)
                snprintf(msg, sizeof msg, "%srank %d (pid %lld, on this host, stopped by SIGSTOP) sent nothing for %.0f s "
                         "while this rank waited for %s (run.rank_timeout %g s): it is hung or unreachable",
                         rank_role_name(t), t, tpid, waited, what, wd.timeout_s);
            else if (f == l && f >= 0)
                snprintf(msg, sizeof msg, "%srank %d (on %s) sent nothing for %.0f s while this rank waited for %s "
                         "(run.rank_timeout %g s): it is hung or unreachable", rank_role_name(f), f,
                         wd.peers ? wd.peers[f].host : "?", waited, what, wd.timeout_s);
            else if (f >= 0)
                snprintf(msg, sizeof msg, "no progress for %.0f s while this rank waited for %s (run.rank_timeout %g s): "
                         "one of %sranks %d..%d is hung or unreachable", waited, what, wd.timeout_s,
                         rank_role_name(f), f, l);
            else // before the ranks know each other (MPI start-up)
                snprintf(msg, sizeof msg, "no progress for %.0f s while this rank waited for %s (run.rank_timeout %g s): "
                         "another rank of the job is hung or unreachable", waited, what, wd.timeout_s);
            pthread_mutex_unlock(&wd.mu);
            watchdog_fail(msg);
        }
        pthread_mutex_unlock(&wd.mu);
    }
}

void watchdog_begin(double timeout_s) {
    if (wd.running) return;
    wd.timeout_s = timeout_s;
    wd.stop = 0;
    // The thread must not take the signals the main thread handles (SIGTERM, SIGUSR1, SIGINT).
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&wd.thread, NULL, watchdog_loop, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) fatal("watchdog: cannot start its thread: %s", strerror(rc));
    wd.running = 1;
    // MPI's start-up waits for every rank of the job (5 x: the launcher starts them one by one)
    watchdog_wait_begin(-1, -1, 5, "the other ranks to start (MPI start-up)");
}

void watchdog_start(const world *w, watchdog_report_fn report) {
    if (!wd.running) return;
    peer_id *peers = xcalloc((size_t)w->size, sizeof(peer_id));
    peer_id me = {.pid = (long long)getpid()};
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    MPI_Request req;
    mpi_check(MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, peers, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD, &req));
    watchdog_mpi_wait(&req, NULL, -1, -1, 5, "the other ranks to start (MPI start-up)");
    pthread_mutex_lock(&wd.mu);
    wd.w = *w;
    wd.report = report;
    wd.peers = peers;
    wd.start_ns = xcalloc((size_t)w->size, sizeof(unsigned long long));
    wd.watched = xcalloc((size_t)w->size, sizeof(int));
    wd.quiet = xcalloc((size_t)w->size, sizeof(int));
    wd.deferred = xcalloc((size_t)w->size, sizeof(double));
    wd.stopped_since = xcalloc((size_t)w->size, sizeof(double));
    // Every rank is alive now (it took part in the all-gather): note the start time of each peer on
    // this host that this process can see (another pid namespace with the same host name: not).
    for (int r = 0; r < w->size; r++)
        if (r != w->rank && strcmp(peers[r].host, me.host) == 0) wd.start_ns[r] = proc_start(peers[r].pid, NULL, NULL, 0);
    wd.started = 1;
    pthread_mutex_unlock(&wd.mu);
    check_set_ending_hook(watchdog_mark_ending); // a fatal error on this rank is not a dead peer
}

void watchdog_set_roles(const world *w) {
    if (!wd.started) return;
    pthread_mutex_lock(&wd.mu);
    wd.w = *w;
    wd.roles = 1;
    pthread_mutex_unlock(&wd.mu);
}

void world_wait(MPI_Request *req, MPI_Status *st) {
    long ns = 10 * 1000;
    for (int done = 0;;) {
        mpi_check(MPI_Test(req, &done, st ? st : MPI_STATUS_IGNORE));
        if (done) return;
        struct timespec pause = {0, ns};
        nanosleep(&pause, NULL);
        if (ns < 1000 * 1000) ns *= 2;
    }
}

void watchdog_mpi_wait(MPI_Request *req, MPI_Status *st, int first, int last, double patience, const char *what) {
    watchdog_wait_begin(first, last, patience, what);
    world_wait(req, st);
    watchdog_wait_end();
}

int watchdog_agree(int status, const char *what) {
    watchdog_allreduce(&status, 1, MPI_INT, MPI_MAX, what);
    return status;
}

void watchdog_wait_all(MPI_Request *req, const char *what) {
    watchdog_mpi_wait(req, NULL, 0, wd.started ? wd.w.size - 1 : -1, 5, what);
}

void watchdog_allreduce(void *buf, int n, MPI_Datatype type, MPI_Op op, const char *what) {
    MPI_Request req;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, type, op, MPI_COMM_WORLD, &req));
    watchdog_wait_all(&req, what);
}

void watchdog_bcast_on(void *buf, int bytes, int root, MPI_Comm comm, const char *what) {
    MPI_Request req;
    mpi_check(MPI_Ibcast(buf, bytes, MPI_BYTE, root, comm, &req));
    watchdog_wait_all(&req, what);
}

void watchdog_bcast(void *buf, int bytes, int root, const char *what) { watchdog_bcast_on(buf, bytes, root, MPI_COMM_WORLD, what); }

void watchdog_barrier(const char *what) {
    MPI_Request req;
    mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    watchdog_wait_all(&req, what);
}

void watchdog_allgather(const void *mine, void *all, int n, MPI_Datatype type, MPI_Comm comm, int first, int last,
                        double patience, const char *what) {
    MPI_Request req;
    mpi_check(MPI_Iallgather(mine, n, type, all, n, type, comm, &req));
    watchdog_mpi_wait(&req, NULL, first, last, patience, what);
}

void watchdog_gather(const void *mine, void *all, int bytes, int root, const char *what) {
    MPI_Request req;
    mpi_check(MPI_Igather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req));
    watchdog_wait_all(&req, what);
}

// After MPI_Finalize, before exiting: every same-host peer has left MPI as well (named
// WATCHDOG_DONE_NAME) or exited. A peer stopped (SIGSTOP) after the last barrier would otherwise
// be watched by no one once the others exited, and mpirun would wait on it forever: a peer stopped
// for the timeout, or not done within 5 x the timeout, ends this rank with a line naming it (exit
// 1: mpirun then ends the job, the stopped rank included).
static void watchdog_await_peers(void) {
    if (!wd.started) return;
    proc_set_name(WATCHDOG_DONE_NAME);
    if (wd.timeout_s <= 0) return;
    watchdog_wait_end(); // MPI has ended here: the thread no longer times it (nor touches stopped_since)
    double t0 = now_s();
    for (;;) {
        int pending = -1;
        char st = 0, comm[64] = "";
        double now = now_s();
        pthread_mutex_lock(&wd.mu);
        for (int r = 0; r < wd.w.size && pending < 0; r++) {
            if (r == wd.w.rank || !wd.start_ns[r]) continue;
            unsigned long long start = proc_start(wd.peers[r].pid, &st, comm, sizeof comm);
            if (start != wd.start_ns[r] || st == 'Z' || st == 'X' || strcmp(comm, WATCHDOG_DONE_NAME) == 0 ||
                strcmp(comm, WATCHDOG_ENDING_NAME) == 0)
                continue;
            pending = r;
            if (st != 'T') wd.stopped_since[r] = 0;
            else if (wd.stopped_since[r] == 0) wd.stopped_since[r] = now;
        }
        double stopped = pending >= 0 && wd.stopped_since[pending] > 0 ? now - wd.stopped_since[pending] : 0;
        pthread_mutex_unlock(&wd.mu);
        if (pending < 0) return;
        int r = pending;
        if (stopped >= wd.timeout_s || now - t0 >= 5 * wd.timeout_s) {
            char msg[512];
            snprintf(msg, sizeof msg, "%srank %d (pid %lld on %s) %s after the job's last barrier (run.rank_timeout %g s): "
                     "it is hung or unreachable", rank_role_name(r), r, wd.peers[r].pid, wd.peers[r].host,
                     stopped > 0 ? "has been stopped (SIGSTOP)" : "has not finished MPI", wd.timeout_s);
            watchdog_fail(msg);
        }
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

void watchdog_finalize(void) {
    if (wd.on_finalize) { // collective (e.g. the stop relay's close: stop_relay.h); once
        void (*fn)(void) = wd.on_finalize;
        wd.on_finalize = NULL;
        fn();
    }
    if (wd.running) {
        pthread_mutex_lock(&wd.mu);
        for (int r = 0; wd.watched && r < wd.w.size; r++) wd.watched[r] = 0; // the peers exit now: no news
        pthread_mutex_unlock(&wd.mu);
        // Every rank reaches the end before any exits (a rank that exited could no longer time
        // out a peer stopped before it, and mpirun would wait on that peer forever): a barrier,
        // timed (5 x: the first student exports the drafter first), then MPI_Finalize, timed too
        // (the thread calls no MPI function, so it runs on through it).
        int last = wd.started ? wd.w.size - 1 : -1;
        MPI_Request req;
        mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &req));
        watchdog_mpi_wait(&req, NULL, 0, last, 5, "the other ranks to finish");
        watchdog_wait_begin(0, last, 1, "the other ranks to finish (MPI_Finalize)");
    }
    world_finalize();
    watchdog_await_peers();
    watchdog_stop();
}

void watchdog_set_watchers(int (*watches)(int watcher, int peer)) { wd.watches = watches; }

void watchdog_on_finalize(void (*fn)(void)) { wd.on_finalize = fn; }

void watchdog_watch(int rank, int on) {
    if (!wd.started || rank < 0 || rank >= wd.w.size || rank == wd.w.rank) return;
    pthread_mutex_lock(&wd.mu);
    wd.watched[rank] = on;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_wait_begin(int first, int last, double patience, const char *what) {
    if (!wd.running) return;
    pthread_mutex_lock(&wd.mu);
    wd.waiting = 1;
    wd.wait_first = first;
    wd.wait_last = last;
    wd.wait_patience = patience;
    wd.wait_what = what;
    wd.wait_since = now_s();
    wd.hang_deferred = 0;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_wait_end(void) {
    if (!wd.running) return;
    pthread_mutex_lock(&wd.mu);
    wd.waiting = 0;
    wd.wait_what = NULL;
    pthread_mutex_unlock(&wd.mu);
}

double watchdog_timeout(void) { return wd.running ? wd.timeout_s : 0; }

int watchdog_stopped_peer(int first, int last, char *buf, size_t n) {
    if (!wd.started) return 0;
    long long pid = 0;
    pthread_mutex_lock(&wd.mu);
    int r = stopped_now(first, last, &pid);
    if (r >= 0) snprintf(buf, n, "%srank %d (pid %lld, on this host, stopped by SIGSTOP)", rank_role_name(r), r, pid);
    pthread_mutex_unlock(&wd.mu);
    return r >= 0;
}

void watchdog_mark_ending(void) {
    static volatile int marked = 0;
    if (!wd.started || marked) return;
    marked = 1;
    proc_set_name(WATCHDOG_ENDING_NAME);
    struct timespec pause = {0, 300 * 1000 * 1000}; // three of the peers' polls
    nanosleep(&pause, NULL);
}

void watchdog_add_check(int (*check)(void *ctx, char *msg, size_t n), void *ctx) {
    if (!wd.started) return;
    pthread_mutex_lock(&wd.mu);
    wd.check = check;
    wd.check_ctx = ctx;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_stop(void) {
    if (!wd.running) return;
    pthread_mutex_lock(&wd.mu);
    wd.stop = 1;
    pthread_mutex_unlock(&wd.mu);
    pthread_join(wd.thread, NULL);
    wd.running = 0;
    if (!wd.started) return;
    free(wd.peers);
    free(wd.start_ns);
    free(wd.watched);
    free(wd.quiet);
    free(wd.deferred);
    free(wd.stopped_since);
    wd.stopped_since = NULL;
    wd.peers = NULL, wd.start_ns = NULL, wd.watched = NULL, wd.quiet = NULL, wd.deferred = NULL;
    wd.started = 0;
    wd.roles = 0;
    wd.check = NULL;
    check_set_ending_hook(NULL);
}

// Settings: the keys of how long a rank waits on a peer (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key watchdog_keys[] = {
    {"run.rank_timeout", CFG_FLOAT, CONFIG_F(rank_timeout), "600", "seconds a rank waits on a peer (a batch, a request, an all-reduce) before it ends the job naming that rank; a peer process on the same host that dies is noticed at once. Must exceed the longest step, evaluation or checkpoint; 0 = wait forever. Also --rank-timeout S", NULL, 0, 1e9},
};
const config_key_set watchdog_settings = CONFIG_KEY_SET(watchdog_keys, NULL);
