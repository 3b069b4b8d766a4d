// emu_internal.h: what the emulator's own files (emu_runtime.cpp, emu_device.cpp, emu_cublas.cpp,
// emu_nccl.cpp, emu_sched.cpp) share; dflash_rank's sources never see it.
#pragma once
#include <stddef.h>

// emu_fail: sets the thread's last CUDA error to e (cudaGetLastError) and returns it
cudaError_t emu_fail(cudaError_t e);
// emu_device_capacity: every emulated device's memory in bytes (DFLASH_EMU_GPU_BYTES, default 16 GiB)
size_t emu_device_capacity(void);
// emu_device_range: the bytes [p, p + bytes) lie inside one live cudaMalloc'd allocation
bool emu_device_range(const void *p, size_t bytes);
// emu_copy_log_waited: the host waits for stream s (every: for all streams), for the copy log
void emu_copy_log_waited(cudaStream_t s, bool every);
// emu_launch_counts: the kernel launches (emu_sched.cpp) and cuBLAS calls (emu_cublas_call_count) of
// this process so far; DFLASH_EMU_LAUNCH_REPORT=1 prints them at exit. Also called by the C tests
// under DFLASH_CUDA_EMU, which declare it themselves.
extern "C" void emu_launch_counts(long long *kernels, long long *library);
// emu_cublas_call_count: the cuBLAS calls this process made so far (every entry point)
long long emu_cublas_call_count(void);
