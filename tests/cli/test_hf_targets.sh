#!/usr/bin/env bash
# shellcheck disable=SC2154  # layer_ids, topk, tokens, ... come from the sourced NAME.args
# test_hf_targets.sh: the C teacher on checkpoints written by transformers itself, against transformers.
# tests/reference/make_hf_fixtures.py (torch + transformers, not run here) builds small random-weight
# models of each target family (Qwen2, Mistral, Gemma3 text and multimodal, Gemma4, gpt-oss with bf16
# and MXFP4 experts, DeepSeek-V3 with and without q_lora and with FP8 block-quantised linears,
# GLM-4.5-MoE, Qwen3 FP8), saves them with save_pretrained (the quantised ones rewritten in the
# published formats), and commits, under tests/reference/data/hf/:
#   NAME/                  the model directory (config.json, model.safetensors, generation_config.json)
#   NAME.args              layer_ids, topk, tokens, reference, model, class, dtype, quant, tol
#   NAME.tokens.json       the sequences (teacher-dump's input)
#   NAME.ref.safetensors   transformers' features / top-k / lse / last-position logits on them
#   NAME.decode.json       three prompts and transformers' greedy continuations (generate, KV cache)
# For every NAME.args: teacher-dump on the directory as it is (--device cpu) and compare with the
# reference at the fixture's tolerance (relative to each tensor's max |value|; fp32 on both sides).
# For every NAME.decode.json: make-data --prompts on the same directory; every generated token must
# equal transformers'. One line per fixture and check says what passed or why not. A family the C
# teacher does not read yet fails here (its loader's error line is shown): that is the point.
# Needs python3 with numpy + h5py only (no torch).
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
D=$SRC/tests/reference/data/hf
# Debian's python3 has numpy and h5py; a python3 earlier on PATH (pyenv) may not.
PY=/usr/bin/python3
if ! $PY -c 'import h5py, numpy' 2>/dev/null; then
  echo "test_hf_targets: $PY lacks h5py/numpy (scripts/install-deps.sh installs python3-h5py)" >&2
  exit 1
fi

# ---------------------------------------------------------------- the forward (teacher-dump)
n=0
for args in "$D"/*.args; do
  [ -e "$args" ] || continue
  name=$(basename "$args" .args)
  unset layer_ids topk tokens reference model class dtype quant tol
  # shellcheck source=/dev/null
  source "$args"
  n=$((n + 1))
  what="$name ($class, $dtype$([ "${quant:-none}" = none ] || echo ", $quant"))"
  if [ ! -d "$D/$model" ]; then bad "$what: no model directory $D/$model"; continue; fi
  if ! "$T" teacher-dump "$D/$model" "$D/$tokens" "$TMP/$name.safetensors" --layers "$layer_ids" --topk "$topk" \
       --device cpu >"$TMP/td.out" 2>"$TMP/td.err"; then
    bad "$what: teacher-dump failed: $(first_error "$TMP/td.err")"
    continue
  fi
  if "$T" compare "$D/$reference" "$TMP/$name.safetensors" --tol "$tol" \
       --only features,topk_idx,topk_val,lse,logits_last >"$TMP/cmp.log" 2>&1; then
    ok
    echo "hf $what: forward = transformers (tol $tol): $(grep -E '^(features|lse)' "$TMP/cmp.log" | awk '{printf "%s rel %s; ", $1, $(NF-2)}')"
  else
    bad "$what: differs from transformers (tol $tol):"
    sed "s/^/  $name: /" "$TMP/cmp.log" >&2
  fi
done
[ "$n" -ge 1 ] && ok || bad "expected fixtures $D/*.args, found none"

# ---------------------------------------------------------------- the decode (make-data)
# the check of tests/cli/test_make_data.sh (tests/cli/decode_check.py): the h5 file's samples are the prompts + transformers' tokens
nd=0
for fx in "$D"/*.decode.json; do
  [ -e "$fx" ] || continue
  name=$(basename "$fx" .decode.json)
  nd=$((nd + 1))
  decode_fixture "$fx"
  what="$name ($class)"
  if ! "$T" make-data "$TMP/$name.h5" --target "$D/$model" --prompts "$fx" --gen-len "$glen" --batch 3 \
       --device cpu >"$TMP/md.out" 2>"$TMP/md.err"; then
    bad "$what: make-data failed: $(first_error "$TMP/md.err")"
    continue
  fi
  if $PY "$SRC/tests/cli/decode_check.py" "$fx" "$TMP/$name.h5" >"$TMP/py.out" 2>&1; then
    ok
    echo "hf $what: decode = transformers: $(cat "$TMP/py.out")"
  else
    bad "$what: make-data's greedy decode differs from transformers: $(tail -n1 "$TMP/py.out")"
  fi
done
[ "$nd" -ge 1 ] && ok || bad "expected fixtures $D/*.decode.json, found none"
finish
