#!/usr/bin/env bash
# test_safetensors_interop.sh: the C writer's output read by the Python `safetensors` package, live.
#
# Where python3 has `safetensors` and numpy (a developer machine), the unit test writes its interop
# file (DFLASH_WRITE_FIXTURE) and tests/reference/make_safetensors_fixture.py --check loads it with
# the package and asserts every value, the metadata and the layout. Elsewhere (CI has no PyPI) it
# is skipped: there the unit test's byte-for-byte comparison with the committed
# tests/reference/data/written_by_c.safetensors, checked the same way when it was made
# (tests/reference/data/safetensors_interop.log), carries the proof.
source "$DFLASH_SRC/tests/cli/lib.sh"

if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  echo "skipped: python3 has no safetensors/numpy package"
  exit 77
fi
T=$BUILD/tests/test_safetensors
[ -x "$T" ] || { echo "skipped: $T not built"; exit 77; }

expect_ok write-fixture env DFLASH_WRITE_FIXTURE="$TMP/c.safetensors" "$T"
expect_ok python-reads-c python3 "$SRC/tests/reference/make_safetensors_fixture.py" --check "$TMP/c.safetensors"
grep -q "^OK$" "$TMP/out" && ok || bad "the Python check did not end with OK: $(tail -3 "$TMP/out")"
cmp -s "$TMP/c.safetensors" "$SRC/tests/reference/data/written_by_c.safetensors" && ok ||
  bad "the C writer's output differs from the committed written_by_c.safetensors"
finish
