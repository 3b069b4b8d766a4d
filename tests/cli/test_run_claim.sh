#!/usr/bin/env bash
# test_run_claim.sh: a run never destroys another (docs/faults.md, "One run per run directory"):
#   - a new run (no --run.resume) in a run.dir holding an earlier run is refused in one line (what is
#     there, --run.resume=true, a new dir or --run.overwrite=true), and changes nothing there;
#   - with --run.overwrite=true the earlier run's files go, and only them: a file of someone else's
#     (in run.dir, in a checkpoint, in the drafter) stays;
#   - pruning (checkpoint.keep) removes only this run's checkpoints: another run's step-N stays;
#   - an evaluation does not replace an earlier eval.json unless told to;
#   - run.dir = / or $HOME is refused before anything is written.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=100000000
      --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6)
sums() { (cd "$1" && find . -type f ! -name .lock -print0 | sort -z | xargs -0 md5sum); }

run=$TMP/run
expect_ok first mpirun -np 2 "$R" "${base[@]}" --run.dir="$run" --train.steps=10 --checkpoint.every=5
echo mine >"$run/notes.txt"
echo mine >"$run/checkpoints/step-00000005/my-notes.txt"
echo mine >"$run/drafter/README.md"
before=$(sums "$run")
expect_fail_mpi again "holds an earlier run" mpirun -np 2 "$R" "${base[@]}" --run.dir="$run" --train.steps=10 --checkpoint.every=5
line=$(grep "error:" "$TMP/err")
for want in metrics.jsonl checkpoint "exported drafter" "--run.resume=true" "--run.overwrite=true" "new run.dir"; do
  case "$line" in *"$want"*) ok ;; *) bad "the refusal does not say '$want': $line" ;; esac
done
[ "$(sums "$run")" = "$before" ] && ok || bad "the refused run changed the earlier run's files"

# overwrite: the earlier run's files go, the foreign ones stay
expect_ok overwrite mpirun -np 2 "$R" "${base[@]}" --run.dir="$run" --train.steps=6 --checkpoint.every=3 --run.overwrite=true
for f in notes.txt checkpoints/step-00000005/my-notes.txt; do
  [ "$(cat "$run/$f" 2>/dev/null)" = mine ] && ok || bad "--run.overwrite removed a file it did not write: $f"
done
# the earlier export held a foreign file: the new export takes its name, the old one is moved aside whole
kept=$(find "$run" -name README.md -path "*drafter*")
[ -n "$kept" ] && [ "$(cat "$kept")" = mine ] && ok || bad "the export removed a file it did not write: drafter/README.md"
[ ! -e "$run/checkpoints/step-00000010" ] && ok || bad "--run.overwrite left the earlier run's step-10 checkpoint"
[ ! -e "$run/checkpoints/step-00000005/state.json" ] && ok || bad "--run.overwrite left the earlier run's step-5 state"
n=$(grep -c '"step"' "$run/metrics.jsonl")
[ "$n" -ge 1 ] && [ "$(grep -c '"step": 10,' "$run/metrics.jsonl")" -eq 0 ] && ok || bad "metrics.jsonl still holds the earlier run"
[ -s "$run/checkpoints/step-00000006/state.json" ] && ok || bad "the overwriting run wrote no checkpoint"
[ -s "$run/drafter/model.safetensors" ] && ok || bad "the overwriting run exported no drafter"

# pruning keeps another run's checkpoint (copied in: its state.json has another run_id)
run2=$TMP/run2
expect_ok other mpirun -np 2 "$R" "${base[@]}" --run.dir="$run2" --train.steps=2 --checkpoint.every=2
mkdir -p "$TMP/run3/checkpoints"
cp -r "$run2/checkpoints/step-00000002" "$TMP/run3/checkpoints/step-00000001"
/usr/bin/python3 - "$TMP/run3/checkpoints/step-00000001/state.json" <<'PYEOF'
import json, sys
p = sys.argv[1]; s = json.load(open(p)); s["step"] = s["optim_step"] = 1; json.dump(s, open(p, "w"))
PYEOF
# a resumed run whose newest checkpoint is its own: step-1 is another run's and must stay
expect_ok own mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/run3/x" --train.steps=3 --checkpoint.every=1 --checkpoint.keep=1
mv "$TMP/run3/x/checkpoints/"step-* "$TMP/run3/checkpoints/"
expect_ok resume-prune mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/run3" --train.steps=6 --checkpoint.every=1 --checkpoint.keep=1 --run.resume=true
[ -s "$TMP/run3/checkpoints/step-00000001/state.json" ] && ok || bad "pruning removed another run's checkpoint"
[ -s "$TMP/run3/checkpoints/step-00000006/state.json" ] && ok || bad "no newest checkpoint after the resume"
left=$(ls "$TMP/run3/checkpoints" | grep -c '^step-')
[ "$left" -eq 2 ] && ok || bad "pruning kept $left checkpoints, wanted 2 (this run's newest and the other run's): $(ls "$TMP/run3/checkpoints")"

# an evaluation does not replace an earlier eval.json
ev=(--mode eval --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
    --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --eval.drafter="$run/drafter")
expect_ok eval-1 mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/ev"
expect_fail_mpi eval-2 "holds an earlier evaluation" mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/ev"
expect_ok eval-3 mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/ev" --run.overwrite=true

# a file-system root or the home directory
expect_fail root "is the root of a file system" "$R" "${base[@]}" --run.dir=/ --train.steps=2
mkdir -p "$TMP/home"
HOME=$TMP/home expect_fail home "is the home directory" "$R" "${base[@]}" --run.dir="$TMP/home" --train.steps=2
[ -z "$(ls -A "$TMP/home")" ] && ok || bad "the refused run wrote into \$HOME: $(ls -A "$TMP/home")"
finish
