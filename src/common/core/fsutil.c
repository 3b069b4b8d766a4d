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

// The lock on the file path for "<key> <target>" (see fs_lock_dir); noun: what there is one job per.
static int lock_at(const char *path, const char *key, const char *target, const char *noun, int *fd_out) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return error_set("%s %s: cannot open its lock file %s: %s", key, target, path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        int err = errno;
        char holder[256] = "";
        ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        long long pid = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK ? (long long)who.l_pid : -1;
        close(fd);
        if (err != EACCES && err != EAGAIN) return error_set("%s %s: cannot lock %s: %s", key, target, path, strerror(err));
        return error_set("%s %s is in use by another job (%s%s; pid %lld as this host sees it): one job per %s; "
                         "wait for it to end or choose another %s",
                         key, target, holder[0] ? "holder: " : "holder unknown", holder, pid, noun, key);
    }
    char host[128] = "?", when[64] = "?", text[320];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", &tm);
    int len = snprintf(text, sizeof text, "host %s pid %lld started %s\n", host, (long long)getpid(), when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) { /* the holder line is a courtesy */ }
    *fd_out = fd;
    return 0;
}

int fs_lock_dir(const char *dir, int *fd_out) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    return lock_at(path, "run.dir", dir, "run directory", fd_out);
}

int fs_lock_file(const char *lock_path, const char *key, const char *target, int *fd_out) {
    for (int tries = 0; tries < 100; tries++) {
        int fd;
        if (lock_at(lock_path, key, target, "output", &fd)) return -1;
        struct stat a, b; // still the file of that name (its holder may have removed it meanwhile)?
        if (fstat(fd, &a) == 0 && stat(lock_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            *fd_out = fd;
            return 0;
        }
        close(fd);
    }
    return error_set("%s %s: its lock file %s keeps being replaced", key, target, lock_path);
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
