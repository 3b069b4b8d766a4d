#!/usr/bin/env bash
# test_teacher_bad_models.sh: a target directory that cannot be used is refused at load with one
# line naming the reason: wrong shape, missing tensor, unsupported architecture, truncated shard,
# no model files, bad layer ids. A good one loads (the control).
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
finish
