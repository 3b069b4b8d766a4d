// threads.h: the one CPU thread policy of dflash_rank and dflash_tool: how many threads a process
// runs (OpenMP loops and OpenBLAS, always the same count) and how idle threads wait.
//
// The count, in this order (docs/config.md, "Threads"):
//   1. run.threads / --threads N when N > 0,
//   2. else OMP_NUM_THREADS when set,
//   3. else the cores of the process's affinity mask (sched_getaffinity: what taskset, cgroups'
//      cpusets, mpirun --bind-to or Slurm give it, not the machine's count) divided among the
//      ranks of this host that share that mask: local_ranks * mask / online CPUs of them, rounded up
//      (ranks bound to a core each share nothing; unbound ranks all share the whole machine).
// Never more than the mask's cores, never fewer than 1. OPENBLAS_NUM_THREADS is overridden: OpenBLAS
// (the OpenMP build) gets the same count through openblas_set_num_threads.
//
// Waiting: libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT when it loads, before main. When neither
// is set, threads_exec_policy re-executes the program (same pid, same arguments) with
// OMP_WAIT_POLICY=passive, so threads that wait at a barrier sleep instead of spinning for ~0.3 ms
// (on a machine where other work runs, spinning threads take the cores that work needs, and it
// theirs). Setting either variable (e.g. OMP_WAIT_POLICY=active) keeps the runtime's choice.
//
// The product library's kernel: OpenBLAS reads OPENBLAS_CORETYPE when it loads. When the user set
// none and the library runs a weaker kernel than the processor allows (it does not know the
// processor: blas_kernel.h), the same re-exec sets it, with DFLASH_BLAS_CHOSE="<kernel>:<the
// library's own>" so the start line can say the project chose it and why.
#pragma once

// threads_exec_policy: the first call of main (before any thread or MPI starts): one re-exec when
// the wait policy or the library's kernel needs setting (above). Returns only if none was needed
// or it failed (then the program runs with the runtimes' defaults).
void threads_exec_policy(char **argv);

// threads_cores: the CPUs in this process's affinity mask (>= 1); threads_online: the host's online CPUs.
int threads_cores(void);
int threads_online(void);

// threads_choose: the count for requested (run.threads; <= 0 = automatic) and local_ranks (ranks
// of the job on this host; <= 0 = 1), as described above. why (n bytes, may be NULL) gets the reason.
int threads_choose(int requested, int local_ranks, char *why, int n);

// threads_bound_warning: 1 and one line in msg when this process's affinity mask holds fewer cores
// than its share of the host (online CPUs / local_ranks, at least 1): the launcher bound it tighter
// than the machine allows (Open MPI binds each of 1 or 2 ranks to one core by default, so a lone
// student on 8 cores computes on 1). 0 when the mask holds its share (or more).
int threads_bound_warning(int local_ranks, char *msg, int n);

// threads_setup: threads_choose, then omp_set_num_threads and openblas_set_num_threads with it;
// returns the count. The reason (for the start log line) is in why as for threads_choose.
int threads_setup(int requested, int local_ranks, char *why, int n);
