# lib.sh: shared helpers for the tests/cli/test_*.sh scripts (sourced, not a test itself).
#   expect_ok NAME CMD...            command exits 0
#   expect_fail NAME PATTERN CMD...  command exits non-zero without crashing (no exit code >= 128),
#                                    and stderr has exactly one error line ("error: ...", the
#                                    problem in one line), which matches PATTERN; log lines before
#                                    it (which backend, what is loading) are allowed
#   finish                           prints "N passed, M failed" and exits 1 on any failure
#   rank_pid MPIRUN_PID RANK         the pid of that rank of a job under mpirun
#   tiny_job                         makes $TMP/target and $TMP/data.h5 (the small job most tests run)
#   need_cuda                        exits 77 (skip) without a usable CUDA device
#   first_error FILE                 the first error line of a tool's stderr, else its last line
#   decode_fixture FX                sets model, glen, class from an hf NAME.decode.json
set -u
BUILD=${DFLASH_BUILD:?run through ctest (DFLASH_BUILD unset)}
SRC=${DFLASH_SRC:?run through ctest (DFLASH_SRC unset)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI wants a writable TMPDIR for its session directory; keep each test's files apart.
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dflash_cli_XXXXXX")
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

# mpi_jobs_without_leak_check: Open MPI dlclose()s its plugins at MPI_Finalize, so LeakSanitizer
# (the ASan build of tests/run.sh) reports their start-up allocations under "<unknown module>",
# which no suppression can name. Scripts that start MPI jobs call this; the rest of the programs
# (dflash_tool, the unit tests) keep leak checking.
mpi_jobs_without_leak_check() { export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"; }

# tiny_job: the small target ($TMP/target: llama, 2 layers, hidden 32, vocabulary 150) and training
# set ($TMP/data.h5: 24 samples the target generated) most job tests train on; T and R name the tools.
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
tiny_job() {
  "$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
  "$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
}

# gpu_job SAMPLES GEN_LEN: the target ($TMP/target: qwen3, 2 layers, hidden 64, vocabulary 256) and
# training set ($TMP/data.h5: SAMPLES samples of 8 prompt + GEN_LEN generated tokens) the CUDA job
# tests (tests/gpu) train on.
gpu_job() {
  "$T" make-target "$TMP/target" --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 256 --seed 11 >/dev/null 2>&1 &&
    "$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples "$1" --prompt-len 8 --gen-len "$2" --seed 3 >/dev/null 2>&1 &&
    ok || bad "make-target / make-data"
}

# run_dir_free DIR [SECONDS]: waits (default 60 s) until no process holds DIR/.lock, the run
# directory's lock (a rank may outlive its mpirun while it winds down: a thread in fsync, a stopped
# rank woken at the end); 0 once free, 1 if still held. A zombie holds no lock, so this is the
# test, not the pids.
run_dir_free() {
  /usr/bin/python3 - "$1/.lock" "${2:-60}" <<'PYEOF'
import fcntl, os, sys, time
path, limit = sys.argv[1], float(sys.argv[2])
end = time.time() + limit
while True:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        sys.exit(0)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        sys.exit(0)
    except OSError:
        os.close(fd)
        if time.time() > end:
            sys.exit(1)
        time.sleep(0.1)
PYEOF
}

# rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun with OMPI_COMM_WORLD_RANK=RANK)
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
  done
}

# need_cuda: exits 77 (ctest's skip) unless dflash_rank finds a usable CUDA device (a GPU or the emulator)
need_cuda() {
  if ! "$R" --mode check --device cuda >/dev/null 2>&1; then
    echo "SKIP: no usable CUDA device (or a binary built without CUDA)"
    exit 77
  fi
}

# need_emulator WHY: exits 77 (ctest's skip), saying WHY, unless dflash_rank is the CUDA emulator
# build (tests/emu), for what only the emulator shows (its copy log, its pinned-memory report)
need_emulator() {
  if ! "$R" --version | grep -q "cuda(emulated)"; then
    echo "SKIP: $1"
    exit 77
  fi
}

# first_error FILE: the first "error:" line of a tool's stderr, else its last line
first_error() { grep -m1 -i "error" "$1" || tail -n1 "$1"; }

# decode_fixture FX: sets model, glen and class from the decode fixture FX (tests/reference/data/hf/NAME.decode.json:
# its "model", "gen_len" and "class")
decode_fixture() {
  read -r model glen class < <(/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["model"], d["gen_len"], d["class"])' "$1")
}

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }

expect_ok() {
  local name=$1; shift
  if "$@" >"$TMP/out" 2>"$TMP/err"; then ok; else bad "$name: exit $? from: $*"; cat "$TMP/err" >&2; fi
}

expect_fail() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  local lines
  lines=$(grep -c "error:" "$TMP/err")
  if [ "$rc" -eq 0 ]; then bad "$name: exit 0, wanted an error"; return; fi
  if [ "$rc" -ge 128 ]; then bad "$name: crashed (exit $rc)"; cat "$TMP/err" >&2; return; fi
  if ! grep -q -- "$pattern" "$TMP/err"; then bad "$name: stderr lacks '$pattern':"; cat "$TMP/err" >&2; return; fi
  if [ "$lines" -ne 1 ]; then bad "$name: $lines error lines, wanted one:"; cat "$TMP/err" >&2; return; fi
  ok
}

# expect_fail_mpi NAME PATTERN CMD...: like expect_fail for a job under mpirun, which adds its own
# banner about the non-zero exit: our error line must appear exactly once among its lines.
expect_fail_mpi() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq 0 ]; then bad "$name: exit 0, wanted an error"; return; fi
  local n
  n=$(grep -c -- "$pattern" "$TMP/err")
  if [ "$n" -ne 1 ]; then bad "$name: '$pattern' appears $n times in stderr:"; cat "$TMP/err" >&2; return; fi
  if grep -qiE "segmentation|core dumped|signal" "$TMP/err"; then bad "$name: a rank crashed:"; cat "$TMP/err" >&2; return; fi
  ok
}

finish() {
  echo "$(basename "$0" .sh): $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit $?
}
