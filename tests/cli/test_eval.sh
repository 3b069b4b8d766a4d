#!/usr/bin/env bash
# test_eval.sh: --mode eval (SPEC §6): a drafter evaluated on every sample of a training set,
# forward only, run.dir/eval.json with tau_decode first.
#   - live (teachers compute the features) and offline (data.features) give the same numbers;
#   - the exported drafter and the final checkpoint of the same run give identical numbers;
#   - 1 and 2 students give the same numbers (the decode walk's counts exactly, the loss to fp32
#     summation order);
#   - every sample counts (no held-out split), and nothing of the training run is touched;
#   - a drafter of another shape (hidden size, vocabulary), a missing directory or model file, and
#     target layers other than the drafter's are refused in one line.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
tiny_job
"$T" make-target "$TMP/other" --arch llama --layers 2 --hidden 48 --heads 4 --kv-heads 2 --vocab 150 --seed 6 >/dev/null 2>&1 || bad "make-target other"
train=(--mode train --device cpu --target.layer_ids=0,1 --drafter.block_size=6 --train.max_anchors=8 --train.log_interval=5
       --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --train.steps=150 --train.lr=5e-3
       --checkpoint.every=150 --train.eval_interval=1000)
expect_ok train mpirun -np 2 "$R" "${train[@]}" --target.path="$TMP/target" --data.path="$TMP/data.h5" --run.dir="$TMP/run"
expect_ok train-other mpirun -np 2 "$R" "${train[@]}" --target.path="$TMP/other" --data.path="$TMP/data.h5" --run.dir="$TMP/run-other"
before=$(find "$TMP/run" -type f -exec md5sum {} + | sort)
ev=(--mode eval --device cpu --target.path="$TMP/target" --data.max_tokens_per_batch=200 --teacher.topk=6)
field() { $PY -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

expect_ok live mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run/drafter" --run.dir="$TMP/e-live"
grep -q "eval: 24 samples, .*tau_decode [0-9.]* ([0-9]* steps)" "$TMP/err" && ok || bad "no eval line: $(tail -3 "$TMP/err")"
head -c 40 "$TMP/e-live/eval.json" | grep -q '^{"tau_decode": ' && ok || bad "eval.json does not lead with tau_decode: $(head -c 80 "$TMP/e-live/eval.json")"
$PY - "$TMP/e-live/eval.json" <<'PYEOF' && ok || bad "eval.json lacks a field or holds a bad value: $(cat "$TMP/e-live/eval.json")"
import json, sys
e = json.load(open(sys.argv[1]))
for k in ("tau_decode", "tau_decode_steps", "tokens", "tau_chain", "tau_tree", "acc", "loss", "ce", "kl", "samples"):
    assert k in e, k
assert e["samples"] == 24 and e["tau_decode_steps"] > 0 and 1.05 <= e["tau_decode"] <= 6 and len(e["acc"]) == 5
assert e["tau_decode_tokens"] / e["tau_decode_steps"] == round(e["tau_decode"], 4) or abs(e["tau_decode_tokens"] / e["tau_decode_steps"] - e["tau_decode"]) < 1e-4
PYEOF
after=$(find "$TMP/run" -type f -exec md5sum {} + | sort)
[ "$before" = "$after" ] && ok || bad "the evaluation changed the training run's files"

# offline: the same features from dump-features
mpirun -np 1 "$R" --mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" \
  --features.dir="$TMP/feat" --target.layer_ids=0,1 --teacher.topk=6 --drafter.block_size=6 --teacher.max_tokens=256 \
  >"$TMP/dump.out" 2>"$TMP/dump.err" && ok || { bad "dump-features failed"; tail -3 "$TMP/dump.err" >&2; }
expect_ok offline mpirun -np 1 "$R" "${ev[@]}" --data.features="$TMP/feat" --eval.drafter="$TMP/run/drafter" --run.dir="$TMP/e-off"
# a checkpoint of the same weights, and two students
expect_ok checkpoint mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run/checkpoints/step-00000150" --run.dir="$TMP/e-ck"
expect_ok two-students mpirun -np 3 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run/drafter" --run.dir="$TMP/e-s2" --world.students=2
$PY - "$TMP"/e-live/eval.json "$TMP"/e-off/eval.json "$TMP"/e-ck/eval.json "$TMP"/e-s2/eval.json <<'PYEOF' && ok || bad "the evaluations disagree"
import json, sys
live, off, ck, s2 = [json.load(open(p)) for p in sys.argv[1:5]]
print("live %.4f (%d steps), offline %.4f (%d), checkpoint %.4f, 2 students %.4f; loss %.6f %.6f %.6f %.6f" % (
    live["tau_decode"], live["tau_decode_steps"], off["tau_decode"], off["tau_decode_steps"], ck["tau_decode"],
    s2["tau_decode"], live["loss"], off["loss"], ck["loss"], s2["loss"]))
# the checkpoint holds the exported weights: identical
assert ck == dict(live, drafter=ck["drafter"]), (ck, live)
# 2 students: the same anchors, the walk's counts exactly; the loss to fp32 summation order
for k in ("tau_decode_steps", "tau_decode_tokens", "anchors", "tokens", "samples"):
    assert s2[k] == live[k], k
assert abs(s2["loss"] - live["loss"]) <= 1e-5 * abs(live["loss"])
# offline: the same features up to the teacher's packing (fp32 summation order before the bf16
# rounding): the loss to 1e-3, the walk's counts to 1 % (an argmax near a tie may flip)
for k in ("tokens", "samples", "anchors"):
    assert off[k] == live[k], k
assert abs(off["loss"] - live["loss"]) <= 1e-3 * abs(live["loss"])
assert abs(off["tau_decode_steps"] - live["tau_decode_steps"]) <= 0.01 * live["tau_decode_steps"]
assert abs(off["tau_decode"] - live["tau_decode"]) <= 0.01
PYEOF

# refused in one line
expect_fail_mpi other-shape "'hidden_size' is 48 but the target's 'hidden_size' is 32" \
  mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run-other/drafter" --run.dir="$TMP/e-bad"
expect_fail_mpi no-dir "eval.drafter $TMP/none: not a directory" \
  mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/none" --run.dir="$TMP/e-bad"
mkdir -p "$TMP/empty"
expect_fail_mpi no-model "eval.drafter $TMP/empty: no readable model.safetensors" \
  mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/empty" --run.dir="$TMP/e-bad"
expect_fail_mpi other-layers "'target_layer_ids' is \[0,1\] but the teachers send layers \[1\]" \
  mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run/drafter" --target.layer_ids=1 --run.dir="$TMP/e-bad"
expect_fail_mpi no-drafter "needs eval.drafter" mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --run.dir="$TMP/e-bad"
# features dumped before the last layer was taken after the final norm (no feature_convention in
# features.json) are refused when they hold the last layer (layer 1 of 2 here)
cp -r "$TMP/feat" "$TMP/feat-old"
$PY - "$TMP/feat-old/features.json" <<'PYEOF' # as written then: no seal, no identity, no convention
import json, sys
p = sys.argv[1]
s = json.loads(open(p).read())
for k in ("crc32c", "identity", "feature_convention"):
    s.pop(k, None)
open(p, "w").write(json.dumps(s))
PYEOF
expect_fail_mpi old-features "was dumped before the last layer's features were taken after the final norm" \
  mpirun -np 1 "$R" "${ev[@]}" --data.features="$TMP/feat-old" --eval.drafter="$TMP/run/drafter" --run.dir="$TMP/e-bad"
[ ! -e "$TMP/e-bad/eval.json" ] && ok || bad "a refused evaluation wrote eval.json"
# an empty /heldout: nothing to evaluate (not a loss of 0 over 0 samples)
cp "$TMP/data.h5" "$TMP/empty-held.h5"
$PY -c "import h5py, numpy as np, sys; f = h5py.File(sys.argv[1], 'a'); f.create_dataset('heldout', data=np.zeros(0, dtype=np.int64))" "$TMP/empty-held.h5"
expect_fail_mpi empty-heldout "error: --mode eval: nothing to evaluate: the held-out split of .*empty-held.h5 is empty" \
  mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/empty-held.h5" --eval.drafter="$TMP/run/drafter" --run.dir="$TMP/e-empty"
[ ! -e "$TMP/e-empty/eval.json" ] && ok || bad "an empty held-out split wrote eval.json"
# a DFlash2 export whose config.json names DFlashDraftModel: the selector and convolutions would be ignored
expect_ok train-dflash2 mpirun -np 2 "$R" "${train[@]}" --train.steps=5 --checkpoint.every=5 --drafter.kind=dflash2 \
  --target.path="$TMP/target" --data.path="$TMP/data.h5" --run.dir="$TMP/run-d2"
# a DFlash2 checkpoint is evaluated as DFlash2 (its state.json's drafter.kind), as its export is
expect_ok dflash2-checkpoint mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" \
  --eval.drafter="$TMP/run-d2/checkpoints/step-00000005" --run.dir="$TMP/e-d2ck"
[ -s "$TMP/e-d2ck/eval.json" ] && ok || bad "dflash2 checkpoint: no eval.json"
$PY -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c['architectures'] = ['DFlashDraftModel']; json.dump(c, open(p, 'w'))" \
  "$TMP/run-d2/drafter/config.json"
expect_fail_mpi kind-mismatch "is not one of a DFlashDraftModel drafter's (drafter.kind dflash" \
  mpirun -np 2 "$R" "${ev[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run-d2/drafter" --run.dir="$TMP/e-d2"
finish
