#!/usr/bin/env bash
# test_layout.sh: the source tree is the map README's layout table draws.
#   - src/common has no source file at its top level, only its concern folders;
#   - the folders stack: core uses nothing above it, data and backend use core, kernels and comm use
#     backend and core; nothing in src/common includes the teacher or the student;
#   - no folder under src holds more than 20 source files (.c, .cu, .cuh);
#   - every source file starts with the comment that names it and says what it holds;
#   - README's layout table names every folder under src that holds sources, and only those.
source "$DFLASH_SRC/tests/cli/lib.sh"
cd "$SRC" || exit 1

top=$(find src/common -maxdepth 1 -type f | sort)
[ -z "$top" ] && ok || bad "source files at the top of src/common: $(echo $top)"

# allowed[folder] = the folders of src/common its files may include
declare -A allowed=([core]="core" [data]="core data" [backend]="core backend" [kernels]="core backend kernels"
                    [comm]="core backend comm")
for dir in src/common/*/; do
  f=$(basename "$dir")
  [ -n "${allowed[$f]+x}" ] && ok || bad "src/common/$f: a folder this test does not know (add it to the stack here and to README)"
done
while IFS= read -r file; do
  f=$(echo "$file" | cut -d/ -f3)
  [ -n "${allowed[$f]+x}" ] || continue
  while IFS= read -r inc; do
    to=$(echo "$inc" | sed -n 's|.*#include "\([a-z_]*\)/\([a-z_]*\)/.*|\1/\2|p')
    case "$to" in
      common/*) echo " ${allowed[$f]} " | grep -q " ${to#common/} " || bad "$file includes $inc: $f may use only ${allowed[$f]}" ;;
    esac
    echo "$inc" | grep -qE '#include "(teacher|student)/' && bad "$file includes $inc: src/common must not use the roles"
  done < <(grep -E '^#include "' "$file")
done < <(find src/common -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
ok

while IFS= read -r dir; do
  n=$(find "$dir" -maxdepth 1 -type f \( -name '*.c' -o -name '*.cu' -o -name '*.cuh' \) | wc -l)
  [ "$n" -le 20 ] && ok || bad "$dir holds $n source files (at most 20: split it by concern)"
done < <(find src -type d)

for file in $(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \)); do
  name=$(basename "$file")
  head -1 "$file" | grep -qE "^// (${name}|${name%.*}):" && ok || bad "$file: its first line is not '// $name: what it holds'"
done

# README's table: `src...` rows against the folders that hold sources
table=$(sed -n '/^## Layout/,/^## /p' README.md | grep -o '^| `src[^`]*`' | sed 's/^| `//; s/`$//' | sort -u)
have=$(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -printf '%h\n' | sort -u)
for d in $have; do echo "$table" | grep -qx "$d" && ok || bad "README's layout table lacks $d"; done
for d in $table; do [ -d "$d" ] && ok || bad "README's layout table names $d, which does not exist"; done
finish
