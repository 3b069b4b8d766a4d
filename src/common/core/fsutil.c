// fsutil.c: see fsutil.h.
#include "common/core/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/core/error.h"

// fs_kind: what a non-regular file is, for the message.
static const char *fs_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

static int fs_refuse(const char *path, const char *what, mode_t m) {
    errno = EINVAL;
    error_set("%s%s%s: not a regular file (%s): only regular files are read", what && what[0] ? what : "",
              what && what[0] ? " " : "", path, fs_kind(m));
    errno = EINVAL;
    return -1;
}

int fs_check_regular(const char *path, const char *what) {
    struct stat st;
    if (stat(path, &st) != 0) {
        int err = errno;
        error_set("%s%s%s: cannot open: %s", what && what[0] ? what : "", what && what[0] ? " " : "", path, strerror(err));
        errno = err;
        return -1;
    }
    return S_ISREG(st.st_mode) ? 0 : fs_refuse(path, what, st.st_mode);
}

int fs_open_regular(const char *path, const char *what) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        error_set("%s%s%s: cannot open: %s", what && what[0] ? what : "", what && what[0] ? " " : "", path, strerror(err));
        errno = err;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fs_refuse(path, what, st.st_mode);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK); // regular files ignore it; keep reads plain
    return fd;
}

FILE *fs_fopen_regular(const char *path, const char *what) {
    int fd = fs_open_regular(path, what);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        error_set("%s: cannot open: %s", path, strerror(err));
        errno = err;
    }
    return f;
}

int fs_mkdirs(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return error_set("directory '%s': empty or too long a path", dir);
    memcpy(path, dir, n + 1);
    // every prefix ending at a '/', then the whole path
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char keep = path[i];
        path[i] = '\0';
        struct stat st;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return error_set("directory %s: %s", path, strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return error_set("directory %s: exists and is not a directory", path);
        path[i] = keep;
    }
    return 0;
}

int fs_write_text(const char *path, const char *text) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return error_set("%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return error_set("%s: %s", path, strerror(errno));
    size_t len = strlen(text);
    int bad = fwrite(text, 1, len, f) != len || fflush(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (!bad && rename(tmp, path) != 0) bad = 1, err = errno;
    if (bad) {
        remove(tmp); // ours, a regular file: never path itself
        return error_set("%s: %s", path, strerror(err));
    }
    return 0;
}

int fs_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    DIR *dp = opendir(path);
    if (!dp) return -1;
    size_t n = strlen(path);
    int rc = 0, first_errno = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        size_t m = strlen(e->d_name);
        char *child = malloc(n + m + 2);
        if (!child) {
            rc = -1, first_errno = first_errno ? first_errno : ENOMEM;
            continue;
        }
        memcpy(child, path, n);
        child[n] = '/';
        memcpy(child + n + 1, e->d_name, m + 1);
        if (fs_remove_tree(child) != 0) rc = -1, first_errno = first_errno ? first_errno : errno;
        free(child);
    }
    closedir(dp);
    if (rmdir(path) != 0 && errno != ENOENT) rc = -1, first_errno = first_errno ? first_errno : errno;
    if (rc) errno = first_errno;
    return rc;
}

// A lock file of this project holds one line, "host H pid P started WHEN\n" (lock_at writes it):
// what a lock left by a crashed job is recognised by, so that it is taken again, while a file of
// that name holding anything else (a user's file, a prompts file) is never written over or removed.
#define LOCK_LINE_MAX 320
// (A small file whose first line is one: a holder line written over a longer one by another tool.)
static int lock_line_ours(const char *buf, ssize_t n) {
    if (n <= 0 || n >= LOCK_LINE_MAX || buf[n - 1] != '\n' || memchr(buf, '\0', (size_t)n)) return 0;
    char line[LOCK_LINE_MAX];
    size_t len = (size_t)((const char *)memchr(buf, '\n', (size_t)n) - buf);
    memcpy(line, buf, len);
    line[len] = '\0';
    return strncmp(line, "host ", 5) == 0 && strstr(line, " pid ") && strstr(line, " started ");
}

// The refusals every lock shares: "<key> <target>" first, then the lock file and why.
static int lock_refuse_link(const char *path, const char *key, const char *target) {
    return error_set("%s %s: its lock file %s is a symbolic link, not a lock file of this project: a lock is never "
                     "taken through a link; remove the link (no job of this project made it) or choose another %s",
                     key, target, path, key);
}

// What is at path when it is not a lock file of ours: refused (never written over or removed).
static int lock_refuse_foreign(const char *path, const char *key, const char *target, const char *what) {
    return error_set("%s %s: %s exists and is not a lock file of this project (%s): it is never written over or "
                     "removed; move it away or choose another %s", key, target, path, what, key);
}

// The holder's line at fd (one line, "" when none) into holder[n].
static void lock_holder(int fd, char *holder, size_t n) {
    ssize_t got = pread(fd, holder, n - 1, 0);
    holder[got > 0 ? got : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
}

static int lock_refuse_held(int fd, const char *key, const char *target, const char *noun, long long pid) {
    char holder[LOCK_LINE_MAX];
    lock_holder(fd, holder, sizeof holder);
    return error_set("%s %s is in use by another job (%s%s; pid %lld as this host sees it): one job per %s; "
                     "wait for it to end or choose another %s",
                     key, target, holder[0] ? "holder: " : "holder unknown", holder, pid, noun, key);
}

// An existing lock file opened at fd (a regular file): 0 when it holds a lock line of ours; 1 when
// it is empty (a job between making it and writing its line: look again); -1 with error_set when it
// holds anything else.
static int lock_check_ours(int fd, const char *path, const char *key, const char *target) {
    char buf[LOCK_LINE_MAX];
    ssize_t got = pread(fd, buf, sizeof buf, 0);
    if (got == 0) return 1;
    if (got < 0) return error_set("%s %s: cannot read its lock file %s: %s", key, target, path, strerror(errno));
    if (lock_line_ours(buf, got)) return 0;
    return lock_refuse_foreign(path, key, target, "it does not hold a lock line \"host H pid P started T\"");
}

// An existing lock file: opened without following a link, a regular file. fd, or -1: *again set
// when it went away meanwhile (its holder removed it), else error_set.
static int lock_open_existing(const char *path, const char *key, const char *target, int flags, int *again) {
    *again = 0;
    int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return *again = 1, -1;
        if (errno == ELOOP) return lock_refuse_link(path, key, target);
        return error_set("%s %s: cannot open its lock file %s: %s", key, target, path, strerror(errno));
    }
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mode_t m = st.st_mode;
        close(fd);
        return lock_refuse_foreign(path, key, target, fs_kind(m));
    }
    return fd;
}

static void lock_pause(void) {
    struct timespec t = {0, 10 * 1000 * 1000};
    nanosleep(&t, NULL);
}

#define LOCK_TRIES 50 // looks at an empty lock file (10 ms apart) before it is taken for someone else's

// An existing lock file opened at fd, looked at for the tries-th time: 0 when it holds a lock line
// of ours (fd kept open); 1 when it is still empty and may be looked at again (fd closed, after a
// pause); -1 with error_set (fd closed) when it holds anything else or stayed empty.
static int lock_wait_ours(int fd, const char *path, const char *key, const char *target, int tries) {
    int r = lock_check_ours(fd, path, key, target);
    if (r == 0) return 0;
    close(fd);
    if (r == 1 && tries < LOCK_TRIES) { // a job between making it and writing its line
        lock_pause();
        return 1;
    }
    return r < 0 ? -1 : lock_refuse_foreign(path, key, target, "an empty file");
}

// The lock on the file path for "<key> <target>" (see fs_lock_dir); noun: what there is one job per.
// Made exclusively (O_CREAT | O_EXCL | O_NOFOLLOW); an existing one is taken only when it is a
// regular file, not a link, holding a lock line of ours (a crashed job's: fcntl locks die with
// their process), and then its line is replaced with this job's.
static int lock_at(const char *path, const char *key, const char *target, const char *noun, int *fd_out) {
    for (int tries = 0;; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644), made = fd >= 0;
        if (fd < 0 && errno != EEXIST) {
            if (errno == ELOOP) return lock_refuse_link(path, key, target);
            return error_set("%s %s: cannot open its lock file %s: %s", key, target, path, strerror(errno));
        }
        int again = 0;
        if (!made && (fd = lock_open_existing(path, key, target, O_RDWR, &again)) < 0) {
            if (again && tries < 100) continue;
            if (again) return error_set("%s %s: its lock file %s keeps being replaced", key, target, path);
            return -1; // a link, not a regular file, unreadable: said
        }
        if (!made) { // someone else's: ours (a lock line) before it is locked, so that nothing else is ever written
            int r = lock_wait_ours(fd, path, key, target, tries);
            if (r == 1) continue;
            if (r < 0) return -1;
        }
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(fd, F_SETLK, &fl) != 0) {
            int err = errno;
            struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            long long pid = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK ? (long long)who.l_pid : -1;
            int rc = err != EACCES && err != EAGAIN
                         ? error_set("%s %s: cannot lock %s: %s", key, target, path, strerror(err))
                         : lock_refuse_held(fd, key, target, noun, pid);
            close(fd);
            return rc;
        }
        char host[128] = "?", when[64] = "?", text[LOCK_LINE_MAX];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        for (char *c = host; *c; c++)
            if (*c == '\n') *c = '?';
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", &tm);
        int len = snprintf(text, sizeof text, "host %s pid %lld started %s\n", host, (long long)getpid(), when);
        if (len >= (int)sizeof text) len = (int)sizeof text - 1, text[len - 1] = '\n';
        // the line written whole before the length is cut: a reader never sees the file empty
        if (pwrite(fd, text, (size_t)len, 0) != len || ftruncate(fd, len) != 0) { /* the holder line is a courtesy */ }
        *fd_out = fd;
        return 0;
    }
}

// Whether the lock file path is free (see fs_lock_file_probe); noun as for lock_at.
static int lock_probe(const char *path, const char *key, const char *target, const char *noun) {
    for (int tries = 0;; tries++) {
        struct stat st;
        if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : error_set("%s %s: its lock file %s: %s", key, target, path, strerror(errno));
        if (S_ISLNK(st.st_mode)) return lock_refuse_link(path, key, target);
        int again = 0, fd = lock_open_existing(path, key, target, O_RDONLY, &again);
        if (fd < 0) {
            if (again) return 0; // gone: free
            return -1;
        }
        int r = lock_wait_ours(fd, path, key, target, tries);
        if (r == 1) continue;
        if (r < 0) return -1;
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        int rc = 0;
        if (fcntl(fd, F_GETLK, &who) != 0) rc = error_set("%s %s: cannot test the lock %s: %s", key, target, path, strerror(errno));
        else if (who.l_type != F_UNLCK) rc = lock_refuse_held(fd, key, target, noun, (long long)who.l_pid);
        close(fd); // (this process holds no lock on it: closing releases nothing)
        return rc;
    }
}

int fs_lock_dir(const char *dir, int *fd_out) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    return lock_at(path, "run.dir", dir, "run directory", fd_out);
}

int fs_lock_dir_probe(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    return lock_probe(path, "run.dir", dir, "run directory");
}

int fs_lock_file(const char *lock_path, const char *key, const char *target, int *fd_out) {
    for (int tries = 0; tries < 100; tries++) {
        int fd;
        if (lock_at(lock_path, key, target, "output", &fd)) return -1;
        struct stat a, b; // still the file of that name (its holder may have removed it meanwhile)?
        if (fstat(fd, &a) == 0 && lstat(lock_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            *fd_out = fd;
            return 0;
        }
        close(fd);
    }
    return error_set("%s %s: its lock file %s keeps being replaced", key, target, lock_path);
}

int fs_lock_file_probe(const char *lock_path, const char *key, const char *target) {
    return lock_probe(lock_path, key, target, "output");
}

void fs_unlock_file(const char *lock_path, int fd) {
    if (fd < 0) return;
    unlink(lock_path); // while still held: a job waiting on this file then finds it gone and retries
    close(fd);
}

// The absolute path of p with its existing part resolved: realpath(p), or realpath of its parent
// + "/" + its last name when p does not exist. -1 when even the parent cannot be resolved.
static int path_resolve(const char *p, char *out, size_t n) {
    char buf[PATH_MAX];
    if (realpath(p, buf)) return snprintf(out, n, "%s", buf) < (int)n ? 0 : -1;
    char copy[PATH_MAX];
    if (snprintf(copy, sizeof copy, "%s", p) >= (int)sizeof copy) return -1;
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/') copy[--len] = '\0';
    char *slash = strrchr(copy, '/');
    const char *name = slash ? slash + 1 : copy, *parent = slash ? (slash == copy ? "/" : copy) : ".";
    if (slash && slash != copy) *slash = '\0';
    if (!realpath(parent, buf)) return -1;
    return snprintf(out, n, "%s/%s", strcmp(buf, "/") == 0 ? "" : buf, name) < (int)n ? 0 : -1;
}

int fs_same_path(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[PATH_MAX], rb[PATH_MAX];
    if (path_resolve(a, ra, sizeof ra) || path_resolve(b, rb, sizeof rb)) return strcmp(a, b) == 0;
    return strcmp(ra, rb) == 0;
}

// The absolute path of p with its parent resolved and its last name kept as it is (a link there
// not followed). -1 when the parent cannot be resolved or the last name is "." or "..".
static int path_resolve_parent(const char *p, char *out, size_t n) {
    char copy[PATH_MAX], buf[PATH_MAX];
    if (snprintf(copy, sizeof copy, "%s", p) >= (int)sizeof copy) return -1;
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/') copy[--len] = '\0';
    char *slash = strrchr(copy, '/');
    const char *name = slash ? slash + 1 : copy, *parent = slash ? (slash == copy ? "/" : copy) : ".";
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return -1;
    if (slash && slash != copy) *slash = '\0';
    if (!realpath(parent, buf)) return -1;
    return snprintf(out, n, "%s/%s", strcmp(buf, "/") == 0 ? "" : buf, name) < (int)n ? 0 : -1;
}

int fs_under_dir(const char *path, const char *dir, char *first, size_t n) {
    struct stat st;
    char rd[PATH_MAX], cand[2][PATH_MAX];
    if (lstat(path, &st) != 0 || !realpath(dir, rd)) return 0;
    int nc = 0;
    if (path_resolve_parent(path, cand[nc], sizeof cand[nc]) == 0) nc++; // where its name is
    if (realpath(path, cand[nc])) nc++;                                   // where what it names is
    size_t L = strcmp(rd, "/") == 0 ? 0 : strlen(rd);
    for (int i = 0; i < nc; i++) {
        const char *c = cand[i];
        if (strncmp(c, rd, L) != 0 || c[L] != '/' || !c[L + 1]) continue;
        const char *rest = c + L + 1;
        size_t k = strcspn(rest, "/");
        snprintf(first, n, "%.*s", (int)k, rest);
        return 1;
    }
    return 0;
}

int fs_in_dir(const char *path, const char *dir) {
    char r[PATH_MAX];
    struct stat sp, sd, sq;
    if (stat(path, &sp) != 0 || stat(dir, &sd) != 0 || !S_ISDIR(sd.st_mode) || path_resolve(path, r, sizeof r)) return 0;
    char *slash = strrchr(r, '/');
    if (!slash) return 0;
    if (slash == r) slash[1] = '\0';
    else *slash = '\0';
    return stat(r, &sq) == 0 && sq.st_dev == sd.st_dev && sq.st_ino == sd.st_ino;
}

void fs_unlock_dir(int fd) {
    if (fd >= 0) close(fd);
}

int fs_h5_name(const char *name, const char *prefix) {
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) != 0) return 0;
    const char *h5 = strstr(name + p, ".h5");
    if (!h5) return 0;
    if (h5[3] == '\0') return 1;
    if (strncmp(h5 + 3, ".tmp.", 5) != 0 || !h5[8]) return 0;
    for (const char *c = h5 + 8; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
}
