#!/usr/bin/env bash
# test_nccl_cuda.sh: the NCCL payload path (transport.payload=nccl: features GPU to GPU, one two-rank
# communicator per teacher-student pair), which needs one GPU per rank. Runs on a machine with two or
# more GPUs, and in the CUDA emulator build (tests/emu), which gives each rank a device of its own
# (DFLASH_EMU_DEVICES=2) and carries NCCL between the processes through files; skipped (exit 77)
# elsewhere. Checks, with 1 teacher + 1 student:
#   transport-test: the NCCL section runs and every payload arrives intact (0 wrong elements);
#   --preflight: the NCCL row is ok (a communicator and one all-reduce);
#   training 24 steps with payload nccl: the log says the features go over NCCL, and every logged
#   loss equals, to the last digit, the same run's with payload mpi (the transport moves the same bytes).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
if ! "$R" --mode check --device cuda >/dev/null 2>&1; then
  echo "SKIP: no usable CUDA device (or a binary built without CUDA)"
  exit 77
fi
if "$R" --version | grep -q "cuda(emulated)"; then
  export DFLASH_EMU_DEVICES=2 DFLASH_EMU_NCCL_DIR=$TMP
  echo "CUDA emulator build: two emulated devices, NCCL through files in $TMP"
elif [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 2 ]; then
  echo "SKIP: the NCCL path needs two GPUs (one per rank)"
  exit 77
fi

expect_ok transport-test mpirun -np 2 "$R" --mode transport-test --device cuda
grep -q "^NCCL, GPU memory to GPU memory" "$TMP/out" && ok || { bad "transport-test ran no NCCL section:"; cat "$TMP/out" "$TMP/err" >&2; }
grep -q "all payloads intact (0 wrong elements)" "$TMP/out" && ok || { bad "transport-test: payloads damaged:"; cat "$TMP/out" >&2; }
sed -n '/^NCCL/,$p' "$TMP/out"

"$T" make-target "$TMP/target" --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 256 --seed 11 >/dev/null 2>&1 &&
  "$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 48 --prompt-len 8 --gen-len 40 --seed 3 >/dev/null 2>&1 &&
  ok || bad "make-target / make-data"
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
finish
