// job_plan.h: --plan: the memory plan of every role of the configured world, from the
// configuration and the target's config.json alone.
//
// One process plans the whole world: no MPI, no device opened, no weight read, no training set
// read (the plans depend on data.max_tokens_per_batch, train.max_anchors, teacher.topk and the
// shapes, not on the data). The roles are the mode's (its world_want: world.teachers /
// world.students, data.features every rank a student), assigned as the job assigns them; the
// device from run.device: cpu plans fp32 on the host, cuda plans bf16
// weights and activations with the cuBLAS workspace and, unless transport.payload = mpi, the NCCL
// receive ring (the job's own rule: every rank on its own GPU), whether or not a GPU is here; auto
// plans for cuda when a GPU is visible, else for the CPU. Under mpirun every rank plans the same
// and the first prints, so the output is the one-process output, printed once.
#pragma once
#include <stddef.h>

#include "common/backend/backend.h"
#include "common/comm/world.h"
#include "common/core/config.h"
#include "student/model/drafter.h"
#include "teacher/teacher_plan.h"

// job_plan_train: a training job's plan (run.mode train or eval: the mode table calls it for them) on
// stdout (print 0: plan, print nothing). want: the roles the mode's rule asks (world.h). world_size: the launcher's rank count
// (-1 when there is no launcher: the configured counts are the world); ranks_on_host: the
// launcher's ranks on this host (-1: unknown), for the CPU threads per rank. 0 when every role
// fits its budget; -1 with error_set (one line; the plans were printed as far as they go) when
// the roles do not fit the world, an input is missing or malformed, or a budget is too small.
int job_plan_train(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print);
// job_plan_roles: the roles of the world planned into *w, assigned as the job assigns them:
// world_size ranks (the launcher's), or without a launcher (world_size <= 0) the configured counts
// (world_want_size; *known = 0 when the teacher count was left to the world size). -1 with error_set.
int job_plan_roles(const config *cfg, const world_want *want, int world_size, world *w, int *known);
// job_plan_pinned_rank: the page-locked host memory world rank r of w asks for on backend be (its
// kind), as the allocation code sizes it: a teacher rank teacher_pinned_bytes of its stage, a
// student its payload buffers (batch_source_pinned_bytes; none offline) and, when grad_mpi, the
// gradient ring (students_grads_pinned_bytes of the drafter dc); on_link: the payloads' features
// go GPU to GPU (NCCL device blocks), so the host buffers hold the rest alone.
size_t job_plan_pinned_rank(const config *cfg, const world *w, int r, const backend *be, const target_config *tc,
                            const teacher_contract *ct, const drafter_config *dc, int on_link, int grad_mpi, int offline);
// job_plan_links: the transports --plan plans for (the configured ones; auto: NCCL on a CUDA
// backend, the job's own rule when every rank has a GPU of its own): *on_link the payloads' device
// blocks, *grad_mpi the students' gradient ring (MPI on a GPU with two students or more).
void job_plan_links(const config *cfg, const world *w, const backend *be, int offline, int eval, int *on_link, int *grad_mpi);
// job_plan_backend: the backend a rank of the job would open, described but not opened, with
// ranks_here ranks on the host; how[n]: one line saying what was planned for and why.
void job_plan_backend(const config *cfg, int ranks_here, backend *be, char *how, size_t n);
