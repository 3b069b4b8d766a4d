#!/usr/bin/env bash
# test_transport.sh: `dflash_rank --mode transport-test` with 2 teachers + 1 student and 1 + 2:
# deterministic payloads from 1 KiB to 64 MiB, each element checked on arrival; every size must
# arrive with 0 wrong elements (the bandwidth column is printed, never asserted). Then the MPI
# all-reduce table (an fp32 sum over all 3 ranks): 9 sizes, 1 KiB to 64 MiB by 4, each with 0 wrong
# elements and busbw = algbw * 2(n-1)/n; on the CPU its NCCL table declines, saying why. And the
# students' gradient path: auto on the CPU sums over MPI in place (the log says so), nccl is one
# error line naming transport.grad_allreduce and the reason. transport.test_bytes sets the largest
# size (the tables end at it).
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
  # the all-reduce table: its rows up to the next line that is not a row
  awk '/^MPI all-reduce, fp32 sum over all 3 ranks, host memory/ {t = 1; next} t && /^ +bytes +iters +time_us +algbw +busbw +#wrong$/ {next}
       t && $1 ~ /^[0-9]+$/ {print; next} t {exit}' "$TMP/out" >"$TMP/sums"
  [ "$(wc -l <"$TMP/sums")" -eq 9 ] && ok || bad "np $np $*: the MPI all-reduce table has $(wc -l <"$TMP/sums") rows, want 9 (1 KiB .. 64 MiB)"
  # (both printed to 3 decimals: 0.002 of rounding allowed)
  awk -v n="$np" 'NF != 6 || $1 != 1024 * 4 ^ (NR - 1) || $6 != 0 || $3 <= 0 || $4 < 0 {print "row " NR ": " $0; bad = 1}
       ($5 - $4 * 2 * (n - 1) / n) ^ 2 > 4e-6 + ($4 * 1e-3) ^ 2 {print "row " NR ": busbw is not algbw*2(n-1)/n: " $0; bad = 1}
       END {exit bad}' "$TMP/sums" && ok || bad "np $np $*: MPI all-reduce rows wrong"
done
grep -q "^NCCL all-reduce: not used (" "$TMP/out" && ok || bad "transport-test does not say why the NCCL all-reduce is not used"
# transport.test_bytes: the tables end at that size (here 5000 bytes: 1 KiB, 4 KiB, then 5000)
expect_ok "transport test_bytes" mpirun -np 2 "$R" --mode transport-test --device cpu --transport.test_bytes=5000
grep -q "all payloads intact (0 wrong elements)" "$TMP/out" && ok || bad "transport-test test_bytes=5000: $(tail -1 "$TMP/out")"
[ "$(awk '$1 ~ /^[0-9]+$/ {printf "%s ", $1}' "$TMP/out")" = "1024 4096 5000 1024 4096 5000 " ] && ok ||
  bad "transport.test_bytes=5000: rows $(awk '$1 ~ /^[0-9]+$/ {printf "%s ", $1}' "$TMP/out"), want 1024 4096 5000 in each table"
# On the CPU the NCCL path declines (every rank must have a GPU of its own), saying why; a job that
# insists on it stops with one line.
grep -q "NCCL path: not used (" "$TMP/out" && ok || bad "transport-test does not say why NCCL is not used"
T=$BUILD/dflash_tool
"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 12 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
expect_fail_mpi "payload nccl on the CPU" "error: transport.payload = nccl, but NCCL cannot carry the payloads" \
  mpirun -np 2 "$R" --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1 \
  --drafter.block_size=6 --data.heldout_samples=2 --train.steps=2 --run.dir="$TMP/run" --transport.payload=nccl
# Two students on the CPU: the gradients go over MPI in place (auto), the first student says so; nccl
# cannot be had there: one error line naming the key and why.
JOB=(--device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1 --drafter.block_size=6
     --data.heldout_samples=2 --train.steps=2 --world.students=2 --train.batches_per_step=2)
expect_ok "two students, grad_allreduce auto" mpirun -np 3 "$R" "${JOB[@]}" --run.dir="$TMP/run-auto"
grep -q "gradients: summed over MPI in place (NCCL not used: CPU backend)" "$TMP/err" && ok ||
  { bad "two students on the CPU: no log line saying the gradients go over MPI in place:"; grep -i gradients "$TMP/err" >&2; }
[ "$(grep -c "gradients: summed over" "$TMP/err")" -eq 1 ] && ok || bad "the gradient path is not said exactly once"
# (the reason: rank 1, the first student, is not on a GPU; or, in a CPU-only build, no CUDA at all)
expect_fail_mpi "grad_allreduce nccl on the CPU" \
  "error: transport.grad_allreduce = nccl, but NCCL cannot sum the students' gradients: \(rank 1 is not on a GPU\|built without CUDA\)" \
  mpirun -np 3 "$R" "${JOB[@]}" --run.dir="$TMP/run-nccl" --transport.grad_allreduce=nccl
finish
