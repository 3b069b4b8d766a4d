#!/usr/bin/env bash
# test_e2e_cuda.sh: a training job on the CUDA backend (skipped, exit 77, without a CUDA device):
# tests/gpu/check.sh's e2e part as it runs on the GPU machine — mpirun -np 2, one teacher and one
# student sharing the device (payloads over MPI), 48 steps on a toy Qwen3 target with self-distilled
# data: exit 0, the loss falls (check_lib.py's criteria), a drafter is exported. Then its transport
# part: transport-test element by element and --preflight. In the emulator build (tests/emu) this is
# the GPU check's own code path, run here before a GPU is lent (about a minute).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
if ! "$BUILD/dflash_rank" --mode check --device cuda >/dev/null 2>&1; then
  echo "SKIP: no usable CUDA device (or a binary built without CUDA)"
  exit 77
fi
mkdir -p "$TMP/out" "$TMP/work"
for part in e2e transport; do
  if OUT=$TMP/out WORK=$TMP/work BUILD=$BUILD DEV=cuda PART=$part bash "$SRC/tests/gpu/check.sh" --part "$part" >"$TMP/$part.log" 2>&1; then
    ok
  else
    bad "check.sh --part $part:"; cat "$TMP/$part.log" >&2
  fi
  sed "s/^/  $part: /" "$TMP/$part.log" | tail -12
  echo "  $part note: $(cat "$TMP/work/$part.note" 2>/dev/null)"
done
[ -s "$TMP/out/e2e_metrics.jsonl" ] && ok || bad "no metrics from the e2e run"
finish
