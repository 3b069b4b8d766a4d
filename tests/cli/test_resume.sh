#!/usr/bin/env bash
# test_resume.sh: a run stopped after a checkpoint and resumed gives exactly the losses of the
# uninterrupted run (CPU backend, same seed), its metrics' wall_s going on from the stopped job's; checkpoints are complete directories, the newest
# checkpoint.keep of them are kept, and no temporary directory is left behind. A run killed between
# its final checkpoint and the end of its export (what it leaves: the checkpoint, no drafter/, no
# summary line) resumes to the export, byte for byte the uninterrupted run's; an unparseable
# state.json is one error naming the file and the line. Another model put at target.path (the same
# config.json, other weights) is refused in one line naming target.path and its weights: by a
# resumed training run (the checkpoint's identity) and by a resumed dump-features (its shards').
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PY=/usr/bin/python3
"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 48 --heads 4 --kv-heads 2 --vocab 200 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 40 --prompt-len 6 --gen-len 30 --seed 2 >/dev/null 2>&1 || bad "make-data"
base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.steps=30 --train.lr=3e-3 --train.max_anchors=12 --train.log_interval=5
      --train.eval_interval=1000 --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4
      --teacher.topk=6 --checkpoint.every=10 --checkpoint.keep=2)
losses() { grep '"step"' "$1" | grep -v heldout | $PY -c "import sys, json; print(' '.join('%d:%.7f' % (json.loads(l)['step'], json.loads(l)['loss']) for l in sys.stdin))"; }

expect_ok full mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/full"
expect_ok stopped mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut" --test.stop_at_step=20
[ -d "$TMP/cut/checkpoints/step-00000020" ] && ok || bad "no checkpoint at step 20: $(ls "$TMP/cut/checkpoints")"
expect_ok resumed mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut" --run.resume=true
grep -q "resuming from" "$TMP/err" && ok || bad "the resumed run did not say where it resumed from"
a=$(losses "$TMP/full/metrics.jsonl")
b=$(losses "$TMP/cut/metrics.jsonl")
echo "uninterrupted: $a"
echo "stopped+resumed: $b"
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "resumed losses differ from the uninterrupted run"
# every line carries the run's wall time; the resumed job's lines go on from the stopped job's
$PY - "$TMP/cut/metrics.jsonl" <<'PYEOF' && ok || bad "wall_s missing or not going on after the resume"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
walls = [r["wall_s"] for r in rows if "step" in r]
assert len(walls) == sum(1 for r in rows if "step" in r) and all(w >= 0 for w in walls), walls
i = max(k for k, r in enumerate(rows) if r.get("step") == 20 and "split" not in r)  # the resumed job's first lines follow
assert all(w >= walls[i] for w in walls[i:]), walls
PYEOF
# keep = 2: steps 20 and 30 remain; nothing temporary
[ "$(ls "$TMP/full/checkpoints" | tr '\n' ' ')" = "step-00000020 step-00000030 " ] && ok || bad "kept checkpoints: $(ls -a "$TMP/full/checkpoints")"
for f in model.safetensors optimizer.safetensors state.json; do
  [ -s "$TMP/full/checkpoints/step-00000030/$f" ] && ok || bad "checkpoint lacks $f"
done
"$T" inspect "$TMP/full/checkpoints/step-00000030/model.safetensors" >/dev/null && ok || bad "checkpoint weights unreadable"
# resuming with no checkpoint starts from step 0
expect_ok fresh-resume mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/fresh" --run.resume=true --train.steps=5 --checkpoint.every=0
grep -q "no checkpoint" "$TMP/err" && ok || bad "resume without a checkpoint did not say so"
# killed after the final checkpoint, before the export finished: the resume exports it
cp -r "$TMP/full" "$TMP/noexp"
rm -rf "$TMP/noexp/drafter" "$TMP/noexp/.lock"
sed -i '/"summary"/d' "$TMP/noexp/metrics.jsonl"
expect_ok export-resume mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/noexp" --run.resume=true
grep -q "no drafter was exported after it" "$TMP/err" && ok || bad "the resume did not say it completes the export"
cmp -s "$TMP/full/drafter/model.safetensors" "$TMP/noexp/drafter/model.safetensors" && ok || bad "the export on resume differs from the uninterrupted run's"
cmp -s "$TMP/full/drafter/config.json" "$TMP/noexp/drafter/config.json" && ok || bad "the export's config.json on resume differs"
expect_ok export-done mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/noexp" --run.resume=true
grep -q "nothing to do" "$TMP/err" && ok || bad "a resume after the completed export did not say nothing to do"
# an unparseable state.json: one line naming it and where
cp -r "$TMP/full" "$TMP/badstate"
rm -f "$TMP/badstate/.lock"
printf '{"step": 30,\n  "optim_step": ' >"$TMP/badstate/checkpoints/step-00000030/state.json"
expect_fail_mpi bad-state "step-00000030/state.json: not valid JSON (near line" mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/badstate" --run.resume=true --train.steps=40
# another model at target.path: the same config.json, other weights (seed 6)
"$T" make-target "$TMP/other" --arch llama --layers 2 --hidden 48 --heads 4 --kv-heads 2 --vocab 200 --seed 6 >/dev/null 2>&1 || bad "make-target other"
cmp -s "$TMP/target/config.json" "$TMP/other/config.json" && ok || bad "the other model's config.json differs (the case is the weights alone)"
grep -q '"target_weights_crc32c"' "$TMP/full/checkpoints/step-00000030/state.json" && ok || bad "state.json records no weights fingerprint"
dump=(mpirun -np 1 "$R" --mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --teacher.topk=6 --teacher.max_tokens=256 --features.shard_samples=20 --features.dir="$TMP/feat")
expect_ok dump "${dump[@]}"
grep -q '"target_weights_crc32c"' "$TMP/feat/features.json" && ok || bad "features.json records no weights fingerprint"
rm "$TMP/feat/features.json" # as after a dump stopped before its index
cp -r "$TMP/full" "$TMP/other-run" && rm -f "$TMP/other-run/.lock"
mv "$TMP/target" "$TMP/target.orig" && mv "$TMP/other" "$TMP/target"
expect_fail_mpi resume-other-weights "run.resume: the checkpoint .* was made with target.path weights (\*.safetensors) fingerprint [0-9a-f]*, this run has [0-9a-f]*" \
  mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/other-run" --run.resume=true --train.steps=40
[ ! -e "$TMP/other-run/checkpoints/step-00000040" ] && ok || bad "a resume with other weights trained on"
expect_fail_mpi dump-other-weights "features-00000-of-00002.h5 was made with target.path weights (\*.safetensors) fingerprint [0-9a-f]*, this run has" \
  "${dump[@]}"
[ ! -e "$TMP/feat/features.json" ] && ok || bad "a dump resumed with other weights wrote its index"
mv "$TMP/target" "$TMP/other" && mv "$TMP/target.orig" "$TMP/target"
expect_ok dump-same-weights "${dump[@]}"
grep -q "2 already done" "$TMP/err" && ok || bad "the unchanged dump resume did not reuse its shards: $(tail -2 "$TMP/err")"
finish
