#!/usr/bin/env bash
# test_teacher_reference.sh: the teacher forward against Hugging Face transformers.
# For every fixture in tests/reference/data/teacher_*.args (made by make_teacher_fixtures.py with
# torch + transformers, committed with their outputs), rebuild the identical random-weight model with
# `dflash_tool make-target`, run `teacher-dump` on the CPU, and compare every output with the
# transformers reference. Tolerance 1e-4 relative to each tensor's scale (its max |value|): fp32 on
# both sides, differing only in summation order over at most a few hundred terms (~1e-6 observed).
# The features are HF hidden_states[id + 1], as the dflash package feeds the drafter: for the last
# layer (id = L-1) after the final norm. Fixtures with the last id (qwen3_gqa, llama3_rope) also
# carry the old convention's features (the last block before the norm, teacher_*.prenorm.safetensors):
# our output must be far from them (the pre/post-norm gap is ~1 of the features' scale, 1e4 x the tolerance).
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
D=$SRC/tests/reference/data
n=0 nl=0
for args in "$D"/teacher_*.args; do
  [ -e "$args" ] || continue
  name=$(basename "$args" .args)
  unset make_target layer_ids topk tokens reference last_id prenorm
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
  [ -n "${prenorm:-}" ] || continue
  # The last layer (id L-1): the features passed above are post-final-norm; the old convention
  # (pre-norm, the reference's other file) must fail, both as a reference for our output and
  # against the reference itself (what a run with the old code would give, to ~1e-6).
  nl=$((nl + 1))
  [[ ",$layer_ids," == *",$last_id,"* ]] && ok || bad "$name: last_id $last_id is not among layer ids $layer_ids"
  for pair in "$D/$prenorm $TMP/$name.safetensors" "$D/$reference $D/$prenorm"; do
    # shellcheck disable=SC2086
    if "$T" compare $pair --tol 1e-4 --only features >"$TMP/old.log" 2>&1; then
      bad "$name: the pre-norm features of layer $last_id (old convention) pass: $(grep features "$TMP/old.log")"
    else ok; fi
  done
  echo "  $name: last layer $last_id, old (pre-norm) convention vs transformers: $(grep '^features' "$TMP/old.log" | awk '{print "max abs err " $4 ", rel " $6 " (tol 1e-4)"}')"
done
# The comparison can fail: features of the wrong layers must be caught.
source "$D/teacher_qwen3_gqa.args"
swapped=$(echo "$layer_ids" | tr ',' '\n' | tac | paste -sd,)
"$T" teacher-dump "$TMP/teacher_qwen3_gqa" "$D/$tokens" "$TMP/swapped.safetensors" --layers "$swapped" --topk "$topk" --device cpu 2>/dev/null
"$T" compare "$D/$reference" "$TMP/swapped.safetensors" --only features >/dev/null 2>&1 && bad "compare missed swapped layers" || ok
[ "$n" -ge 4 ] && ok || bad "expected at least 4 teacher fixtures, found $n"
[ "$nl" -ge 2 ] && ok || bad "expected at least 2 teacher fixtures with the last layer among their ids (Qwen3 and Llama), found $nl"

# make-target is deterministic (same bytes from the same arguments) and refuses bad values.
"$T" make-target "$TMP/a" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 1 --vocab 97 --seed 4 >/dev/null 2>&1
"$T" make-target "$TMP/b" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 1 --vocab 97 --seed 4 >/dev/null 2>&1
cmp -s "$TMP/a/model.safetensors" "$TMP/b/model.safetensors" && ok || bad "make-target is not deterministic"
expect_fail mt-kv "kv" "$T" make-target "$TMP/c" --arch qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 3 --vocab 97
expect_fail mt-exists "$TMP/a" "$T" make-target "$TMP/a" --arch qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 97
[ ! -e "$TMP/c" ] && ok || bad "a refused make-target left a directory"
finish
