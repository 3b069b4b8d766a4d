#!/usr/bin/env bash
# test_quant_target.sh: quantised target checkpoints end to end (teacher/target_quant.h).
# For every tests/reference/data/quant_qwen3_fp8_*.args (made by make_quant_fixture.py with torch +
# transformers): the committed FP8 checkpoint (a Qwen3 target from `dflash_tool make-target`, every
# linear weight float8_e4m3fn in blocks with its weight_scale_inv) goes through `teacher-dump` on the
# CPU, and its outputs must match transformers' fp32 forward of the same model de-quantised (the
# partial fixture: blocks [32, 40], partial last blocks in both dims, the rule W = fp8 * scale[o / bo,
# i / bi]; the even one: blocks [8, 16] in two shards, transformers' own load of the directory) to
# 1e-4, as test_teacher_reference.sh holds the bf16 targets. The unquantised model (make-target,
# same arguments) must miss that reference (its outputs are orig_err away): the FP8 weights, not the
# originals, are what the teacher ran. Then the refusals, each one line naming what is wrong: an
# unsupported quant_method, an fp8 fmt other than e4m3, F8_E4M3 weights with no quantization_config, a
# missing or mis-shaped scale, an F8_E5M2 weight.
source "$DFLASH_SRC/tests/cli/lib.sh"
D=$SRC/tests/reference/data
n=0
for args in "$D"/quant_qwen3_fp8_*.args; do
  [ -e "$args" ] || continue
  name=$(basename "$args" .args)
  unset make_target model layer_ids topk tokens reference orig_err
  source "$args"
  n=$((n + 1))
  expect_ok "$name teacher-dump" "$T" teacher-dump "$D/$model" "$D/$tokens" "$TMP/$name.safetensors" \
    --layers "$layer_ids" --topk "$topk" --device cpu
  if "$T" compare "$D/$reference" "$TMP/$name.safetensors" --tol 1e-4 \
       --only features,topk_idx,topk_val,lse,logits_last >"$TMP/cmp.log" 2>&1; then ok
  else bad "$name differs from transformers' de-quantised model:"; cat "$TMP/cmp.log" >&2; fi
  sed "s/^/  $name: /" "$TMP/cmp.log" | grep -E "features|lse|compare:"
  # shellcheck disable=SC2086
  if ! "$T" make-target "$TMP/$name.orig" $make_target >"$TMP/mt.log" 2>&1; then bad "$name: make-target failed: $(cat "$TMP/mt.log")"; continue; fi
  expect_ok "$name unquantised teacher-dump" "$T" teacher-dump "$TMP/$name.orig" "$D/$tokens" "$TMP/$name.orig.safetensors" \
    --layers "$layer_ids" --topk "$topk" --device cpu
  if "$T" compare "$D/$reference" "$TMP/$name.orig.safetensors" --tol 1e-4 --only features,lse >"$TMP/orig.log" 2>&1; then
    bad "$name: the unquantised model passes the de-quantised reference: $(cat "$TMP/orig.log")"
  else ok; fi
  echo "  $name: the unquantised model vs that reference: $(grep '^features' "$TMP/orig.log" | awk '{print "features max abs err " $4 ", rel " $6}') (fixture log: $orig_err)"
done
[ "$n" -ge 2 ] && ok || bad "expected 2 quantised fixtures (partial, even), found $n"

# Refusals, on copies of the partial fixture.
source "$D/quant_qwen3_fp8_partial.args"
Q=$D/$model
mk() { rm -rf "${TMP:?}/${1:?}"; mkdir -p "$TMP/$1"; cp "$Q/config.json" "$Q/model.safetensors" "$TMP/$1/"; }
# config.json's quantization_config edited by a Python one-liner (json stdlib only)
qc() { /usr/bin/python3 - "$TMP/$1/config.json" "$2" <<'PYEOF'
import json, sys
p, expr = sys.argv[1], sys.argv[2]
c = json.load(open(p))
q = c["quantization_config"]
exec(expr)
json.dump(c, open(p, "w"))
PYEOF
}
# st_set FILE TENSOR KEY JSON: rewrite one header field of a tensor (same byte count), stdlib only
st_set() { /usr/bin/python3 - "$@" <<'PYEOF'
import json, struct, sys
path, name, key, value = sys.argv[1:5]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
h[name][key] = json.loads(value)
b = json.dumps(h).encode()
b += b" " * ((8 - len(b) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(b)) + b + raw[8 + n:])
PYEOF
}
# shellcheck disable=SC2317 # called through expect_fail
dump() { "$T" teacher-dump "$TMP/$1" "$D/$tokens" "$TMP/out.safetensors" --layers "$layer_ids" --topk "$topk" --device cpu; }

mk gptq; qc gptq 'q.clear(); q.update(quant_method="gptq", bits=4, group_size=128)'
expect_fail gptq "config.json: 'quantization_config.quant_method' is \"gptq\": not supported (supported: fp8 block-quantised, mxfp4)" dump gptq
mk awq; qc awq 'q["quant_method"] = "awq"'
expect_fail awq "'quantization_config.quant_method' is \"awq\": not supported" dump awq
mk ct; qc ct 'q["quant_method"] = "compressed-tensors"'
expect_fail compressed-tensors "'quantization_config.quant_method' is \"compressed-tensors\": not supported" dump ct
mk e5m2fmt; qc e5m2fmt 'q["fmt"] = "e5m2"'
expect_fail fmt-e5m2 "'quantization_config.fmt' is \"e5m2\": not supported (fp8 weights must be e4m3" dump e5m2fmt
mk static; qc static 'q["activation_scheme"] = "static"'
expect_fail static "'quantization_config.activation_scheme' is \"static\": not supported" dump static
mk noqc; qc noqc 'del c["quantization_config"]'
expect_fail no-quantization-config "is F8_E4M3 but config.json has no quantization_config" dump noqc
mk noscale; /usr/bin/python3 "$SRC/tests/cli/st_drop.py" "$Q/model.safetensors" "$TMP/noscale/model.safetensors" \
  model.layers.1.mlp.up_proj.weight_scale_inv
expect_fail missing-scale "tensor model.layers.1.mlp.up_proj.weight is F8_E4M3 but its scale model.layers.1.mlp.up_proj.weight_scale_inv is missing" dump noscale
mk block; qc block 'q["weight_block_size"] = [32, 48]'
expect_fail wrong-block "tensor model.layers.0.self_attn.q_proj.weight_scale_inv has shape \[2, 2\], want \[2, 1\] (weight \[48, 48\], scales ceil(out/32) x ceil(in/48))" dump block
mk shape; st_set "$TMP/shape/model.safetensors" model.layers.0.self_attn.q_proj.weight_scale_inv shape '[4, 1]'
expect_fail misshaped-scale "tensor model.layers.0.self_attn.q_proj.weight_scale_inv has shape \[4, 1\], want \[2, 2\]" dump shape
mk e5m2; st_set "$TMP/e5m2/model.safetensors" model.layers.0.self_attn.k_proj.weight dtype '"F8_E5M2"'
expect_fail f8-e5m2 "tensor model.layers.0.self_attn.k_proj.weight is F8_E5M2 (float8_e5m2): not supported" dump e5m2
finish
