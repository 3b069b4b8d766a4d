// mode_transport_test.c: `--mode transport-test`: deterministic payloads teacher -> student,
// checked element by element, the bandwidth printed (common/comm/transport_test.h). Teachers of
// one rank; reads and writes no file.
#include <stdio.h>

#include "common/comm/transport_test.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "modes/mode.h"
#include "modes/preflight_job.h"

static int transport_plan(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print) {
    world w;
    backend be;
    if (mode_plan_roles(cfg, want, world_size, ranks_on_host, print, &w, &be)) return -1;
    if (w.teachers < 1 || w.students < 1) return error_set("transport-test needs at least one teacher and one student rank");
    if (print) printf("mode transport-test sends payloads of up to 64 MiB: no model to plan\n");
    return 0;
}

static int transport_run(mode_job *j) {
    world *w = j->w;
    if (w->teachers < 1 || w->students < 1) fatal("transport-test needs at least one teacher and one student rank");
    long long wrong = transport_test_run(w, j->be, 5, j->cfg->transport_test_bytes);
    if (wrong < 0) fatal("%s", error_msg());
    backend_close(j->be);
    watchdog_finalize();
    return wrong ? 1 : 0;
}

// --preflight: the rows every mode has; the memory plans of a training job's roles when target.path
// is given (its own tables are not planned), no row of its own.
static const mode_preflight transport_preflight = {
    .shape = pf_job_shape,
    .teacher = pf_job_teacher,
    .student = pf_job_student,
    .pinned = pf_job_pinned,
};

const mode_def mode_transport_test = {
    .name = "transport-test",
    .what = "deterministic payloads teacher -> student, checked element by element, the bandwidth printed",
    .roles = WORLD_RULE_PAIRS,
    .preflight = &transport_preflight,
    .plan = transport_plan,
    .run = transport_run,
};
