#!/usr/bin/env bash
# test_teacher_bad_models.sh: a target directory that cannot be used is refused at load with one
# line naming the reason: wrong shape, missing tensor, unsupported architecture, truncated shard,
# no model files, bad layer ids; for the Qwen3.5 hybrid a missing linear_attn tensor, a conv1d of the
# wrong shape, inconsistent head counts and bad layer_types. A good one loads (the control).
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
PY=/usr/bin/python3
echo '{"sequences": [[1, 2, 3, 4, 5], [6, 7]]}' >"$TMP/tok.json"
make_model() { # make_model DIR [extra make-target args]
  local d=$1; shift
  "$T" make-target "$d" --arch qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 48 \
    --vocab 101 --seed 5 "$@" >/dev/null 2>&1 || bad "make-target $d failed"
}

make_model "$TMP/good"
expect_ok good "$T" teacher-dump "$TMP/good" "$TMP/tok.json" "$TMP/out.safetensors" --layers 0,1 --topk 4 --device cpu

# a shape that config.json does not imply
cp -r "$TMP/good" "$TMP/shape"
sed -i 's/"intermediate_size":[[:space:]]*48/"intermediate_size": 40/' "$TMP/shape/config.json"
expect_fail wrong-shape "tensor model.layers.0.mlp.gate_proj.weight has shape \[48, 32\], config.json implies \[40, 32\]" \
  "$T" teacher-dump "$TMP/shape" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu

# a missing tensor
mkdir -p "$TMP/missing"
cp "$TMP/good/config.json" "$TMP/missing/"
$PY "$SRC/tests/cli/st_drop.py" "$TMP/good/model.safetensors" "$TMP/missing/model.safetensors" model.layers.1.self_attn.k_norm.weight
expect_fail missing-tensor "missing tensor model.layers.1.self_attn.k_norm.weight" \
  "$T" teacher-dump "$TMP/missing" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu

# an architecture we do not run
cp -r "$TMP/good" "$TMP/arch"
sed -i 's/Qwen3ForCausalLM/MistralForCausalLM/' "$TMP/arch/config.json"
expect_fail unsupported-arch "MistralForCausalLM" \
  "$T" teacher-dump "$TMP/arch" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu

# a truncated shard of a sharded checkpoint
make_model "$TMP/sharded" --shards 2
expect_ok sharded-good "$T" teacher-dump "$TMP/sharded" "$TMP/tok.json" "$TMP/o2.safetensors" --layers 0,1 --topk 4 --device cpu
if [ -f "$TMP/sharded/model-00002-of-00002.safetensors" ]; then
  f="$TMP/sharded/model-00002-of-00002.safetensors"
  truncate -s $(( $(stat -c %s "$f") - 100 )) "$f"
  expect_fail truncated-shard "model-00002-of-00002.safetensors" \
    "$T" teacher-dump "$TMP/sharded" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
else
  bad "make-target --shards 2 did not write model-00002-of-00002.safetensors"
fi

# no weights at all, no directory at all
mkdir -p "$TMP/empty"
cp "$TMP/good/config.json" "$TMP/empty/"
expect_fail no-weights "model.safetensors" "$T" teacher-dump "$TMP/empty" "$TMP/tok.json" "$TMP/o.safetensors" --device cpu
expect_fail no-dir "config.json" "$T" teacher-dump "$TMP/nowhere" "$TMP/tok.json" "$TMP/o.safetensors" --device cpu

# layer ids outside the target, top-k too large, tokens outside the vocabulary
expect_fail bad-layer "target layer id 2 is outside \[0, 2)" \
  "$T" teacher-dump "$TMP/good" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0,2 --device cpu
expect_fail bad-topk "top-k = 500 is outside \[1, 101\]" \
  "$T" teacher-dump "$TMP/good" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --topk 500 --device cpu
echo '{"sequences": [[1, 2, 101]]}' >"$TMP/badtok.json"
expect_fail bad-token "id 101, outside the target vocabulary" \
  "$T" teacher-dump "$TMP/good" "$TMP/badtok.json" "$TMP/o.safetensors" --layers 0 --device cpu
[ ! -e "$TMP/o.safetensors" ] && ok || bad "a failed teacher-dump left an output file"
# ---- the Qwen3.5 hybrid (SPEC §2.1): Gated DeltaNet layers 0-2, full attention layer 3
make_hybrid() { # make_hybrid DIR [extra make-target args]
  local d=$1; shift
  "$T" make-target "$d" --arch qwen3_5 --layers 4 --hidden 32 --heads 2 --kv-heads 1 --head-dim 16 \
    --intermediate 48 --vocab 101 --lin-k-heads 2 --lin-v-heads 4 --lin-k-dim 8 --lin-v-dim 8 --conv-kernel 4 \
    --seed 5 "$@" >/dev/null 2>&1 || bad "make-target $d failed"
}
# edit_config DIR PYTHON: run PYTHON on config.json's dict `c` (the text keys: `t`), write it back
edit_config() {
  $PY - "$1/config.json" "$2" <<'PYEOF'
import json, sys
path, code = sys.argv[1:3]
c = json.load(open(path))
t = c.get("text_config", c)
exec(code)
json.dump(c, open(path, "w"), indent=2)
PYEOF
}
make_hybrid "$TMP/hgood"
expect_ok hybrid-good "$T" teacher-dump "$TMP/hgood" "$TMP/tok.json" "$TMP/out.safetensors" --layers 0,3 --topk 4 --device cpu
# the multimodal wrapper: text under model.language_model., model.visual.* and mtp.* to skip
make_hybrid "$TMP/hvl" --arch qwen3_5_vl --tie
expect_ok hybrid-vl-good "$T" teacher-dump "$TMP/hvl" "$TMP/tok.json" "$TMP/out.safetensors" --layers 1,2 --topk 4 --device cpu

# a missing linear_attn tensor, in both layouts
mkdir -p "$TMP/hmissing" "$TMP/hvlmissing"
cp "$TMP/hgood/config.json" "$TMP/hmissing/"
$PY "$SRC/tests/cli/st_drop.py" "$TMP/hgood/model.safetensors" "$TMP/hmissing/model.safetensors" model.layers.0.linear_attn.in_proj_a.weight
expect_fail hybrid-missing "missing tensor model.layers.0.linear_attn.in_proj_a.weight" \
  "$T" teacher-dump "$TMP/hmissing" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
cp "$TMP/hvl/config.json" "$TMP/hvlmissing/"
$PY "$SRC/tests/cli/st_drop.py" "$TMP/hvl/model.safetensors" "$TMP/hvlmissing/model.safetensors" model.language_model.layers.1.linear_attn.A_log
expect_fail hybrid-vl-missing "missing tensor model.language_model.layers.1.linear_attn.A_log" \
  "$T" teacher-dump "$TMP/hvlmissing" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu

# edited_fails NAME FROM PYTHON PATTERN: a copy of model FROM with config.json edited by PYTHON is
# refused with PATTERN
edited_fails() {
  cp -r "$2" "$TMP/$1"
  edit_config "$TMP/$1" "$3"
  expect_fail "$1" "$4" "$T" teacher-dump "$TMP/$1" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
}
# a conv1d of the wrong shape: the weights have kernel 4, config.json says 3 (only conv1d depends on it)
edited_fails hybrid-conv-shape "$TMP/hgood" 't["linear_conv_kernel_dim"] = 3' \
  "tensor model.layers.0.linear_attn.conv1d.weight has shape \[64, 1, 4\], config.json implies \[64, 1, 3\]"
# config errors, each naming the field (the wrapper's under text_config, and the message says so)
edited_fails hybrid-head-ratio "$TMP/hgood" 't["linear_num_value_heads"] = 3' \
  "'linear_num_value_heads' 3 is not a multiple of 'linear_num_key_heads' 2"
edited_fails hybrid-types-length "$TMP/hgood" 't["layer_types"] = ["linear_attention"] * 2 + ["full_attention"]' \
  "'layer_types' has 3 entries for 4 layers"
edited_fails hybrid-types-unknown "$TMP/hgood" 't["layer_types"] = ["linear_attention", "mamba"] + ["full_attention"] * 2' \
  "'layer_types\[1\]' is \"mamba\""
edited_fails hybrid-vl-head-ratio "$TMP/hvl" 't["linear_num_value_heads"] = 5' \
  "text_config: 'linear_num_value_heads' 5 is not a multiple of 'linear_num_key_heads' 2"
[ ! -e "$TMP/o.safetensors" ] && ok || bad "a failed teacher-dump left an output file"
finish
