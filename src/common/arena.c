// arena.c: bump allocation from one big block, with a high-water mark (see arena.h).
//
// Every carve consumes its size rounded up to ARENA_ALIGN, in dry mode as in real mode, so the
// dry run of a carving sequence reports exactly the bytes the real run needs. The capacity is
// rounded up the same way at arena_init.
#include "common/arena.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/check.h"
#include "common/error.h"

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
        fatal_hint("the memory planner should have sized this arena; please report it",
                   "arena '%s' is full: %s requested with %s used of %s capacity", a->name,
                   bytes_format(bytes, req, sizeof req), bytes_format(a->used, used, sizeof used),
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

// ---------------------------------------------------------------- sizes as text

char *bytes_format(size_t bytes, char *buf, size_t n) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, n, "%zu B", bytes);
        return buf;
    }
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    // three significant digits; the thresholds avoid printing "10.00" or "100.0"
    if (v < 9.995) snprintf(buf, n, "%.2f %s", v, units[u]);
    else if (v < 99.95) snprintf(buf, n, "%.1f %s", v, units[u]);
    else snprintf(buf, n, "%.0f %s", v, units[u]);
    return buf;
}

// The unit suffixes bytes_parse accepts (case-insensitive). Binary: K, KiB, M, MiB, ... (what
// memory sizes mean in practice, and what bytes_format prints); decimal: KB, MB, GB, TB.
static const struct {
    const char *suffix;
    uint64_t mult;
} byte_units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10},    {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20},    {"mib", 1ull << 20}, {"mb", 1000000ull},
    {"g", 1ull << 30},    {"gib", 1ull << 30}, {"gb", 1000000000ull},
    {"t", 1ull << 40},    {"tib", 1ull << 40}, {"tb", 1000000000000ull},
};

int bytes_parse(const char *s, size_t *out) {
#define BYTES_BAD(why)                                                                          \
    error_set("invalid size '%s': %s (expected e.g. 512, 64MiB, 1.5GiB, 2G, 500MB)", s, why)
    const char *p = s;
    if (!isdigit((unsigned char)*p)) return BYTES_BAD("it must start with a digit");
    // integer part, exactly, with overflow detection
    uint64_t whole = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10) return BYTES_BAD("too large");
        whole = whole * 10 + d;
    }
    // fraction: up to 18 digits kept exactly as frac / 10^frac_digits (further digits cannot
    // change the byte count of any size below 2^64 by more than a byte, so they are ignored)
    uint64_t frac = 0, frac_scale = 1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return BYTES_BAD("digits must follow the '.'");
        for (; isdigit((unsigned char)*p); p++) {
            if (frac_scale < 1000000000000000000ull) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                frac_scale *= 10;
            }
        }
    }
    if (*p == ' ' && p[1]) p++; // "1.50 GiB", as bytes_format writes it (a unit must follow)
    uint64_t mult = 0;
    for (size_t i = 0; i < sizeof byte_units / sizeof byte_units[0]; i++) {
        if (strcasecmp(p, byte_units[i].suffix) == 0) {
            mult = byte_units[i].mult;
            break;
        }
    }
    if (!mult) return BYTES_BAD("unknown unit (B, K/KiB, M/MiB, G/GiB, T/TiB, KB, MB, GB, TB)");
    if (whole > UINT64_MAX / mult) return BYTES_BAD("too large");
    uint64_t total = whole * mult;
    if (frac) {
        if (mult == 1) return BYTES_BAD("a fraction of a byte");
        // frac * mult / frac_scale, truncated to whole bytes; 128-bit so nothing overflows
        unsigned __int128 part = (unsigned __int128)frac * mult / frac_scale;
        if (part > UINT64_MAX - total) return BYTES_BAD("too large");
        total += (uint64_t)part;
    }
    if (total > SIZE_MAX) return BYTES_BAD("too large");
    *out = (size_t)total;
    return 0;
#undef BYTES_BAD
}
