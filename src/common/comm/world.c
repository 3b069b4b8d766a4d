// world.c: MPI start-up, local rank and role assignment (see world.h).
#include "common/comm/world.h"
#include "common/core/config.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"

int world_roles(world *w, int rank, int size, long long teachers, long long students) {
    if (students < 0) return error_set("world.students = %lld: cannot be negative", students);
    if (teachers < 0 && students > size)
        return error_set("roles do not fit the world: %lld student(s) (world.students), but the job has %d rank(s) (set "
                         "world.students or the mpirun -np count)", students, size);
    long long t = teachers < 0 ? size - students : teachers;
    if (t < 0 || t + students != size)
        return error_set("roles do not fit the world: %lld teacher(s) + %lld student(s) = %lld rank(s), but the job "
                         "has %d (set world.teachers/world.students or the mpirun -np count)",
                         t, students, t + students, size);
    w->rank = rank;
    w->size = size;
    w->teachers = (int)t;
    w->students = (int)students;
    w->role = rank < t ? ROLE_TEACHER : ROLE_STUDENT;
    w->role_index = rank < t ? rank : rank - (int)t;
    return world_set_groups(w, 1);
}

int world_set_groups(world *w, long long G) {
    if (G < 1) return error_set("world.teacher_group_size = %lld: must be at least 1", G);
    if (w->teachers % G != 0)
        return error_set("world.teacher_group_size = %lld does not divide the %d teacher rank(s): each teacher is a group "
                         "of that many consecutive ranks (set world.teachers or the mpirun -np count to a multiple)",
                         G, w->teachers);
    w->group_size = (int)G;
    w->groups = w->teachers / (int)G;
    w->group = w->role == ROLE_TEACHER ? w->rank / (int)G : -1;
    w->stage = w->role == ROLE_TEACHER ? w->rank % (int)G : -1;
    return 0;
}

void world_want_make(world_rule rule, const config *cfg, world_want *want) {
    memset(want, 0, sizeof *want);
    want->offline = rule == WORLD_RULE_JOB && cfg->data_features[0] != '\0';
    if (want->offline) {
        want->teachers = 0, want->students = -1, want->group_size = 1;
    } else if (rule == WORLD_RULE_TEACHERS) {
        want->teachers = -1, want->students = 0, want->group_size = cfg->teacher_group_size;
    } else {
        want->teachers = cfg->teachers, want->students = cfg->students;
        want->group_size = rule == WORLD_RULE_PAIRS ? 1 : cfg->teacher_group_size;
    }
}

int world_assign_roles(world *w, int rank, int size, const world_want *want) {
    long long t = want->students < 0 ? 0 : want->teachers, s = want->students < 0 ? size : want->students;
    return world_roles(w, rank, size, t, s);
}

int world_assign(world *w, int rank, int size, const world_want *want) {
    if (world_assign_roles(w, rank, size, want)) return -1;
    return world_set_groups(w, want->group_size);
}

int world_want_size(const world_want *want, const config *cfg, int *known) {
    long long s = want->students < 0 ? cfg->students : want->students, t = want->students < 0 ? 0 : want->teachers;
    *known = t >= 0;
    if (t < 0) t = want->group_size > 1 ? want->group_size : 1;
    return (int)(t + s);
}

void world_init(world *w, int *argc, char ***argv) {
    int provided = 0;
    mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &w->rank));
    mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &w->size));
    MPI_Comm local;
    mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &local));
    mpi_check(MPI_Comm_rank(local, &w->local_rank));
    mpi_check(MPI_Comm_size(local, &w->local_size));
    mpi_check(MPI_Comm_free(&local));
}

void world_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

const char *role_name(rank_role r) { return r == ROLE_TEACHER ? "teacher" : "student"; }

int world_check_group_hosts(const world *w, int allow_cross_node) {
    char me[64] = {0};
    if (gethostname(me, sizeof me - 1) != 0) snprintf(me, sizeof me, "?");
    char *all = xmalloc((size_t)w->size * sizeof me);
    mpi_check(MPI_Allgather(me, (int)sizeof me, MPI_CHAR, all, (int)sizeof me, MPI_CHAR, MPI_COMM_WORLD));
    int rc = 0;
    for (int g = 0; g < w->groups && !allow_cross_node && rc == 0; g++)
        for (int r = world_group_first(w, g) + 1; r <= world_group_last(w, g); r++) {
            const char *a = all + (size_t)world_group_first(w, g) * sizeof me, *b = all + (size_t)r * sizeof me;
            if (strcmp(a, b) != 0) {
                rc = error_set("teacher group %d (ranks %d-%d) spans hosts %s (rank %d) and %s (rank %d): its activations "
                               "would cross the network at every stage; place the ranks so that every group of "
                               "world.teacher_group_size = %d stays on one host (ranks per host a multiple of it; "
                               "docs/distributed.md), or set world.teacher_group_cross_node=true",
                               g, world_group_first(w, g), world_group_last(w, g), a, world_group_first(w, g), b, r,
                               w->group_size);
                break;
            }
        }
    free(all);
    return rc;
}

// Settings: the keys of the ranks' roles (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key world_keys[] = {
    {"world.teachers", CFG_INT, CONFIG_F(teachers), "-1", "teacher ranks; -1 = world size - students", NULL, -1, 1e6},
    {"world.students", CFG_INT, CONFIG_F(students), "1", "student ranks (the last ranks of the world)", NULL, 1, 1e6},
    {"world.teacher_group_size", CFG_INT, CONFIG_F(teacher_group_size), "1", "G: teacher ranks per teacher; each teacher is G consecutive ranks holding consecutive layer ranges of the target (pipeline stages, balanced by weight bytes), for a target that does not fit one device; the teacher ranks must be a multiple of G (docs/distributed.md)", NULL, 1, 1024},
    {"world.teacher_group_cross_node", CFG_BOOL, CONFIG_F(teacher_group_cross_node), "false", "allow a teacher group to span hosts (by default a group whose ranks are not all on one host is an error: its activations would cross the network at every stage)", NULL, CONFIG_NOLIM},
};
const config_key_set world_settings = CONFIG_KEY_SET(world_keys, NULL);
