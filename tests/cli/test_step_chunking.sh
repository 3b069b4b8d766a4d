#!/usr/bin/env bash
# test_step_chunking.sh: the anchor-chunked step gives the same loss and gradients however it is
# chunked (1, 2, several, all anchors per chunk; loss mode rows or tiles, budgets that force each),
# and its measured memory stays flat while the anchors per step grow 1 -> 4 -> 16 times; the
# evaluation (student_eval: forward only) gives the step's loss terms and touches no gradient; the
# same (chunking, flat memory) for a DFlash2 drafter, whose selector adds two V x r codebooks.
# Tolerance: 1e-5 relative to each tensor's scale — the chunkings differ only in fp32 summation order.
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
PY=/usr/bin/python3
"$PY" -c "import numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks numpy"; exit 1; }

for variant in full sliding; do
  extra=()
  slots=3
  [ "$variant" = sliding ] && extra=(--sliding 5 --block 5 --kv-heads 1) && slots=4
  "$PY" "$SRC/tests/cli/make_step_input.py" "$TMP/$variant" --anchors 12 "${extra[@]}" || bad "make_step_input $variant"
  in=$TMP/$variant.in.safetensors
  cfg=$TMP/$variant.config.json
  expect_ok "$variant ref" "$T" step-dump "$in" "$cfg" "$TMP/ref.safetensors" --device cpu --chunk-anchors 12 --loss-mode rows
  # the evaluation (forward only, in chunks of 5): the same loss terms to fp32 summation order, and
  # no gradient at all (every grad.* tensor exactly 0)
  expect_ok "$variant eval" "$T" step-dump "$in" "$cfg" "$TMP/eval.safetensors" --device cpu --chunk-anchors 5 --eval
  "$PY" - "$TMP/ref.safetensors" "$TMP/eval.safetensors" <<'PYEOF' && ok || bad "$variant: the evaluation's loss terms differ from the step's, or it left a gradient"
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
from st_read import st_load
ref, ev = st_load(sys.argv[1]), st_load(sys.argv[2])
for k in ("loss", "ce", "kl", "cap"):
    assert abs(float(ev[k][0]) - float(ref[k][0])) <= 1e-5 * max(1.0, abs(float(ref[k][0]))), k
grads = [k for k in ev if k.startswith("grad.")]
assert grads and all(not ev[k].any() for k in grads)
assert any(ref[k].any() for k in grads)  # the step itself has gradients: the check can fail
PYEOF
  for opts in "--chunk-anchors 1" "--chunk-anchors 2" "--chunk-anchors 5" "--chunk-anchors 12 --loss-mode tiles --vocab-tile 50" \
              "--chunk-anchors 3 --loss-mode tiles --vocab-tile 1" "--chunk-anchors 4 --loss-mode rows --row-chunk $((2 * slots))"; do
    rm -f "$TMP/out.safetensors"
    # shellcheck disable=SC2086
    if "$T" step-dump "$in" "$cfg" "$TMP/out.safetensors" --device cpu $opts >"$TMP/run.log" 2>&1 &&
       "$T" compare "$TMP/ref.safetensors" "$TMP/out.safetensors" --tol 1e-5 >"$TMP/cmp.log" 2>&1; then ok
    else bad "$variant [$opts] differs from the unchunked step:"; cat "$TMP/run.log" "$TMP/cmp.log" >&2; fi
  done
  # budgets that make the planner choose 1, 2 and all 12 anchors per chunk
  for c in 1 2 12; do
    total=$("$T" step-dump "$in" "$cfg" "$TMP/x" --device cpu --chunk-anchors $c --loss-mode rows --plan | awk '/^plan_total_bytes/ {print $2}')
    "$T" step-dump "$in" "$cfg" "$TMP/out.safetensors" --device cpu --mem-budget "$total" >"$TMP/run.log" 2>&1
    if grep -q "in chunks of $c," "$TMP/run.log" && "$T" compare "$TMP/ref.safetensors" "$TMP/out.safetensors" --tol 1e-5 >"$TMP/cmp.log" 2>&1; then ok
    else bad "$variant budget $total: expected chunks of $c and the same result:"; cat "$TMP/run.log" "$TMP/cmp.log" >&2; fi
  done
done

# flat_memory NAME "N..." MAKE_ARGS...: a budget that holds 4 anchors per chunk (the plan of 4
# anchors); each N anchors per step must run in chunks under it, with the same measured peak.
flat_memory() {
  local name=$1 counts=$2 n p budget peaks=()
  shift 2
  "$PY" "$SRC/tests/cli/make_step_input.py" "$TMP/$name-4" --anchors 4 --seq-lens 40,33 "$@"
  budget=$("$T" step-dump "$TMP/$name-4.in.safetensors" "$TMP/$name-4.config.json" "$TMP/x" --device cpu --chunk-anchors 4 \
    --plan | awk '/^plan_total_bytes/ {print $2}')
  for n in $counts; do
    "$PY" "$SRC/tests/cli/make_step_input.py" "$TMP/$name-$n" --anchors "$n" --seq-lens 40,33 "$@"
    "$T" step-dump "$TMP/$name-$n.in.safetensors" "$TMP/$name-$n.config.json" "$TMP/o.safetensors" --device cpu \
      --mem-budget "$budget" >"$TMP/run.log" 2>&1 || { bad "$name: step-dump with $n anchors failed"; cat "$TMP/run.log" >&2; }
    p=$(grep -o "peak_bytes [0-9]*" "$TMP/run.log" | awk '{print $2}')
    echo "$name anchors $n: $(grep -o 'in chunks of [0-9]*' "$TMP/run.log"), peak $p bytes, budget $budget"
    [ -n "$p" ] && [ "$p" -le "$budget" ] && ok || bad "$name $n anchors: peak ${p:-?} over the budget $budget"
    peaks+=("$p")
  done
  [ "$(printf '%s\n' "${peaks[@]}" | sort -u | wc -l)" = 1 ] && ok || bad "$name: peak memory grows with the anchors: ${peaks[*]}"
}
flat_memory dflash "4 16 64"

# DFlash2 (its convolutions and candidate selector; an odd H 36 in groups of 4, kernel 3, top-k 13,
# rank 7, block 5): chunked = unchunked, and the measured peak stays under a budget as the anchors grow.
d2=(--dflash2 3,4,13,7 --hidden 36 --heads 3 --head-dim 12 --kv-heads 1 --block 5)
"$PY" "$SRC/tests/cli/make_step_input.py" "$TMP/d2" --anchors 12 "${d2[@]}" || bad "make_step_input dflash2"
expect_ok "dflash2 ref" "$T" step-dump "$TMP/d2.in.safetensors" "$TMP/d2.config.json" "$TMP/ref2.safetensors" --device cpu \
  --chunk-anchors 12 --loss-mode rows
for opts in "--chunk-anchors 1" "--chunk-anchors 5 --loss-mode tiles --vocab-tile 50"; do
  # shellcheck disable=SC2086
  if "$T" step-dump "$TMP/d2.in.safetensors" "$TMP/d2.config.json" "$TMP/out2.safetensors" --device cpu $opts >"$TMP/run.log" 2>&1 &&
     "$T" compare "$TMP/ref2.safetensors" "$TMP/out2.safetensors" --tol 1e-5 >"$TMP/cmp.log" 2>&1; then ok
  else bad "dflash2 [$opts] differs from the unchunked step:"; cat "$TMP/run.log" "$TMP/cmp.log" >&2; fi
done
flat_memory dflash2 "4 32" "${d2[@]}"

# An infeasible budget is refused before the step, naming the budget that would work.
expect_fail tiny-budget "needs at least" "$T" step-dump "$TMP/dflash-4.in.safetensors" "$TMP/dflash-4.config.json" "$TMP/x" --device cpu --mem-budget 4KiB
finish
