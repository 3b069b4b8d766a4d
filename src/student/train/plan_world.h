// plan_world.h: --plan: the memory plan of every role of the configured world, from the
// configuration and the target's config.json alone.
//
// One process plans the whole world: no MPI, no device opened, no weight read, no training set
// read (the plans depend on data.max_tokens_per_batch, train.max_anchors, teacher.topk and the
// shapes, not on the data). The roles come from world.teachers / world.students (data.features:
// every rank a student); the device from run.device: cpu plans fp32 on the host, cuda plans bf16
// weights and activations with the cuBLAS workspace and, unless transport.payload = mpi, the NCCL
// receive ring (the job's own rule: every rank on its own GPU), whether or not a GPU is here; auto
// plans for cuda when a GPU is visible, else for the CPU. Under mpirun every rank plans the same
// and the first prints, so the output is the one-process output, printed once.
#pragma once
#include "common/core/config.h"

// plan_world: print the plan on stdout (print 0: plan, print nothing). world_size: the launcher's rank count
// (-1 when there is no launcher: the configured counts are the world); ranks_on_host: the
// launcher's ranks on this host (-1: unknown), for the CPU threads per rank. 0 when every role
// fits its budget; -1 with error_set (one line; the plans were printed as far as they go) when
// the roles do not fit the world, an input is missing or malformed, or a budget is too small.
int plan_world(const config *cfg, int world_size, int ranks_on_host, int print);
