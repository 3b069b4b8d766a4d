// world.h: the MPI world and each rank's role in it (SPEC §8).
//
// Ranks 0 .. T-1 are teachers, ranks T .. T+S-1 are students (by default one student, the last
// rank). The local rank (rank among the processes on the same host, from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) picks the GPU.
#pragma once

#include "common/core/config.h"

typedef enum { ROLE_TEACHER = 0, ROLE_STUDENT = 1 } rank_role;

// WORLD_REPORTED_ELSEWHERE: what a role returns when every rank of it finds the same error and
// another rank prints it and ends the job: this rank prints nothing and waits to be ended (one line
// for the job, not one per rank).
#define WORLD_REPORTED_ELSEWHERE 1

typedef struct {
    int rank, size;             // in MPI_COMM_WORLD
    int local_rank, local_size; // on this host
    int teachers, students;     // T + S = size
    rank_role role;
    int role_index;             // index among the ranks of the same role
    // teacher groups (world.teacher_group_size = G): teacher ranks g*G .. g*G+G-1 are one teacher,
    // the stages of a pipeline over the target's layers; G = 1: every teacher rank is a teacher
    int group_size;             // G
    int groups;                 // teachers / G: the teachers the students see
    int group, stage;           // a teacher rank's group and its stage in it (-1 on a student)
} world;

// The world ranks of group g: its first stage takes the students' requests, its last sends the payloads.
static inline int world_group_first(const world *w, int g) { return g * w->group_size; }
static inline int world_group_last(const world *w, int g) { return g * w->group_size + w->group_size - 1; }

// world_roles: assign roles for a world of `size` ranks from the configured counts (teachers = -1:
// size - students). -1 with error_set naming both numbers when T + S != size or either is invalid.
int world_roles(world *w, int rank, int size, long long teachers, long long students);
// world_set_groups: teacher groups of G ranks (world_roles sets G = 1). -1 with error_set naming
// world.teacher_group_size when G does not divide the teacher ranks.
int world_set_groups(world *w, long long G);
// The role rule of a mode (each mode of src/modes names one; docs/distributed.md, "Modes"): how the
// ranks of a job are split. The one place a mode's roles are decided: the job, --preflight and
// --plan all assign them through world_want_make and world_assign.
typedef enum {
    WORLD_RULE_JOB,        // train, eval: world.teachers + world.students, teacher groups of
                           // world.teacher_group_size; with data.features every rank a student
    WORLD_RULE_TEACHERS,   // dump-features, regenerate: every rank a teacher, in teacher groups
    WORLD_RULE_CONFIGURED, // check: world.teachers + world.students, in teacher groups
    WORLD_RULE_PAIRS,      // transport-test: world.teachers + world.students, teachers of one rank
} world_rule;

// What a rule asks of the world: teachers -1 = the ranks the students leave; students -1 = every
// rank (then no teacher); group_size: the ranks of one teacher.
typedef struct {
    long long teachers, students, group_size;
    int offline; // every rank a student reading offline features (WORLD_RULE_JOB with data.features)
} world_want;

// world_want_make: the rule applied to the configuration.
void world_want_make(world_rule rule, const config *cfg, world_want *want);
// world_assign: the roles and teacher groups of a world of size ranks (world_roles, then
// world_set_groups). -1 with error_set as those.
int world_assign(world *w, int rank, int size, const world_want *want);
// world_assign_roles: the roles alone (teachers of one rank; then world_set_groups(want->group_size)).
int world_assign_roles(world *w, int rank, int size, const world_want *want);
// world_want_size: the world a plan without a launcher plans (--plan run alone): the configured
// counts; a teacher count the world size would decide (-1) is one teacher (one group of stage
// ranks), *known = 0 then (1 otherwise).
int world_want_size(const world_want *want, const config *cfg, int *known);
// world_check_group_hosts: collective; -1 with error_set naming the group and its hosts when a
// teacher group's ranks are not all on one host (unless allow_cross_node: world.teacher_group_cross_node).
int world_check_group_hosts(const world *w, int allow_cross_node);
// world_init: MPI_Init (MPI_THREAD_FUNNELED), rank, size, local rank. Works without mpirun (one rank).
void world_init(world *w, int *argc, char ***argv);
void world_finalize(void);
const char *role_name(rank_role r);
