// tensor.h: element types and a small tensor descriptor (dtype, shape, data pointer, device).
//
// A tensor does not own its memory: data points into an arena (arena.h), an mmapped safetensors
// file (safetensors.h) or a caller's buffer. Shapes are row-major, outermost dimension first.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DT_F32 = 0, DT_F16, DT_BF16, DT_F64,
    DT_I8, DT_U8, DT_I16, DT_U16, DT_I32, DT_U32, DT_I64, DT_U64, DT_BOOL,
    DT_COUNT
} dtype;

// dtype_size: bytes per element.
size_t dtype_size(dtype dt);
// dtype_name: the safetensors spelling ("F32", "BF16", "I32", "U8", "BOOL", ...).
const char *dtype_name(dtype dt);
// dtype_parse: safetensors spelling -> dtype; returns -1 (error_set) when unknown.
int dtype_parse(const char *name, dtype *out);

typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } device_kind;

#define TENSOR_MAX_DIMS 8
typedef struct {
    dtype dt;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    void *data;
    device_kind device;
} tensor;

// tensor_make: a descriptor over existing memory.
tensor tensor_make(dtype dt, void *data, device_kind device, int ndim, const int64_t *shape);
int64_t tensor_numel(const tensor *t);
size_t tensor_bytes(const tensor *t);
// tensor_shape_str: "[4, 128]" into buf; returns buf.
char *tensor_shape_str(const tensor *t, char *buf, size_t n);
// shape_str: the same for a bare shape.
char *shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
