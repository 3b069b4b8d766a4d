#!/usr/bin/env bash
# test_payload_pinned_cuda.sh: the payloads of a --device cuda training job over MPI are pinned and
# their copies asynchronous (issue 39), on the CUDA emulator's copy log (tests/emu/README.md,
# DFLASH_EMU_COPY_LOG: per host<->device copy, whether its host side was cudaHostAlloc'd and whether
# the host waited for it at once). Skipped (exit 77) off the emulator build: the log is the emulator's.
# One teacher and one student sharing the emulated device (transport.payload=mpi), 6 steps:
#   the teacher's every device-to-host copy is a payload copy (its features, top-k, LSE): at least
#   3 per batch it served, none of them from pageable memory or waited for at once (nccl-tests
#   style: the wrong ones are counted and must be 0);
#   the student uploads each batch's features once, from a pinned buffer, asynchronously: one
#   pinned host-to-device copy per batch, and no pinned copy the host waited for.
# On the code before issue 39 the teacher copied into malloc'd buffers and synchronised each copy,
# and the student converted the features on the host: every count here fails.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
need_emulator "the copy log is the CUDA emulator's (tests/emu); on a GPU, nsys shows the copies"
if ! "$R" --mode check --device cuda >/dev/null 2>&1; then
  echo "SKIP: no usable CUDA device"
  exit 77
fi
gpu_job 32 32

export DFLASH_EMU_COPY_LOG=$TMP/copies.log
expect_ok "train over MPI on cuda" mpirun -x DFLASH_EMU_COPY_LOG -np 2 "$R" --mode train --device cuda \
  --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1 --drafter.block_size=8 \
  --drafter.layers=1 --train.steps=6 --train.lr=3e-3 --train.max_anchors=16 --train.log_interval=2 \
  --train.eval_interval=6 --train.eval_batches=2 --data.max_tokens_per_batch=256 --data.heldout_samples=8 \
  --teacher.topk=8 --transport.payload=mpi --run.dir="$TMP/run"
served=$(grep -o "teacher 0: served [0-9]* batches" "$TMP/err" | grep -o "[0-9]* batches" | grep -o "[0-9]*")
[ -n "$served" ] && [ "$served" -ge 6 ] && ok || { bad "the teacher served ${served:-no} batches"; cat "$TMP/err" >&2; }
"$PY" - "$TMP/copies.log" "${served:-0}" <<'PY' && ok || bad "payload copies that are not pinned and asynchronous (above)"
import sys
served = int(sys.argv[2])
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("copy ")]
rec = [(int(r[1]), r[2], int(r[3]), r[4] == "pinned=1", r[5] == "async=1") for r in rows]
t_d2h = [r for r in rec if r[0] == 0 and r[1] == "d2h"]
t_wrong = [r for r in t_d2h if not (r[3] and r[4])]
s_pinned = [r for r in rec if r[0] == 1 and r[3]]
s_up = [r for r in s_pinned if r[1] == "h2d" and r[4]]
s_wrong = [r for r in s_pinned if not r[4]]
print(f"teacher: {len(t_d2h)} payload copies for {served} batches, {len(t_wrong)} not pinned+async")
print(f"student: {len(s_up)} pinned async feature uploads for {served} batches, {len(s_wrong)} pinned copies waited for")
fails = []
if len(t_d2h) < 3 * served: fails.append("the teacher made fewer than 3 device-to-host copies per batch")
if t_wrong: fails.append(f"{len(t_wrong)} of the teacher's payload copies are not pinned+async, e.g. {t_wrong[0]}")
if len(s_up) != served: fails.append(f"the student uploaded {len(s_up)} batches' features from pinned memory, not {served}")
if s_wrong: fails.append(f"{len(s_wrong)} of the student's pinned copies were waited for at once")
for f in fails: print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY
grep -q '"loss"' "$TMP/run/metrics.jsonl" 2>/dev/null && ok || bad "no losses in metrics.jsonl"

# The system refuses to pin (DFLASH_EMU_PINNED_BYTES: the emulator grants 64 KiB): the buffers are
# pageable, with one warning, and the job trains as before (the same weights: only the copies differ)
export DFLASH_EMU_PINNED_BYTES=65536
expect_ok "train with pinning refused" mpirun -x DFLASH_EMU_COPY_LOG -x DFLASH_EMU_PINNED_BYTES -np 2 "$R" --mode train \
  --device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1 --drafter.block_size=8 \
  --drafter.layers=1 --train.steps=6 --train.lr=3e-3 --train.max_anchors=16 --train.log_interval=2 \
  --train.eval_interval=6 --train.eval_batches=2 --data.max_tokens_per_batch=256 --data.heldout_samples=8 \
  --teacher.topk=8 --transport.payload=mpi --run.dir="$TMP/run-pageable"
grep -q "warning: the system refused to pin .* pageable instead" "$TMP/err" && ok || bad "no warning that pinning was refused: $(grep -i warn "$TMP/err")"
cmp -s "$TMP/run/drafter/model.safetensors" "$TMP/run-pageable/drafter/model.safetensors" && ok ||
  bad "the drafter trained with pageable buffers differs from the pinned run's"
unset DFLASH_EMU_PINNED_BYTES
finish
