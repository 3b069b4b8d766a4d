#!/usr/bin/env bash
# test_grad_pinned_cuda.sh: the students' MPI gradient all-reduce on a GPU (transport.grad_allreduce
# = mpi, students.h): bucket by bucket as the last micro-batch's backward finishes each, through a
# ring of pinned host chunks with asynchronous copies. Runs in the CUDA emulator build (tests/emu) and
# on a GPU machine; skipped (exit 77) without a CUDA device. 1 teacher + 2 students, --device cuda:
#   the log says the gradients go over MPI through the pinned ring, that every bucket (3 steps x
#   5 buckets) was issued during the backward, and that at least a ring's worth of pieces a step
#   (4 chunks) went into the ring then (copied to the host behind the backward of their layer, their
#   MPI_Iallreduce started while the rest went on);
#   emulator (the copy log, DFLASH_EMU_COPY_LOG): each student copied exactly the gradient's bytes
#   per step to pinned host memory, each copy asynchronous, and at least as many back;
#   the trained weights equal, byte for byte, those of the same run with transport.grad_allreduce =
#   nccl (emulator: three devices, NCCL through files; or a machine with 3 GPUs), which sums the same
#   fp32 values on the GPU (test_nccl_cuda.sh: with two students each element's sum is one fp32
#   addition, the same whichever path makes it); before the pinned ring the MPI path copied the whole
#   gradient through pageable memory after the backward, to the same weights.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
if ! "$R" --mode check --device cuda >/dev/null 2>&1; then
  echo "SKIP: no usable CUDA device (or a binary built without CUDA)"
  exit 77
fi
emu=0
"$R" --version | grep -q "cuda(emulated)" && emu=1

gpu_job 48 40
STEPS=3
S2=(--mode train --device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
    --drafter.block_size=8 --drafter.layers=2 --train.lr=3e-3 --train.max_anchors=16 --train.log_interval=1
    --train.eval_interval=100 --train.eval_batches=1 --data.max_tokens_per_batch=256 --data.heldout_samples=8
    --teacher.topk=8 --train.steps=$STEPS --world.students=2 --train.batches_per_step=2 --transport.payload=mpi)

export DFLASH_EMU_COPY_LOG=$TMP/copies.log
expect_ok "two students, grad_allreduce mpi" \
  mpirun -x DFLASH_EMU_COPY_LOG -np 3 "$R" "${S2[@]}" --transport.grad_allreduce=mpi --run.dir="$TMP/s2-mpi"
unset DFLASH_EMU_COPY_LOG
cp "$TMP/err" "$TMP/s2-mpi.err"
grep -q "gradients: over MPI in 5 buckets started as the last micro-batch's backward finishes each, through a ring of 4 pinned host chunks of" "$TMP/s2-mpi.err" &&
  ok || { bad "grad_allreduce mpi: no log line saying the gradients go through the pinned ring:"; grep -i gradients "$TMP/s2-mpi.err" >&2; }
# every bucket issued during the backward; of their pieces, at least a ring's worth (4) a step went
# into the ring then (the rest wait for a free chunk, at the latest until the step's finish)
during=$(sed -n "s/.*gradients: $((STEPS * 5)) of $((STEPS * 5)) bucket sums started during the backward, the rest after it; \([0-9]*\) of [0-9]* pieces put in the pinned ring then.*/\1/p" "$TMP/s2-mpi.err")
[ -n "$during" ] && [ "$during" -ge $((STEPS * 4)) ] && ok ||
  { bad "grad_allreduce mpi: not every bucket issued during the backward ($STEPS steps x 5 buckets), or fewer than $((STEPS * 4)) pieces in the ring then:"; grep -i gradients "$TMP/s2-mpi.err" >&2; }

if [ "$emu" = 1 ]; then
  # the gradient's bytes, from the plan the students print: "gradients (fp32) ... (N bytes)"; the
  # copy log (tests/emu/README.md) per copy: rank, direction, bytes, pinned, async. A student's only
  # pinned copies to the host are its gradient's pieces (its payloads come in by MPI and go up to
  # the device): exactly the gradient's bytes per step, each asynchronous; as many bytes go back.
  gbytes=$(sed -n 's/^ *gradients (fp32) .*(\([0-9]*\) bytes)$/\1/p' "$TMP/s2-mpi.err" | head -1)
  python3 - "$TMP/copies.log" "${gbytes:-0}" "$STEPS" <<'PY' && ok ||
import sys
g, steps = int(sys.argv[2]), int(sys.argv[3])
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("copy ")]
bad = []
for rank in (1, 2):
    d2h = [r for r in rows if r[1] == str(rank) and r[2] == "d2h" and r[4] == "pinned=1"]
    h2d = [r for r in rows if r[1] == str(rank) and r[2] == "h2d" and r[4] == "pinned=1"]
    nd, nh = sum(int(r[3]) for r in d2h), sum(int(r[3]) for r in h2d)
    waited = [r for r in d2h if r[5] != "async=1"]
    print(f"student rank {rank}: {nd} bytes to pinned host memory, {nh} back (gradient {g} x {steps} steps), {len(waited)} waited for")
    if g == 0 or nd != g * steps: bad.append(f"rank {rank}: {nd} bytes to the host, not {g * steps}")
    if nh < g * steps: bad.append(f"rank {rank}: {nh} bytes back, fewer than {g * steps}")
    if waited: bad.append(f"rank {rank}: {len(waited)} gradient copies waited for at once")
for b in bad: print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
    bad "grad_allreduce mpi: not every student's gradient through pinned host memory, asynchronously (above)"
fi

if [ "$emu" = 1 ] || [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 3 ]; then
  [ "$emu" = 1 ] && export DFLASH_EMU_DEVICES=3 DFLASH_EMU_NCCL_DIR=$TMP # every rank its own device
  expect_ok "two students, grad_allreduce nccl" \
    mpirun -np 3 "$R" "${S2[@]}" --transport.grad_allreduce=nccl --run.dir="$TMP/s2-nccl"
  grep -q "gradients: summed over NCCL" "$TMP/err" && ok || { bad "grad_allreduce nccl: not over NCCL:"; grep -i gradients "$TMP/err" >&2; }
  cmp "$TMP/s2-mpi/drafter/model.safetensors" "$TMP/s2-nccl/drafter/model.safetensors" && ok ||
    bad "grad_allreduce mpi (pinned ring) and nccl trained different weights"
  python3 - "$TMP/s2-mpi/metrics.jsonl" <<'PY' && ok || bad "grad_allreduce mpi: the steps did not move the weights"
import json, sys
l = [d["loss"] for d in map(json.loads, open(sys.argv[1])) if "loss" in d and d.get("split") is None]
assert len(set(l)) == len(l) >= 3, l
PY
else
  echo "SKIP: the comparison with NCCL needs three GPUs (one per rank)"
fi
finish
