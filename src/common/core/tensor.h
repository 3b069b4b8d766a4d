// tensor.h: element types and a small tensor descriptor (dtype, shape, data pointer, device).
//
// A tensor does not own its memory: data points into an arena (arena.h), an mmapped safetensors
// file (safetensors.h) or a caller's buffer. Shapes are row-major, outermost dimension first.
#pragma once
#include <stddef.h>
#include <stdint.h>

// The 8-bit floats are storage types of quantised checkpoints (teacher/target_quant.h): weights in
// F8_E4M3 (torch.float8_e4m3fn: 4 exponent bits, bias 7, no infinities, NaN = 0x7f/0xff, max 448),
// scales in F8_E8M0 (torch.float8_e8m0fnu: 2^(b - 127), NaN = 0xff). F8_E5M2 (torch.float8_e5m2, the
// top byte of an fp16) is read from files and converted, but no loader takes it as a weight.
typedef enum {
    DT_F32 = 0, DT_F16, DT_BF16, DT_F64,
    DT_I8, DT_U8, DT_I16, DT_U16, DT_I32, DT_U32, DT_I64, DT_U64, DT_BOOL,
    DT_F8_E4M3, DT_F8_E5M2, DT_F8_E8M0,
    DT_COUNT
} dtype;

// dtype_size: bytes per element.
size_t dtype_size(dtype dt);
// dtype_name: the safetensors spelling ("F32", "BF16", "I32", "U8", "BOOL", "F8_E4M3", ...).
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
