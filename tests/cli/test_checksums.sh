#!/usr/bin/env bash
# test_checksums.sh: corruption that stays finite (issue 27, item 4; docs/faults.md, "What is
# verified at load"). Before, each case trained on and exited 0:
#   - one flipped bit in a checkpoint's model.safetensors / optimizer.safetensors / state.json:
#     the resume (and --mode eval of the checkpoint) is refused naming the file and both CRCs;
#   - a top-k value shifted by +50 in a feature shard: the student-only run is refused naming the
#     shard, the sample and the dataset;
#   - the same shift with the checksums made to match (crc32c_reseal.py: a teacher that really
#     computed it): the loss explodes past train.divergence_factor x its running mean and the run
#     stops like a NaN, exporting nothing, naming a checkpoint that verifies; with the factor 0 it
#     runs on (the key works), and a normal run never trips it;
#   - files written before checksums (no seal, no /crc32c, no "checksums") are read with one warning,
#     and then the error does not advise lowering the learning rate.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
RESEAL="$SRC/tests/cli/crc32c_reseal.py"
tiny_job
common=(--device cpu --drafter.block_size=6 --teacher.topk=6 --target.path="$TMP/target" --target.layer_ids=0,1)
train=(--mode train "${common[@]}" --train.max_anchors=8 --train.log_interval=1 --train.eval_interval=100000000
       --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4)
flip() { # flip bit $3 of byte $2 of file $1
  $PY -c "import sys; p, i, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); d = bytearray(open(p, 'rb').read()); d[i] ^= 1 << b; open(p, 'wb').write(d)" "$@"
}

# --- checkpoints
expect_ok good mpirun -np 2 "$R" "${train[@]}" --data.path="$TMP/data.h5" --run.dir="$TMP/good" --train.steps=5 --checkpoint.every=5
ck=checkpoints/step-00000005
grep -q '"checksums"' "$TMP/good/$ck/state.json" && grep -q '"crc32c": "[0-9a-f]\{8\}"}' "$TMP/good/$ck/state.json" && ok ||
  bad "state.json records no checksums or seal: $(cat "$TMP/good/$ck/state.json" | tail -c 200)"
for case in "model.safetensors 3000 4" "optimizer.safetensors 5000 2" "state.json 20 0"; do
  set -- $case
  rm -rf "$TMP/c"; cp -r "$TMP/good" "$TMP/c"
  flip "$TMP/c/$ck/$1" "$2" "$3"
  expect_fail_mpi "ckpt-$1" "$1 fails its checksum" mpirun -np 2 "$R" "${train[@]}" --data.path="$TMP/data.h5" \
    --run.dir="$TMP/c" --train.steps=10 --run.resume=true
done
grep "fails its checksum" "$TMP/err" | grep -q "recorded [0-9a-f]\{8\}, computed [0-9a-f]\{8\}" && ok || bad "the refusal does not name both CRCs"
# --mode eval of a checkpoint verifies it too
rm -rf "$TMP/c"; cp -r "$TMP/good" "$TMP/c"; flip "$TMP/c/$ck/model.safetensors" 3000 4
ev=(--mode eval --device cpu --target.path="$TMP/target" --data.max_tokens_per_batch=200 --teacher.topk=6 --data.path="$TMP/data.h5")
expect_fail_mpi eval-ckpt "model.safetensors fails its checksum" mpirun -np 2 "$R" "${ev[@]}" --eval.drafter="$TMP/c/$ck" --run.dir="$TMP/e-c"
expect_ok eval-good mpirun -np 2 "$R" "${ev[@]}" --eval.drafter="$TMP/good/$ck" --run.dir="$TMP/e-good"
# an older checkpoint (no checksums, no seal, no identity): one warning, then resumed
rm -rf "$TMP/old"; cp -r "$TMP/good" "$TMP/old"
$PY - "$TMP/old/$ck/state.json" <<'PYEOF' || bad "could not make an old checkpoint"
import json, sys
p = sys.argv[1]
s = json.loads(open(p).read())
for k in ("checksums", "crc32c", "identity"):
    s.pop(k, None)
open(p, "w").write(json.dumps(s))
PYEOF
expect_ok ckpt-old mpirun -np 2 "$R" "${train[@]}" --data.path="$TMP/data.h5" --run.dir="$TMP/old" --train.steps=7 --run.resume=true
[ "$(grep -c "carries no checksums" "$TMP/err")" = 1 ] && ok || bad "no single warning for an old checkpoint: $(grep -c "carries no checksums" "$TMP/err")"

# --- feature shards
mpirun -np 1 "$R" --mode dump-features "${common[@]}" --data.path="$TMP/data.h5" --features.dir="$TMP/feat" \
  --teacher.max_tokens=256 >"$TMP/out" 2>"$TMP/err" && ok || { bad "dump-features"; tail -3 "$TMP/err" >&2; }
shift50() { $PY -c "
import glob, h5py, sys
with h5py.File(sorted(glob.glob(sys.argv[1] + '/*.h5'))[0], 'r+') as f:
    v = f['topk_val'][...]; v[:, 0] += 50; f['topk_val'][...] = v
" "$1"; }
cp -r "$TMP/feat" "$TMP/feat-bad"; shift50 "$TMP/feat-bad"
expect_fail_mpi feat-shift "/topk_val fails its checksum" mpirun -np 1 "$R" "${train[@]}" --data.features="$TMP/feat-bad" \
  --run.dir="$TMP/r-bad" --train.steps=5
[ ! -e "$TMP/r-bad/drafter" ] && ok || bad "a drafter was exported from corrupt features"
flip "$TMP/feat-bad/features.json" 40 1
expect_fail_mpi index-flip "features.json fails its checksum" mpirun -np 1 "$R" "${train[@]}" --data.features="$TMP/feat-bad" \
  --run.dir="$TMP/r-bad2" --train.steps=5

# --- divergence: the same shift, checksums matching
cp -r "$TMP/feat" "$TMP/feat-x"; shift50 "$TMP/feat-x"
for f in "$TMP"/feat-x/*.h5; do $PY "$RESEAL" shard "$f"; done
cp -r "$TMP/feat" "$TMP/feat-run"
expect_ok normal mpirun -np 1 "$R" "${train[@]}" --data.features="$TMP/feat-run" --run.dir="$TMP/r-normal" --train.steps=20 --checkpoint.every=5
grep -q "divergence" "$TMP/err" && bad "a normal run tripped the divergence stop" || ok
rm -rf "$TMP/feat-run"; cp -r "$TMP/feat-x" "$TMP/feat-run" # the same samples, a teacher gone wrong
expect_fail_mpi diverged "train.divergence_factor 100 x its running mean" mpirun -np 1 "$R" "${train[@]}" \
  --data.features="$TMP/feat-run" --run.dir="$TMP/r-normal" --train.steps=40 --checkpoint.every=5 --run.resume=true
line=$(grep "divergence_factor" "$TMP/err")
echo "diverged: $line"
echo "$line" | grep -q "the last good checkpoint: step 20 in .*(verified)" && ok || bad "the line does not name a verified checkpoint: $line"
echo "$line" | grep -q "lower train.lr" && ok || bad "verified inputs, but no advice: $line"
[ -z "$(ls "$TMP/r-normal/checkpoints" | grep -v step-00000020 | grep -v step-0000001 | grep -v step-0000000)" ] && ok ||
  bad "a checkpoint was written after the divergence: $(ls "$TMP/r-normal/checkpoints")"
expect_ok factor-off mpirun -np 1 "$R" "${train[@]}" --data.features="$TMP/feat-x" --run.dir="$TMP/r-off" --train.steps=5 \
  --train.divergence_factor=0
# an index from before checksums over the same diverging data: no advice to lower the learning rate
cp -r "$TMP/feat-x" "$TMP/feat-xold"
$PY - "$TMP/feat-xold/features.json" <<'PYEOF' || bad "could not make an old index"
import json, sys
p = sys.argv[1]
s = json.loads(open(p).read())
s.pop("crc32c"); s.pop("identity")
open(p, "w").write(json.dumps(s))
PYEOF
expect_fail_mpi diverged-unverified "the features (written before checksums) could not be verified" mpirun -np 1 "$R" "${train[@]}" \
  --data.features="$TMP/feat-xold" --run.dir="$TMP/r-xold" --train.steps=20
grep -q "lower train.lr" "$TMP/err" && grep "error:" "$TMP/err" | grep -qv "before lowering" && bad "advice on unverified data" || ok
finish
