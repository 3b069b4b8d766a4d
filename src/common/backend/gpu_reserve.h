// gpu_reserve.h: the memory a rank's process takes on its GPU besides its memory plan, and the
// start-up check that the plan fits the card (docs/distributed.md, "Memory that fits the card").
//
// A budget (teacher.mem_budget, train.mem_budget) is all the memory the process may use on its card.
// Its planners plan the budget less this reserve, on a CUDA backend (0 on the CPU):
//   CUDA context + loaded kernels   GPU_RESERVE_CONTEXT, 1 GiB: NVIDIA states no figure; a CUDA 12
//                                   context on Ampere/Hopper takes about 0.3-0.6 GiB as commonly
//                                   measured (nvidia-smi after cudaFree(0)), lazy module loading
//                                   (the default since CUDA 12.2) keeps the libraries' kernels to
//                                   those used; doubled for those kernels and our own
//   cuBLAS workspace                CUDA_CUBLAS_WORKSPACE_BYTES, 32 MiB: cuBLAS's recommended size on
//                                   Hopper (cublasSetWorkspace); the student's plan counts it already
//                                   ("library workspaces"), the teacher's reserve carries it
//   each NCCL communicator          GPU_RESERVE_NCCL_COMM, 688 MiB: measured for NCCL groups of more
//                                   than 2 GPUs on A100 NVLink (NVIDIA/nccl#964; 544 MiB for 2); it
//                                   grows with the channels NCCL uses (NVIDIA/nccl#986)
// The communicators a rank opens (payload_link_nccl.c, nccl_reduce.h): with NCCL links, the one
// over all ranks, one per teacher-student pair it is in, one per neighbouring stage of its teacher group;
// a student also the students' gradient all-reduce (NCCL, more than one student).
// The start-up check measures what the context, the handles and the communicators took
// (cudaMemGetInfo), so that a first GPU run tells what these figures should be.
#pragma once
#include <stddef.h>

#include "common/backend/backend.h"

#define GPU_RESERVE_CONTEXT ((size_t)1 << 30)
#define GPU_RESERVE_NCCL_COMM ((size_t)688 << 20)

typedef struct {
    size_t context, cublas, nccl; // nccl: all of the communicators
    int comms;
    size_t total;
} gpu_reserve;

// gpu_reserve_make: the reserve of a rank on a CUDA backend (cuda = 0: nothing) that opens `comms`
// NCCL communicators; cublas = 1 when its plan does not count the cuBLAS workspace.
void gpu_reserve_make(gpu_reserve *r, int cuda, int comms, int cublas);
// gpu_reserve_teacher_comms: the communicators of a teacher rank: nccl = NCCL links (every rank
// on a GPU of its own, transport.payload not mpi), stage s of a group of G, `students` students.
int gpu_reserve_teacher_comms(int nccl, int G, int s, int students);
// gpu_reserve_student_comms: of a student rank: `groups` teachers (groups of stages) over NCCL
// links (nccl), and the gradient all-reduce over NCCL (grad_nccl).
int gpu_reserve_student_comms(int nccl, int groups, int grad_nccl);
// gpu_reserve_usable: what a budget leaves the plan: 0 (no limit) for budget 0, else budget less
// the reserve (1 byte when the reserve takes it all, so that the planner refuses).
size_t gpu_reserve_usable(size_t budget, const gpu_reserve *r);
// gpu_reserve_describe: "1.00 GiB CUDA context + 32.0 MiB cuBLAS + 3 x 688 MiB NCCL = 3.05 GiB".
const char *gpu_reserve_describe(const gpu_reserve *r, char *buf, size_t n);
// gpu_reserve_check: at start on a GPU, after its context, handles and the communicators opened so
// far (`later` more to come): 0 when the device's free memory holds `need` bytes (the plan) and the
// later communicators' reserve; else -1 with error_set in one line naming `who`, the free and needed
// bytes and `key` (the budget to lower). Logs what the context and communicators took (total -
// free: the measurement that replaces the figures above on a first GPU run).
int gpu_reserve_check(backend *be, size_t need, int later, const char *who, const char *key);
