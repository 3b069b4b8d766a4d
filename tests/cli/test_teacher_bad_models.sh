#!/usr/bin/env bash
# test_teacher_bad_models.sh: a target directory that cannot be used is refused at load with one
# line naming the reason: wrong shape, missing tensor, unsupported architecture, truncated shard,
# no model files, bad layer ids; for the Qwen3.5 hybrid a missing linear_attn tensor, a conv1d of the
# wrong shape, inconsistent head counts and bad layer_types; for the MoE targets a missing expert
# (per expert, fused, the wrapper's, the shared expert's gate), a router or experts of the wrong
# shape, a dense layer made sparse, num_experts_per_tok > num_experts, a bad mlp_only_layers entry.
# Good ones load (the controls; the two expert layouts give the same outputs).
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
sed -i 's/Qwen3ForCausalLM/Phi3ForCausalLM/' "$TMP/arch/config.json"
expect_fail unsupported-arch "Phi3ForCausalLM" \
  "$T" teacher-dump "$TMP/arch" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu

# weights past num_hidden_layers: refused, unless they are the multi-token-prediction layers the
# config declares (num_nextn_predict_layers, as DeepSeek-V3 and GLM-4.5 publish them), which are
# not read: the one-layer model then equals the two-layer one's first layer
cp -r "$TMP/good" "$TMP/extra"
sed -i 's/"num_hidden_layers":[[:space:]]*2/"num_hidden_layers": 1/' "$TMP/extra/config.json"
expect_fail extra-layer "the weights hold layer 1 (tensor model.layers.1." \
  "$T" teacher-dump "$TMP/extra" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
sed -i 's/"num_hidden_layers": 1/"num_hidden_layers": 1, "num_nextn_predict_layers": 1/' "$TMP/extra/config.json"
expect_ok mtp-layer "$T" teacher-dump "$TMP/extra" "$TMP/tok.json" "$TMP/mtp.safetensors" --layers 0 --topk 4 --device cpu
sed -i 's/"num_nextn_predict_layers": 1/"num_nextn_predict_layers": -1/' "$TMP/extra/config.json"
expect_fail mtp-negative "'num_nextn_predict_layers' must be in" \
  "$T" teacher-dump "$TMP/extra" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu

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

# ---- the mixture-of-experts targets (SPEC §2.2): Qwen3-MoE (6 experts, top 2, both layers sparse)
make_moe() { # make_moe DIR [extra make-target args]
  local d=$1; shift
  "$T" make-target "$d" --arch qwen3_moe --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 48 \
    --vocab 101 --experts 6 --experts-per-tok 2 --moe-intermediate 16 --seed 5 "$@" >/dev/null 2>&1 || bad "make-target $d failed"
}
# a copy of model FROM without tensor NAME (one file): dropped NAME FROM NAME
dropped() {
  mkdir -p "$TMP/$1"
  cp "$2/config.json" "$TMP/$1/"
  $PY "$SRC/tests/cli/st_drop.py" "$2/model.safetensors" "$TMP/$1/model.safetensors" "$3"
}
make_moe "$TMP/mgood"
expect_ok moe-good "$T" teacher-dump "$TMP/mgood" "$TMP/tok.json" "$TMP/mgood.safetensors" --layers 0,1 --topk 4 --device cpu
# the fused layout (experts.gate_up_proj / down_proj) holds the same weights: the same outputs
make_moe "$TMP/mfused" --experts-layout fused
expect_ok moe-fused-good "$T" teacher-dump "$TMP/mfused" "$TMP/tok.json" "$TMP/mfused.safetensors" --layers 0,1 --topk 4 --device cpu
expect_ok moe-layouts-agree "$T" compare "$TMP/mgood.safetensors" "$TMP/mfused.safetensors" --tol 1e-6
# a dense layer among sparse ones (mlp_only_layers), and the Qwen3.5-MoE layouts
make_moe "$TMP/mdense" --mlp-only 0
expect_ok moe-mlp-only-good "$T" teacher-dump "$TMP/mdense" "$TMP/tok.json" "$TMP/out.safetensors" --layers 0,1 --topk 4 --device cpu
# (the hybrid's shape as make_hybrid's, no dense MLP: experts fused, as published)
"$T" make-target "$TMP/h5moe" --arch qwen3_5_moe --layers 4 --hidden 32 --heads 2 --kv-heads 1 --head-dim 16 \
  --vocab 101 --lin-k-heads 2 --lin-v-heads 4 --lin-k-dim 8 --lin-v-dim 8 --conv-kernel 4 --experts 6 \
  --experts-per-tok 2 --moe-intermediate 16 --shared-intermediate 24 --seed 5 >/dev/null 2>&1 || bad "make-target h5moe failed"
expect_ok moe35-good "$T" teacher-dump "$TMP/h5moe" "$TMP/tok.json" "$TMP/out.safetensors" --layers 0,3 --topk 4 --device cpu
"$T" make-target "$TMP/h5moevl" --arch qwen3_5_moe_vl --layers 4 --hidden 32 --heads 2 --kv-heads 1 --head-dim 16 \
  --vocab 101 --lin-k-heads 2 --lin-v-heads 4 --lin-k-dim 8 --lin-v-dim 8 --experts 6 --experts-per-tok 3 \
  --moe-intermediate 16 --shared-intermediate 24 --experts-layout per-expert --tie --seed 5 >/dev/null 2>&1 \
  || bad "make-target h5moevl failed"
expect_ok moe35-vl-good "$T" teacher-dump "$TMP/h5moevl" "$TMP/tok.json" "$TMP/out.safetensors" --layers 1,2 --topk 4 --device cpu

# a missing expert tensor: per expert, fused, the wrapper's, the shared expert's gate
dropped mmissing "$TMP/mgood" model.layers.1.mlp.experts.3.up_proj.weight
expect_fail moe-missing-expert "missing tensor model.layers.1.mlp.experts.3.up_proj.weight" \
  "$T" teacher-dump "$TMP/mmissing" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
dropped mfmissing "$TMP/mfused" model.layers.0.mlp.experts.down_proj
expect_fail moe-missing-fused "missing tensor model.layers.0.mlp.experts.down_proj" \
  "$T" teacher-dump "$TMP/mfmissing" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
mkdir -p "$TMP/h5vlmissing"
cp "$TMP/h5moevl/config.json" "$TMP/h5vlmissing/"
$PY "$SRC/tests/cli/st_drop.py" "$TMP/h5moevl/model.safetensors" "$TMP/h5vlmissing/model.safetensors" \
  model.language_model.layers.2.mlp.experts.5.down_proj.weight
expect_fail moe35-vl-missing-expert "missing tensor model.language_model.layers.2.mlp.experts.5.down_proj.weight" \
  "$T" teacher-dump "$TMP/h5vlmissing" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
dropped h5missing "$TMP/h5moe" model.layers.0.mlp.shared_expert_gate.weight
expect_fail moe35-missing-shared-gate "missing tensor model.layers.0.mlp.shared_expert_gate.weight" \
  "$T" teacher-dump "$TMP/h5missing" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0 --device cpu
# config.json makes a dense layer sparse: its router is not there
edited_fails moe-not-mlp-only "$TMP/mdense" 'c["mlp_only_layers"] = []' "missing tensor model.layers.0.mlp.gate.weight"
# shapes config.json does not imply: a router for 6 experts where it says 5 (the per-expert
# tensors of experts 0-4 fit), experts of width 16 where it says 12, fused tensors for 6 experts
edited_fails moe-router-shape "$TMP/mgood" 'c["num_experts"] = 5' \
  "tensor model.layers.0.mlp.gate.weight has shape \[6, 32\], config.json implies \[5, 32\]"
edited_fails moe-expert-width "$TMP/mgood" 'c["moe_intermediate_size"] = 12' \
  "tensor model.layers.0.mlp.experts.0.gate_proj.weight has shape \[16, 32\], config.json implies \[12, 32\]"
edited_fails moe35-experts-count "$TMP/h5moe" 't["num_experts"] = 5' "config.json implies \[5, "
# config errors, each naming the field
edited_fails moe-topk-over-experts "$TMP/mgood" 'c["num_experts_per_tok"] = 7' \
  "'num_experts_per_tok' 7 is more than 'num_experts' 6"
edited_fails moe-mlp-only-bad "$TMP/mgood" 'c["mlp_only_layers"] = [2]' \
  "'mlp_only_layers\[0\]' is 2: want a layer index in \[0, 2)"
edited_fails moe-sparse-step-bad "$TMP/mgood" 'c["decoder_sparse_step"] = 0' "'decoder_sparse_step' must be positive, got 0"
edited_fails moe35-vl-topk-over-experts "$TMP/h5moevl" 't["num_experts_per_tok"] = 9' \
  "text_config: 'num_experts_per_tok' 9 is more than 'num_experts' 6"
[ ! -e "$TMP/o.safetensors" ] && ok || bad "a failed teacher-dump left an output file"
finish
