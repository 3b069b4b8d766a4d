#!/usr/bin/env bash
# run.sh WORKDIR: our trainer (dflash_rank) and the peer (vLLM's speculators 0.9.0) train the same DFlash
# drafter on the same data on this CPU, side by side, and the same evaluators measure both (issue 51).
#
# WORKDIR is what examples/smollm2-135m/run.sh leaves (or bench/peers/smoke_workdir.sh, in minutes):
# WORKDIR/target (the HF checkpoint), WORKDIR/regen.h5 (the regenerated training set with its held-out
# split /heldout), WORKDIR/features (its offline features; made here when absent),
# WORKDIR/prompts-heldout/*.h5 and WORKDIR/prompts-eval/*.h5 (the per-category evaluation sets).
#
#   1. the peer's venv, WORKDIR/peers-venv (venv.sh: speculators 0.9.0 pinned, torch, transformers)
#   2. the peer's inputs, once for every recipe and seed, in WORKDIR/peers/inputs (make_inputs.py): the
#      same token ids and loss masks as JSONL, the same held-out split excluded (it becomes the peer's
#      validation split), through the peer's own `speculators prepare-data`; the hidden states of our
#      target_layer_ids (features.json) from a transformers forward of the same target, checked against
#      our offline features
#   3. ours: dflash_rank trains from the offline features (one rank, THREADS threads), exports
#      OUT/ours/drafter
#   4. the peer: speculators' trainer through speculators_cpu.py (the three CPU substitutions, nothing
#      edited), --draft-attn-impl sdpa --loss-implementation eager, full block attention unless the
#      recipe says otherwise; its last checkpoint converted to the z-lab format (to_zlab.py) and checked
#      against the peer's own forward (check_convert.py) -> OUT/peer/drafter
#   5. both drafters, the same evaluators: --mode eval on the recorded held-out split (regen.h5), on
#      every held-out category and every category of the other source; tools/spec_decode.py (the dflash
#      package's decoding, lossless check) on the other source's categories (SPEC=1)
#   6. the peer's curve: every CURVE_EVERY-th epoch checkpoint converted and evaluated on the held-out
#      split (ours logs its own every train.eval_interval steps)
#   7. OUT/table.md (compare.py): acceptance by set, s per step, steps, wall time, peak memory, the curve
#
# OUT = WORKDIR/peers/$TAG. Every step is skipped when its output is there (a killed run continues;
# ours resumes from its newest checkpoint, the peer from its newest epoch).
# Environment: RECIPE (ours: the example's defaults in both; peer: speculators' DFlash defaults in
# both; README.md has the mapping), STEPS (2400, both), SEED (1234, both), THREADS (2: torch threads
# and OMP_NUM_THREADS of each trainer; the trainers run one after the other), NP (2: ranks of
# dump-features and --mode eval), BUILD (the C binaries; default build/ in the repository),
# TAG ($RECIPE-s$SEED), SPEC (1: spec_decode.py on the other source; 0 skips it), SPEC_SAMPLES
# (prompts per category for spec_decode.py; default all), CURVE_EVERY (4: peer epochs between curve
# points; 0: none), PEER_EXTRA / OURS_EXTRA (more flags / keys for one side).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ex=$root/examples/smollm2-135m
W=$(cd "$1" && pwd)
RECIPE=${RECIPE:-ours} STEPS=${STEPS:-2400} SEED=${SEED:-1234} THREADS=${THREADS:-2} NP=${NP:-2}
BUILD=${BUILD:-$root/build} TAG=${TAG:-$RECIPE-s$SEED} SPEC=${SPEC:-1} SPEC_SAMPLES=${SPEC_SAMPLES:-}
CURVE_EVERY=${CURVE_EVERY:-4} PEER_EXTRA=${PEER_EXTRA:-} OURS_EXTRA=${OURS_EXTRA:-}
bin=$BUILD
O=$W/peers/$TAG
I=$W/peers/inputs
py=$W/peers-venv/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export TRANSFORMERS_NO_ADVISORY_WARNINGS=1 # OMP_NUM_THREADS=$THREADS is set for the two trainers only (the
# evaluations' ranks choose their own threads, as in the example)
say() { echo "== $(date +%H:%M:%S) peers: $*"; }
die() { echo "error: bench/peers/run.sh: $*" >&2; exit 1; }
[ -x "$bin/dflash_rank" ] || die "$bin/dflash_rank not found (build it: cmake -S $root -B $bin && cmake --build $bin; or set BUILD)"
[ -f "$W/target/config.json" ] || die "$W/target/config.json not found: run examples/smollm2-135m/run.sh $W first (or smoke_workdir.sh)"
[ -f "$W/regen.h5" ] || die "$W/regen.h5 not found: run examples/smollm2-135m/run.sh $W first (or smoke_workdir.sh)"
case $RECIPE in ours|peer) ;; *) die "RECIPE=$RECIPE: expected ours or peer" ;; esac
mkdir -p "$O"

# 1. the peer's environment
"$here/venv.sh" "$W"

# our offline features (the example's dump-features), and the target layers they hold
if [ ! -f "$W/features/features.json" ]; then
  say "offline features: dump-features on $NP ranks -> $W/features"
  mpirun -np "$NP" --bind-to none "$bin/dflash_rank" --config "$ex/train.json" --mode dump-features \
    --target.path="$W/target" --data.path="$W/regen.h5" --features.dir="$W/features" --run.dir="$W/dump-run"
fi
ours_ids=$("$py" -c "import json,sys; print(','.join(str(i) for i in json.load(open(sys.argv[1]))['target_layer_ids']))" \
  "$W/features/features.json")
peer_ids=$("$py" -c "import sys; print(' '.join(str(int(i) + 1) for i in sys.argv[1].split(',')))" "$ours_ids")
say "target layers: ours $ours_ids (outputs of these layers) = the peer's --target-layer-ids $peer_ids (inputs of the next)"

# 2. the peer's inputs
if [ ! -f "$I/data/split.json" ]; then
  say "the peer's inputs: the training set as JSONL, then speculators prepare-data (no server) -> $I"
  "$py" "$here/make_inputs.py" jsonl --data "$W/regen.h5" --out "$I"
  for s in train heldout; do
    rm -rf "$I/prep-$s"
    "$W/peers-venv/bin/speculators" prepare-data --model "$W/target" --data "$I/$s.jsonl" --output "$I/prep-$s" \
      --seq-length 8192 --num-preprocessing-workers 1 --seed 0 >"$I/prep-$s.log" 2>&1 ||
      { tail -20 "$I/prep-$s.log" >&2; die "speculators prepare-data of $I/$s.jsonl failed (log: $I/prep-$s.log)"; }
  done
  rm -rf "$I/data" "$I/data.tmp"
  "$py" "$here/make_inputs.py" concat --train "$I/prep-train" --heldout "$I/prep-heldout" --out "$I/data"
fi
if [ ! -f "$I/hidden.done" ] || [ "$(cat "$I/hidden.done")" != "$ours_ids" ]; then
  say "the peer's hidden states: a transformers forward of the target, layers $ours_ids + the last (before the norm)"
  "$py" "$here/make_inputs.py" hidden --target "$W/target" --data "$I/data" --layer-ids "$ours_ids" --threads "$THREADS"
  "$py" "$here/make_inputs.py" check --data "$I/data" --features "$W/features" --layer-ids "$ours_ids"
  echo "$ours_ids" >"$I/hidden.done"
fi
ratio=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['train_data_ratio'])" "$I/data/split.json")

# The recipes, each in both trainers' terms (README.md, "The recipe mapping", says what cannot be matched)
full_all() { seq -s ' ' 0 $(( $1 - 1 )); }
if [ "$RECIPE" = ours ]; then
  LAYERS=${LAYERS:-1} ANCHORS=${ANCHORS:-64}
  ours_keys=(--drafter.kind=dflash --drafter.layers="$LAYERS" --train.max_anchors="$ANCHORS")
  peer_flags=(--num-layers "$LAYERS" --block-size 16 --max-anchors "$ANCHORS" --full-attention-indices $(full_all "$LAYERS")
    --loss-fn '{"ce": 0.85, "kl_div": 0.15}' --per-position-loss-weight fixed-exp-decay --dflash-decay-gamma 7
    --optimizer adamw --lr 6e-4 --weight-decay 0 --scheduler-type cosine --scheduler-warmup-ratio 0.04
    --total-seq-len 4096)
else
  LAYERS=${LAYERS:-5} ANCHORS=${ANCHORS:-512}
  ours_keys=(--drafter.kind=dflash --drafter.layers="$LAYERS" --train.max_anchors="$ANCHORS" --train.optimizer=muon
    --train.lr=0.001 --train.weight_decay=0.01 --train.warmup_frac=0.01 --loss.alpha=0 --loss.lambda=0
    --loss.label=teacher --loss.weighting=dpace --data.max_tokens_per_batch=8192 --drafter.sliding_window=2048)
  peer_flags=(--num-layers "$LAYERS" --block-size 16 --max-anchors "$ANCHORS" --sliding-window 2048
    --loss-fn ce --per-position-loss-weight dpace --dpace-alpha 0.5 --optimizer muon --lr 1e-3
    --scheduler-type linear --total-seq-len 8192)
fi

# 3. ours
if ! grep -qs '"finished": true' "$O/ours/metrics.jsonl"; then
  say "ours: dflash_rank, $STEPS steps, recipe $RECIPE ($LAYERS layer(s), $ANCHORS anchors), $THREADS thread(s)"
  rss=() # the peak resident memory of the rank (GNU time's %M: the largest of mpirun and the ranks it waited for)
  [ -x /usr/bin/time ] && rss=(/usr/bin/time -f %M -o "$O/ours.maxrss_kb")
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$THREADS "${rss[@]}" mpirun -np 1 --bind-to none "$bin/dflash_rank" --config "$ex/train.json" --target.path="$W/target" \
    --data.path="$W/regen.h5" --data.features="$W/features" --run.dir="$O/ours" --run.resume=true \
    --train.steps="$STEPS" --run.seed="$SEED" "${ours_keys[@]}" $OURS_EXTRA 2>&1 | tee "$O/ours.log" | grep --line-buffered -E '^(step|eval)' || true
  grep -qs '"finished": true' "$O/ours/metrics.jsonl" || die "ours stopped before its last step (log: $O/ours.log): run again to resume"
fi

# 4. the peer
last_epoch() { ls "$O/peer/ckpt" 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -1; }
if ! grep -qs '"finished": true' "$O/peer/metrics.jsonl"; then
  say "the peer: speculators train on the CPU, $STEPS steps, recipe $RECIPE, $THREADS thread(s) (log: $O/peer.log)"
  mkdir -p "$O/peer"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$THREADS "$py" "$here/speculators_cpu.py" --metrics "$O/peer/metrics.jsonl" --threads "$THREADS" -- \
    --speculator-type dflash --verifier-name-or-path "$W/target" --data-path "$I/data" \
    --save-path "$O/peer/ckpt" --log-dir "$O/peer/logs" --target-layer-ids $peer_ids --mask-token-id \
    "$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'] - 1)" "$W/target/config.json")" \
    --draft-attn-impl sdpa --loss-implementation eager --max-steps "$STEPS" --epochs 100000 \
    --train-data-ratio "$ratio" --num-workers 0 --seed "$SEED" --on-missing raise \
    "${peer_flags[@]}" $PEER_EXTRA >"$O/peer.log" 2>&1 || { tail -30 "$O/peer.log" >&2; die "the peer's training failed (log: $O/peer.log)"; }
  tail -1 "$O/peer.log"
fi
e=$(last_epoch)
[ -n "$e" ] || die "the peer saved no checkpoint in $O/peer/ckpt"
if [ ! -f "$O/peer/drafter/config.json" ] || [ "$(cat "$O/peer/drafter.epoch" 2>/dev/null)" != "$e" ]; then
  "$py" "$here/to_zlab.py" "$O/peer/ckpt/$e" "$O/peer/drafter" "$W/target"
  "$py" "$here/check_convert.py" --checkpoint "$O/peer/ckpt/$e" --converted "$O/peer/drafter" --data "$I/data" \
    --target "$W/target" --threads "$THREADS" 2>&1 | grep -E '^(check_convert|error)'
  echo "$e" >"$O/peer/drafter.epoch"
fi

# 5. the same evaluators for both
# evaluate NAME DRAFTER SET RUNDIR: --mode eval, skipped when RUNDIR/eval.json is there
evaluate() {
  [ -f "$4/eval.json" ] && return 0
  mpirun -np "$NP" --bind-to none "$bin/dflash_rank" --mode eval --target.path="$W/target" --data.path="$3" \
    --eval.drafter="$2" --run.dir="$4" --run.overwrite=true >"$4.log" 2>&1 || { tail -20 "$4.log" >&2; die "--mode eval of $1 on $3 failed"; }
  say "  $1 $(basename "$(dirname "$4")")/$(basename "$4"): $(grep -o '"tau_decode": [0-9.]*' "$4/eval.json")"
}
for side in ours peer; do
  d=$O/$side/drafter
  mkdir -p "$O/eval/$side"
  say "evaluation of $side: --mode eval on the recorded held-out split and by category"
  evaluate "$side" "$d" "$W/regen.h5" "$O/eval/$side/heldout"
  for set in heldout eval; do
    mkdir -p "$O/eval/$side/$set-by-category"
    for f in "$W/prompts-$set"/*.h5; do
      [ -f "$f" ] || continue
      evaluate "$side" "$d" "$f" "$O/eval/$side/$set-by-category/$(basename "$f" .h5)"
    done
  done
  if [ "$SPEC" = 1 ]; then
    for f in "$W"/prompts-eval/*.h5; do
      [ -f "$f" ] || continue
      c=$(basename "$f" .h5) log=$O/eval/$side/eval-by-category/$c.spec_decode.log
      grep -qs '^OK' "$log" && continue
      say "  $side: the dflash package's decoding of $c (tools/spec_decode.py)"
      # shellcheck disable=SC2086
      "$py" -u "$root/tools/spec_decode.py" --target "$W/target" --drafter "$d" --data "$f" --threads "$THREADS" \
        --eval-binary "$bin/dflash_rank" --work "$O/spec/$side-$c" ${SPEC_SAMPLES:+--samples $SPEC_SAMPLES} >"$log" 2>&1 ||
        grep -q '^FAIL' "$log" || { tail -20 "$log" >&2; die "spec_decode.py of $side on $c failed (log: $log)"; }
      # FAIL (decoding not lossless, or its acceptance and --mode eval's more than 0.01 apart): kept in
      # the table as FAIL, and the next run.sh decodes this category again
      grep -E '^(OK|FAIL|total|project tau_decode)' "$log" | cut -c1-160
    done
  fi
done

# 6. the peer's curve: its epoch checkpoints, converted and evaluated on the held-out split
if [ "$CURVE_EVERY" -gt 0 ]; then
  say "the peer's curve: every $CURVE_EVERY-th epoch checkpoint on the held-out split"
  for ep in $(ls "$O/peer/ckpt" | grep -E '^[0-9]+$' | sort -n); do
    [ $(( (ep + 1) % CURVE_EVERY )) -eq 0 ] || [ "$ep" = "$e" ] || continue
    c=$O/curve/peer-epoch-$ep
    [ -f "$c/eval/eval.json" ] && continue
    mkdir -p "$c"
    "$py" "$here/to_zlab.py" "$O/peer/ckpt/$ep" "$c/drafter" "$W/target" >/dev/null
    cp "$O/peer/ckpt/$ep/training_state.json" "$c/"
    evaluate "peer epoch $ep" "$c/drafter" "$W/regen.h5" "$c/eval"
    rm -rf "$c/drafter"
  done
fi

# 7. the table
"$py" "$here/compare.py" "$O" --recipe "$RECIPE" --threads "$THREADS" --blas "$(grep -m1 -o 'blas: .*' "$O/ours.log" || true)" \
  >"$O/table.md"
cat "$O/table.md"
say "done: $O/table.md"
