// run_dir.c: see run_dir.h.
#include "common/core/run_dir.h"
#include "common/core/config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/error.h"
#include "common/core/fsutil.h"
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
// A link of that name (to a directory of someone else's) is not followed: it stays, said once.
static int run_dir_remove_ours(const char *path, void *names) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        log_warn("run.overwrite: %s is not a directory this trainer wrote (a link or a file): left in place", path);
        return 0;
    }
    if (run_dir_remove_known(path, names) == 0) return 0;
    if (errno == ENOTEMPTY) { // a file of someone else's in it: it stays, with that file
        log_warn("run.overwrite: %s holds files this trainer does not write: left in place", path);
        return 0;
    }
    return error_set("run.overwrite: cannot remove %s: %s", path, strerror(errno));
}

// run_dir_claim's checks, and with dry (--preflight) nothing removed.
static int run_dir_claim_at(const char *dir, int overwrite, int eval, int dry) {
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
    if (dry) return 0;
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

int run_dir_claim(const char *dir, int overwrite, int eval) { return run_dir_claim_at(dir, overwrite, eval, 0); }

// The files a job writes at the top of dir, when there, are regular files: a link (or anything
// else) of that name is never written through or replaced, resumed or not.
static int run_dir_top_regular(const char *dir, int eval) {
    char path[4200];
    for (int i = 0; run_dir_top_files[i]; i++) {
        if (eval && strcmp(run_dir_top_files[i], "eval.json") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, run_dir_top_files[i]);
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return error_set("run.dir %s: %s is %s, not a file this trainer wrote: the job writes %s there and never "
                             "through a link or over what it did not write; move it away or choose another run.dir",
                             dir, path, S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory"
                                                                                               : "not a regular file",
                             run_dir_top_files[i]);
    }
    return 0;
}

int run_dir_take(const char *dir, int resume, int overwrite, int eval, int dry, int *lock_fd) {
    if (lock_fd) *lock_fd = -1;
    struct stat st;
    if (dry) { // nothing made: a directory that does not exist yet is free and holds no earlier run
        if (stat(dir, &st) != 0) return 0;
        if (!S_ISDIR(st.st_mode)) return error_set("run.dir %s: not a directory", dir);
        if (fs_lock_dir_probe(dir) || run_dir_top_regular(dir, eval)) return -1;
        return resume ? 0 : run_dir_claim_at(dir, overwrite, eval, 1);
    }
    if (fs_mkdirs(dir) || fs_lock_dir(dir, lock_fd)) return -1;
    if (run_dir_top_regular(dir, eval) || (!resume && run_dir_claim_at(dir, overwrite, eval, 0))) {
        fs_unlock_dir(*lock_fd);
        *lock_fd = -1;
        return -1;
    }
    return 0;
}

int run_dir_ours(const char *name, int eval) {
    static const char *const more[] = {".lock", "checkpoints", "drafter", NULL};
    for (int k = 0; k < 2; k++)
        for (const char *const *n = k ? more : run_dir_top_files; *n; n++) {
            if (eval && strcmp(*n, "eval.json") != 0 && strcmp(*n, ".lock") != 0) continue; // eval writes eval.json only
            size_t len = strlen(*n); // the name, or one of its temporaries (NAME.tmp.PID, drafter.old.PID)
            if (strncmp(name, *n, len) == 0 &&
                (name[len] == '\0' || strncmp(name + len, ".tmp.", 5) == 0 || strncmp(name + len, ".old.", 5) == 0))
                return 1;
        }
    return 0;
}

// The STEM of a leftover "STEM.tmp.PID" / "STEM.old.PID" (PID: digits) into stem; 0 when name is not one.
static int run_dir_leftover_stem(const char *name, char *stem, size_t n) {
    const char *tail = NULL;
    for (const char *p = strchr(name, '.'); p; p = strchr(p + 1, '.'))
        if (strncmp(p, ".tmp.", 5) == 0 || strncmp(p, ".old.", 5) == 0) tail = p;
    if (!tail || !tail[5] || (size_t)(tail - name) >= n) return 0;
    for (const char *c = tail + 5; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    memcpy(stem, name, (size_t)(tail - name));
    stem[tail - name] = '\0';
    return 1;
}

// An HDF5 file (its signature at offset 0, where this project's writers put the superblock), or an
// empty one (a writer killed as it created it).
static int run_dir_hdf5_or_empty(const char *path, off_t size) {
    if (size == 0) return 1;
    unsigned char sig[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(sig, 1, sizeof sig, f) : 0;
    if (f) fclose(f);
    return n == sizeof sig && memcmp(sig, "\211HDF\r\n\032\n", 8) == 0;
}

int run_dir_remove_leftovers(const char *dir, const char *stem, const char *const *dir_files) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t star = strlen(stem) > 0 && stem[strlen(stem) - 1] == '*' ? strlen(stem) - 1 : 0;
    int removed = 0;
    struct dirent *e;
    char have[1024], path[4200];
    while ((e = readdir(d))) {
        if (!run_dir_leftover_stem(e->d_name, have, sizeof have)) continue;
        size_t hl = strlen(have);
        int match = star ? strncmp(have, stem, star) == 0 && hl > star + 3 && strcmp(have + hl - 3, ".h5") == 0
                         : strcmp(have, stem) == 0;
        if (!match) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (dir_files ? S_ISDIR(st.st_mode) && run_dir_holds_only(path, dir_files) && fs_remove_tree(path) == 0
                      : S_ISREG(st.st_mode) && run_dir_hdf5_or_empty(path, st.st_size) && unlink(path) == 0)
            removed++;
        else
            log_warn("%s: left by an interrupted job, but not removed (not a file or a directory of this project's)", path);
    }
    closedir(d);
    return removed;
}

// Settings: the keys of the job's frame: its run directory, seed, mode and log level (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key run_keys[] = {
    {"run.dir", CFG_STRING, CONFIG_F(run_dir), "runs/dflash", "run directory: metrics.jsonl, checkpoints, the effective config", NULL, CONFIG_NOLIM},
    {"run.seed", CFG_INT, CONFIG_F(seed), "1234", "seed of every random stream (data order, anchors, init)", NULL, 0, 9.2e18},
    {"run.log_level", CFG_STRING, CONFIG_F(log_level), "info", "lowest level of log lines printed", "debug|info|warn|error", CONFIG_NOLIM},
    {"run.mode", CFG_STRING, CONFIG_F(mode), "train", "what the job does: one of the modes dflash_rank --help lists with what each does (train, check, dump-features, regenerate, eval, transport-test; src/modes/modes.c is their table, and an unknown name is an error listing them)", NULL, CONFIG_NOLIM},
    {"run.resume", CFG_BOOL, CONFIG_F(resume), "false", "continue from the newest complete checkpoint in run.dir (from the start when there is none)", NULL, CONFIG_NOLIM},
    {"run.overwrite", CFG_BOOL, CONFIG_F(overwrite), "false", "start a new run in a run.dir that holds an earlier one (its metrics.jsonl, config.json, checkpoints, drafter, eval.json): those files are removed first (only those: nothing else in run.dir is touched); without it such a start is refused. Likewise for the other modes' outputs (docs/faults.md, Modes): dump-features starts over in a features.dir (its own files removed), regenerate replaces a regenerate.out that is a training set (made with other settings, or by another tool) and removes its OUT.parts; a file this project did not write is never removed or replaced", NULL, CONFIG_NOLIM},
};
const config_key_set run_settings = CONFIG_KEY_SET(run_keys, NULL);
