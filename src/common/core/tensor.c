// tensor.c: the dtype table and tensor descriptor helpers (see tensor.h).
#include "common/core/tensor.h"

#include <stdio.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"

// One row per dtype, in enum order; names are the safetensors header spellings.
static const struct {
    const char *name;
    size_t size;
} dtype_table[DT_COUNT] = {
    [DT_F32] = {"F32", 4},  [DT_F16] = {"F16", 2},  [DT_BF16] = {"BF16", 2}, [DT_F64] = {"F64", 8},
    [DT_I8] = {"I8", 1},    [DT_U8] = {"U8", 1},    [DT_I16] = {"I16", 2},   [DT_U16] = {"U16", 2},
    [DT_I32] = {"I32", 4},  [DT_U32] = {"U32", 4},  [DT_I64] = {"I64", 8},   [DT_U64] = {"U64", 8},
    [DT_BOOL] = {"BOOL", 1}, [DT_F8_E4M3] = {"F8_E4M3", 1}, [DT_F8_E5M2] = {"F8_E5M2", 1},
    [DT_F8_E8M0] = {"F8_E8M0", 1},
};

// An out-of-range dtype can only come from a programming error (a cast int, a corrupt struct).
static void dtype_check(dtype dt) {
    if ((int)dt < 0 || dt >= DT_COUNT) fatal("invalid dtype %d", (int)dt);
}

size_t dtype_size(dtype dt) {
    dtype_check(dt);
    return dtype_table[dt].size;
}

const char *dtype_name(dtype dt) {
    dtype_check(dt);
    return dtype_table[dt].name;
}

int dtype_parse(const char *name, dtype *out) {
    for (int i = 0; i < DT_COUNT; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *out = (dtype)i;
            return 0;
        }
    }
    return error_set("unknown dtype '%s' (expected F32, F16, BF16, F64, I8, U8, I16, U16, I32, "
                     "U32, I64, U64, BOOL, F8_E4M3, F8_E5M2 or F8_E8M0)", name);
}

tensor tensor_make(dtype dt, void *data, device_kind device, int ndim, const int64_t *shape) {
    dtype_check(dt);
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS)
        fatal("tensor_make: %d dimensions (at most %d)", ndim, TENSOR_MAX_DIMS);
    tensor t;
    memset(&t, 0, sizeof t);
    t.dt = dt;
    t.ndim = ndim;
    t.data = data;
    t.device = device;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) fatal("tensor_make: negative dimension %lld", (long long)shape[i]);
        t.shape[i] = shape[i];
    }
    return t;
}

// A 0-dimensional tensor is a scalar: one element.
int64_t tensor_numel(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t tensor_bytes(const tensor *t) { return (size_t)tensor_numel(t) * dtype_size(t->dt); }

char *shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    if (n == 0) return buf;
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

char *tensor_shape_str(const tensor *t, char *buf, size_t n) {
    return shape_str(t->ndim, t->shape, buf, n);
}
