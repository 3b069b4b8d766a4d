#!/usr/bin/env bash
# test_groups_cuda.sh: a teacher group of 2 GPUs (world.teacher_group_size=2: two pipeline stages,
# the activations GPU to GPU over NCCL) against the single-GPU teacher, with --device cuda. Runs on a
# machine with three or more GPUs, and in the CUDA emulator build (tests/emu), which gives each rank
# a device of its own (DFLASH_EMU_DEVICES=3) and carries NCCL between the processes through files;
# skipped (exit 77) elsewhere. Checks:
#   dump-features: the group's shards equal the single GPU's (tests/cli/features_equal.py), and the
#   log says the stages' activations went over NCCL;
#   training 12 steps (2 stages + 1 student, payloads over NCCL): every logged loss equals the
#   single-GPU teacher's (1 teacher + 1 student), the batches being the same numbers.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
if ! "$R" --mode check --device cuda >/dev/null 2>&1; then
  echo "SKIP: no usable CUDA device (or a binary built without CUDA)"
  exit 77
fi
if "$R" --version | grep -q "cuda(emulated)"; then
  export DFLASH_EMU_DEVICES=3 DFLASH_EMU_NCCL_DIR=$TMP
  echo "CUDA emulator build: three emulated devices, NCCL through files in $TMP"
elif [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 3 ]; then
  echo "SKIP: a group of 2 GPUs and a student need three GPUs (one per rank)"
  exit 77
fi
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }

"$T" make-target "$TMP/target" --arch qwen3 --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --vocab 241 \
  --seed 31 >/dev/null 2>&1 &&
  "$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 40 --prompt-len 8 --gen-len 36 --seed 4 >/dev/null 2>&1 &&
  ok || bad "make-target / make-data"

dump=(--mode dump-features --device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,2
      --teacher.topk=8 --features.shard_samples=16 --teacher.max_tokens=256 --drafter.block_size=8)
expect_ok "dump 1 GPU" mpirun -np 1 "$R" "${dump[@]}" --features.dir="$TMP/f1"
expect_ok "dump group of 2" mpirun -np 2 "$R" "${dump[@]}" --features.dir="$TMP/f2" --world.teacher_group_size=2 \
  --transport.payload=nccl
grep -q "features over NCCL" "$TMP/err" && ok || { bad "dump group: the stages did not use NCCL:"; cat "$TMP/err" >&2; }
out=$("$PY" "$SRC/tests/cli/features_equal.py" "$TMP/f1" "$TMP/f2" 2>&1) && ok || bad "dump group of 2 differs from 1 GPU: $out"

ARGS=(--mode train --device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,2
      --drafter.block_size=8 --drafter.layers=1 --train.lr=3e-3 --train.max_anchors=16 --train.log_interval=4
      --train.eval_interval=12 --train.eval_batches=2 --data.max_tokens_per_batch=256 --data.heldout_samples=8
      --teacher.topk=8 --train.steps=12 --transport.payload=nccl)
expect_ok "train 1 GPU teacher" mpirun -np 2 "$R" "${ARGS[@]}" --run.dir="$TMP/run-1"
expect_ok "train group of 2" mpirun -np 3 "$R" "${ARGS[@]}" --run.dir="$TMP/run-2" --world.teacher_group_size=2
"$PY" - "$TMP/run-1/metrics.jsonl" "$TMP/run-2/metrics.jsonl" <<'PY' && ok || bad "the group of 2 trained differently"
import json, sys
a, b = ([(d["step"], d.get("split"), d["loss"]) for d in map(json.loads, open(p)) if "loss" in d] for p in sys.argv[1:])
assert len(a) >= 3 and a == b, (a, b)
print("group of 2 == 1 GPU:", a)
PY
finish
