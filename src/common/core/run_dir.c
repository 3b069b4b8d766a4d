// run_dir.c: see run_dir.h.
#include "common/core/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/error.h"
#include "common/core/log.h"

const char *const run_dir_checkpoint_files[] = {"model.safetensors", "optimizer.safetensors", "state.json", NULL};
const char *const run_dir_drafter_files[] = {"model.safetensors", "config.json", NULL};
// The files a job writes at the top of run.dir (the lock stays: it is this job's).
static const char *const run_dir_top_files[] = {"metrics.jsonl", "config.json", "eval.json", NULL};

int run_dir_refuse_unsafe(const char *key, const char *dir) {
    struct stat st, up, home;
    if (stat(dir, &st) != 0) return 0; // made later; a root or $HOME always exists
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/..", dir);
    if (stat(parent, &up) == 0 && (up.st_dev != st.st_dev || up.st_ino == st.st_ino))
        return error_set("%s %s is the root of a file system: a run there would mix its files with everything "
                         "else on it; give a directory of its own (e.g. %s/runs/NAME)", key, dir,
                         strcmp(dir, "/") == 0 ? "" : dir);
    const char *h = getenv("HOME");
    if (h && h[0] && stat(h, &home) == 0 && home.st_dev == st.st_dev && home.st_ino == st.st_ino)
        return error_set("%s %s is the home directory: a run there would mix its files with everything else in "
                         "it; give a directory of its own (e.g. %s/runs/NAME)", key, dir, dir);
    return 0;
}

int run_dir_remove_known(const char *dir, const char *const *names) {
    char path[4200];
    for (int i = 0; names[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (!S_ISREG(st.st_mode)) continue; // not what this project wrote under that name: stays
        if (unlink(path) != 0 && errno != ENOENT) return -1;
    }
    if (rmdir(dir) == 0 || errno == ENOENT) return 0;
    if (errno == EEXIST) errno = ENOTEMPTY;
    return -1;
}

int run_dir_holds_only(const char *dir, const char *const *names) {
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    struct dirent *e;
    int only = 1;
    char path[4200];
    while ((e = readdir(dp)) && only) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int known = 0;
        for (int i = 0; names[i] && !known; i++) known = strcmp(e->d_name, names[i]) == 0;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        only = known && lstat(path, &st) == 0 && S_ISREG(st.st_mode);
    }
    closedir(dp);
    return only;
}

// The checkpoint directories (step-N, and the temporaries of an interrupted write) under dir/checkpoints.
typedef int (*run_dir_entry_fn)(const char *path, void *arg);
static int run_dir_each_checkpoint(const char *dir, run_dir_entry_fn fn, void *arg) {
    char root[4200], path[4400];
    snprintf(root, sizeof root, "%s/checkpoints", dir);
    DIR *dp = opendir(root);
    if (!dp) return 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(dp)) && rc == 0) {
        long long s;
        const char *n = e->d_name;
        int ours = (n[0] == 's' && sscanf(n, "step-%lld", &s) == 1) || strncmp(n, ".tmp-step-", 10) == 0 ||
                   strncmp(n, ".old-step-", 10) == 0;
        if (!ours) continue;
        snprintf(path, sizeof path, "%s/%s", root, n);
        rc = fn(path, arg);
    }
    closedir(dp);
    return rc;
}

static int run_dir_count(const char *path, void *arg) {
    (void)path;
    ++*(int *)arg;
    return 0;
}

// Remove the files names (a list) from the directory path: a foreign file left in it keeps it, said once.
static int run_dir_remove_ours(const char *path, void *names) {
    if (run_dir_remove_known(path, names) == 0) return 0;
    if (errno == ENOTEMPTY) { // a file of someone else's in it: it stays, with that file
        log_warn("run.overwrite: %s holds files this trainer does not write: left in place", path);
        return 0;
    }
    return error_set("run.overwrite: cannot remove %s: %s", path, strerror(errno));
}

int run_dir_claim(const char *dir, int overwrite, int eval) {
    char what[1024] = "", path[4200];
    size_t m = 0;
    if (eval) { // an evaluation writes eval.json only: an earlier one is what it would replace
        snprintf(path, sizeof path, "%s/eval.json", dir);
        if (access(path, F_OK) != 0) return 0;
        if (!overwrite)
            return error_set("run.dir %s holds an earlier evaluation (eval.json): give a new run.dir, or "
                             "--run.overwrite=true to replace it", dir);
        return 0;
    }
    for (int i = 0; run_dir_top_files[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, run_dir_top_files[i]);
        if (access(path, F_OK) == 0) m += (size_t)snprintf(what + m, sizeof what - m, "%s%s", m ? ", " : "", run_dir_top_files[i]);
    }
    int n_ckpt = 0;
    run_dir_each_checkpoint(dir, run_dir_count, &n_ckpt);
    if (n_ckpt > 0 && m < sizeof what - 64)
        m += (size_t)snprintf(what + m, sizeof what - m, "%s%d checkpoint%s", m ? ", " : "", n_ckpt, n_ckpt > 1 ? "s" : "");
    snprintf(path, sizeof path, "%s/drafter", dir);
    if (access(path, F_OK) == 0 && m < sizeof what - 64)
        m += (size_t)snprintf(what + m, sizeof what - m, "%san exported drafter", m ? ", " : "");
    if (m == 0) return 0;
    if (!overwrite)
        return error_set("run.dir %s holds an earlier run (%s): continue it with --run.resume=true, or start over in "
                         "a new run.dir or with --run.overwrite=true (which removes those files)", dir, what);
    log_info("run.overwrite: removing the earlier run in %s (%s)", dir, what);
    for (int i = 0; run_dir_top_files[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, run_dir_top_files[i]);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && unlink(path) != 0)
            return error_set("run.overwrite: cannot remove %s: %s", path, strerror(errno));
    }
    if (run_dir_each_checkpoint(dir, run_dir_remove_ours, (void *)run_dir_checkpoint_files)) return -1;
    snprintf(path, sizeof path, "%s/checkpoints", dir);
    rmdir(path); // when empty
    snprintf(path, sizeof path, "%s/drafter", dir);
    return run_dir_remove_ours(path, (void *)run_dir_drafter_files);
}
