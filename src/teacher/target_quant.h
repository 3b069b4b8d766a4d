// target_quant.h: quantised target checkpoints, read as shipped and de-quantised at load, one tensor
// at a time, into the teacher's compute dtype on the device (docs/teacher.md, "Quantised checkpoints").
//
// What it offers:
//   target_quant_parse    config.json's "quantization_config" (top level, or under text_config for
//                         the multimodal wrappers): none, fp8 (block-quantised float8_e4m3fn, as
//                         DeepSeek-V3/R1, Kimi-K2, Qwen3-*-FP8, GLM-*-FP8 ship), or mxfp4 (gpt-oss's
//                         experts). Any other quant_method (gptq, awq, compressed-tensors, bitsandbytes,
//                         fbgemm_fp8, ...), an fp8 "fmt" other than e4m3 or a static activation scheme is
//                         refused in one line naming the key and the value.
//   target_quant_lookup   how a tensor the teacher wants is stored: plain (BF16/F16/F32, the entry
//                         itself), fp8 (the F8_E4M3 entry + its weight_scale_inv), mxfp4 (NAME_blocks +
//                         NAME_scales); the companions and their shapes are checked, a missing or
//                         mis-shaped one is a one-line error naming the tensor.
//   target_quant_present  whether a tensor exists in any of those forms (for a loader choosing between
//                         layouts: "mlp.experts.gate_up_proj" is stored as gate_up_proj_blocks in mxfp4).
//   target_quant_dequant_rows  logical rows of a stored tensor, de-quantised to fp32 on the host.
//   target_quant_upload   the whole tensor de-quantised into dt (F32, BF16 or F16) on the device, in
//                         chunks of rows of at most TARGET_QUANT_CHUNK elements through
//                         backend_copy_to_device: host memory is bounded by the chunk (a few MiB),
//                         nothing is written to disk.
//   target_quant_disk_bytes  the bytes a stored tensor takes in the files (companions included).
//
// The rules, as transformers 5.x reads these checkpoints (integrations/finegrained_fp8.py, mxfp4.py):
//   fp8     weight W [..., out, in] float8_e4m3fn, scale S [..., ceil(out/bo), ceil(in/bi)] with
//           [bo, bi] = weight_block_size (absent: [128, 128]; null: one scale per matrix, S [...] or
//           [..., 1, 1]): W[o, i] = f32(fp8(W[o, i])) * f32(S[o / bo, i / bi]) (integer division: the
//           last block of a dimension that bo/bi does not divide is partial), rounded once to the
//           compute dtype. S is named NAME_scale_inv with ".weight" -> ".weight_scale_inv"
//           (model.layers.0.mlp.down_proj.weight_scale_inv; fused experts: experts.down_proj_scale_inv),
//           and is F32, BF16, F16 or F8_E8M0 (scale_fmt ue8m0).
//   mxfp4   blocks B [..., N, G, 16] U8, scales X [..., N, G] U8, the logical tensor [..., N, 32 G]:
//           byte j of a block holds elements 2j (low nibble) and 2j+1 (high nibble), each an e2m1
//           code of {0, .5, 1, 1.5, 2, 3, 4, 6} (bit 3: sign), times 2^(X - 127) exactly, as torch.ldexp
//           (X = 0: 2^-127, a subnormal; X = 255: 2^128, values of magnitude >= 1 become inf, zeros stay
//           0; the e8m0 NaN code is not special in transformers). The experts of gpt-oss come as
//           [E, out, in] (gate_up_proj_blocks [E, 2I, H/32, 16]: rows are outputs), the layout the
//           teacher's experts use; transformers' parameter gate_up_proj [E, H, 2I] is its transpose.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/core/tensor.h"
#include "common/data/safetensors.h"

struct cJSON;

typedef enum { TARGET_QUANT_NONE = 0, TARGET_QUANT_FP8, TARGET_QUANT_MXFP4 } target_quant_method;

typedef struct target_quant {
    target_quant_method method;
    // fp8: weight_block_size [block_out, block_in]; 0, 0: one scale per matrix (weight_block_size null)
    int64_t block_out, block_in;
    // teacher.quant_weights resident when the config was parsed (target_quant_weights_mode) and the
    // checkpoint is quantised: its quantised tensors stay stored on the device, each layer's
    // de-quantised into the layer scratch before it runs (target_layer_materialize, target.h)
    int resident;
    // modules_to_not_convert: n_skip patterns, NUL-separated (interned for the process: copies of the
    // config share them); NULL when absent or null
    const char *skip;
    int n_skip;
} target_quant;

// teacher.quant_weights: what becomes of a quantised checkpoint's weights on the device.
//   resident    (default) kept as stored (codes + scales), de-quantised a layer at a time into one
//               scratch shared by the stage's layers (the memory plans count them so)
//   dequantize  de-quantised at load into the compute dtype (every weight at compute size)
// One setting for the process (every plan, split and load of it must agree; dflash_rank sets it from
// the configuration before anything reads a config.json, the tools from an option); before it is
// set, the environment variable DFLASH_QUANT_WEIGHTS (resident | dequantize) is the default.
typedef enum { TARGET_QUANT_WEIGHTS_RESIDENT = 0, TARGET_QUANT_WEIGHTS_DEQUANTIZE = 1 } target_quant_weights;
// target_quant_weights_set: "resident" or "dequantize"; -1 with error_set naming `what` (the key or
// option) otherwise.
int target_quant_weights_set(const char *value, const char *what);
// target_quant_weights_mode: the setting (the environment's default when never set; an invalid
// DFLASH_QUANT_WEIGHTS: -1 with error_set).
int target_quant_weights_mode(void);
const char *target_quant_weights_name(int mode);

// target_quant_parse: root's "quantization_config", or its text_config's (the multimodal wrappers);
// absent or null: TARGET_QUANT_NONE. -1 with error_set("<src>: 'quantization_config.<key>' ...").
// Sets q->resident from target_quant_weights_mode().
int target_quant_parse(target_quant *q, const struct cJSON *root, const char *src);
// target_quant_describe: "none", "fp8 (e4m3, blocks [128, 128])", "fp8 (e4m3, one scale per matrix)",
// "mxfp4" into buf; returns buf.
const char *target_quant_describe(const target_quant *q, char *buf, size_t n);

typedef enum {
    TARGET_QUANT_ABSENT = 0, // no tensor of that name in any form
    TARGET_QUANT_PLAIN,      // w is the tensor as it is (any dtype: the caller checks it)
    TARGET_QUANT_STORED_FP8, // w: F8_E4M3, scale: its weight_scale_inv
    TARGET_QUANT_STORED_MXFP4, // w: NAME_blocks, scale: NAME_scales
} target_quant_kind;

typedef struct {
    target_quant_kind kind;
    const st_entry *w, *scale;
    int ndim;                        // the logical (de-quantised) shape
    int64_t shape[TENSOR_MAX_DIMS];
    int64_t block_out, block_in;     // fp8: the block in effect (the whole matrix for one scale)
} target_quant_tensor;

// target_quant_lookup: how `name` is stored in d under q. 0 with out filled (kind ABSENT when there is
// nothing by that name); -1 with error_set naming the tensor when it is stored in a way q does not
// declare (F8_E4M3 without an fp8 quantization_config, MXFP4 blocks without mxfp4, F8_E5M2 at all),
// or a companion is missing, of the wrong dtype or mis-shaped.
int target_quant_lookup(const target_quant *q, const st_dir *d, const char *name, target_quant_tensor *out);
// target_quant_present: d holds `name` itself, or its MXFP4 NAME_blocks.
int target_quant_present(const st_dir *d, const char *name);
// target_quant_numel: elements of the logical tensor; target_quant_rows / _cols: the logical tensor as
// a matrix [rows, cols] (cols = the last dimension).
int64_t target_quant_numel(const target_quant_tensor *t);
int64_t target_quant_cols(const target_quant_tensor *t);
int64_t target_quant_rows(const target_quant_tensor *t);
size_t target_quant_disk_bytes(const target_quant_tensor *t);

// target_quant_dequant_rows: logical rows [r0, r0 + nrows) of t as fp32 into dst (nrows * cols
// floats). Plain tensors of F32/F16/BF16 (and the 8-bit floats) convert; -1 (error_set) otherwise.
int target_quant_dequant_rows(const target_quant_tensor *t, int64_t r0, int64_t nrows, float *dst);

// The bound on the elements de-quantised at once (fp32 staging: 4 MiB, plus the chunk in dt); a row
// wider than it goes alone. target_quant_chunk is that bound at run time (tests lower it to cross
// chunk boundaries in small tensors).
#define TARGET_QUANT_CHUNK ((int64_t)1 << 20)
extern int64_t target_quant_chunk;
// target_quant_upload: all of t, de-quantised, into dst (device memory of be) as dt (F32, BF16 or
// F16), chunk by chunk. -1 (error_set) for another dt or an unreadable plain dtype.
int target_quant_upload(backend *be, void *dst, dtype dt, const target_quant_tensor *t);

// ------------------------------------------------------------------------- resident quantised weights
// What config.json alone says (the memory plans read no weights): a checkpoint's quantised tensors.
//   fp8    every decoder layer's linear weight (a 2-D [out, in] NAME.weight, or the fused experts
//          [E, out, in] experts.gate_up_proj / experts.down_proj) except the routers (mlp.gate.weight,
//          mlp.router.weight, shared_expert_gate.weight) and conv1d.weight, as DeepSeek-V3/R1, Kimi-K2,
//          Qwen3-*-FP8 publish them
//   mxfp4  the experts' experts.gate_up_proj / experts.down_proj (gpt-oss)
// and neither what quantization_config.modules_to_not_convert names: a pattern P leaves out a tensor
// whose module (its name without ".weight"; for fused experts also the experts module) contains P
// (transformers 4's rule) or whose start P matches as a regular expression ('.', '*', '+', '?', '\\';
// transformers 5's re.match), a superset of transformers' rules: a tensor counted plain that the files
// hold quantised is de-quantised at load (the plan counted its compute size), the reverse is refused.

// target_quant_planned: STORED_FP8 / STORED_MXFP4 when q says `name` (ndim dims; in_layer: a decoder
// layer's tensor kept in the compute dtype, not fp32) is stored quantised, else PLAIN.
target_quant_kind target_quant_planned(const target_quant *q, const char *name, int ndim, int in_layer);
// target_quant_planned_bytes: the device bytes of a planned-quantised tensor of logical shape [ndim]
// kept as stored: *codes (fp8: 1 byte an element; mxfp4: half) and *scales (fp8: f32 per block, for
// fused gate_up experts as many as the per-expert files hold, which is at least the fused count;
// mxfp4: 1 byte per 32 elements). Neither is aligned.
void target_quant_planned_bytes(const target_quant *q, target_quant_kind kind, const char *name, int ndim,
                                const int64_t *shape, size_t *codes, size_t *scales);

// target_quant_stored_codes / _scales: bytes of a stored tensor t (fp8 or mxfp4) on the device: its
// codes as in the file, its scales as f32 (fp8: every scale dtype converts exactly) or as the file's
// e8m0 bytes (mxfp4: 2^128 is no f32, the op applies it as ldexp does).
size_t target_quant_stored_codes(const target_quant_tensor *t);
size_t target_quant_stored_scales(const target_quant_tensor *t);
// target_quant_upload_stored: t's codes to codes_dst and its scales (converted as above) to
// scales_dst, device memory of be; host memory bounded by TARGET_QUANT_CHUNK.
void target_quant_upload_stored(backend *be, const target_quant_tensor *t, void *codes_dst, void *scales_dst);

// One de-quantisation of a layer's stored tensor (or of consecutive parts of a stacked one) into its
// buffer in the layer scratch.
typedef struct {
    int64_t layer;
    target_quant_kind kind;  // STORED_FP8 or STORED_MXFP4
    void *dst;               // [M, O, I] in the compute dtype, in the scratch
    const uint8_t *codes;    // device: fp8 codes [M, O, I]; mxfp4 blocks [M * O, I / 32, 16]
    const void *scales;      // device: fp8 f32 [M, ceil(O / bo), ceil(I / bi)]; mxfp4 u8 [M * O, I / 32]
    int64_t M, O, I, bo, bi; // bo, bi: fp8 only
} target_quant_job;
// target_quant_job_run: ops_dequant_fp8 / ops_dequant_mxfp4 of j on be.
void target_quant_job_run(backend *be, const target_quant_job *j);

