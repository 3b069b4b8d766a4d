// arena.h: one allocation, tensors carved from it, and a high-water mark.
//
// Each rank allocates a few arenas at start-up (weights, gradients, activations, ...) from the
// backend's device and carves every tensor from them: nothing is allocated in the training loop,
// and the sum of the arenas' high-water marks is the memory the rank really used (what the memory
// budget is checked against). An arena in "dry" mode allocates nothing and only counts: the memory
// planner runs the same carving code dry to learn the sizes before anything is allocated.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/core/tensor.h"

#define ARENA_ALIGN 256 // bytes: enough for cuBLAS, AVX-512 and cache lines

typedef struct arena {
    char name[48];
    backend *be;       // NULL = host memory (malloc), else the backend's device memory
    char *base;        // NULL in dry mode
    size_t capacity;   // bytes (SIZE_MAX in dry mode)
    size_t used;       // bytes carved so far (aligned)
    size_t high_water; // max of used over the arena's life
    int dry;
} arena;

// arena_init: allocate capacity bytes (on be's device, or host when be is NULL).
// Returns -1 (error_set naming the arena and the size) when the allocation fails.
int arena_init(arena *a, const char *name, backend *be, size_t capacity);
// arena_init_dry: a counting arena: arena_alloc returns NULL and only advances `used`.
void arena_init_dry(arena *a, const char *name);
// arena_alloc: bytes carved at ARENA_ALIGN. Over capacity is fatal, naming the arena, the request,
// what is used and the capacity, and the budget to raise (the planner should have prevented it); a
// dry arena past 2^64 bytes says the sizes overflow.
void *arena_alloc(arena *a, size_t bytes);
// arena_tensor: a tensor of the given dtype and shape carved from the arena.
tensor arena_tensor(arena *a, dtype dt, int ndim, const int64_t *shape);
// arena_mark / arena_reset: scoped scratch: everything carved after the mark is released.
size_t arena_mark(const arena *a);
void arena_reset(arena *a, size_t mark);
size_t arena_high_water(const arena *a);
void arena_free(arena *a);
