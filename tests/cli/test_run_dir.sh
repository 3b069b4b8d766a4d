#!/usr/bin/env bash
# test_run_dir.sh: what a run directory must survive (docs/faults.md):
#   - paths that would break a shell command (quotes, spaces, $(), newlines): two runs in one such
#     run.dir (the second exports over the first) leave one drafter, nothing else is deleted;
#   - two jobs in one run.dir: the second is refused in one line naming the directory and the holder,
#     and writes nothing; once the first is killed, its resume is not blocked;
#   - NaN or inf (features with NaN; a checkpoint with a NaN moment): the job stops with one line
#     naming the step, exports nothing, and a non-finite checkpoint is refused at load;
#   - resuming must be the same run: a changed block size or seed is refused naming the keys, a
#     changed lr is said in one line; a newest checkpoint without state.json, or with an impossible
#     optim_step, is refused; a run already at train.steps says so, exits 0 and rewrites nothing;
#   - train.steps = 1e9 starts at once (nothing is allocated per configured step);
#   - an error found before MPI starts is printed once under mpirun -np 3, not three times.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
tiny_job
base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=100000000
      --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6)
errors() { grep -c "error:" "$1"; }

# --- 1. hostile paths ---------------------------------------------------------------------------------
mkdir -p "$TMP/victim" && echo keep >"$TMP/victim/file"
weird="$TMP/it's a \$(touch $TMP/pwned) \`x\`
line' $TMP/victim '"
expect_ok weird-1 mpirun -np 2 "$R" "${base[@]}" --run.dir="$weird" --train.steps=10 --checkpoint.every=5
expect_ok weird-2 mpirun -np 2 "$R" "${base[@]}" --run.dir="$weird" --train.steps=20 --checkpoint.every=5 --run.resume=true
[ -s "$weird/drafter/model.safetensors" ] && ok || bad "no drafter in the run.dir with a hostile name"
[ -f "$TMP/victim/file" ] && ok || bad "a path in run.dir was handed to a shell: $TMP/victim was deleted"
[ ! -e "$TMP/pwned" ] && ok || bad "a path in run.dir was run by a shell"
left=$(cd "$weird" && ls -a | grep -E "drafter\.(old|tmp)" || true)
[ -z "$left" ] && ok || bad "the export left $left behind"

# --- 2. one job per run directory --------------------------------------------------------------------
run=$TMP/shared
mpirun -np 2 "$R" "${base[@]}" --run.dir="$run" --train.steps=100000000 --checkpoint.every=5 \
  --test.slow_teacher=0 --test.slow_ms=20 >"$TMP/first.out" 2>"$TMP/first.err" &
first=$!
# until it has logged and its step-5 checkpoint is in place (published by a rename: complete when
# there), so that the resume below has one to resume from (a hang bound: at most 120 s on a busy machine)
for _ in $(seq 1 1200); do
  grep -qs '"step": 5,' "$run/metrics.jsonl" && [ -d "$run/checkpoints/step-00000005" ] && break
  kill -0 "$first" 2>/dev/null || break
  sleep 0.1
done
grep -qs '"step": 5,' "$run/metrics.jsonl" && [ -d "$run/checkpoints/step-00000005" ] && ok ||
  { bad "the first job did not start or wrote no checkpoint"; cat "$TMP/first.err" >&2; }
kill -STOP "$first" 2>/dev/null # hold the first still (its ranks keep the lock): nothing of it changes the files now
for p in $(pgrep -P "$first"); do kill -STOP "$p"; done
before=$(md5sum "$run/metrics.jsonl" "$run/config.json" | cut -c1-32 | tr '\n' ' ')
expect_fail_mpi second "is in use by another job" mpirun -np 2 "$R" "${base[@]}" --run.dir="$run" --train.steps=7 --train.lr=1e-2
grep "in use by another job" "$TMP/err" | grep -q "host .* pid [0-9]* started [0-9-]* [0-9:]*" && ok ||
  bad "the refusal does not name the holder (host, pid, start time): $(grep error: "$TMP/err")"
after=$(md5sum "$run/metrics.jsonl" "$run/config.json" | cut -c1-32 | tr '\n' ' ')
[ "$before" = "$after" ] && ok || bad "the refused job wrote into the run directory"
for p in $(pgrep -P "$first"); do kill -KILL "$p"; done
kill -KILL "$first" 2>/dev/null
wait "$first" 2>/dev/null
run_dir_free "$run" 60 && ok || bad "the killed job's lock is still held 60 s later"
# the kernel released the lock with the killed process: the resume runs
expect_ok resume-after-kill mpirun -np 2 "$R" "${base[@]}" --run.dir="$run" --train.steps=12 --checkpoint.every=5 --run.resume=true
grep -q "resuming from" "$TMP/err" && ok || bad "the resume after the killed job did not resume"

# --- 3. NaN and inf ----------------------------------------------------------------------------------
# bad data: offline features with NaN (a corrupted dump) reach the student's loss
mpirun -np 1 "$R" --mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" \
  --features.dir="$TMP/feat" --target.layer_ids=0,1 --teacher.topk=6 --drafter.block_size=6 --teacher.max_tokens=256 \
  >"$TMP/dump.out" 2>"$TMP/dump.err" && ok || { bad "dump-features failed"; tail -3 "$TMP/dump.err" >&2; }
$PY -c "
import glob, h5py
with h5py.File(sorted(glob.glob('$TMP/feat/*.h5'))[0], 'r+') as f:
    f['features'][:, :] = 0x7FC0  # bf16 NaN
" || bad "could not poison the features"
# (resealed: the NaN, not the checksum, is what this case reaches; test_checksums.sh has the other)
for f in "$TMP"/feat/*.h5; do $PY "$SRC/tests/cli/crc32c_reseal.py" shard "$f"; done
offline=("${base[@]/--data.path=*/--data.features=$TMP/feat}")
expect_fail_mpi nan-data "training stopped before the update" mpirun -np 1 "$R" "${offline[@]}" --run.dir="$TMP/nan" \
  --train.steps=20 --checkpoint.every=1
line=$(grep "training stopped before the update" "$TMP/err")
echo "nan: $line"
echo "$line" | grep -qE "step 1: the (held-out loss|loss|gradient norm) is (nan|-nan|inf|-inf)" && ok || bad "the line does not name the step and the value: $line"
[ ! -e "$TMP/nan/drafter" ] && ok || bad "a drafter was exported after NaN"
# every checkpoint written holds finite values
$PY - "$TMP/nan/checkpoints" <<'PYEOF' && ok || bad "a checkpoint with non-finite values was written"
import json, math, os, struct, sys
root = sys.argv[1]
for d in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    for name in ("model.safetensors", "optimizer.safetensors"):
        raw = open(os.path.join(root, d, name), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        data = raw[8 + n:]
        for x in struct.unpack("<%df" % (len(data) // 4), data):
            assert math.isfinite(x), (d, name)
PYEOF
# a checkpoint whose Adam moment holds a NaN is refused at load
good=$TMP/good
expect_ok good mpirun -np 2 "$R" "${base[@]}" --run.dir="$good" --train.steps=5 --checkpoint.every=5
cp -r "$good" "$TMP/poisoned"
$PY - "$TMP/poisoned/checkpoints/step-00000005/optimizer.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
b = json.loads(raw[8:8 + n])["m"]["data_offsets"][0]
raw[8 + n + b + 40:8 + n + b + 44] = struct.pack("<f", float("nan"))
open(p, "wb").write(raw)
PYEOF
$PY "$SRC/tests/cli/crc32c_reseal.py" checkpoint "$TMP/poisoned/checkpoints/step-00000005"
expect_fail_mpi nan-checkpoint "tensor m holds a non-finite value" mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/poisoned" \
  --train.steps=10 --run.resume=true

# --- 4. resuming is the same run ---------------------------------------------------------------------
expect_fail_mpi resume-block "drafter.block_size 6 -> 8" mpirun -np 2 "$R" "${base[@]}" --run.dir="$good" --train.steps=10 \
  --run.resume=true --drafter.block_size=8
expect_fail_mpi resume-seed "run.seed" mpirun -np 2 "$R" "${base[@]}" --run.dir="$good" --train.steps=10 --run.resume=true --run.seed=7
grep "belongs to another run" "$TMP/err" | grep -q "run.seed 1234 -> 7" && ok || bad "the seed refusal does not say old -> new: $(grep error: "$TMP/err")"
cp -r "$good" "$TMP/sched"
expect_ok resume-lr mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/sched" --train.steps=10 --run.resume=true --train.lr=1e-4 --checkpoint.every=5
grep -q "the schedule changed since the checkpoint: .*train.lr" "$TMP/err" && ok || bad "a changed lr was not said: $(grep run.resume "$TMP/err")"
grep -q "train.steps 5 -> 10" "$TMP/err" && ok || bad "a changed train.steps was not said"
# the newest checkpoint without state.json: refused, not silently passed over for an older one
cp -r "$TMP/sched" "$TMP/nostate"
rm "$TMP/nostate/checkpoints/step-00000010/state.json"
expect_fail_mpi resume-nostate "step-00000010 has no readable state.json" mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/nostate" \
  --train.steps=15 --run.resume=true
for bad_step in -5 999; do
  cp -r "$good" "$TMP/optim$bad_step"
  sed -i "s/\"optim_step\": 5/\"optim_step\": $bad_step/" "$TMP/optim$bad_step/checkpoints/step-00000005/state.json"
  $PY "$SRC/tests/cli/crc32c_reseal.py" checkpoint "$TMP/optim$bad_step/checkpoints/step-00000005"
  expect_fail_mpi "resume-optim$bad_step" "'optim_step' is $bad_step" mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/optim$bad_step" \
    --train.steps=10 --run.resume=true
done
# already finished: one line, exit 0, nothing rewritten
stamp() { find "$good" -type f -newer "$TMP/mark" | grep -v '/\.lock$'; }
touch "$TMP/mark"; sleep 1.1
expect_ok finished mpirun -np 2 "$R" "${base[@]}" --run.dir="$good" --train.steps=5 --run.resume=true
grep -q "already finished at step 5" "$TMP/err" && ok || bad "no 'already finished' line: $(tail -3 "$TMP/err")"
[ -z "$(stamp)" ] && ok || bad "the finished run rewrote $(stamp)"

# --- 5. the largest train.steps costs nothing up front (the schedule is computed, not listed: a
# list would take about 40 GB here)
expect_ok steps-1e9 mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/long" --train.steps=1000000000 --test.stop_at_step=3
grep -q '"step": 3,' "$TMP/long/metrics.jsonl" 2>/dev/null || grep -q "stopping after step 3" "$TMP/err" && ok || bad "the 1e9-step run did not run"

# --- 6. one line, not one per rank -------------------------------------------------------------------
mpirun -np 3 "$R" "${base[@]}" --run.dir="$TMP/x" --train.lr=fast >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -ne 0 ] && [ "$(errors "$TMP/err")" -eq 1 ] && ok || bad "a config error under -np 3: exit $rc, $(errors "$TMP/err") error lines"
finish
