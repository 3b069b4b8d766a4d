// checkpoint.c: see checkpoint.h.
#include "student/train/checkpoint.h"
#include "common/core/config.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/json_util.h"
#include "common/core/log.h"
#include "common/core/run_dir.h"
#include "common/data/identity.h"
#include "common/data/safetensors.h"
#include "student/train/optim.h"

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

// Every value finite (no NaN, no inf).
static int checkpoint_finite(const float *x, int64_t n) {
    int ok = 1;
#pragma omp parallel for reduction(&& : ok)
    for (int64_t i = 0; i < n; i++) ok = ok && isfinite(x[i]);
    return ok;
}

// The same over a file's bytes, which need not be aligned for float.
static int checkpoint_finite_bytes(const void *bytes, int64_t n) {
    const unsigned char *p = bytes;
    for (int64_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, p + (size_t)i * sizeof x, sizeof x);
        if (!isfinite(x)) return 0;
    }
    return 1;
}

// 1 when a device buffer holds a non-finite value: its sum of squares (in double) is then not
// finite; finite floats cannot overflow it (n * 3.4e38^2 is far below the double range).
static int checkpoint_device_nonfinite(backend *be, const float *x, int64_t n) { return !isfinite(optim_sum_squares(be, x, n)); }

// obj[key] as a whole number in *out: 0 when absent, not a number or not whole.
static int json_int_field(const cJSON *obj, const char *key, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9e15) return 0;
    *out = (int64_t)v->valuedouble;
    return 1;
}

// This run's identity in every state.json it writes ("run_id"): a new one for a new run, the
// resumed checkpoint's for a resumed one. Pruning removes only checkpoints of this run.
static char checkpoint_run_id[40];

// state.json's "run_id" in dir into out ("" when absent: a checkpoint of an older trainer); -1 when
// state.json cannot be read or parsed.
// dir/state.json parsed (path: its name), NULL when it cannot be read (error_set) or parsed.
static cJSON *checkpoint_state_parse(const char *dir, char *path, size_t n) {
    snprintf(path, n, "%s/state.json", dir);
    char *text = file_read_text(path, 1 << 20);
    if (!text) return NULL;
    cJSON *root = json_parse_text(text, path); // an unparseable one names the file and the line
    free(text);
    return root;
}

static int checkpoint_read_run_id(const char *dir, char *out, size_t n) {
    char path[1200];
    cJSON *root = checkpoint_state_parse(dir, path, sizeof path);
    if (!root) return -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "run_id");
    snprintf(out, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
    cJSON_Delete(root);
    return 0;
}

void checkpoint_begin_run(const char *run_dir, int64_t step, int resumed) {
    char dir[1100];
    checkpoint_dir(dir, sizeof dir, run_dir, step);
    if (resumed && checkpoint_read_run_id(dir, checkpoint_run_id, sizeof checkpoint_run_id) == 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33; // splitmix-style finish: spread the bits
    snprintf(checkpoint_run_id, sizeof checkpoint_run_id, "%016llx", (unsigned long long)x);
}

// Remove a checkpoint directory of ours (moved to a temporary name): only when it holds nothing but
// the files a checkpoint has; one with anything else in it stays, said once.
static void checkpoint_remove_dir(const char *dir) {
    if (run_dir_holds_only(dir, run_dir_checkpoint_files)) fs_remove_tree(dir);
    else log_warn("checkpoint: %s holds files this trainer does not write: left in place", dir);
}

// Leftovers of a write that never finished (a killed job: ".tmp-step-*"; a replaced checkpoint:
// ".old-step-*"). A run directory has one writer at a time, so they are garbage; they would
// otherwise hold disk space forever. (a ".tmp-step-*" holds only what a write made in it)
static void checkpoint_remove_leftovers(const char *root) {
    DIR *dp = opendir(root);
    if (!dp) return;
    struct dirent *e;
    char path[1400];
    while ((e = readdir(dp))) {
        if (strncmp(e->d_name, ".tmp-step-", 10) != 0 && strncmp(e->d_name, ".old-step-", 10) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        if (e->d_name[1] == 't') fs_remove_tree(path);
        else checkpoint_remove_dir(path);
    }
    closedir(dp);
}

// This run's identity (checkpoint_set_identity), written into every state.json ("identity").
static run_identity checkpoint_identity;
static int checkpoint_identity_set;

void checkpoint_set_identity(const run_identity *id) {
    checkpoint_identity = *id;
    checkpoint_identity_set = 1;
}

// The files of a checkpoint whose CRC32C state.json records ("checksums").
static const char *const checkpoint_summed[] = {"model.safetensors", "optimizer.safetensors"};
#define CHECKPOINT_N_SUMMED 2

// Write state.json into dir: the step, run id, configuration, identity and the CRC32C of the files
// written before it, sealed (crc32c.h). -1 with error_set naming the file and the OS reason.
static int checkpoint_write_state(const char *dir, int64_t step, const optim *o, const config *cfg) {
    char path[1200];
    uint32_t sums[CHECKPOINT_N_SUMMED];
    for (int i = 0; i < CHECKPOINT_N_SUMMED; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, checkpoint_summed[i]);
        if (crc32c_file(path, &sums[i])) return -1;
    }
    snprintf(path, sizeof path, "%s/state.json", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return error_set("%s: %s", path, strerror(errno));
    char *json = config_to_json(cfg);
    run_identity none;
    identity_init(&none);
    char *idj = identity_to_json(checkpoint_identity_set ? &checkpoint_identity : &none);
    size_t cap = strlen(json) + strlen(idj) + 512;
    char *body = xmalloc(cap);
    snprintf(body, cap, "{\"step\": %lld, \"optim_step\": %lld, \"loss_mean\": %.17g, \"norm_mean\": %.17g, \"run_id\": \"%s\", \"config_hash\": \"%016llx\", "
             "\"config\": %s, \"identity\": %s, \"checksums\": {\"%s\": \"%08x\", \"%s\": \"%08x\"}}",
             (long long)step, (long long)o->step, o->loss_mean, o->norm_mean, checkpoint_run_id, (unsigned long long)config_hash(cfg), json, idj,
             checkpoint_summed[0], sums[0], checkpoint_summed[1], sums[1]);
    cJSON_free(json);
    free(idj);
    char *text = crc32c_seal_json(body);
    free(body);
    int n = (int)strlen(text);
    int err = 0;
    for (int done = 0; done < n && !err;) {
        ssize_t w = write(fd, text + done, (size_t)(n - done));
        if (w > 0) done += (int)w;
        else if (w < 0 && errno == EINTR) continue;
        else err = w < 0 ? errno : ENOSPC; // write() returning 0 for a regular file: out of space
    }
    free(text);
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    return err ? error_set("%s: %s", path, strerror(err)) : 0;
}

int checkpoint_verify(const char *dir, int *verified) {
    char path[1200];
    *verified = 0;
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text = file_read_text(path, 64 << 20);
    if (!text) return -1;
    uint32_t want = 0, got = 0;
    int seal = crc32c_check_seal(text, &want, &got);
    cJSON *root = seal == 1 ? json_parse_text(text, path) : NULL;
    const cJSON *sums = root ? cJSON_GetObjectItemCaseSensitive(root, "checksums") : NULL;
    int rc = 0;
    if (seal < 0)
        rc = error_set("%s fails its checksum (CRC32C recorded %08x, computed %08x): the checkpoint is corrupt", path, want, got);
    else if (seal == 0 && strstr(text, "\"checksums\""))
        rc = error_set("%s records checksums but has no seal of its own: the checkpoint is corrupt", path);
    else if (seal == 1 && !cJSON_IsObject(sums))
        rc = error_set("%s is sealed but records no \"checksums\": the checkpoint is corrupt", path);
    for (int i = 0; rc == 0 && seal == 1 && i < CHECKPOINT_N_SUMMED; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(sums, checkpoint_summed[i]);
        unsigned int rec = 0;
        uint32_t now = 0;
        char file[1300];
        snprintf(file, sizeof file, "%s/%s", dir, checkpoint_summed[i]);
        if (!cJSON_IsString(v) || sscanf(v->valuestring, "%8x", &rec) != 1)
            rc = error_set("%s: no checksum of %s: the checkpoint is corrupt", path, checkpoint_summed[i]);
        else if (crc32c_file(file, &now))
            rc = -1;
        else if (rec != now)
            rc = error_set("%s fails its checksum (CRC32C recorded in state.json %08x, computed %08x): the checkpoint is corrupt",
                           file, rec, now);
    }
    cJSON_Delete(root);
    free(text);
    if (rc == 0) *verified = seal == 1;
    return rc;
}

int checkpoint_check_identity(const char *run_dir, int64_t step, const run_identity *now) {
    char dir[1100], path[1200];
    checkpoint_dir(dir, sizeof dir, run_dir, step);
    cJSON *root = checkpoint_state_parse(dir, path, sizeof path);
    if (!root) return error_prefix("run.resume");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "identity");
    run_identity rec;
    int rc = 0;
    if (o) rc = identity_from_json(o, path, &rec);
    if (rc == 0 && o) {
        char what[1300];
        snprintf(what, sizeof what, "run.resume: the checkpoint %s", dir);
        rc = identity_check(&rec, what, now, "resume with the inputs it was trained on, or start a new run.dir");
    }
    cJSON_Delete(root);
    return rc;
}

// A failed write: the temporary directory goes, earlier checkpoints stay, and the message names
// the checkpoint, then the file and the OS reason.
static int checkpoint_fail(const char *tmp, const char *final) {
    fs_remove_tree(tmp);
    return error_prefix("checkpoint %s not written (earlier checkpoints are kept)", final);
}

int checkpoint_write(const char *run_dir, int64_t step, const drafter *d, const optim *o, const config *cfg, int keep) {
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
    int rc = 0;
    const char *bad = !checkpoint_finite(master, d->numel) ? "the weights" : !checkpoint_finite(m, d->numel) ? "the Adam moment m"
                    : !checkpoint_finite(v, d->numel)    ? "the Adam moment v" : ema && !checkpoint_finite(ema, d->numel) ? "the EMA" : NULL;
    if (bad) rc = error_set("%s hold a non-finite value at step %lld", bad, (long long)step);
    st_writer w;
    safetensors_writer_init(&w);
    for (int i = 0; i < d->n_params; i++) {
        const drafter_param *p = &d->params[i];
        safetensors_writer_add(&w, p->name, tensor_make(DT_F32, master + p->offset, DEVICE_CPU, p->ndim, p->shape));
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if (rc == 0) rc = safetensors_writer_write(&w, path); // a temporary file, fsynced, renamed
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
    if (rc == 0) rc = checkpoint_write_state(tmp, step, o, cfg);
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
    if (had) checkpoint_remove_dir(old);
    if (checkpoint_fsync_dir(root) != 0) // complete, but its name may not survive a power cut
        log_warn("checkpoint %s: fsync of %s: %s", final, root, strerror(errno));

    // keep the newest `keep` of this run's checkpoints (another run's, or a directory holding files of
    // someone else's, are never removed)
    if (keep > 0) {
        DIR *dp = opendir(root);
        if (dp) {
            int64_t steps[4096];
            int n = 0;
            struct dirent *e;
            char id[sizeof checkpoint_run_id];
            while ((e = readdir(dp)) && n < 4096) {
                long long s;
                if (sscanf(e->d_name, "step-%lld", &s) != 1 || e->d_name[0] != 's') continue;
                checkpoint_dir(path, sizeof path, run_dir, s);
                if (checkpoint_read_run_id(path, id, sizeof id) == 0 && strcmp(id, checkpoint_run_id) == 0) steps[n++] = s;
            }
            closedir(dp);
            for (int i = 0; i < n; i++) {
                int newer = 0;
                for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
                if (newer >= keep) { // renamed first: no directory under a final name is ever incomplete
                    checkpoint_dir(path, sizeof path, run_dir, steps[i]);
                    snprintf(old, sizeof old, "%s/.old-step-%08lld.%d", root, (long long)steps[i], (int)getpid());
                    if (!run_dir_holds_only(path, run_dir_checkpoint_files))
                        log_warn("checkpoint: %s holds files this trainer does not write: not pruned", path);
                    else if (rename(path, old) == 0)
                        fs_remove_tree(old);
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
        if (e->d_name[0] != 's' || sscanf(e->d_name, "step-%lld", &s) != 1 || s < 0) continue;
        if (!*found || s > best) best = s, *found = 1;
    }
    closedir(dp);
    return best;
}

int64_t checkpoint_last_good(const char *run_dir, int *found, int *verified, int *n_corrupt) {
    char root[1024], dir[1100];
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    *found = *verified = *n_corrupt = 0;
    int64_t steps[4096];
    int n = 0;
    DIR *dp = opendir(root);
    if (!dp) return 0;
    struct dirent *e;
    while ((e = readdir(dp)) && n < 4096) {
        long long s;
        if (e->d_name[0] == 's' && sscanf(e->d_name, "step-%lld", &s) == 1 && s >= 0) steps[n++] = s;
    }
    closedir(dp);
    char *saved = xstrdup(error_msg()); // a corrupt checkpoint here is counted, not the error
    int64_t best = 0;
    for (;;) { // newest first
        int at = -1;
        for (int i = 0; i < n; i++)
            if (steps[i] >= 0 && (at < 0 || steps[i] > steps[at])) at = i;
        if (at < 0) break;
        checkpoint_dir(dir, sizeof dir, run_dir, steps[at]);
        if (checkpoint_verify(dir, verified) == 0) {
            best = steps[at], *found = 1;
            break;
        }
        ++*n_corrupt;
        steps[at] = -1;
    }
    error_set("%s", saved);
    free(saved);
    return best;
}

int checkpoint_find_resume(const char *run_dir, int64_t *step, int *found) {
    *step = checkpoint_latest(run_dir, found);
    if (!*found) return 0;
    char dir[1100], state[1200];
    checkpoint_dir(dir, sizeof dir, run_dir, *step);
    snprintf(state, sizeof state, "%s/state.json", dir);
    if (access(state, R_OK) == 0) return 0;
    return error_set("run.resume: checkpoint %s has no readable state.json (%s): it is incomplete, which a checkpoint "
                     "under its final name never is; move it away to resume from an earlier one", dir, strerror(errno));
}

static int checkpoint_read_dir(const char *dir, int64_t step, drafter *d, optim *o, int *verified) {
    char path[1200];
    if (checkpoint_verify(dir, verified)) return -1;
    if (!*verified)
        log_warn("%s/state.json carries no checksums (a checkpoint of an older trainer): its files are read unverified", dir);
    cJSON *root = checkpoint_state_parse(dir, path, sizeof path);
    if (!root) return -1; // unreadable, or not JSON: the error names the file and the line
    int64_t st_step = -1, st_optim = -1;
    int have = root && json_int_field(root, "step", &st_step) && json_int_field(root, "optim_step", &st_optim);
    // the divergence check's running means (absent in older checkpoints: the check starts afresh)
    const cJSON *lm = root ? cJSON_GetObjectItemCaseSensitive(root, "loss_mean") : NULL;
    const cJSON *nm = root ? cJSON_GetObjectItemCaseSensitive(root, "norm_mean") : NULL;
    o->loss_mean = cJSON_IsNumber(lm) && isfinite(lm->valuedouble) && lm->valuedouble > 0 ? lm->valuedouble : 0;
    o->norm_mean = cJSON_IsNumber(nm) && isfinite(nm->valuedouble) && nm->valuedouble > 0 ? nm->valuedouble : 0;
    cJSON_Delete(root);
    if (!have) return error_set("%s: not a state file (it needs whole numbers 'step' and 'optim_step')", path);
    if (st_step != step) return error_set("%s: 'step' is %lld but the directory is step %lld", path, (long long)st_step, (long long)step);
    if (st_optim != step)
        return error_set("%s: 'optim_step' is %lld but the checkpoint is at step %lld (they are equal in every "
                         "checkpoint this trainer writes)", path, (long long)st_optim, (long long)step);
    o->step = st_optim;
    st_file f;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (safetensors_open(&f, path)) return -1;
    int rc = drafter_load_weights(d, &f);
    safetensors_close(&f);
    if (rc) return -1;
    if (checkpoint_device_nonfinite(d->be, d->master, d->numel))
        return error_set("%s: the weights hold a non-finite value (NaN or inf): refused", path);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (safetensors_open(&f, path)) return -1;
    const char *names[3] = {"m", "v", "ema"};
    float *dst[3] = {o->m, o->v, o->ema};
    for (int i = 0; i < 3 && rc == 0; i++) {
        if (!dst[i]) continue;
        const st_entry *e = safetensors_find(&f, names[i]);
        if (!e || e->dt != DT_F32 || e->nbytes != (size_t)d->numel * sizeof(float))
            rc = error_set("%s: tensor %s missing or not f32 [%lld]", path, names[i], (long long)d->numel);
        else if (!checkpoint_finite_bytes(e->data, d->numel))
            rc = error_set("%s: tensor %s holds a non-finite value (NaN or inf): refused", path, names[i]);
        else
            backend_copy_to_device(d->be, dst[i], e->data, e->nbytes);
    }
    safetensors_close(&f);
    return rc;
}

int checkpoint_read(const char *run_dir, int64_t step, drafter *d, optim *o, int *verified) {
    char dir[1100];
    checkpoint_dir(dir, sizeof dir, run_dir, step);
    if (checkpoint_read_dir(dir, step, d, o, verified)) return error_prefix("run.resume: checkpoint step %lld", (long long)step);
    return 0;
}

// ----------------------------------------------------------------------------- resuming the same run

// Keys a resumed run may change: the schedule (how long, how fast, how often) and where and how the
// job runs. A change is said in one line. Every other key shapes the run itself (the drafter, the
// data and its plan, the seed, the block, the loss) and may not change: the resumed run would not
// be the one the checkpoint belongs to.
static const char *const resume_schedule_keys[] = {
    "train.steps", "train.lr", "train.warmup_frac", "train.weight_decay", "train.grad_clip", "train.divergence_factor",
    "train.mem_budget",
    "train.log_interval", "train.eval_interval", "train.eval_batches", "checkpoint.every", "checkpoint.every_minutes",
    "checkpoint.keep",
    "teacher.max_tokens", "teacher.mem_budget", "teacher.vocab_tile", "transport.slots", "transport.payload",
    "world.teachers", "world.students", "run.device", "run.log_level", "run.rank_timeout", "target.path",
    "features.dir", "features.shard_samples", NULL};
// Keys that differ between any two invocations of one run, not worth a line.
static const char *const resume_silent_keys[] = {"run.dir", "run.resume", "run.overwrite", "run.mode", "test.stop_at_step",
                                                 "test.slow_teacher", "test.slow_ms", NULL};

static int resume_key_in(const char *key, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcmp(key, list[i]) == 0) return 1;
    return 0;
}

// Flatten a nested config object into "section.key" -> value text, appended to keys/vals (n so far).
static int resume_flatten(const cJSON *o, const char *prefix, char (*keys)[96], char **vals, int n, int cap) {
    for (const cJSON *c = o ? o->child : NULL; c && n < cap; c = c->next) {
        char key[96];
        snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", c->string ? c->string : "");
        if (cJSON_IsObject(c) && !prefix[0]) {
            n = resume_flatten(c, key, keys, vals, n, cap);
            continue;
        }
        snprintf(keys[n], sizeof keys[n], "%s", key);
        vals[n++] = cJSON_PrintUnformatted(c);
    }
    return n;
}

static const char *resume_lookup(char (*keys)[96], char **vals, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return vals[i];
    return NULL;
}

int checkpoint_check_resume(const char *run_dir, int64_t step, const config *cfg) {
    char dir[1100], path[1200];
    checkpoint_dir(dir, sizeof dir, run_dir, step);
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text = file_read_text(path, 64 << 20);
    if (!text) return error_prefix("run.resume");
    cJSON *root = json_parse_text(text, path);
    free(text);
    if (!root) return error_prefix("run.resume");
    const cJSON *saved = root ? cJSON_GetObjectItemCaseSensitive(root, "config") : NULL;
    if (!cJSON_IsObject(saved)) {
        cJSON_Delete(root);
        log_warn("run.resume: %s holds no configuration (an older checkpoint): the resumed run's keys cannot be "
                 "checked against it", path);
        return 0;
    }
    char *now_json = config_to_json(cfg);
    cJSON *now = cJSON_Parse(now_json);
    cJSON_free(now_json);
    // the defaults: a key the checkpoint's configuration lacks (added to the trainer since) was its default then
    config dc;
    config_defaults(&dc);
    char *def_json = config_to_json(&dc);
    cJSON *def = cJSON_Parse(def_json);
    cJSON_free(def_json);
    enum { CAP = 256 };
    char(*ka)[96] = xmalloc(sizeof(char[96]) * CAP), (*kb)[96] = xmalloc(sizeof(char[96]) * CAP);
    char(*kd)[96] = xmalloc(sizeof(char[96]) * CAP);
    char **va = xcalloc(CAP, sizeof(char *)), **vb = xcalloc(CAP, sizeof(char *)), **vd = xcalloc(CAP, sizeof(char *));
    int na = resume_flatten(saved, "", ka, va, 0, CAP), nb = resume_flatten(now, "", kb, vb, 0, CAP);
    int nd = resume_flatten(def, "", kd, vd, 0, CAP);
    char refused[1024] = "", changed[1024] = "";
    int nr = 0, nc = 0;
    for (int i = 0; i < nb; i++) {
        const char *before = resume_lookup(ka, va, na, kb[i]);
        if (!before) before = resume_lookup(kd, vd, nd, kb[i]);
        if (before && strcmp(before, vb[i]) == 0) continue;
        if (resume_key_in(kb[i], resume_silent_keys)) continue;
        char *list = resume_key_in(kb[i], resume_schedule_keys) ? changed : refused;
        int *m = list == changed ? &nc : &nr;
        if (*m < (int)sizeof refused - 64)
            *m += snprintf(list + *m, sizeof refused - (size_t)*m, "%s%s %.60s -> %.60s", *m ? ", " : "", kb[i],
                           before ? before : "(unset)", vb[i]);
    }
    for (int i = 0; i < na; i++) cJSON_free(va[i]);
    for (int i = 0; i < nb; i++) cJSON_free(vb[i]);
    for (int i = 0; i < nd; i++) cJSON_free(vd[i]);
    free(ka), free(kb), free(kd), free(va), free(vb), free(vd);
    cJSON_Delete(def);
    cJSON_Delete(now);
    cJSON_Delete(root);
    if (nr)
        return error_set("run.resume: the checkpoint %s belongs to another run: %s (these keys shape the run; resume "
                         "with the values it was written with, or start a new run.dir)", dir, refused);
    if (nc) log_info("run.resume: the schedule changed since the checkpoint: %s", changed);
    return 0;
}

// Settings: the keys of checkpoints (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key checkpoint_keys[] = {
    {"checkpoint.every", CFG_INT, CONFIG_F(ckpt_every), "0", "steps between checkpoints in run.dir/checkpoints (also one at the end); 0 = none", NULL, 0, CONFIG_STEPS_MAX},
    {"checkpoint.every_minutes", CFG_FLOAT, CONFIG_F(ckpt_every_minutes), "0", "also a checkpoint after the step at which this many minutes (wall time, the first student's clock) passed since the last one, and one at the end, so a killed job loses minutes, not hours; fractions allowed; 0 = none", NULL, 0, 1e9},
    {"checkpoint.keep", CFG_INT, CONFIG_F(ckpt_keep), "3", "newest checkpoints kept", NULL, 1, 1e6},
};
const config_key_set checkpoint_settings = CONFIG_KEY_SET(checkpoint_keys, NULL);
