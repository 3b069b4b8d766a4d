// mode_shared_fs.c: the outputs' directories seen alike by every rank (see mode_shared_fs.h).
#include "modes/mode_shared_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/log.h"

#define SHARED_HOST 64
#define SHARED_NONCE 48

// What rank 0 tells every rank: its host, and for each output the file it wrote ("" when none).
typedef struct {
    char host[SHARED_HOST];
    int n;
    struct {
        char key[48];
        char dir[CONFIG_STR + 8];
        char file[CONFIG_STR + 96];
        char nonce[SHARED_NONCE];
    } v[MODE_MAX_PATHS];
} shared_note;

// The nearest existing directory above path (its parent, else the parent's, ...) into out; 0, or
// -1. Above it, not the output directory itself: a file left there by a killed job would be one
// the mode did not write, and its claim would refuse the directory.
static int shared_dir_of(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') out[--len] = '\0'; // "run/" is "run"
    struct stat st;
    for (;;) {
        char *slash = strrchr(out, '/');
        if (!slash) {
            snprintf(out, n, ".");
            return stat(out, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
        }
        if (slash == out) slash[1] = '\0'; // "/"
        else *slash = '\0';
        if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
        if (slash == out) return -1;
    }
}

// Rank 0: the nonce file of output i (left empty when it cannot be written there).
static void shared_write(shared_note *s, int i, const mode_path *p) {
    snprintf(s->v[i].key, sizeof s->v[i].key, "%s", p->key);
    if (shared_dir_of(p->path, s->v[i].dir, sizeof s->v[i].dir)) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(s->v[i].nonce, SHARED_NONCE, "%llx-%lx-%x-%d", (unsigned long long)ts.tv_sec, (unsigned long)ts.tv_nsec,
             (unsigned)getpid(), i);
    char file[sizeof s->v[i].file];
    snprintf(file, sizeof file, "%s/.dflash-shared-fs.%s", s->v[i].dir, s->v[i].nonce);
    memcpy(s->v[i].file, file, sizeof file);
    int fd = open(s->v[i].file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    size_t len = strlen(s->v[i].nonce);
    int ok = fd >= 0 && write(fd, s->v[i].nonce, len) == (ssize_t)len;
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (!ok) {
        if (fd >= 0) unlink(s->v[i].file);
        s->v[i].file[0] = '\0';
    }
}

// Another rank: 1 when it reads output i's nonce (a few tries over a second: a network file
// system's caches may show a new file a moment late), 0 otherwise.
static int shared_read(const shared_note *s, int i) {
    if (!s->v[i].file[0]) return 1;
    char buf[SHARED_NONCE];
    for (int attempt = 0; attempt < 10; attempt++) {
        int fd = open(s->v[i].file, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t got = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (got >= 0) {
                buf[got] = '\0';
                if (strcmp(buf, s->v[i].nonce) == 0) return 1;
            }
        }
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

int mode_shared_fs_check(const world *w, const mode_def *mode, const config *cfg) {
    if (w->size < 2 || !mode->outputs) return 0;
    shared_note *s = xcalloc(1, sizeof *s);
    mode_paths out = {0};
    if (w->rank == 0) {
        mode->outputs(cfg, &out);
        if (gethostname(s->host, sizeof s->host - 1) != 0) snprintf(s->host, sizeof s->host, "?");
        s->n = out.n;
        for (int i = 0; i < out.n; i++) shared_write(s, i, &out.v[i]);
    }
    watchdog_bcast(s, (int)sizeof *s, 0, "rank 0's shared-file-system check");
    int bad = -1;
    for (int i = 0; i < s->n && bad < 0 && w->rank != 0; i++)
        if (!shared_read(s, i)) bad = i;
    int first = bad >= 0 ? w->rank : w->size; // the lowest rank that could not read says it
    watchdog_allreduce(&first, 1, MPI_INT, MPI_MIN, "the other ranks' shared-file-system check");
    if (w->rank == first) {
        char host[SHARED_HOST] = "?";
        if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
        log_error("%s: rank %d (on %s) does not see the file rank 0 (on %s) wrote in %s: every rank must see the job's "
                  "outputs in one directory on a file system every host mounts (NFS, Lustre, ...), not a node-local one "
                  "(docs/distributed.md, \"Several hosts\")",
                  s->v[bad].key, w->rank, host, s->host, s->v[bad].dir);
    }
    if (w->rank == 0)
        for (int i = 0; i < s->n; i++)
            if (s->v[i].file[0]) unlink(s->v[i].file);
    free(s);
    return first < w->size ? -1 : 0;
}
