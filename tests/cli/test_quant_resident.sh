#!/usr/bin/env bash
# shellcheck disable=SC2154  # layer_ids, topk, tokens, model come from the sourced NAME.args
# test_quant_resident.sh: teacher.quant_weights (docs/teacher.md, "Quantised checkpoints"): a
# quantised target's weights kept on the device as stored and de-quantised a layer at a time into
# one scratch (resident, the default) give the same outputs, bit for bit, as the weights de-quantised
# at load (dequantize), in a smaller weight arena. On the checkpoints transformers saved
# (tests/reference/data/hf/: qwen3_fp8, FP8 blocks with partial last blocks; deepseek_v3_fp8, FP8
# experts stored per expert, stacked at load; gpt_oss_mxfp4, MXFP4 experts), on the CPU, and on CUDA
# where a device is usable (a GPU, or the emulator build: ctest --test-dir build-emu -R quant_resident):
#   1. teacher-dump --quant-weights resident vs dequantize: the output files byte-identical (features,
#      top-k, LSE, every logit of the last positions); the weights' device bytes each run reports,
#      resident below dequantize on the CPU (fp32 weights; on CUDA the fixtures' hundreds of tiny
#      buffers, each aligned to 256 bytes, can outweigh the saving: the bytes are shown), and neither
#      above what --plan counts for the same target (its teacher_total_bytes row holds the weights);
#   2. make-data (the KV-cached decoder; no option of its own: the environment variable
#      DFLASH_QUANT_WEIGHTS) with each setting: the same tokens, offsets and loss masks;
#   3. --plan: "weights X (quantised, resident) + layer scratch Y" and fewer bytes than dequantize;
#   4. what config.json says and the files disagree on: a tensor planned plain but stored FP8
#      (modules_to_not_convert names the MLP) is de-quantised at load, outputs still identical; a bf16
#      checkpoint whose config.json declares fp8 is refused under resident in one line naming the
#      tensor (the plan counted it at its FP8 size) and loads under dequantize; a bad setting is
#      refused in one line.
source "$DFLASH_SRC/tests/cli/lib.sh"
D=$SRC/tests/reference/data/hf
PY=/usr/bin/python3
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }
devices=cpu
if "$R" --mode check --device cuda >/dev/null 2>&1; then devices="cpu cuda"; fi

# weights_bytes FILE: the "weights X = N bytes" of teacher-dump's last line
weights_bytes() { sed -n 's/.*; weights [^=]* = \([0-9]*\) bytes.*/\1/p' "$1" | tail -n1; }

cat >"$TMP/same_h5.py" <<'PYEOF'
import sys
import h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
for k in ("tokens", "offsets", "loss_mask"):
    x, y = a[k][:], b[k][:]
    if x.shape != y.shape or not np.array_equal(x, y):
        sys.exit(f"{k} differs")
print(f"{len(a['offsets']) - 1} samples, {len(a['tokens'])} tokens equal")
PYEOF

for dev in $devices; do
  for name in qwen3_fp8 deepseek_v3_fp8 gpt_oss_mxfp4; do
    unset layer_ids topk tokens model
    # shellcheck source=/dev/null
    source "$D/$name.args"
    M=$D/$model
    for mode in resident dequantize; do
      expect_ok "$name $dev teacher-dump $mode" "$T" teacher-dump "$M" "$D/$tokens" "$TMP/$name.$dev.$mode.safetensors" \
        --layers "$layer_ids" --topk "$topk" --device "$dev" --quant-weights "$mode"
      cp "$TMP/err" "$TMP/$name.$dev.$mode.log"
    done
    if cmp -s "$TMP/$name.$dev.resident.safetensors" "$TMP/$name.$dev.dequantize.safetensors"; then ok
    else bad "$name $dev: teacher-dump's outputs differ between resident and dequantize"
      "$T" compare "$TMP/$name.$dev.dequantize.safetensors" "$TMP/$name.$dev.resident.safetensors" >&2; fi
    r=$(weights_bytes "$TMP/$name.$dev.resident.log"); q=$(weights_bytes "$TMP/$name.$dev.dequantize.log")
    if [ -z "$r" ] || [ -z "$q" ]; then bad "$name $dev: no weights line in teacher-dump's log: $(tail -n1 "$TMP/$name.$dev.resident.log")"
    elif [ "$dev" = cpu ] && [ "$r" -ge "$q" ]; then bad "$name $dev: the resident weights take $r bytes, not fewer than dequantize's $q"
    else ok; fi
    grep -o 'layer scratch [^)]*' "$TMP/$name.$dev.resident.log" | head -n1 >"$TMP/scratch" || true
    echo "  $name $dev: outputs identical; weights $r bytes resident ($(cat "$TMP/scratch")) vs $q de-quantised at load"
    # the plan of the same target on the same device counts at least the arena's weights
    for mode in resident dequantize; do
      "$R" --plan --mode dump-features --device "$dev" --target.path="$M" --target.layer_ids="$layer_ids" \
        --teacher.topk="$topk" --teacher.max_tokens=64 --data.path="$TMP/none.h5" --features.dir="$TMP/feat" \
        --teacher.quant_weights="$mode" >"$TMP/plan.$mode" 2>&1 || true
    done
    if grep -q "(quantised, resident) + layer scratch" "$TMP/plan.resident" && \
       ! grep -q "quantised, resident" "$TMP/plan.dequantize"; then ok
    else bad "$name $dev --plan: no 'weights X (quantised, resident) + layer scratch Y' line for resident only:"
      cat "$TMP/plan.resident" >&2; fi
    tr=$(sed -n 's/^teacher_total_bytes //p' "$TMP/plan.resident"); td=$(sed -n 's/^teacher_total_bytes //p' "$TMP/plan.dequantize")
    if [ -n "$tr" ] && [ -n "$td" ] && [ -n "$r" ] && [ "$tr" -ge "$r" ] && [ "$td" -ge "$q" ]; then ok
    else bad "$name $dev --plan: teacher_total_bytes resident '$tr' / dequantize '$td' below the arenas' weights $r / $q"; fi
    echo "  $name $dev --plan:$(grep -m1 '^  target weights' "$TMP/plan.resident" | tr -s ' ') (dequantize:$(grep -m1 '^  target weights' "$TMP/plan.dequantize" | tr -s ' ' | sed 's/^ target weights//'))"

    # 2. the decoder
    fx=$D/$name.decode.json
    glen=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["gen_len"])' "$fx")
    for mode in resident dequantize; do
      DFLASH_QUANT_WEIGHTS=$mode expect_ok "$name $dev make-data $mode" "$T" make-data "$TMP/$name.$dev.$mode.h5" \
        --target "$M" --prompts "$fx" --gen-len "$glen" --batch 3 --device "$dev"
    done
    if $PY "$TMP/same_h5.py" "$TMP/$name.$dev.resident.h5" "$TMP/$name.$dev.dequantize.h5" >"$TMP/py.out" 2>&1; then ok
      echo "  $name $dev make-data: resident = dequantize: $(cat "$TMP/py.out")"
    else bad "$name $dev make-data: resident and dequantize differ: $(cat "$TMP/py.out")"; fi
  done
done

# 4. config.json and the files disagreeing
source "$D/qwen3_fp8.args"
mkq() { rm -rf "${TMP:?}/${1:?}"; mkdir -p "$TMP/$1"; cp "$D/qwen3_fp8"/* "$TMP/$1/"; }
qc() { "$PY" - "$TMP/$1/config.json" "$2" <<'PYEOF'
import json, sys
p, expr = sys.argv[1], sys.argv[2]
c = json.load(open(p))
q = c.setdefault("quantization_config", {})
exec(expr)
json.dump(c, open(p, "w"))
PYEOF
}
dump() { "$T" teacher-dump "$TMP/$1" "$D/$tokens" "$TMP/$1.$2.safetensors" --layers "$layer_ids" --topk "$topk" --device cpu \
  --quant-weights "$2"; }
mkq skipmlp; qc skipmlp 'q["modules_to_not_convert"] = ["mlp"]'
expect_ok "plain-planned FP8 MLP resident" dump skipmlp resident
cp "$TMP/err" "$TMP/skip.log"
expect_ok "plain-planned FP8 MLP dequantize" dump skipmlp dequantize
if cmp -s "$TMP/skipmlp.resident.safetensors" "$TMP/skipmlp.dequantize.safetensors" && \
   cmp -s "$TMP/skipmlp.resident.safetensors" "$TMP/qwen3_fp8.cpu.resident.safetensors"; then ok
else bad "modules_to_not_convert [mlp]: the outputs differ"; fi
s=$(weights_bytes "$TMP/skip.log"); r=$(weights_bytes "$TMP/qwen3_fp8.cpu.resident.log"); q=$(weights_bytes "$TMP/qwen3_fp8.cpu.dequantize.log")
[ -n "$s" ] && [ "$s" -gt "$r" ] && [ "$s" -lt "$q" ] && ok || bad "modules_to_not_convert [mlp]: weights $s bytes, want between $r and $q"
echo "  modules_to_not_convert [mlp]: the MLP de-quantised at load, the attention resident: weights $s bytes (all resident $r, none $q)"

"$T" make-target "$TMP/bf16" --arch qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
qc bf16 'q.update(quant_method="fp8", weight_block_size=[16, 16])'
echo '{"sequences": [[1, 2, 3, 4]]}' >"$TMP/toks.json"
bdump() { "$T" teacher-dump "$TMP/bf16" "$TMP/toks.json" "$TMP/bf16.$1.safetensors" --layers 0 --topk 4 --device cpu --quant-weights "$1"; }
expect_fail "fp8 config, bf16 files, resident" \
  "tensor model.layers.0.self_attn.q_proj.weight is stored BF16, but config.json's quantization_config (fp8 (e4m3, blocks \[16, 16\])) makes it a quantised weight, which teacher.quant_weights resident keeps as stored and the memory plans count so" \
  bdump resident
expect_ok "fp8 config, bf16 files, dequantize" bdump dequantize
expect_fail "bad --quant-weights" "teacher-dump: --quant-weights is \"fp8\": want resident" bdump fp8
DFLASH_QUANT_WEIGHTS=bf16 expect_fail "bad DFLASH_QUANT_WEIGHTS" \
  "the environment variable DFLASH_QUANT_WEIGHTS is \"bf16\": want resident" \
  "$T" make-data "$TMP/x.h5" --target "$TMP/skipmlp" --samples 1 --prompt-len 3 --gen-len 2 --device cpu
expect_fail "bad teacher.quant_weights" "teacher.quant_weights" "$R" --plan --target.path="$TMP/skipmlp" --teacher.quant_weights=fp8
finish
