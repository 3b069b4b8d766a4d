// frame.c: what the modes' runs share: their paths, the agreed exit, the payload links and the
// teacher groups' split (see mode.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/nccl_reduce.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "modes/mode.h"
#include "modes/job_plan.h"
#include "teacher/target.h"

void mode_paths_add(mode_paths *p, const char *key, const char *path, int dir) {
    if (!path || !path[0] || p->n == MODE_MAX_PATHS) return;
    p->v[p->n++] = (mode_path){.key = key, .path = path, .dir = dir, .set = key};
}

void mode_paths_add_dir(mode_paths *p, const char *key, const char *path, int (*ours)(const char *name)) {
    int n = p->n;
    mode_paths_add(p, key, path, 1);
    if (p->n > n) p->v[n].ours = ours;
}

void mode_paths_add_beside(mode_paths *p, const char *label, const char *key, const char *value, const char *suffix,
                           int dir) {
    if (!value || !value[0] || p->n_own == MODE_MAX_OWN) return;
    char *own = p->own[p->n_own++];
    snprintf(own, sizeof p->own[0], "%s%s", value, suffix);
    int n = p->n;
    mode_paths_add(p, label, own, dir);
    if (p->n > n) p->v[n].set = key;
}

void mode_paths_data(mode_paths *p, const config *cfg) {
    if (cfg->data_features[0]) {
        mode_paths_add(p, "data.features", cfg->data_features, 1);
        return;
    }
    mode_paths_add(p, "data.path", cfg->data_path, 0);
    for (int64_t i = 0; i < cfg->data_sets.n; i++) mode_paths_add(p, "data.sets", cfg->data_sets.v[i].path, 0);
}

int mode_exit(const world *w, int status) {
    watchdog_finalize();
    return status && w->rank == 0 ? 1 : 0;
}

// NCCL's asynchronous errors, polled by the watchdog thread: the payload link's transport (NULL:
// none) and the students' gradient communicators (nccl_reduce.h keeps the open ones).
static int links_check(void *links, char *msg, size_t n) {
    return payload_link_check(links, msg, n) || nccl_reduce_check(NULL, msg, n);
}

int mode_payload_links(const world *w, const char *want, backend *be, payload_link **links) {
    char why[256] = "";
    if (payload_link_open(links, want, w, be->caps.device_links ? be->device_id : -1, why, sizeof why))
        fatal("%s", error_msg());
    if (!*links) { // the device transport asked for declined
        const char *label = want;
        for (int i = 0; i < payload_link_kinds(); i++)
            if (strcmp(payload_link_kind(i), want) == 0) label = payload_link_kind_label(i);
        if (w->rank == 0) fprintf(stderr, "error: transport.payload = %s, but %s cannot carry the payloads: %s\n", want, label, why);
        return -1;
    }
    if (w->rank == 0 && strcmp(want, "mpi") != 0) {
        if (why[0]) log_info("payloads: %s (%s)", payload_link_says(*links), why);
        else log_info("payloads: %s", payload_link_says(*links));
    }
    if (payload_link_device(*links)) watchdog_add_check(links_check, *links);
    return 0;
}

void mode_watch_gradients(void) { watchdog_add_check(links_check, NULL); }

int mode_run_teachers(mode_job *j, mode_teacher_work work) {
    world *w = j->w;
    for (int r = 0; r < w->size; r++) watchdog_watch(r, 1); // a dead peer on this host is noticed at once
    payload_link *links = NULL; // a teacher group's stages: their rows GPU to GPU when they can
    if (mode_payload_links(w, w->group_size > 1 ? j->cfg->payload : "mpi", j->be, &links)) {
        watchdog_finalize();
        return 1;
    }
    int status = work(w, j->cfg, j->be, links) ? 1 : 0;
    if (payload_link_device(links)) watchdog_add_check(NULL, NULL); // the watchdog stops polling the links before they close
    payload_link_close(links);
    backend_close(j->be);
    watchdog_finalize();
    return status;
}

int mode_groups_check(const world *w, const config *cfg) {
    if (w->group_size <= 1) return 0;
    target_config tc;
    if (target_config_load(&tc, cfg->target_path)) return -1;
    int64_t *bounds = xmalloc(((size_t)w->group_size + 1) * sizeof(int64_t));
    int rc = target_stage_split(&tc, DT_BF16, w->group_size, bounds);
    free(bounds);
    return rc;
}

int mode_plan_roles(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print, world *w,
                    backend *be) {
    int known = 1;
    if (job_plan_roles(cfg, want, world_size, w, &known)) return -1;
    char how[160];
    job_plan_backend(cfg, ranks_on_host > 0 ? ranks_on_host : w->size, be, how, sizeof how);
    if (!print) return 0;
    char groups[96] = "";
    if (w->group_size > 1) snprintf(groups, sizeof groups, " in %d group(s) of %d", w->groups, w->group_size);
    printf("plan: %d teacher(s)%s + %d student(s), mode %s; %s\n", w->teachers, groups, w->students, cfg->mode, how);
    if (!known) printf("  no launcher: planned for %d rank(s); under mpirun -np N the job has N\n", w->size);
    fflush(stdout);
    return 0;
}
