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

#include "common/check.h"
#include "common/error.h"
#include "common/json_util.h"
#include "common/safetensors.h"

static void checkpoint_dir(char *buf, size_t n, const char *run_dir, int64_t step) {
    snprintf(buf, n, "%s/checkpoints/step-%08lld", run_dir, (long long)step);
}

static int checkpoint_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int checkpoint_rm_rf(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int checkpoint_write(const char *run_dir, int64_t step, const drafter *d, const optim *o, uint64_t config_hash, int keep) {
    char root[1024], tmp[1100], final[1100], path[1200];
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    if (mkdir(root, 0755) != 0 && errno != EEXIST) return error_set("checkpoint %s: %s", root, strerror(errno));
    checkpoint_dir(final, sizeof final, run_dir, step);
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%08lld.%d", root, (long long)step, (int)getpid());
    checkpoint_rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0) return error_set("checkpoint %s: %s", tmp, strerror(errno));

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
    int rc = safetensors_writer_write(&w, path); // fsyncs
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
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "{\"step\": %lld, \"optim_step\": %lld, \"config_hash\": \"%016llx\"}\n", (long long)step,
                          (long long)o->step, (unsigned long long)config_hash) < 0 ||
            fflush(f) != 0 || fsync(fileno(f)) != 0)
            rc = error_set("checkpoint %s: %s", path, strerror(errno));
        if (f && fclose(f) != 0 && rc == 0) rc = error_set("checkpoint %s: %s", path, strerror(errno));
    }
    free(master);
    free(m);
    free(v);
    free(ema);
    if (rc == 0 && checkpoint_fsync_dir(tmp) != 0) rc = error_set("checkpoint %s: fsync: %s", tmp, strerror(errno));
    if (rc == 0) {
        checkpoint_rm_rf(final); // a checkpoint of the same step from an earlier attempt
        if (rename(tmp, final) != 0) rc = error_set("checkpoint %s: %s", final, strerror(errno));
        else checkpoint_fsync_dir(root);
    }
    if (rc) {
        checkpoint_rm_rf(tmp); // never a half-written checkpoint; the previous ones stay
        return -1;
    }
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

int checkpoint_read(const char *run_dir, int64_t step, drafter *d, optim *o) {
    char dir[1100], path[1200];
    checkpoint_dir(dir, sizeof dir, run_dir, step);
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
