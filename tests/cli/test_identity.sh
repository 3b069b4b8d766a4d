#!/usr/bin/env bash
# test_identity.sh: inputs checked against each other (issue 27, item 1; src/common/data/identity.c).
# Every case would have run on to exit 0 before: each is refused now in one line naming both values.
#   - a student-only run (data.features) with other target layer ids than the features were dumped
#     from (the same number of columns), or with a target of another layer count;
#   - a resumed dump-features whose existing shard holds another training set (same sample count
#     and lengths, other tokens), or other sample lengths;
#   - a resumed training run whose training set (same path) now holds other samples, or another
#     /heldout (the same count, other samples: it would evaluate on samples it trained on);
#   - a student-only run naming the dumped sets in another order (data.sets; the weights apply by
#     position), or another set under a dumped set's position; a copy of a dumped set is accepted;
#   - --mode eval of a checkpoint on its training set with another /heldout.
# The same inputs unchanged still pass (so a refusal is the change's doing).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
"$T" make-target "$TMP/target3" --arch llama --layers 3 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target 3"
"$T" make-data "$TMP/other.h5" --target "$TMP/target" --samples 24 --prompt-len 6 --gen-len 24 --seed 9 >/dev/null 2>&1 || bad "make-data other"
"$T" make-data "$TMP/longer.h5" --target "$TMP/target" --samples 24 --prompt-len 6 --gen-len 20 --seed 2 >/dev/null 2>&1 || bad "make-data longer"
common=(--device cpu --drafter.block_size=6 --teacher.topk=6)
train=(--mode train "${common[@]}" --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=100000000
       --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4)
dump() { mpirun -np 1 "$R" --mode dump-features "${common[@]}" --target.path="$TMP/target" --teacher.max_tokens=256 "$@"; }

# --- student-only runs against the features' identity
expect_ok dump-layer0 dump --data.path="$TMP/data.h5" --features.dir="$TMP/feat0" --target.layer_ids=0
grep -q '"identity"' "$TMP/feat0/features.json" && ok || bad "features.json records no identity"
expect_ok offline-same mpirun -np 1 "$R" "${train[@]}" --target.path="$TMP/target" --data.features="$TMP/feat0" \
  --target.layer_ids=0 --train.steps=2 --run.dir="$TMP/r-same"
expect_fail_mpi offline-layers "was made with target_layer_ids \[0\], this run has \[1\]" mpirun -np 1 "$R" "${train[@]}" \
  --target.path="$TMP/target" --data.features="$TMP/feat0" --target.layer_ids=1 --train.steps=2 --run.dir="$TMP/r-layers"
[ ! -e "$TMP/r-layers/drafter" ] && ok || bad "a drafter was exported from features of other layers"
expect_fail_mpi offline-target "target num_hidden_layers 2, this run has 3" mpirun -np 1 "$R" "${train[@]}" \
  --target.path="$TMP/target3" --data.features="$TMP/feat0" --target.layer_ids=0 --train.steps=2 --run.dir="$TMP/r-target"

# --- a resumed dump-features against shards of another training set
expect_ok dump-a dump --data.path="$TMP/data.h5" --features.dir="$TMP/featA" --target.layer_ids=0 --features.shard_samples=12
rm "$TMP/featA/features.json" # as after a dump stopped before its index
expect_fail_mpi dump-other-tokens "features-00000-of-00002.h5 was made with training-set tokens CRC32C" \
  dump --data.path="$TMP/other.h5" --features.dir="$TMP/featA" --target.layer_ids=0 --features.shard_samples=12
expect_fail_mpi dump-other-lengths "features-00000-of-00002.h5 was made with training-set lengths CRC32C" \
  dump --data.path="$TMP/longer.h5" --features.dir="$TMP/featA" --target.layer_ids=0 --features.shard_samples=12
expect_ok dump-a-again dump --data.path="$TMP/data.h5" --features.dir="$TMP/featA" --target.layer_ids=0 --features.shard_samples=12
grep -q "2 already done" "$TMP/err" && ok || bad "the unchanged resume did not reuse its shards: $(tail -2 "$TMP/err")"

# --- a resumed training run against its checkpoint's identity
cp "$TMP/data.h5" "$TMP/live.h5"
live=(mpirun -np 2 "$R" "${train[@]}" --target.path="$TMP/target" --data.path="$TMP/live.h5" --target.layer_ids=0,1
      --checkpoint.every=5 --run.dir="$TMP/r-live")
expect_ok live-5 "${live[@]}" --train.steps=5
grep -q '"identity"' "$TMP/r-live/checkpoints/step-00000005/state.json" && ok || bad "state.json records no identity"
cp "$TMP/longer.h5" "$TMP/live.h5" # the same path, other samples
expect_fail_mpi resume-other-data "run.resume: the checkpoint .* was made with training-set lengths CRC32C" \
  "${live[@]}" --train.steps=10 --run.resume=true
cp "$TMP/data.h5" "$TMP/live.h5"
expect_ok resume-same "${live[@]}" --train.steps=10 --run.resume=true
# --- the held-out split is part of a run's identity
PY=/usr/bin/python3
setheld() { $PY -c "import h5py, numpy as np, sys; f = h5py.File(sys.argv[1], 'a'); f.pop('heldout', None); f.create_dataset('heldout', data=np.array([int(x) for x in sys.argv[2].split(',')], dtype=np.int64))" "$@"; }
cp "$TMP/data.h5" "$TMP/held.h5"
setheld "$TMP/held.h5" 0,1,2,3
expect_ok held-train mpirun -np 2 "$R" "${train[@]}" --target.path="$TMP/target" --data.path="$TMP/held.h5" --target.layer_ids=0,1 \
  --train.steps=4 --checkpoint.every=2 --test.stop_at_step=2 --run.dir="$TMP/r-held"
grep -q '"heldout_crc32c"' "$TMP/r-held/checkpoints/step-00000002/state.json" && ok || bad "the checkpoint records no held-out split"
setheld "$TMP/held.h5" 4,5,6,7
expect_fail_mpi held-resume "held-out split (indices' CRC32C)" mpirun -np 2 "$R" "${train[@]}" --target.path="$TMP/target" \
  --data.path="$TMP/held.h5" --target.layer_ids=0,1 --train.steps=4 --checkpoint.every=2 --run.dir="$TMP/r-held" --run.resume=true
setheld "$TMP/held.h5" 0,1,2,3
expect_ok held-same mpirun -np 2 "$R" "${train[@]}" --target.path="$TMP/target" --data.path="$TMP/held.h5" --target.layer_ids=0,1 \
  --train.steps=4 --checkpoint.every=2 --run.dir="$TMP/r-held" --run.resume=true
# --mode eval of that checkpoint on the same set with another /heldout: refused; with its own: evaluated
ev=(--mode eval --device cpu --target.path="$TMP/target" --data.max_tokens_per_batch=200 --teacher.topk=6 --data.path="$TMP/held.h5"
    --eval.drafter="$TMP/r-held/checkpoints/step-00000004")
setheld "$TMP/held.h5" 4,5,6,7
expect_fail_mpi held-eval "this evaluation's /heldout holds 4" mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/e-held"
setheld "$TMP/held.h5" 0,1,2,3
expect_ok held-eval-same mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/e-held2"

# --- data.sets against the sets the features were dumped from
expect_ok dump-sets dump --data.sets="$TMP/data.h5:1,$TMP/other.h5:1" --features.dir="$TMP/feat-sets" --target.layer_ids=0
grep -q '"lengths_crc32c"' "$TMP/feat-sets/features.json" && ok || bad "features.json records no set's content identity"
expect_fail_mpi sets-order "data.sets: set 0 is .*other.h5, but data.features .* was dumped with it as set 1" mpirun -np 1 "$R" \
  "${train[@]}" --target.path="$TMP/target" --data.features="$TMP/feat-sets" --target.layer_ids=0 --train.steps=2 \
  --data.sets="$TMP/other.h5:3,$TMP/data.h5:1" --run.dir="$TMP/r-order"
expect_fail_mpi sets-other "data.sets: set 1 is .*longer.h5 (.*), but data.features .* was dumped from .*other.h5" mpirun -np 1 "$R" \
  "${train[@]}" --target.path="$TMP/target" --data.features="$TMP/feat-sets" --target.layer_ids=0 --train.steps=2 \
  --data.sets="$TMP/data.h5:1,$TMP/longer.h5:1" --run.dir="$TMP/r-other"
cp "$TMP/other.h5" "$TMP/other-copy.h5"
expect_ok sets-copy mpirun -np 1 "$R" "${train[@]}" --target.path="$TMP/target" --data.features="$TMP/feat-sets" --target.layer_ids=0 \
  --train.steps=2 --data.sets="$TMP/data.h5:1,$TMP/other-copy.h5:2" --run.dir="$TMP/r-copy"
finish
