#!/usr/bin/env bash
# test_nccl_setup_cuda.sh: a rank that hangs during the NCCL set-up ends the job within the rank
# timeout, with one line naming the set-up and the rank (docs/faults.md, "NCCL"): the communicators
# are made non-blocking and polled until run.rank_timeout (src/common/backend/nccl_setup_cuda.cuh), and
# the one that did not come together is aborted. Runs in the CUDA emulator build (tests/emu: NCCL
# between the processes through files; its non-blocking creation returns at once and the ranks meet
# as ncclCommGetAsyncError is polled) and on a machine with two or more GPUs; skipped (exit 77)
# elsewhere. transport-test with 1 teacher + 1 student and --rank-timeout 2:
#   the ordinary job: every payload intact over NCCL (the non-blocking set-up works);
#   rank 1 stopped (SIGSTOP) just before the payload links' NCCL init (DFLASH_TEST_NCCL_SETUP_STOP,
#   a test-only hook): the job ends non-zero within a hang bound, rank 0's error line names the NCCL
#   set-up of the payload links and rank 1, the stopped rank (woken by mpirun) prints no error line,
#   and no rank process is left;
#   rank 1 hung, not stopped (DFLASH_TEST_NCCL_SETUP_HANG: it sleeps; the watchdog's wait allows 2 x
#   the timeout, so the line is the set-up's own): the same, "no answer within run.rank_timeout 2 s";
#   rank 1 stopped before the payload links' split (after their init): the line names the pair's split;
#   rank 1 stopped before the NCCL all-reduce's init (after the payload links worked): the line names
#   the all-reduce's communicator.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
R=$BUILD/dflash_rank
need_cuda
if "$R" --version | grep -q "cuda(emulated)"; then
  export DFLASH_EMU_DEVICES=2 DFLASH_EMU_NCCL_DIR=$TMP # every rank of the np 2 job its own device
elif [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 2 ]; then
  echo "SKIP: the NCCL path needs two GPUs (one per rank)"
  exit 77
fi
unset DFLASH_TEST_NCCL_SETUP_STOP DFLASH_TEST_NCCL_SETUP_HANG
TT=(--mode transport-test --device cuda --rank-timeout 2 --transport.test_bytes=4096)

expect_ok "transport-test (no fault)" mpirun -np 2 "$R" "${TT[@]}"
grep -q "^NCCL, GPU memory to GPU memory" "$TMP/out" && grep -q "all payloads intact (0 wrong elements)" "$TMP/out" &&
  ok || { bad "transport-test: no intact NCCL section:"; cat "$TMP/out" "$TMP/err" >&2; }

# setup_hang NAME VAR=VALUE PATTERN: the job with the hook set; rank 0's error line must match PATTERN.
setup_hang() {
  local name=$1 hook=$2 pattern=$3 pids="" rc t0 el p
  t0=$(date +%s)
  env "$hook" mpirun -np 2 "$R" "${TT[@]}" >"$TMP/h.out" 2>"$TMP/h.err" &
  local job=$!
  for _ in $(seq 1 200); do # the ranks' pids, for the leftover check (at most 20 s)
    pids="$(rank_pid "$job" 0) $(rank_pid "$job" 1)"
    [ "$(echo $pids | wc -w)" -eq 2 ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done # a hang bound: 30 s
  if kill -0 "$job" 2>/dev/null; then
    bad "$name: the job still runs 30 s after it started (a hang)"
    kill -9 $pids "$job" 2>/dev/null; wait "$job"; cat "$TMP/h.err" >&2; return
  fi
  wait "$job"; rc=$?
  el=$(( $(date +%s) - t0 ))
  echo "$name: ended in $el s (exit $rc)"
  [ "$rc" -ne 0 ] && ok || bad "$name: exit 0"
  grep "error:" "$TMP/h.err" | grep -q -- "$pattern" && ok ||
    { bad "$name: no error line matching '$pattern':"; cat "$TMP/h.err" >&2; }
  grep -q "^\[r1\] error:" "$TMP/h.err" && { bad "$name: the hung rank printed an error line:"; grep "error:" "$TMP/h.err" >&2; } || ok
  for _ in $(seq 1 50); do # no rank left (mpirun ends them: SIGCONT, SIGTERM, SIGKILL; a zombie is gone)
    local left=""
    for p in $pids; do awk '{ sub(/.*\) /, ""); exit $1 == "Z" }' "/proc/$p/stat" 2>/dev/null && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] && ok || { bad "$name: rank process(es)$left left after the job ended"; kill -9 $left 2>/dev/null; }
}

# A stopped rank is named with its pid: by the set-up's line ("... (init): no answer within
# run.rank_timeout 2 s: student rank 1 (pid N, on this host, stopped by SIGSTOP) is hung or
# unreachable") or by the watchdog, which may see it first ("student rank 1 (pid N on host) has been
# stopped (SIGSTOP) for 2 s while this rank waited for the NCCL set-up of the payload links (init)").
setup_hang "rank 1 stopped before the payload links' NCCL init" DFLASH_TEST_NCCL_SETUP_STOP=1:links \
  "NCCL set-up of the payload links' communicator of ranks 0..1 (init): .*rank 1 (pid .*hung or unreachable\|rank 1 (pid .*NCCL set-up of the payload links (init).*hung or unreachable"
setup_hang "rank 1 hung before the payload links' NCCL init" DFLASH_TEST_NCCL_SETUP_HANG=1:links \
  "NCCL set-up of the payload links' communicator of ranks 0..1 (init): no answer within run.rank_timeout 2 s: rank 1 is hung or unreachable"
setup_hang "rank 1 stopped before the payload links' NCCL split" DFLASH_TEST_NCCL_SETUP_STOP=1:split \
  "NCCL set-up of the payload link of ranks 0 and 1 (split): .*rank 1 (pid .*hung or unreachable\|rank 1 (pid .*NCCL set-up of the payload links (split).*hung or unreachable"
setup_hang "rank 1 stopped before the NCCL all-reduce's init" DFLASH_TEST_NCCL_SETUP_STOP=1:reduce \
  "NCCL set-up of the all-reduce's communicator of ranks 0..1 (init): .*rank 1 (pid .*hung or unreachable\|rank 1 (pid .*NCCL set-up of the all-reduce (init).*hung or unreachable"
finish
