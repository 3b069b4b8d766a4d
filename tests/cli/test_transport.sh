#!/usr/bin/env bash
# test_transport.sh: `dflash_rank --mode transport-test` with 2 teachers + 1 student and 1 + 2:
# deterministic payloads from 1 KiB to 64 MiB, each element checked on arrival; every size must
# arrive with 0 wrong elements (the bandwidth column is printed, never asserted).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
R=$BUILD/dflash_rank
for cfg in "3 --world.students=1" "3 --world.students=2"; do
  set -- $cfg
  np=$1; shift
  expect_ok "transport np $np $*" mpirun -np "$np" "$R" --mode transport-test --device cpu "$@"
  cat "$TMP/out"
  grep -q "all payloads intact (0 wrong elements)" "$TMP/out" && ok || bad "transport-test np $np $*: $(tail -1 "$TMP/out")"
  [ "$(grep -c '^ *[0-9]' "$TMP/out")" -ge 9 ] && ok || bad "transport-test printed fewer sizes than expected"
done
# On the CPU the NCCL path declines (every rank must have a GPU of its own), saying why; a job that
# insists on it stops with one line.
grep -q "NCCL path: not used (" "$TMP/out" && ok || bad "transport-test does not say why NCCL is not used"
T=$BUILD/dflash_tool
"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 12 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
expect_fail_mpi "payload nccl on the CPU" "error: transport.payload = nccl, but NCCL cannot carry the payloads" \
  mpirun -np 2 "$R" --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1 \
  --drafter.block_size=6 --data.heldout_samples=2 --train.steps=2 --run.dir="$TMP/run" --transport.payload=nccl
finish
