#!/bin/bash
# grow.sh: the data-volume row at the long run's length (README.md "Status", bench/RESULTS.md "Acceptance: the current long runs"):
# run.sh's training set grown by more replies of the same target, with the same held-out prompts, then
# run.sh's training and the three evaluations.
#
#   examples/smollm2-135m/grow.sh WORKDIR OUT
#
# WORKDIR is a finished run.sh's (target, magpie.jsonl, the prompt files, regen.h5 with its /heldout,
# prompts-heldout/*.h5, prompts-eval/*.h5); everything new goes to OUT, and every step is skipped when
# its output is there (run it again to continue). N (default 1700) more Magpie requests are sampled from
# the target with another seed (SEED, default 7); more_prompts.py keeps those, and the first pass's
# requests the prompt mix left out, that are in none of WORKDIR's prompts; the target answers them
# (greedy, MAX_NEW tokens, default 192, run.sh's); merge_sets.py puts WORKDIR/regen.h5 first (its
# /heldout kept) and the new replies after it; dump-features; then run.sh's training for STEPS (default
# 2400) and --mode eval of the drafter on the recorded split, the held-out categories pooled and the
# other source pooled (OUT/eval-split, OUT/eval-heldout, OUT/eval-other), one line each at the end.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 WORKDIR OUT" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
W=$(cd "$1" && pwd); mkdir -p "$2"; O=$(cd "$2" && pwd)
N=${N:-1700} SEED=${SEED:-7} MAX_NEW=${MAX_NEW:-192} STEPS=${STEPS:-2400} NP=${NP:-2}
py=$W/venv/bin/python bin=$root/build mpirun=$root/launch/mpirun_stop.sh
for f in target/config.json magpie.jsonl regen.h5 prompts_messages.jsonl; do
  [ -e "$W/$f" ] || { echo "error: grow.sh: $W/$f missing (WORKDIR is a finished run.sh's)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
say() { echo "== $(date +%H:%M:%S) $*"; }
regen() { # OUT PROMPTS KEY=VALUE...: --mode regenerate on NP ranks, skipped when OUT is there
  local out=$1 prompts=$2; shift 2
  [ -f "$out" ] && return 0
  "$mpirun" -np "$NP" --bind-to none "$bin/dflash_rank" --config "$here/regenerate.json" --target.path="$W/target" \
    --regenerate.prompts="$prompts" --regenerate.out="$out" --regenerate.max_seqs=32 --run.dir="$out.run" "$@"
  [ -f "$out" ] || { say "stopped before $out was complete: run this script again to resume"; exit 0; }
}
if [ ! -f "$O/magpie.jsonl" ]; then
  say "Magpie, second pass: $N user requests sampled from the target (seed $SEED)"
  "$py" "$here/magpie.py" prefix --model "$W/target" --n "$N" "$O/magpie_prompts.jsonl"
  regen "$O/magpie.h5" "$O/magpie_prompts.jsonl" --regenerate.temperature=1 --regenerate.top_p=0.95 \
    --regenerate.max_new_tokens=128 --regenerate.heldout=0 --regenerate.seed="$SEED"
  "$py" "$here/magpie.py" collect --model "$W/target" "$O/magpie.h5" "$O/magpie.jsonl"
fi
if [ ! -f "$O/more_prompts.jsonl" ]; then
  "$py" "$here/more_prompts.py" "$W" "$O/magpie.jsonl" "$O/more_messages.jsonl"
  "$py" "$root/tools/prepare_data.py" --prompts-only "$O/more_messages.jsonl" "$O/more_prompts.jsonl" \
    --model "$W/target" --max-len 1024
fi
say "regeneration of the new prompts (greedy, at most $MAX_NEW new tokens)"
regen "$O/more.h5" "$O/more_prompts.jsonl" --regenerate.max_new_tokens="$MAX_NEW" --regenerate.heldout=0
[ -f "$O/regen.h5" ] || "$py" "$here/merge_sets.py" "$O/regen.h5" "$W/regen.h5" "$O/more.h5"
if [ ! -f "$O/features/features.json" ]; then
  say "offline features of the grown set"
  "$mpirun" -np "$NP" --bind-to none "$bin/dflash_rank" --config "$here/train.json" --mode dump-features \
    --target.path="$W/target" --data.path="$O/regen.h5" --features.dir="$O/features" --run.dir="$O/dump-run"
  [ -f "$O/features/features.json" ] || { say "stopped before every feature shard was written: run again"; exit 0; }
fi
say "training: $STEPS steps, run.sh's recipe, on the grown set"
"$mpirun" -np 1 --bind-to none "$bin/dflash_rank" --config "$here/train.json" --target.path="$W/target" \
  --data.path="$O/regen.h5" --data.features="$O/features" --run.dir="$O/run" --run.resume=true \
  --train.steps="$STEPS" --drafter.layers=1 --drafter.kind=dflash2 --train.max_anchors=64
grep -q '"finished": true' "$O/run/metrics.jsonl" || { say "training stopped before its last step: run again"; exit 0; }
ev() { # NAME DATA-ARG
  "$mpirun" -np 2 --bind-to none "$bin/dflash_rank" --mode eval --target.path="$W/target" "$2" \
    --eval.drafter="$O/run/drafter" --run.dir="$O/eval-$1" --run.overwrite=true >"$O/eval-$1.log" 2>&1 ||
    { tail -3 "$O/eval-$1.log" >&2; exit 1; }
  say "  $1: $(grep -o '"tau_decode": [0-9.]*' "$O/eval-$1/eval.json")"
}
say "evaluation (--mode eval): the recorded split, the held-out categories, the other source"
ev split --data.path="$W/regen.h5"
ev heldout --data.sets="$(printf '%s\n' "$W"/prompts-heldout/*.h5 | paste -sd,)"
ev other --data.sets="$(printf '%s\n' "$W"/prompts-eval/*.h5 | paste -sd,)"
