#!/usr/bin/env bash
# test_comment_names.sh: the comments under src name only what exists (tests/cli/comment_names.py:
# a name written like a call, name(), or a bare name that starts like one of the tree's API
# functions, must be an identifier of the tree's code or a listed external one); and the check
# finds a stale name: a copy of a header whose comment names a function no code has fails it.
source "$DFLASH_SRC/tests/cli/lib.sh"
PY=/usr/bin/python3
CHECK=$SRC/tests/cli/comment_names.py

if "$PY" "$CHECK" "$SRC" >"$TMP/out" 2>&1; then ok; else bad "comments name what does not exist:"; cat "$TMP/out" >&2; fi

# The check itself: a tree whose src has one comment naming a function nothing defines.
mkdir -p "$TMP/tree"
for d in src tools tests bench; do
  (cd "$SRC" && find "$d" -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' -o -name '*.sh' \
    -o -name '*.cmake' -o -name '*.txt' \) -exec cp --parents {} "$TMP/tree/" \;)
done
echo "// config_frobnicate(): stale" >>"$TMP/tree/src/common/core/config.h"
echo "// see config_reticulate_splines for the rest" >>"$TMP/tree/src/common/core/config.c"
"$PY" "$CHECK" "$TMP/tree" >"$TMP/out2" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "src/common/core/config.h:[0-9]*: config_frobnicate()" "$TMP/out2" &&
  grep -q "src/common/core/config.c:[0-9]*: config_reticulate_splines" "$TMP/out2" && ok ||
  { bad "the check missed a stale name (exit $rc):"; cat "$TMP/out2" >&2; }
finish
