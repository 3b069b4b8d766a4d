#!/usr/bin/env bash
# test_step_chunking.sh: the anchor-chunked step gives the same loss and gradients however it is
# chunked (1, 2, several, all anchors per chunk; loss mode rows or tiles, budgets that force each),
# and its measured memory stays flat while the anchors per step grow 1 -> 4 -> 16 times; the
# evaluation (student_eval: forward only) gives the step's loss terms and touches no gradient.
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

# Flat memory: a budget that holds 4 anchors per chunk; 4, 16 and 64 anchors per step.
"$PY" "$SRC/tests/cli/make_step_input.py" "$TMP/m4" --anchors 4 --seq-lens 40,33
budget=$("$T" step-dump "$TMP/m4.in.safetensors" "$TMP/m4.config.json" "$TMP/x" --device cpu --chunk-anchors 4 --plan | awk '/^plan_total_bytes/ {print $2}')
peaks=()
for n in 4 16 64; do
  "$PY" "$SRC/tests/cli/make_step_input.py" "$TMP/m$n" --anchors $n --seq-lens 40,33
  "$T" step-dump "$TMP/m$n.in.safetensors" "$TMP/m$n.config.json" "$TMP/o$n.safetensors" --device cpu --mem-budget "$budget" >"$TMP/run.log" 2>&1 || { bad "step-dump with $n anchors failed"; cat "$TMP/run.log" >&2; }
  p=$(grep -o "peak_bytes [0-9]*" "$TMP/run.log" | awk '{print $2}')
  echo "anchors $n: $(grep -o 'in chunks of [0-9]*' "$TMP/run.log"), peak $p bytes, budget $budget"
  [ -n "$p" ] && [ "$p" -le "$budget" ] && ok || bad "$n anchors: peak ${p:-?} over the budget $budget"
  peaks+=("$p")
done
[ "${peaks[0]}" = "${peaks[1]}" ] && [ "${peaks[1]}" = "${peaks[2]}" ] && ok || bad "peak memory grows with the anchors: ${peaks[*]}"

# An infeasible budget is refused before the step, naming the budget that would work.
expect_fail tiny-budget "needs at least" "$T" step-dump "$TMP/m4.in.safetensors" "$TMP/m4.config.json" "$TMP/x" --device cpu --mem-budget 4KiB
finish
