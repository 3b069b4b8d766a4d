#!/usr/bin/env bash
# test_reserve_cuda.sh: the start-up check of a job on the CUDA backend (gpu_reserve.h; skipped,
# exit 77, without a CUDA device). Each rank, once its CUDA context, cuBLAS and NCCL communicators
# exist, compares the device's free memory with its memory plan and logs what the context and
# communicators took; a plan that does not fit is refused in one line naming the rank and the budget
# to lower, before any weight is loaded. On a GPU: a tiny job (1 teacher + 1 student, 1 step) passes
# and both ranks log the line. In the emulator build (tests/emu) also: an emulated device of 32 MiB
# + 256 KiB (DFLASH_EMU_GPU_BYTES) holds the cuBLAS workspace (32 MiB) but not the teacher's plan
# (464 KiB): refused in one line.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
if ! "$R" --mode check --device cuda >/dev/null 2>&1; then
  echo "SKIP: no usable CUDA device (or a binary built without CUDA)"
  exit 77
fi
tiny_job
job=(--device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1 --drafter.block_size=6
     --drafter.layers=1 --train.max_anchors=8 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6
     --train.steps=1 --train.eval_interval=1000 --transport.payload=mpi)
expect_ok "a tiny job" mpirun -np 2 "$R" "${job[@]}" --run.dir="$TMP/run"
for who in "teacher rank 0" "student rank 1"; do
  grep -q "$who: .* free on .* after the CUDA context, handles and communicators (.* taken)" "$TMP/err" && ok ||
    { bad "no start-up memory line for $who:"; grep -i "free on" "$TMP/err" >&2; }
done
grep "after the CUDA context" "$TMP/err"
if "$R" --mode check --device cuda 2>&1 | grep -q "emulator"; then
  expect_fail_mpi "a device too small" "teacher rank 0: the memory plan needs .* but .* of its .* are free after the CUDA context, handles and NCCL communicators: lower teacher.mem_budget" \
    env DFLASH_EMU_GPU_BYTES=33816576 mpirun -np 2 -x DFLASH_EMU_GPU_BYTES "$R" "${job[@]}" --run.dir="$TMP/small"
  grep -q "target: loaded\|loading" "$TMP/err" && bad "the refused rank loaded weights first" || ok
fi
finish
