// world.h: the MPI world and each rank's role in it (SPEC §8).
//
// Ranks 0 .. T-1 are teachers, ranks T .. T+S-1 are students (by default one student, the last
// rank). The local rank (rank among the processes on the same host, from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) picks the GPU.
#pragma once

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
// world_check_group_hosts: collective; -1 with error_set naming the group and its hosts when a
// teacher group's ranks are not all on one host (unless allow_cross_node: world.teacher_group_cross_node).
int world_check_group_hosts(const world *w, int allow_cross_node);
// world_init: MPI_Init (MPI_THREAD_FUNNELED), rank, size, local rank. Works without mpirun (one rank).
void world_init(world *w, int *argc, char ***argv);
void world_finalize(void);
const char *role_name(rank_role r);
