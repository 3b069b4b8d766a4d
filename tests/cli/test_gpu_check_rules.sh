#!/usr/bin/env bash
# test_gpu_check_rules.sh: tests/gpu/check.sh's own rules, without a GPU or a build (issue 50), on
# its fake parts (DFLASH_CHECK_SELFTEST=1: parts that pass, fail, sleep past their limit, exit 77
# with and without a note, lack a Python package; about 11 s) and on the ops part over a fake ctest folder:
#   - a part that exits 77 is a SKIP with its reason; a missing Python package is a SKIP naming it;
#   - a part past its limit is a FAIL ("timed out"), and the check exits non-zero;
#   - a part left no time is not run: a FAIL, "complete": false, "not_run" naming it, exit non-zero;
#   - the part limits fit inside DFLASH_CHECK_LIMIT (each its weight's share of the time left);
#   - the ops part excludes gpu.test_payload_pinned_cuda by name with its reason, gives each ctest
#     test a timeout under the part's limit, and fails on any ctest skip.
# Before issue 50 the check had no such hook, marked a part left no time SKIP and exited 0.
source "$DFLASH_SRC/tests/cli/lib.sh"
CHECK=$SRC/tests/gpu/check.sh
PY=python3

# run_check NAME LIMIT PARTS [ENV...]: the check on fake parts; $TMP/NAME/summary.json, exit in $rc
run_check() {
  local name=$1 limit=$2 parts=$3
  shift 3
  mkdir -p "$TMP/$name"
  env DFLASH_CHECK_CPU=1 DFLASH_CHECK_SELFTEST=1 DFLASH_CHECK_SELFTEST_PARTS="$parts" DFLASH_CHECK_LIMIT="$limit" \
    DFLASH_CHECK_RESERVE=0 DFLASH_COMMIT=test OUT="$TMP/$name" "$@" timeout 60 bash "$CHECK" >"$TMP/$name.log" 2>&1
  rc=$?
}
# field NAME EXPR: EXPR of summary.json's d (the parts by name in p)
field() {
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); p = {x["name"]: x for x in d["parts"]}; v = eval(sys.argv[2]); print(" ".join(map(str, v)) if isinstance(v, tuple) else v)' \
    "$TMP/$1/summary.json" "$2" 2>&1
}
# want NAME EXPR VALUE
want() {
  local got
  got=$(field "$1" "$2")
  [ "$got" = "$3" ] && ok || { bad "$1: $2 is '$got', wanted '$3'"; cat "$TMP/$1.log" >&2; }
}

# passes and skips: exit 0, complete, each skip with its reason (limits far above what the parts take:
# a python start under a loaded machine took over the old 1 s)
run_check skips 60 "st_pass:6 st_skip:4 st_skip_bare:4 st_nopy:10" DFLASH_CHECK_MIN_PART=1
[ "$rc" -eq 0 ] && ok || { bad "skips: exit $rc, wanted 0"; cat "$TMP/skips.log" >&2; }
want skips 'd["result"], d["complete"], d["not_run"]' "PASS True []"
want skips '[p[n]["status"] for n in ("st_pass", "st_skip", "st_skip_bare", "st_nopy")]' "['PASS', 'SKIP', 'SKIP', 'SKIP']"
want skips 'p["st_skip"]["note"]' "a fake part that skips"
want skips 'p["st_skip_bare"]["note"]' "needs a GPU"
want skips '"has no dflash_no_such_module" in p["st_nopy"]["note"]' "True"
want skips 'p["st_pass"]["numbers"]["answer"]' "42"
# the limits fit inside the whole limit (the old ones added up to about three times it)
want skips 'sum(x["limit_s"] for x in d["parts"]) <= 60' "True"

# a failing part: FAIL, exit non-zero, the check still complete
run_check fail 60 "st_fail:1 st_pass:1" DFLASH_CHECK_MIN_PART=1
[ "$rc" -ne 0 ] && ok || bad "fail: exit 0 with a failed part"
want fail 'p["st_fail"]["status"], p["st_pass"]["status"], d["result"], d["complete"]' "FAIL PASS FAIL True"

# a part past its limit, then no time left for the next: the clock starts with the fake parts, so
# the sleeper's share is 9/10 of the 3-4 s left (2-3 s, at least the 2 s a part needs); it times out
# (FAIL), and the 1 s or less left is under the 2 s: the next part is not run, a FAIL, the check
# incomplete, exit non-zero
run_check notime 4 "st_sleep:9 st_pass:1" DFLASH_CHECK_MIN_PART=2
[ "$rc" -ne 0 ] && ok || bad "notime: exit 0 with a part not run"
want notime 'p["st_sleep"]["status"], p["st_sleep"]["note"].startswith("timed out after"), p["st_sleep"]["ran"]' "FAIL True True"
want notime 'p["st_pass"]["status"], p["st_pass"]["ran"], p["st_pass"]["note"].startswith("not run: no time left")' "FAIL False True"
want notime 'd["result"], d["complete"], d["not_run"]' "FAIL False ['st_pass']"
want notime 'sum(x["limit_s"] for x in d["parts"]) <= 4' "True"
grep -q "incomplete: not run: st_pass" "$TMP/notime.log" && ok || bad "notime: the log does not name the part not run"

# the ops part over a fake ctest folder: gpu.test_payload_pinned_cuda (exit 77 off the emulator) is
# excluded by name with its reason, the per-test timeout is under the part's limit, and a skip fails
F=$TMP/ctest
mkdir -p "$F" "$TMP/opsw" "$TMP/opso"
cat >"$F/CTestTestfile.cmake" <<'EOF'
add_test(unit.test_a_cuda "sh" "-c" "echo ok")
add_test(gpu.test_payload_pinned_cuda "sh" "-c" "exit 77")
set_tests_properties(gpu.test_payload_pinned_cuda PROPERTIES SKIP_RETURN_CODE 77)
EOF
ops() { PART=ops PART_LIMIT=30 BUILD=$F DEV=cuda WORK=$TMP/opsw OUT=$TMP/opso bash "$CHECK" --part ops >"$TMP/ops.log" 2>&1; }
ops && ok || { bad "ops: exit $?, wanted 0 with the GPU-only test excluded"; cat "$TMP/ops.log" >&2; }
"$PY" - "$TMP/opsw/ops.num" <<'PY' && ok || bad "ops: the numbers (above)"
import json, sys
n = {k: json.loads(v) for k, v in (l.rstrip("\n").split("\t", 1) for l in open(sys.argv[1]))}
fails = []
if "emulator" not in n["excluded"].get("gpu.test_payload_pinned_cuda", ""): fails.append("payload_pinned not excluded with a reason")
if "gpu.test_payload_pinned_cuda" in n["tests"]: fails.append("payload_pinned ran")
if not 0 < n["per_test_timeout_s"] < 30: fails.append(f"per-test timeout {n['per_test_timeout_s']} not under the part's 30 s")
if n["passed"] != 1 or n["skipped"] != 0: fails.append(f"passed {n['passed']}, skipped {n['skipped']}")
for f in fails: print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY
cat >>"$F/CTestTestfile.cmake" <<'EOF'
add_test(gpu.test_b_cuda "sh" "-c" "exit 77")
set_tests_properties(gpu.test_b_cuda PROPERTIES SKIP_RETURN_CODE 77)
EOF
rm -f "$TMP"/opsw/*
ops
orc=$?
[ "$orc" -eq 1 ] && ok || { bad "ops: exit $orc with a ctest skip, wanted 1 (FAIL)"; cat "$TMP/ops.log" >&2; }
grep -q "skipped (ctest)" "$TMP/opsw/ops.note" && ok || bad "ops: the note does not say a skip failed: $(cat "$TMP/opsw/ops.note")"

# Every CUDA job test that cannot run on the check's one GPU is excluded by name: those that skip
# off the emulator (need_emulator, or a "not the CUDA emulator" skip) and those that need more
# GPUs than one (nvidia-smi -L ... -lt N); test_regenerate_cuda and test_grad_pinned_cuda run with
# one GPU and are not. The names as tests/CMakeLists.txt registers them (gpu.<script>; the
# emulator's own test_profile.sh as gpu.test_emu_profile).
excluded=$(sed -n '/^ops_excluded() {/,/^}/p' "$CHECK")
for t in "$SRC"/tests/gpu/test_*.sh "$SRC"/tests/emu/test_profile.sh; do
  name=gpu.$(basename "$t" .sh)
  [ "$t" = "$SRC/tests/emu/test_profile.sh" ] && name=gpu.test_emu_profile
  if grep -qE 'need_emulator |not the CUDA emulator|nvidia-smi -L .*-lt [2-9]' "$t"; then
    grep -qF " $name \"" <<<"$excluded" && ok || bad "check.sh's ops part does not exclude $name, which cannot run on one GPU"
  fi
done
finish
