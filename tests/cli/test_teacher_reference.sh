#!/usr/bin/env bash
# test_teacher_reference.sh: the teacher forward against Hugging Face transformers.
# For every fixture in tests/reference/data/teacher_*.args (made by make_teacher_fixtures.py with
# torch + transformers, committed with their outputs), rebuild the identical random-weight model with
# `dflash_tool make-target`, run `teacher-dump` on the CPU, and compare every output with the
# transformers reference. Tolerance 1e-4 relative to each tensor's scale (its max |value|): fp32 on
# both sides, differing only in summation order over at most a few hundred terms (~1e-6 observed).
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
D=$SRC/tests/reference/data
n=0
for args in "$D"/teacher_*.args; do
  [ -e "$args" ] || continue
  name=$(basename "$args" .args)
  unset make_target layer_ids topk tokens reference
  source "$args"
  n=$((n + 1))
  # shellcheck disable=SC2086
  if ! "$T" make-target "$TMP/$name" $make_target >"$TMP/mt.log" 2>&1; then bad "$name: make-target failed: $(cat "$TMP/mt.log")"; continue; fi
  expect_ok "$name teacher-dump" "$T" teacher-dump "$TMP/$name" "$D/$tokens" "$TMP/$name.safetensors" \
    --layers "$layer_ids" --topk "$topk" --device cpu
  if "$T" compare "$D/$reference" "$TMP/$name.safetensors" --tol 1e-4 \
       --only features,topk_idx,topk_val,lse,logits_last >"$TMP/cmp.log" 2>&1; then ok
  else bad "$name differs from transformers:"; cat "$TMP/cmp.log" >&2; fi
  sed "s/^/  $name: /" "$TMP/cmp.log" | grep -E "features|lse|compare:"
done
# The comparison can fail: features of the wrong layers must be caught.
source "$D/teacher_qwen3_gqa.args"
"$T" teacher-dump "$TMP/teacher_qwen3_gqa" "$D/$tokens" "$TMP/swapped.safetensors" --layers 1,0 --topk "$topk" --device cpu 2>/dev/null
"$T" compare "$D/$reference" "$TMP/swapped.safetensors" --only features >/dev/null 2>&1 && bad "compare missed swapped layers" || ok
[ "$n" -ge 4 ] && ok || bad "expected at least 4 teacher fixtures, found $n"

# make-target is deterministic (same bytes from the same arguments) and refuses bad values.
"$T" make-target "$TMP/a" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 1 --vocab 97 --seed 4 >/dev/null 2>&1
"$T" make-target "$TMP/b" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 1 --vocab 97 --seed 4 >/dev/null 2>&1
cmp -s "$TMP/a/model.safetensors" "$TMP/b/model.safetensors" && ok || bad "make-target is not deterministic"
expect_fail mt-kv "kv" "$T" make-target "$TMP/c" --arch qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 3 --vocab 97
expect_fail mt-exists "$TMP/a" "$T" make-target "$TMP/a" --arch qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 97
[ ! -e "$TMP/c" ] && ok || bad "a refused make-target left a directory"
finish
