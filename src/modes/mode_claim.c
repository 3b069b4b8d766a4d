// mode_claim.c: the frame's claim of a job's outputs (see mode_claim.h).
#include "modes/mode_claim.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/error.h"
#include "common/core/fsutil.h"

#define CLAIM_MAX_LOCKS 8

// The locks this process holds: fd and, for a file output, the lock file removed at release.
static struct {
    int fd;
    char path[CONFIG_STR + 16];
    int remove;
} held[CLAIM_MAX_LOCKS];
static int n_held;

int mode_claim_distinct(const mode_def *m, const config *cfg) {
    if (!m->inputs || !m->outputs) return 0;
    mode_paths in = {0}, out = {0};
    m->inputs(cfg, &in);
    m->outputs(cfg, &out);
    for (int o = 0; o < out.n; o++) { // a file output, or what the job makes beside one, is never a link
        const mode_path *a = &out.v[o];
        struct stat st;
        if ((!a->dir || a->set != a->key) && lstat(a->path, &st) == 0 && S_ISLNK(st.st_mode))
            return error_set("%s %s is a symbolic link: the job never writes through a link or replaces one it did "
                             "not make; move it away or give %s a path of its own", a->key, a->path, a->set);
    }
    for (int o = 0; o < out.n; o++)
        for (int i = 0; i < in.n; i++) {
            const mode_path *a = &out.v[o], *b = &in.v[i];
            if (fs_same_path(a->path, b->path))
                return error_set("%s %s is %s %s, an input of this job: the job would write over what it reads; "
                                 "give %s a path of its own", a->key, a->path, b->key, b->path, a->set);
            if (b->dir && !a->dir && fs_in_dir(a->path, b->path))
                return error_set("%s %s is a file of %s %s, an input of this job: the job would write over what it "
                                 "reads; give %s a path of its own", a->key, a->path, b->key, b->path, a->set);
            char name[300]; // an input under an output directory, by a name the mode writes or clears there
            if (a->dir && fs_under_dir(b->path, a->path, name, sizeof name) && (!a->ours || a->ours(name)))
                return error_set("%s %s lies inside %s %s, an output directory of this job, under %s, a name the job "
                                 "writes or removes there (run.overwrite clears it): move %s out of it or give %s %s",
                                 b->key, b->path, a->key, a->path, name, b->key, a->set,
                                 a->set == a->key ? "a directory of its own" : "a path of its own");
        }
    return 0;
}

static int claim_hold(int fd, const char *path, int remove) {
    if (n_held == CLAIM_MAX_LOCKS) {
        fs_unlock_dir(fd);
        return error_set("%s: more than %d outputs locked", path, CLAIM_MAX_LOCKS);
    }
    held[n_held].fd = fd;
    snprintf(held[n_held].path, sizeof held[n_held].path, "%s", path);
    held[n_held].remove = remove;
    n_held++;
    return 0;
}

int mode_claim_lock_file(const char *key, const char *out, int dry) {
    char path[CONFIG_STR + 16], parent[CONFIG_STR];
    snprintf(path, sizeof path, "%s.lock", out);
    if (dry) return fs_lock_file_probe(path, key, out); // nothing made: a missing lock file is a free one
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    struct stat st;
    if (slash && slash != parent) { // its directory: made as the job would make it (nobody holds a lock there yet)
        *slash = '\0';
        if (stat(parent, &st) != 0 && fs_mkdirs(parent)) return error_prefix("%s", key);
    }
    int fd;
    if (fs_lock_file(path, key, out, &fd)) return -1;
    return claim_hold(fd, path, 1);
}

int mode_claim_lock_dir(const char *key, const char *dir, int dry) {
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) return error_set("%s %s: not a directory", key, dir);
    char path[CONFIG_STR + 16];
    snprintf(path, sizeof path, "%s/.lock", dir);
    if (dry) return stat(dir, &st) != 0 ? 0 : fs_lock_file_probe(path, key, dir); // made by the job: nobody holds it yet
    if (fs_mkdirs(dir)) return error_prefix("%s", key);
    int fd;
    if (fs_lock_file(path, key, dir, &fd)) return -1;
    return claim_hold(fd, path, 0);
}

void mode_claim_release(void) {
    for (int i = n_held - 1; i >= 0; i--) {
        if (held[i].remove) fs_unlock_file(held[i].path, held[i].fd);
        else fs_unlock_dir(held[i].fd);
    }
    n_held = 0;
}

int mode_claim_foreign(const char *dir, int (*ours)(const char *name), char *name, size_t n) {
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    struct dirent *e;
    int found = 0;
    char path[CONFIG_STR + 300];
    while (!found && (e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (ours(e->d_name) && lstat(path, &st) == 0 && S_ISREG(st.st_mode)) continue;
        snprintf(name, n, "%s", e->d_name);
        found = 1;
    }
    closedir(dp);
    return found;
}

int mode_claim_remove_ours(const char *dir, int (*ours)(const char *name)) {
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    struct dirent *e;
    int rc = 0;
    char path[CONFIG_STR + 300];
    while (rc == 0 && (e = readdir(dp))) {
        if (!ours(e->d_name) || strcmp(e->d_name, ".lock") == 0) continue; // the lock is this job's now
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; // not what this project wrote there
        if (unlink(path) != 0 && errno != ENOENT) rc = error_set("%s: cannot remove it: %s", path, strerror(errno));
    }
    closedir(dp);
    return rc;
}
