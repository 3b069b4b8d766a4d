#!/usr/bin/env bash
# test_nccl_cuda.sh: the NCCL payload path (transport.payload=nccl: features GPU to GPU, one two-rank
# communicator per teacher-student pair), which needs one GPU per rank. Runs on a machine with two or
# more GPUs, and in the CUDA emulator build (tests/emu), which gives each rank a device of its own
# (DFLASH_EMU_DEVICES=2) and carries NCCL between the processes through files; skipped (exit 77)
# elsewhere. Checks, with 1 teacher + 1 student:
#   transport-test: the NCCL section runs and every payload arrives intact (0 wrong elements);
#   --preflight: the NCCL row is ok (a communicator and one all-reduce);
#   training 24 steps with payload nccl: the log says the features go over NCCL, and every logged
#   loss equals, to the last digit, the same run's with payload mpi (the transport moves the same bytes);
#   transport-test's NCCL all-reduce table (fp32 sums over both ranks, checked on the GPU): 9 sizes,
#   every element right;
#   two students (1 teacher + 2 students, three devices) with transport.grad_allreduce=nccl: the log
#   says the gradients go over NCCL in buckets, and every logged loss equals, to the last digit, the
#   run's with grad_allreduce=mpi. Exact, not a tolerance: with two students each element of the sum
#   is one fp32 addition, and a + b == b + a, so NCCL's sum is MPI's bit for bit (fp32 both; the
#   buckets change when a sum starts, not what it adds); with three or more the order of the additions
#   may differ between the paths and the losses would agree only to a few ulps.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
if ! "$R" --mode check --device cuda >/dev/null 2>&1; then
  echo "SKIP: no usable CUDA device (or a binary built without CUDA)"
  exit 77
fi
if "$R" --version | grep -q "cuda(emulated)"; then
  export DFLASH_EMU_DEVICES=3 DFLASH_EMU_NCCL_DIR=$TMP # every rank of the np 3 job its own device
  echo "CUDA emulator build: three emulated devices, NCCL through files in $TMP"
elif [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 2 ]; then
  echo "SKIP: the NCCL path needs two GPUs (one per rank)"
  exit 77
fi

expect_ok transport-test mpirun -np 2 "$R" --mode transport-test --device cuda
grep -q "^NCCL, GPU memory to GPU memory" "$TMP/out" && ok || { bad "transport-test ran no NCCL section:"; cat "$TMP/out" "$TMP/err" >&2; }
grep -q "all payloads intact (0 wrong elements)" "$TMP/out" && ok || { bad "transport-test: payloads damaged:"; cat "$TMP/out" >&2; }
sed -n '/^NCCL/,$p' "$TMP/out"
# the NCCL all-reduce table: 9 rows (1 KiB .. 64 MiB), each with 0 wrong elements
awk '/^NCCL all-reduce, fp32 sum over all 2 ranks, GPU memory/ {t = 1; next} t && $1 == "bytes" {next}
     t && $1 ~ /^[0-9]+$/ {rows++; if (NF != 6 || $6 != 0) bad = 1; next} t {exit} END {exit !(rows == 9 && !bad)}' "$TMP/out" &&
  ok || { bad "transport-test: no NCCL all-reduce table of 9 sizes with 0 wrong elements:"; cat "$TMP/out" >&2; }

gpu_job 48 40
ARGS=(--mode train --device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=8 --drafter.layers=1 --train.lr=3e-3 --train.max_anchors=16 --train.log_interval=4
      --train.eval_interval=12 --train.eval_batches=2 --data.max_tokens_per_batch=256 --data.heldout_samples=8
      --teacher.topk=8 --train.steps=24)

expect_ok preflight mpirun -np 2 "$R" --preflight "${ARGS[@]}" --transport.payload=nccl --run.dir="$TMP/pf"
grep -E "^nccl +[0-9]+ +ok" "$TMP/out" >/dev/null && ok || { bad "preflight: no ok NCCL row:"; cat "$TMP/out" >&2; }

for p in nccl mpi; do
  expect_ok "train payload $p" mpirun -np 2 "$R" "${ARGS[@]}" --transport.payload=$p --run.dir="$TMP/run-$p"
  cp "$TMP/err" "$TMP/train-$p.err"
done
grep -q "payloads: features over NCCL" "$TMP/train-nccl.err" && ok || { bad "payload nccl: the features did not go over NCCL:"; grep payloads "$TMP/train-nccl.err" >&2; }
python3 - "$TMP/run-nccl/metrics.jsonl" "$TMP/run-mpi/metrics.jsonl" <<'PY' && ok || bad "payload nccl and mpi trained differently"
import json, sys
a, b = ([(d["step"], d.get("split"), d["loss"]) for d in map(json.loads, open(p)) if "loss" in d] for p in sys.argv[1:])
assert len(a) >= 6 and a == b, (a, b)
assert a[-1][2] < a[0][2], a  # and it learns
print("nccl == mpi:", a)
PY

# Two students: the gradients over NCCL in buckets, or over MPI; the same losses (see the top).
# (payloads over MPI: on a machine with two GPUs the teacher shares one with a student)
S2=(--mode train --device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
    --drafter.block_size=8 --drafter.layers=2 --train.lr=3e-3 --train.max_anchors=16 --train.log_interval=1
    --train.eval_interval=100 --train.eval_batches=1 --data.max_tokens_per_batch=256 --data.heldout_samples=8
    --teacher.topk=8 --train.steps=4 --world.students=2 --train.batches_per_step=4 --transport.payload=mpi)
for g in nccl mpi; do
  expect_ok "two students, grad_allreduce $g" mpirun -np 3 "$R" "${S2[@]}" --transport.grad_allreduce=$g --run.dir="$TMP/s2-$g"
  cp "$TMP/err" "$TMP/s2-$g.err"
done
grep -q "gradients: summed over NCCL, GPU to GPU, in fp32, in 5 buckets" "$TMP/s2-nccl.err" && ok ||
  { bad "grad_allreduce nccl: the gradients did not go over NCCL in 5 buckets (2 layers):"; grep -i gradients "$TMP/s2-nccl.err" >&2; }
# every student's last micro-batch has anchors here, so every bucket sum starts during the backward
grep -q "gradients: 20 of 20 bucket sums started during the backward" "$TMP/s2-nccl.err" && ok ||
  { bad "grad_allreduce nccl: not every bucket sum started during the backward (4 steps x 5 buckets):"; grep -i gradients "$TMP/s2-nccl.err" >&2; }
grep -q "gradients: summed over MPI through host memory (NCCL not used: transport.grad_allreduce = mpi)" "$TMP/s2-mpi.err" && ok ||
  { bad "grad_allreduce mpi: no log line saying so:"; grep -i gradients "$TMP/s2-mpi.err" >&2; }
python3 - "$TMP/s2-nccl/metrics.jsonl" "$TMP/s2-mpi/metrics.jsonl" <<'PY' && ok || bad "grad_allreduce nccl and mpi trained differently"
import json, sys
a, b = ([(d["step"], d.get("split"), d["loss"]) for d in map(json.loads, open(p)) if "loss" in d] for p in sys.argv[1:])
assert len(a) >= 5 and a == b, (a, b)  # 4 training steps and the held-out evaluations
assert len({l for _, s, l in a if s is None}) == 4, a  # the steps moved the weights (else equal losses prove little)
print("grad_allreduce nccl == mpi:", a)
PY
finish
