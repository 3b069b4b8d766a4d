#!/usr/bin/env bash
# test_layout.sh: the source tree is the map README's layout table draws.
#   - src/common has no source file at its top level, only its concern folders;
#   - the folders stack: core uses nothing above it, data and backend use core, kernels and comm use
#     backend and core, decode, moe and quant use kernels too; nothing in src/common includes the
#     teacher or the student;
#   - the student's folders stack: loss uses no other student folder, model uses loss, train uses
#     model and loss (the drafter never includes its training loop);
#   - the roles meet only through src/common: no file under src/student includes a header under
#     src/teacher and none under src/teacher one under src/student, save the exceptions named below
#     (the target's shape and the teacher contract the drafter is built against);
#   - the payload transports are behind one seam (src/common/comm/payload_link.h): no file under
#     src/teacher, src/student or src/modes, nor transport_test.c, makes a point-to-point MPI call
#     (MPI_Send, MPI_Irecv, ... or msg.h's), an NCCL call or a call of the NCCL transport's own;
#     collectives (barriers, all-reduces, the gradient's nccl_reduce) stay where they are;
#   - src/modes (the modes' table) is at the top: nothing under src/common, src/teacher or
#     src/student includes it;
#   - no include circle between files anywhere under src: in the graph of quoted includes (resolved
#     against src/, then the including file's folder), with foo.c, foo.h and foo.cu one node (the
#     module foo), no module reaches itself; a circle is reported with its path. A module's device
#     halves beside it (foo_cpu.*, foo_cuda.* next to foo.*) are the module foo: foo.c dispatching
#     to foo_cuda.h, whose kernels use foo.h's types, is one module, not a circle;
#   - no folder under src holds more than 20 source files (.c, .cu, .cuh);
#   - every source file starts with the comment that names it and says what it holds;
#   - README's layout table names every folder under src that holds sources, and only those;
#   - the backend is one object (src/common/backend/backend_ops.h): no file under src or tools
#     outside src/common/backend names a backend kind (BACKEND_CUDA, BACKEND_CPU, DISPATCH, ON_CUDA),
#     and none but the CUDA-only files (.cu, .cuh, *_cuda.h) tests DFLASH_HAVE_CUDA: a build without
#     CUDA takes *_nocuda.c files instead (CMake's choice);
#   - kernels by op: no file under src is named for a phase of training (ops_train*, *_backward.*,
#     *_forward.*): an op's forward and backward live together;
#   - the modes decide for themselves: no MODE_PF_ flag (preflight runs each mode's own checks) and
#     no mode name compared as a string outside src/modes;
#   - results read as results: no heading of bench/RESULTS.md or docs/ is a dated session, and
#     docs/architecture.md (the one-page map) exists;
#   - the MPI collectives are src/common/comm's (timed by the watchdog): none called elsewhere;
#   - settings owned by their users: no key declared in src/common/core/config.c, every file's
#     config_key_set listed in src/settings.c.
source "$DFLASH_SRC/tests/cli/lib.sh"
cd "$SRC" || exit 1

top=$(find src/common -maxdepth 1 -type f | sort)
[ -z "$top" ] && ok || bad "source files at the top of src/common: $(echo $top)"

# allowed[folder] = the folders of src/common its files may include
declare -A allowed=([core]="core" [data]="core data" [backend]="core backend" [kernels]="core backend kernels"
                    [decode]="core backend kernels decode" [moe]="core backend kernels moe"
                    [quant]="core backend kernels quant"
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

# the student's folders: stu_allowed[folder] = the student folders its files may include
declare -A stu_allowed=([loss]="loss" [model]="loss model" [train]="loss model train")
for dir in src/student/*/; do
  f=$(basename "$dir")
  [ -n "${stu_allowed[$f]+x}" ] && ok || bad "src/student/$f: a folder this test does not know (add it to the stack here and to README)"
done
top=$(find src/student -maxdepth 1 -type f | sort)
[ -z "$top" ] && ok || bad "source files at the top of src/student: $(echo $top)"
while IFS= read -r file; do
  f=$(echo "$file" | cut -d/ -f3)
  [ -n "${stu_allowed[$f]+x}" ] || continue
  while IFS= read -r inc; do
    to=$(echo "$inc" | sed -n 's|.*#include "student/\([a-z_]*\)/.*|\1|p')
    [ -z "$to" ] && continue
    echo " ${stu_allowed[$f]} " | grep -q " $to " || bad "$file includes $inc: student/$f may use only ${stu_allowed[$f]}"
  done < <(grep -E '^#include "' "$file")
done < <(find src/student -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
ok

# the roles meet through src/common. What the student still takes from the teacher (to move to
# common; the list only shrinks): the target's shape and the teacher contract.
student_may_use=" teacher/target_config.h teacher/teacher_plan.h "
while IFS= read -r file; do
  while IFS= read -r inc; do
    h=$(echo "$inc" | sed -n 's|.*#include "\(teacher/[^"]*\)".*|\1|p')
    [ -z "$h" ] && continue
    echo "$student_may_use" | grep -q " $h " || bad "$file includes $h: the student takes the teacher's protocol and data from src/common"
  done < <(grep -E '^#include "' "$file")
done < <(find src/student -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
while IFS= read -r file; do
  grep -qE '^#include "student/' "$file" && bad "$file includes a student header: the teacher uses src/common only"
done < <(find src/teacher -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
ok

# the payload transports behind payload_link.h: no point-to-point call of their own in the callers
p2p='\b(MPI_(Send|Recv|Isend|Irecv|Ssend|Issend|Bsend|Rsend|Sendrecv|Probe|Iprobe|Mprobe|Improbe)|msg_(send|recv|isend|irecv)|nccl_(links?|ticket|cuda)_[a-z_]*|nccl[A-Z][A-Za-z]*)[[:space:]]*\('
while IFS= read -r hit; do
  [ -n "$hit" ] && bad "$hit: a transport call outside src/common/comm's transports (use payload_link.h)"
done < <(grep -nE "$p2p" $(find src/teacher src/student src/modes -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \)) \
           src/common/comm/transport_test.c)
[ -f src/common/comm/payload_link.h ] && ok || bad "src/common/comm/payload_link.h is missing (the payload transports' seam)"

# the modes' table is at the top, beside dflash_rank.c: no floor below includes it
while IFS= read -r file; do
  grep -qE '^#include "modes/' "$file" && bad "$file includes a file of src/modes: the modes sit above every floor"
done < <(find src/common src/teacher src/student -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
[ -d src/modes ] && ok || bad "src/modes is missing (the modes' table)"
top=$(find src/modes -mindepth 1 -type d | sort)
[ -z "$top" ] && ok || bad "folders under src/modes: $(echo $top) (one file per mode, no folders)"

# no include circle between modules (foo.c + foo.h + foo.cu = foo) anywhere under src
circles=$(/usr/bin/python3 - <<'PYEOF'
import os, re
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
files = [os.path.join(d, n) for d, _, ns in os.walk("src") for n in ns
         if n.endswith((".c", ".h", ".cu", ".cuh"))]
stems = {os.path.splitext(os.path.normpath(f))[0] for f in files}
def mod(path):
    stem = os.path.splitext(os.path.normpath(path))[0]
    for half in ("_cuda", "_cpu"):
        if stem.endswith(half) and stem[: -len(half)] in stems:
            return stem[: -len(half)]
    return stem
graph = {}
for path in sorted(files):
    node = graph.setdefault(mod(path), set())
    with open(path, encoding="utf-8", errors="replace") as fh:
        for name in inc.findall(fh.read()):
            for cand in (os.path.join("src", name), os.path.join(os.path.dirname(path), name)):
                if os.path.isfile(cand):
                    if mod(cand) != mod(path):
                        node.add(mod(cand))
                    break
# Tarjan's strongly connected components (iterative); each component of two or more modules holds
# circles: each is reported as the shortest cycle through each of its modules, once.
index, low, on, stack, comps, count = {}, {}, set(), [], [], [0]
for root in sorted(graph):
    if root in index:
        continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = count[0]; count[0] += 1; stack.append(root); on.add(root)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = count[0]; count[0] += 1; stack.append(w); on.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on:
                low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))
seen = set()
for comp in sorted(comps):
    members = set(comp)
    for start in comp:
        prev, frontier, last = {start: None}, [start], None
        while last is None:
            nxt = []
            for v in frontier:
                if start in graph[v]:
                    last = v
                    break
                for w in sorted(graph[v] & members):
                    if w not in prev:
                        prev[w] = v; nxt.append(w)
            frontier = nxt
        cycle = []
        while last is not None:
            cycle.append(last); last = prev[last]
        cycle.reverse()
        i = cycle.index(min(cycle))
        cycle = cycle[i:] + cycle[:i]
        if tuple(cycle) not in seen:
            seen.add(tuple(cycle))
            print(" -> ".join(p[len("src/"):] for p in cycle + cycle[:1]))
PYEOF
) || bad "the include graph could not be read (python3 failed)"
[ -z "$circles" ] && ok || while IFS= read -r c; do bad "include circle: $c"; done <<< "$circles"

while IFS= read -r dir; do
  n=$(find "$dir" -maxdepth 1 -type f \( -name '*.c' -o -name '*.cu' -o -name '*.cuh' \) | wc -l)
  [ "$n" -le 20 ] && ok || bad "$dir holds $n source files (at most 20: split it by concern)"
done < <(find src -type d)

for file in $(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \)); do
  name=$(basename "$file")
  head -1 "$file" | grep -qE "^// (${name}|${name%.*}):" && ok || bad "$file: its first line is not '// $name: what it holds'"
done

# the backend as one object
code=$(find src tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) ! -path 'src/common/backend/*' | sort)
hits=$(grep -nwE 'BACKEND_CUDA|BACKEND_CPU|DISPATCH|ON_CUDA' $code)
[ -z "$hits" ] && ok || while IFS= read -r h; do bad "$h: names a backend kind outside src/common/backend (ask be->caps, call the op tables)"; done <<< "$hits"
hits=$(grep -nE '^[[:space:]]*#[[:space:]]*(if|ifdef|ifndef|elif).*DFLASH_HAVE_CUDA' $(find src tools -type f \( -name '*.c' -o -name '*.h' \) ! -name '*_cuda.h' | sort))
[ -z "$hits" ] && ok || while IFS= read -r h; do bad "$h: tests DFLASH_HAVE_CUDA outside the CUDA-only files (a *_nocuda.c file instead)"; done <<< "$hits"
hits=$(find src -type f \( -name 'ops_train*' -o -name '*_backward.*' -o -name '*_forward.*' \) | sort)
[ -z "$hits" ] && ok || bad "files named for a phase of training (an op's forward and backward live together): $(echo $hits)"
hits=$(grep -rn 'MODE_PF_' src)
[ -z "$hits" ] && ok || bad "per-mode preflight flags remain (each mode owns its checks): $(echo "$hits" | head -3)"
hits=$(grep -rnE 'strcmp\([^;]*mode[^;]*"(train|eval|regenerate|check|dump-features|transport-test)"' src | grep -v '^src/modes/')
[ -z "$hits" ] && ok || while IFS= read -r h; do bad "$h: a mode name compared outside src/modes (a property of the mode's entry)"; done <<< "$hits"
hits=$(grep -nE '^#+ .*([Ss]ession|20[0-9]{2}-[0-9]{2}-[0-9]{2})' bench/RESULTS.md docs/*.md)
[ -z "$hits" ] && ok || while IFS= read -r h; do bad "$h: a dated section (results by benchmark; the history is git's)"; done <<< "$hits"
[ -f docs/architecture.md ] && ok || bad "docs/architecture.md is missing (the one-page map)"

# collectives through src/common/comm (the watchdog's timed waits): none called elsewhere
hits=$(grep -rnE 'MPI_(I|All|Iall)?(gather|Gather|bcast|Bcast|reduce|Reduce|barrier|Barrier)\(' src --include=*.c --include=*.cu | grep -v '^src/common/comm/')
[ -z "$hits" ] && ok || while IFS= read -r h; do bad "$h: an MPI collective outside src/common/comm (watchdog.h has them, timed)"; done <<< "$hits"

# settings owned by their users: the key rows live in the files that read them (a config_key_set
# each), src/settings.c lists every set, and the config core declares none
hits=$(grep -nE '^[[:space:]]*\{"[a-z_]+\.[a-z_]+", CFG_' src/common/core/config.c)
[ -z "$hits" ] && ok || bad "src/common/core/config.c declares keys (a key belongs to the file that reads it): $(echo "$hits" | head -2)"
sets=$(grep -rhoE '^const config_key_set [a-z_0-9]+' src | awk '{print $3}' | sort)
[ -n "$sets" ] && ok || bad "no config_key_set found in src"
for set in $sets; do grep -qE "&$set\b" src/settings.c && ok || bad "config_key_set $set is not listed in src/settings.c"; done

# README's table: `src...` rows against the folders that hold sources
table=$(sed -n '/^## Layout/,/^## /p' README.md | grep -o '^| `src[^`]*`' | sed 's/^| `//; s/`$//' | sort -u)
have=$(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -printf '%h\n' | sort -u)
for d in $have; do echo "$table" | grep -qx "$d" && ok || bad "README's layout table lacks $d"; done
for d in $table; do [ -d "$d" ] && ok || bad "README's layout table names $d, which does not exist"; done
finish
