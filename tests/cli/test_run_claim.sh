#!/usr/bin/env bash
# test_run_claim.sh: a run never destroys another (docs/faults.md, "One run per run directory"):
#   - a new run (no --run.resume) in a run.dir holding an earlier run is refused in one line (what is
#     there, --run.resume=true, a new dir or --run.overwrite=true), and changes nothing there;
#   - with --run.overwrite=true the earlier run's files go, and only them: a file of someone else's
#     (in run.dir, in a checkpoint, in the drafter) stays;
#   - pruning (checkpoint.keep) removes only this run's checkpoints: another run's step-N stays;
#   - an evaluation does not replace an earlier eval.json unless told to;
#   - run.dir = / or $HOME is refused before anything is written;
#   - every path the job reads is among its inputs (issue 49): drafter.config inside run.dir under a
#     name the run writes (RUN/drafter, a published drafter's directory as run.dir) is refused with
#     --run.overwrite or --run.resume, and the drafter is left as it was;
#   - --preflight refuses what the run refuses: an eval run.dir holding eval.json.
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

# drafter.config inside run.dir (issue 49): refused before anything is removed or rewritten
dsum=$(sums "$run/drafter")
expect_fail_mpi drafter-config-in-run "drafter.config $run/drafter lies inside run.dir $run" \
  mpirun -np 2 "$R" "${base[@]}" --run.dir="$run" --train.steps=2 --drafter.config="$run/drafter" --run.overwrite=true
[ "$(sums "$run/drafter")" = "$dsum" ] && ok || bad "--run.overwrite with drafter.config=run.dir/drafter changed the drafter"
# a published drafter's directory as run.dir: its config.json is an input, never rewritten or removed
pub=$TMP/pub
mkdir -p "$pub" && cp "$run/drafter/config.json" "$run/drafter/model.safetensors" "$pub/"
psum=$(sums "$pub")
expect_fail_mpi pub-resume "drafter.config $pub/config.json lies inside run.dir $pub" \
  mpirun -np 2 "$R" "${base[@]}" --run.dir="$pub" --train.steps=2 --drafter.config="$pub/config.json" --run.resume=true
[ "$(sums "$pub")" = "$psum" ] && ok || bad "a run in a published drafter's directory changed it"
# (run.dir's lock over a user's file or a link, drafter.config = run.dir: tests/cli/test_fuzz_files.sh, "paths")

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
# --preflight makes the same claim (issue 49): a FAIL row, and a non-zero exit
mpirun -np 2 "$R" --preflight "${ev[@]}" --run.dir="$TMP/ev" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -ne 0 ] && grep -qE "^run.dir +[0-9]+ +FAIL +run.dir $TMP/ev holds an earlier evaluation" "$TMP/out" && ok ||
  bad "preflight of an eval whose run.dir holds eval.json: exit $rc: $(cat "$TMP/out")"
# an evaluation reads eval.drafter = RUN/drafter and writes RUN/eval.json: allowed (eval writes nothing else there)
rm -f "$run/eval.json"
expect_ok eval-in-run mpirun -np 2 "$R" "${ev[@]}" --run.dir="$run"
[ -s "$run/eval.json" ] && ok || bad "eval in the drafter's run.dir wrote no eval.json"
expect_ok eval-3 mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/ev" --run.overwrite=true

# a file-system root or the home directory
expect_fail root "is the root of a file system" "$R" "${base[@]}" --run.dir=/ --train.steps=2
mkdir -p "$TMP/home"
HOME=$TMP/home expect_fail home "is the home directory" "$R" "${base[@]}" --run.dir="$TMP/home" --train.steps=2
[ -z "$(ls -A "$TMP/home")" ] && ok || bad "the refused run wrote into \$HOME: $(ls -A "$TMP/home")"
finish
