// arena.c: bump allocation from one big block, with a high-water mark (see arena.h).
//
// Every carve consumes its size rounded up to ARENA_ALIGN, in dry mode as in real mode, so the
// dry run of a carving sequence reports exactly the bytes the real run needs. The capacity is
// rounded up the same way at arena_init.
#include "common/backend/arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"

// align_up: x rounded up to ARENA_ALIGN; the caller ensures it cannot overflow.
static size_t align_up(size_t x) { return (x + (ARENA_ALIGN - 1)) & ~(size_t)(ARENA_ALIGN - 1); }

int arena_init(arena *a, const char *name, backend *be, size_t capacity) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->be = be;
    char cap_s[32];
    if (capacity > SIZE_MAX - ARENA_ALIGN)
        return error_set("arena '%s': capacity %zu bytes is too large", a->name, capacity);
    // Never allocate 0 bytes (malloc may return NULL for it): an empty arena still owns a block.
    size_t cap = align_up(capacity ? capacity : 1);
    if (be) {
        a->base = backend_alloc(be, cap);
        if (!a->base)
            return error_prefix("arena '%s' (%s)", a->name, bytes_format(cap, cap_s, sizeof cap_s));
    } else {
        a->base = aligned_alloc(ARENA_ALIGN, cap);
        if (!a->base)
            return error_set("arena '%s': out of host memory allocating %s", a->name,
                             bytes_format(cap, cap_s, sizeof cap_s));
    }
    a->capacity = capacity ? cap : 0;
    return 0;
}

void arena_init_dry(arena *a, const char *name) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->capacity = SIZE_MAX;
    a->dry = 1;
}

void *arena_alloc(arena *a, size_t bytes) {
    size_t room = a->capacity - a->used;
    // Check before rounding, so a request near SIZE_MAX cannot wrap around to a small size.
    if (bytes > room || bytes > SIZE_MAX - ARENA_ALIGN || align_up(bytes) > room) {
        char req[32], used[32], cap[32];
        bytes_format(bytes, req, sizeof req), bytes_format(a->used, used, sizeof used);
        if (a->dry) // a count past 16 EiB: sizes that overflow 64 bits (the shape bounds should stop them first)
            fatal("memory plan '%s': %s more on top of %s overflows 64 bits: the model's shape or a batch setting"
                  " (data.max_tokens_per_batch, teacher.max_tokens, train.max_anchors) is too large", a->name, req, used);
        fatal_hint("the arena was sized by the memory plan (--plan shows it): raise the role's budget, train.mem_budget"
                   " for a student or teacher.mem_budget for a teacher, or lower data.max_tokens_per_batch",
                   "arena '%s' is full: %s requested with %s used of %s capacity", a->name, req, used,
                   bytes_format(a->capacity, cap, sizeof cap));
    }
    void *p = a->dry ? NULL : a->base + a->used;
    a->used += align_up(bytes);
    if (a->used > a->high_water) a->high_water = a->used;
    return p;
}

tensor arena_tensor(arena *a, dtype dt, int ndim, const int64_t *shape) {
    device_kind dev = a->be ? a->be->device : DEVICE_CPU;
    tensor t = tensor_make(dt, NULL, dev, ndim, shape);
    // Guard the byte count against overflow: a shape that large is a planner bug.
    size_t bytes = dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && bytes > SIZE_MAX / (size_t)shape[i]) {
            char s[128];
            fatal("arena '%s': tensor of shape %s overflows size_t", a->name,
                  shape_str(ndim, shape, s, sizeof s));
        }
        bytes *= (size_t)shape[i];
    }
    t.data = arena_alloc(a, bytes);
    return t;
}

size_t arena_mark(const arena *a) { return a->used; }

void arena_reset(arena *a, size_t mark) {
    if (mark > a->used)
        fatal("arena '%s': reset to %zu bytes, past the %zu bytes in use", a->name, mark, a->used);
    a->used = mark;
}

size_t arena_high_water(const arena *a) { return a->high_water; }

// Safe on a dry arena and on one already freed.
void arena_free(arena *a) {
    if (a->base) {
        if (a->be) backend_free(a->be, a->base);
        else free(a->base);
    }
    a->base = NULL;
    a->capacity = 0;
    a->used = 0;
}
