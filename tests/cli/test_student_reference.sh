#!/usr/bin/env bash
# test_student_reference.sh: one student step against the independent PyTorch implementation.
# For every fixture tests/reference/data/student_<name>.{in.safetensors,config.json,out.safetensors}
# (made by make_student_fixtures.py: the drafter and the loss written from the SPEC with torch
# autograd in float64; student_dflash2_odd by make_dflash2_step_fixture.py: the dflash package's
# DFlash2DraftModel itself, its convolutions and candidate selector, with autograd in float64), `dflash_tool step-dump` on the CPU must give the loss terms to 1e-5 relative
# and every gradient to 1e-4 relative to its largest element (fp32 against float64: ~1e-6 seen).
# The same with the chunking and loss mode forced differently, and a control that must fail.
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
D=$SRC/tests/reference/data
n=0
for in in "$D"/student_*.in.safetensors; do
  [ -e "$in" ] || continue
  name=$(basename "$in" .in.safetensors)
  cfg=$D/$name.config.json
  ref=$D/$name.out.safetensors
  n=$((n + 1))
  for opts in "" "--chunk-anchors 1 --loss-mode tiles --vocab-tile 64"; do
    rm -f "$TMP/out.safetensors"
    # shellcheck disable=SC2086
    if ! "$T" step-dump "$in" "$cfg" "$TMP/out.safetensors" --device cpu $opts >"$TMP/run.log" 2>&1; then
      bad "$name [$opts]: step-dump failed:"; cat "$TMP/run.log" >&2; continue
    fi
    "$T" compare "$ref" "$TMP/out.safetensors" --tol 1e-5 --only loss,ce,kl,cap >"$TMP/c1.log" 2>&1 && ok ||
      { bad "$name [$opts]: loss terms differ:"; cat "$TMP/c1.log" >&2; }
    "$T" compare "$ref" "$TMP/out.safetensors" --tol 1e-4 >"$TMP/c2.log" 2>&1 && ok ||
      { bad "$name [$opts]: gradients differ:"; cat "$TMP/c2.log" >&2; }
    [ -z "$opts" ] && echo "$name: $(grep -h 'compare:' "$TMP/c1.log" "$TMP/c2.log" | paste -sd' ' -)"
  done
done
[ "$n" -ge 4 ] && ok || bad "expected at least 4 student fixtures, found $n"

# Control: with another loss setting the comparison must fail.
sed 's/"alpha": 0.15/"alpha": 0.5/' "$D/student_full_gqa.config.json" >"$TMP/alpha.json"
"$T" step-dump "$D/student_full_gqa.in.safetensors" "$TMP/alpha.json" "$TMP/alpha.safetensors" --device cpu >/dev/null 2>&1
"$T" compare "$D/student_full_gqa.out.safetensors" "$TMP/alpha.safetensors" --only loss >/dev/null 2>&1 && bad "compare missed a changed alpha" || ok

# Control: the DFlash2 fixture (make_dflash2_step_fixture.py: the package's DFlash2DraftModel) with
# another selector weight must fail too (the selector's term is in the compared loss and gradients).
sed 's/"selector_weight": 0.7/"selector_weight": 1.0/' "$D/student_dflash2_odd.config.json" >"$TMP/sw.json"
grep -q '"selector_weight": 1.0' "$TMP/sw.json" && ok || bad "the DFlash2 fixture has no selector_weight 0.7"
"$T" step-dump "$D/student_dflash2_odd.in.safetensors" "$TMP/sw.json" "$TMP/sw.safetensors" --device cpu >/dev/null 2>&1
"$T" compare "$D/student_dflash2_odd.out.safetensors" "$TMP/sw.safetensors" --only loss >/dev/null 2>&1 &&
  bad "compare missed a changed selector_weight" || ok

# Bad inputs: one line each.
expect_fail missing-tensor "missing tensor features" "$T" step-dump "$D/student_full_gqa.out.safetensors" "$D/student_full_gqa.config.json" "$TMP/x" --device cpu
echo '{"hidden_size": 32' >"$TMP/bad.json"
expect_fail bad-config "bad.json" "$T" step-dump "$D/student_full_gqa.in.safetensors" "$TMP/bad.json" "$TMP/x" --device cpu
sed 's/"weighting": "decay"/"weighting": "linear"/' "$D/student_full_gqa.config.json" >"$TMP/w.json"
expect_fail bad-weighting "loss.weighting" "$T" step-dump "$D/student_full_gqa.in.safetensors" "$TMP/w.json" "$TMP/x" --device cpu
[ ! -e "$TMP/x" ] && ok || bad "a failed step-dump left an output file"
finish
