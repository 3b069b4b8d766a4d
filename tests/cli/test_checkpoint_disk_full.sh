#!/usr/bin/env bash
# test_checkpoint_disk_full.sh: the disk fills while a checkpoint is written. The job must stop
# with a non-zero exit and one error line naming the checkpoint and the OS reason (ENOSPC, or
# EFBIG under a file-size limit), leave no temporary file behind, and leave the previous
# checkpoint complete: copied to a disk with space, the run resumes from it with --run.resume=true
# and repeats the uninterrupted run's losses.
#
# The full disk is a tmpfs sized from the first checkpoint (as root, where mount is allowed), so
# the first checkpoint fits and the second does not. Elsewhere (or with DFLASH_TEST_DISK=fsize) a
# file-size limit (ulimit -f, RLIMIT_FSIZE) on the ranks stands in for it: the first checkpoint is
# written without the limit, then the run is resumed under a limit between the sizes of the two
# checkpoint files, so the next checkpoint's write fails with EFBIG (dflash_rank ignores SIGXFSZ,
# which would otherwise kill it).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PY=/usr/bin/python3
MNT=$TMP/small_disk
trap 'umount -l "$MNT" 2>/dev/null; rm -rf "$TMP"' EXIT
command -v mpirun >/dev/null || { echo "test_checkpoint_disk_full: mpirun not found" >&2; exit 1; }

"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.steps=15 --train.lr=3e-3 --train.max_anchors=8 --train.log_interval=5
      --train.eval_interval=1000 --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4
      --teacher.topk=6 --checkpoint.every=5 --checkpoint.keep=3)
job() { mpirun -np 2 "$R" "${base[@]}" "$@"; } # 1 teacher + 1 student
# loss STEP METRICS: the loss logged for STEP (the last line for it: a resumed run repeats steps)
loss() { grep '"step"' "$2" | grep -v heldout | $PY -c "
import sys, json
d = {json.loads(l)['step']: json.loads(l)['loss'] for l in sys.stdin}
print('%.7f' % d[int(sys.argv[1])] if int(sys.argv[1]) in d else 'none')" "$1"; }

# The uninterrupted run, on a disk with space: the reference losses, and the checkpoint's size.
expect_ok reference job --run.dir="$TMP/ref"
ck=$TMP/ref/checkpoints/step-00000005
[ -f "$ck/state.json" ] && ok || bad "reference run: no checkpoint at step 5: $(ls -A "$TMP/ref/checkpoints" 2>&1)"
ck_bytes=0 # what its files take on a tmpfs: whole pages (du would depend on the file system here)
for f in "$ck"/*; do ck_bytes=$(( ck_bytes + ($(stat -c %s "$f") + 4095) / 4096 * 4096 )); done
model_bytes=$(stat -c %s "$ck/model.safetensors")
opt_bytes=$(stat -c %s "$ck/optimizer.safetensors")
echo "a checkpoint: $ck_bytes bytes in pages (model $model_bytes, optimizer $opt_bytes)"

mode=${DFLASH_TEST_DISK:-tmpfs}
if [ "$mode" = tmpfs ]; then
  mkdir -p "$MNT"
  # room for the first checkpoint, the metrics and the config, and half of a second checkpoint
  size_k=$(( (ck_bytes + ck_bytes / 2 + 32768) / 1024 ))
  if ! mount -t tmpfs -o size=${size_k}k tmpfs "$MNT" 2>"$TMP/mount.err"; then
    echo "cannot mount a tmpfs ($(cat "$TMP/mount.err")): using a file-size limit instead"
    mode=fsize
  fi
fi

if [ "$mode" = tmpfs ]; then
  echo "a ${size_k} KiB tmpfs: the checkpoint at step 5 fits, the one at step 10 does not"
  run=$MNT/run
  reason="No space left on device"
  job --run.dir="$run" >"$TMP/full.out" 2>"$TMP/full.err"
  rc=$?
else
  # step 5 on a disk with space, then the rest under a limit that the optimizer file exceeds
  limit_k=$(( (model_bytes + opt_bytes) / 2 / 1024 ))
  echo "a file-size limit of ${limit_k} KiB: model.safetensors fits, optimizer.safetensors does not"
  run=$TMP/limited
  expect_ok first-checkpoint job --run.dir="$run" --test.stop_at_step=5
  reason="File too large"
  # The limit goes on the ranks alone (mpirun's own files are larger), and the ranks talk over TCP:
  # Open MPI's shared-memory transport sizes its segment files past any such limit.
  mpirun --mca btl self,tcp -np 2 bash -c 'ulimit -f "$0" && exec "$@"' "$limit_k" \
    "$R" "${base[@]}" --run.dir="$run" --run.resume=true >"$TMP/full.out" 2>"$TMP/full.err"
  rc=$?
fi
echo "--- the job on the full disk (exit $rc):"; grep -E "error|warning|resuming" "$TMP/full.err"

# non-zero exit, no crash, one error line naming the checkpoint and the reason
[ "$rc" -ne 0 ] && ok || bad "the job on a full disk exited 0"
[ "$rc" -lt 128 ] && ok || bad "the job on a full disk crashed (exit $rc)"
grep -qiE "segmentation|core dumped|exited on signal|File size limit" "$TMP/full.err" && bad "a rank crashed: $(cat "$TMP/full.err")" || ok
n=$(grep -c "error:" "$TMP/full.err")
[ "$n" -eq 1 ] && ok || bad "$n error lines, wanted one: $(grep "error:" "$TMP/full.err")"
grep "error:" "$TMP/full.err" | grep -q "checkpoint $run/checkpoints/step-00000010 not written.*$reason" && ok ||
  bad "the error line does not name the checkpoint and '$reason': $(grep "error:" "$TMP/full.err")"
# nothing temporary left, the step-10 checkpoint absent, step 5 complete and as it was written
left=$(find "$run" \( -name '*.tmp.*' -o -name '.tmp-*' -o -name '.old-*' \))
[ -z "$left" ] && ok || bad "temporary files left behind: $left"
[ ! -e "$run/checkpoints/step-00000010" ] && ok || bad "a step-10 checkpoint exists: $(ls -A "$run/checkpoints/step-00000010")"
[ "$(ls -A "$run/checkpoints" | tr '\n' ' ')" = "step-00000005 " ] && ok || bad "checkpoints: $(ls -A "$run/checkpoints")"
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$ck/$f" "$run/checkpoints/step-00000005/$f" && ok || bad "step-5 $f differs from the reference run's"
  "$T" inspect "$run/checkpoints/step-00000005/$f" >/dev/null 2>&1 && ok || bad "step-5 $f is unreadable"
done
grep -q '"step": 5,' "$run/checkpoints/step-00000005/state.json" && ok || bad "step-5 state.json: $(cat "$run/checkpoints/step-00000005/state.json")"

# The run directory copied to a disk with space resumes from step 5 and repeats the losses.
cp -r "$run" "$TMP/resumed"
umount -l "$MNT" 2>/dev/null
expect_ok resume job --run.dir="$TMP/resumed" --run.resume=true
grep -q "resuming from $TMP/resumed/checkpoints/step-00000005" "$TMP/err" && ok || bad "the resumed run did not start from step 5: $(grep -i resum "$TMP/err")"
for s in 10 15; do
  a=$(loss $s "$TMP/ref/metrics.jsonl") b=$(loss $s "$TMP/resumed/metrics.jsonl")
  echo "step $s: loss $a uninterrupted, $b resumed"
  [ "$a" != none ] && [ "$a" = "$b" ] && ok || bad "step $s: the resumed loss $b differs from the uninterrupted $a"
done
[ "$(ls -A "$TMP/resumed/checkpoints" | tr '\n' ' ')" = "step-00000005 step-00000010 step-00000015 " ] && ok ||
  bad "checkpoints after the resume: $(ls -A "$TMP/resumed/checkpoints")"
finish
