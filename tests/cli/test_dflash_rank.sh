#!/usr/bin/env bash
# test_dflash_rank.sh: the dflash_rank command line: --help, --version, the config key table vs
# docs/config.md, bad configurations refused with one line, and a 3-rank "check" job under mpirun.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
R=$BUILD/dflash_rank

expect_ok help "$R" --help
grep -q -- "--config FILE" "$TMP/out" && ok || bad "--help does not list --config"
expect_ok version "$R" --version
grep -q "^backends: cpu" "$TMP/out" && ok || bad "--version does not list the backends: $(cat "$TMP/out")"
grep -q "^dflash_rank [0-9]" "$TMP/out" && ok || bad "--version has no version line"
grep -q "^blas: OpenBLAS [0-9.]* (.*), kernel [A-Za-z0-9]*: " "$TMP/out" && ok || bad "--version does not name the BLAS kernel: $(cat "$TMP/out")"

# Every key of the code's table is documented, row for row, in docs/config.md, and vice versa.
"$R" --config-keys | grep '^| `' >"$TMP/keys"
grep '^| `' "$SRC/docs/config.md" >"$TMP/doc_keys"
if diff "$TMP/keys" "$TMP/doc_keys" >"$TMP/diff"; then ok; else bad "docs/config.md differs from --config-keys:"; cat "$TMP/diff" >&2; fi

# Effective config: file + override.
echo '{"run": {"seed": 5}, "drafter": {"block_size": 8}}' >"$TMP/run.json"
expect_ok print-config "$R" --config "$TMP/run.json" --run.seed=6 --print-config
grep -q '"seed":[[:space:]]*6' "$TMP/out" && ok || bad "override not applied: $(cat "$TMP/out")"
grep -q '"block_size":[[:space:]]*8' "$TMP/out" && ok || bad "file value not applied"

# Bad input: one line naming the thing, non-zero exit, no crash.
echo '{"run": {"sede": 5}}' >"$TMP/bad1.json"
expect_fail unknown-key "unknown key 'run.sede'" "$R" --config "$TMP/bad1.json"
echo '{"run": {"seed": "five"}}' >"$TMP/bad2.json"
expect_fail wrong-type "'run.seed' wants an integer" "$R" --config "$TMP/bad2.json"
echo '{"run": ' >"$TMP/bad3.json"
expect_fail bad-json "not valid JSON" "$R" --config "$TMP/bad3.json"
expect_fail missing-config "no-such.json" "$R" --config "$TMP/no-such.json"
expect_fail bad-override "wants an integer" "$R" --run.seed=x
expect_fail unknown-arg "unknown argument '--frobnicate'" "$R" --frobnicate
expect_fail bad-device "not one of auto|cpu|cuda" "$R" --device tpu

# Training without a target is refused with one line.
expect_fail train-no-target "train needs target.path" "$R" --device cpu
# One process without mpirun: one student rank, CPU.
expect_ok single "$R" --device cpu --mode check
grep -q "student" "$TMP/out" && ok || bad "single-rank check has no student line"

# Three ranks: two teachers and one student, each reporting its role and backend.
if command -v mpirun >/dev/null; then
  expect_ok mpirun-3 mpirun -np 3 "$R" --device auto --mode check
  [ "$(grep -c ' teacher ' "$TMP/out")" -eq 2 ] && ok || bad "wanted 2 teacher lines: $(cat "$TMP/out")"
  [ "$(grep -c ' student ' "$TMP/out")" -eq 1 ] && ok || bad "wanted 1 student line"
  grep -q "every rank is ready" "$TMP/out" && ok || bad "no ready line"
  # Roles that do not fit the world: the error names both numbers.
  expect_fail_mpi world-mismatch "3 teacher(s) + 1 student(s) = 4 rank(s), but the job has 3" \
    mpirun -np 3 "$R" --world.teachers=3 --mode check
else
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
fi
finish
