// checkpoint.c: see checkpoint.h.
#include "student/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/core/log.h"
#include "common/data/safetensors.h"

static void checkpoint_dir(char *buf, size_t n, const char *run_dir, int64_t step) {
    snprintf(buf, n, "%s/checkpoints/step-%08lld", run_dir, (long long)step);
}

// fsync a directory so that the entries created or renamed in it are durable. Some file systems
// cannot fsync a directory (EINVAL): nothing more can be done there, so that is not an error.
static int checkpoint_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0 && err == EINVAL) rc = 0;
    errno = err;
    return rc;
}

// rm -rf for a checkpoint directory (flat: files only, but a stray subdirectory is removed too),
// without a shell: no quoting problems, no fork() inside an MPI process, and it works on a full
// disk (unlink needs no space).
static int checkpoint_rm_rf(const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return errno == ENOENT ? 0 : unlink(dir);
    struct dirent *e;
    char path[1400];
    int rc = 0;
    while ((e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) rc |= checkpoint_rm_rf(path);
        else if (unlink(path) != 0 && errno != ENOENT) rc = -1;
    }
    closedir(dp);
    if (rmdir(dir) != 0 && errno != ENOENT) rc = -1;
    return rc;
}

// Leftovers of a write that never finished (a killed job: ".tmp-step-*"; a replaced checkpoint:
// ".old-step-*"). A run directory has one writer at a time, so they are garbage; they would
// otherwise hold disk space forever.
static void checkpoint_remove_leftovers(const char *root) {
    DIR *dp = opendir(root);
    if (!dp) return;
    struct dirent *e;
    char path[1400];
    while ((e = readdir(dp))) {
        if (strncmp(e->d_name, ".tmp-step-", 10) != 0 && strncmp(e->d_name, ".old-step-", 10) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        checkpoint_rm_rf(path);
    }
    closedir(dp);
}

// Write state.json into dir: -1 with error_set naming the file and the OS reason.
static int checkpoint_write_state(const char *dir, int64_t step, const optim *o, uint64_t config_hash) {
    char path[1200];
    snprintf(path, sizeof path, "%s/state.json", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return error_set("%s: %s", path, strerror(errno));
    char text[256];
    int n = snprintf(text, sizeof text, "{\"step\": %lld, \"optim_step\": %lld, \"config_hash\": \"%016llx\"}\n",
                     (long long)step, (long long)o->step, (unsigned long long)config_hash);
    int err = 0;
    for (int done = 0; done < n && !err;) {
        ssize_t w = write(fd, text + done, (size_t)(n - done));
        if (w > 0) done += (int)w;
        else if (w < 0 && errno == EINTR) continue;
        else err = w < 0 ? errno : ENOSPC; // write() returning 0 for a regular file: out of space
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    return err ? error_set("%s: %s", path, strerror(err)) : 0;
}

// A failed write: the temporary directory goes, earlier checkpoints stay, and the message names
// the checkpoint, then the file and the OS reason.
static int checkpoint_fail(const char *tmp, const char *final) {
    checkpoint_rm_rf(tmp);
    return error_prefix("checkpoint %s not written (earlier checkpoints are kept)", final);
}

int checkpoint_write(const char *run_dir, int64_t step, const drafter *d, const optim *o, uint64_t config_hash, int keep) {
    char root[1024], tmp[1100], final[1100], old[1100], path[1200];
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    checkpoint_dir(final, sizeof final, run_dir, step);
    if (mkdir(root, 0755) == 0) checkpoint_fsync_dir(run_dir); // best effort: the new entry is durable
    else if (errno != EEXIST) return error_set("checkpoint %s not written: %s: %s", final, root, strerror(errno));
    checkpoint_remove_leftovers(root);
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%08lld.%d", root, (long long)step, (int)getpid());
    if (mkdir(tmp, 0755) != 0) {
        error_set("%s: %s", tmp, strerror(errno));
        return checkpoint_fail(tmp, final);
    }

    size_t bytes = (size_t)d->numel * sizeof(float);
    float *master = xmalloc(bytes), *m = xmalloc(bytes), *v = xmalloc(bytes), *ema = o->ema ? xmalloc(bytes) : NULL;
    backend_copy_to_host(d->be, master, d->master, bytes);
    backend_copy_to_host(d->be, m, o->m, bytes);
    backend_copy_to_host(d->be, v, o->v, bytes);
    if (ema) backend_copy_to_host(d->be, ema, o->ema, bytes);
    st_writer w;
    safetensors_writer_init(&w);
    for (int i = 0; i < d->n_params; i++) {
        const drafter_param *p = &d->params[i];
        safetensors_writer_add(&w, p->name, tensor_make(DT_F32, master + p->offset, DEVICE_CPU, p->ndim, p->shape));
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    int rc = safetensors_writer_write(&w, path); // a temporary file, fsynced, renamed
    safetensors_writer_free(&w);
    if (rc == 0) {
        int64_t n = d->numel;
        safetensors_writer_init(&w);
        safetensors_writer_add(&w, "m", tensor_make(DT_F32, m, DEVICE_CPU, 1, &n));
        safetensors_writer_add(&w, "v", tensor_make(DT_F32, v, DEVICE_CPU, 1, &n));
        if (ema) safetensors_writer_add(&w, "ema", tensor_make(DT_F32, ema, DEVICE_CPU, 1, &n));
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        rc = safetensors_writer_write(&w, path);
        safetensors_writer_free(&w);
    }
    free(master);
    free(m);
    free(v);
    free(ema);
    // state.json last: checkpoint_latest takes a directory with it as complete
    if (rc == 0) rc = checkpoint_write_state(tmp, step, o, config_hash);
    if (rc == 0 && checkpoint_fsync_dir(tmp) != 0) rc = error_set("%s: fsync: %s", tmp, strerror(errno));
    if (rc) return checkpoint_fail(tmp, final);

    // A checkpoint of the same step from an earlier attempt is moved aside, not deleted first, so a
    // failed rename can put it back.
    snprintf(old, sizeof old, "%s/.old-step-%08lld.%d", root, (long long)step, (int)getpid());
    int had = rename(final, old) == 0;
    if (rename(tmp, final) != 0) {
        error_set("%s: cannot rename %s onto it: %s", final, tmp, strerror(errno));
        if (had) rename(old, final);
        return checkpoint_fail(tmp, final);
    }
    if (had) checkpoint_rm_rf(old);
    if (checkpoint_fsync_dir(root) != 0) // complete, but its name may not survive a power cut
        log_warn("checkpoint %s: fsync of %s: %s", final, root, strerror(errno));

    // keep the newest `keep`
    if (keep > 0) {
        DIR *dp = opendir(root);
        if (dp) {
            int64_t steps[4096];
            int n = 0;
            struct dirent *e;
            while ((e = readdir(dp)) && n < 4096) {
                long long s;
                if (sscanf(e->d_name, "step-%lld", &s) == 1 && e->d_name[0] == 's') steps[n++] = s;
            }
            closedir(dp);
            for (int i = 0; i < n; i++) {
                int newer = 0;
                for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
                if (newer >= keep) {
                    checkpoint_dir(path, sizeof path, run_dir, steps[i]);
                    checkpoint_rm_rf(path);
                }
            }
        }
    }
    return 0;
}

int64_t checkpoint_latest(const char *run_dir, int *found) {
    char root[1024];
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    *found = 0;
    int64_t best = 0;
    DIR *dp = opendir(root);
    if (!dp) return 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        long long s;
        char state[1400];
        if (e->d_name[0] != 's' || sscanf(e->d_name, "step-%lld", &s) != 1) continue;
        snprintf(state, sizeof state, "%s/%s/state.json", root, e->d_name);
        if (access(state, R_OK) != 0) continue;
        if (!*found || s > best) best = s, *found = 1;
    }
    closedir(dp);
    return best;
}

static int checkpoint_read_dir(const char *dir, drafter *d, optim *o) {
    char path[1200];
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text = file_read_text(path, 1 << 20);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *os = root ? cJSON_GetObjectItemCaseSensitive(root, "optim_step") : NULL;
    if (!cJSON_IsNumber(os)) {
        cJSON_Delete(root);
        return error_set("%s: no optim_step", path);
    }
    o->step = (int64_t)os->valuedouble;
    cJSON_Delete(root);
    st_file f;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (safetensors_open(&f, path)) return -1;
    int rc = drafter_load_weights(d, &f);
    safetensors_close(&f);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (safetensors_open(&f, path)) return -1;
    const char *names[3] = {"m", "v", "ema"};
    float *dst[3] = {o->m, o->v, o->ema};
    for (int i = 0; i < 3 && rc == 0; i++) {
        if (!dst[i]) continue;
        const st_entry *e = safetensors_find(&f, names[i]);
        if (!e || e->dt != DT_F32 || e->nbytes != (size_t)d->numel * sizeof(float))
            rc = error_set("%s: tensor %s missing or not f32 [%lld]", path, names[i], (long long)d->numel);
        else
            backend_copy_to_device(d->be, dst[i], e->data, e->nbytes);
    }
    safetensors_close(&f);
    return rc;
}

int checkpoint_read(const char *run_dir, int64_t step, drafter *d, optim *o) {
    char dir[1100];
    checkpoint_dir(dir, sizeof dir, run_dir, step);
    if (checkpoint_read_dir(dir, d, o)) return error_prefix("run.resume: checkpoint step %lld", (long long)step);
    return 0;
}
