// backend_cpu.h: the CPU backend (OpenBLAS + OpenMP), called through backend.c's dispatch.
#pragma once
#include <stddef.h>

#include "common/backend/backend_type.h"

int cpu_open(backend *be);
void cpu_close(backend *be);
void *cpu_alloc(backend *be, size_t bytes);
void cpu_free(backend *be, void *p);
void cpu_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes);
void cpu_gemm(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a,
              int lda, const void *b, int ldb, float beta, void *c, int ldc, dtype ab_dt, dtype c_dt);
