// regen_output.c: regenerate.out's claim and its tidy-up after a successful end (see regen_output.h).
#include "teacher/regen_output.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/core/run_dir.h"
#include "common/data/trainset.h"

#define REGEN_SETTINGS_MAX 4096

// What regenerate writes in OUT.parts: a part (part-SSSSS-of-NNNNN.h5, or one being written), a
// file, and a job's shard claims (claims-NONCE/, a directory of empty files named by shard;
// regenerate.c). Anything else there is refused as not regenerate's: a new kind of entry regenerate
// writes there is named here too.
static int regen_parts_entry(const char *name, const struct stat *st) {
    if (S_ISREG(st->st_mode)) return fs_h5_name(name, "part-");
    return S_ISDIR(st->st_mode) && strncmp(name, "claims-", 7) == 0;
}

// regen_parts_only_ours: 0 when the directory parts holds only regenerate's entries; -1 with
// error_set naming the first other one.
static int regen_parts_only_ours(const config *cfg, const char *parts) {
    struct stat st;
    DIR *dp = opendir(parts);
    if (!dp) return error_set("regenerate.out %s: cannot read %s: %s", cfg->regen_out, parts, strerror(errno));
    struct dirent *e;
    int rc = 0;
    char path[CONFIG_STR + 300];
    while (rc == 0 && (e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", parts, e->d_name);
        if (lstat(path, &st) != 0 || !regen_parts_entry(e->d_name, &st))
            rc = error_set("regenerate.out %s: %s holds %s, which regenerate did not write; move it away", cfg->regen_out,
                           parts, e->d_name);
    }
    closedir(dp);
    return rc;
}

// The parts directory: only regenerate's parts in it; with overwrite (not dry) they go.
static int regen_parts_claim(const config *cfg, int dry) {
    char parts[CONFIG_STR + 16];
    snprintf(parts, sizeof parts, "%s.parts", cfg->regen_out);
    struct stat st;
    if (lstat(parts, &st) != 0) return 0; // lstat: a symbolic link is not followed into a directory not ours
    if (!S_ISDIR(st.st_mode))
        return error_set("regenerate.out %s: %s is there and is not regenerate's parts directory (a directory, "
                         "not a link); move it away",
                         cfg->regen_out, parts);
    int rc = regen_parts_only_ours(cfg, parts);
    if (rc || dry || !cfg->overwrite) return rc; // without overwrite the parts are resumed (or refused, settings differing)
    if (fs_remove_tree(parts) != 0)
        return error_set("regenerate.out %s: run.overwrite: cannot remove %s: %s", cfg->regen_out, parts, strerror(errno));
    return 0;
}

int regen_output_claim(const config *cfg, int dry) {
    const char *out = cfg->regen_out;
    if (!out[0]) return error_set("regenerate needs regenerate.out (the training set to write)");
    struct stat st;
    if (stat(out, &st) != 0) {
        if (errno != ENOENT) return error_set("regenerate.out %s: %s", out, strerror(errno));
        return regen_parts_claim(cfg, dry);
    }
    if (S_ISDIR(st.st_mode))
        return error_set("regenerate.out %s is a directory: it names the training set file to write (e.g. %s/regenerated.h5)",
                         out, out);
    if (!S_ISREG(st.st_mode)) return fs_check_regular(out, "regenerate.out");
    trainset ts;
    if (trainset_open(&ts, out, 0) < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", error_msg());
        return error_set("regenerate.out %s exists and is not a training set (%s): regenerate replaces only a training "
                         "set this project wrote, even with run.overwrite; choose another regenerate.out or move the "
                         "file away", out, why);
    }
    char have[REGEN_SETTINGS_MAX];
    int rc = trainset_attr_str(&ts, "settings", have, sizeof have);
    trainset_close(&ts);
    if (rc < 0) return error_prefix("regenerate.out");
    if (rc == 0 && !cfg->overwrite)
        return error_set("regenerate.out %s is a training set that regenerate did not make (no settings record): "
                         "--run.overwrite=true replaces it; or choose another regenerate.out", out);
    return regen_parts_claim(cfg, dry);
}

void regen_output_tidy(const config *cfg) {
    char parts[CONFIG_STR + 16], dir[CONFIG_STR], *slash;
    snprintf(parts, sizeof parts, "%s.parts", cfg->regen_out);
    struct stat st;
    if (lstat(parts, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (regen_parts_only_ours(cfg, parts) != 0) log_warn("regenerate: %s left in place: %s", parts, error_msg());
        else if (fs_remove_tree(parts) != 0) log_warn("regenerate: could not remove %s: %s", parts, strerror(errno));
    }
    snprintf(dir, sizeof dir, "%s", cfg->regen_out);
    slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    if (slash == dir) slash[1] = '\0', base = cfg->regen_out + 1; // "/x.h5": in "/"
    else if (slash) *slash = '\0';
    run_dir_remove_leftovers(slash ? dir : ".", base, NULL);
}
