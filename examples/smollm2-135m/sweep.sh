#!/bin/bash
# sweep.sh: two training configurations side by side at equal wall time, one per core (the recipe rows of
# README.md "Status" and bench/RESULTS.md "The recipe at equal wall time").
#
#   examples/smollm2-135m/sweep.sh WORKDIR BUDGET NAME1 "ARGS1" NAME2 "ARGS2"
#
# WORKDIR is run.sh's (target, regen.h5, features, prompts-eval, prompts-heldout). Each configuration is
# run.sh's training (train.json, KIND dflash2, 1 layer, 64 anchors, from the offline features) plus its ARGS
# (dflash_rank --key=value overrides, e.g. "--drafter.layers=3"), pinned to one core (taskset; the thread
# policy then takes 1 thread): first 40 steps to measure its step time (steps 10-40), then BUDGET seconds
# of steps at that time, so every configuration gets the same wall time whatever its step costs; the
# held-out evaluation at the start and the end only. Then `--mode eval` on the same core: the other
# source's categories pooled (WORKDIR/sweep/NAME-eval) and the held-out categories pooled (NAME-heldout).
# One line per configuration at the end: its step time, its steps, and the three tau_decode figures.
set -u
[ $# -eq 6 ] || { echo "usage: $0 WORKDIR BUDGET_SECONDS NAME1 ARGS1 NAME2 ARGS2" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
W=$(cd "$1" && pwd); BUDGET=$2; shift 2
B=$root/build; S=$W/sweep; mkdir -p "$S"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(nproc)" -ge 2 ] || { echo "sweep.sh: needs 2 cores (one per configuration), this process has $(nproc)" >&2; exit 2; }
base=(--config "$here/train.json" --target.path="$W/target" --drafter.kind=dflash2 --drafter.layers=1
      --train.max_anchors=64 --data.path="$W/regen.h5" --data.features="$W/features")
train() { # CORE NAME STEPS ARGS...
  local core=$1 name=$2 steps=$3; shift 3
  taskset -c "$core" mpirun -np 1 --bind-to none "$B/dflash_rank" "${base[@]}" --train.steps="$steps" "$@" >"$S/$name.log" 2>&1
}
tau() { grep -o '"tau_decode": [0-9.]*' "$1" | tail -1 | cut -d' ' -f2; }
one() { # CORE NAME ARGS...
  local core=$1 name=$2; shift 2
  train "$core" "cal-$name" 40 --run.dir="$S/cal-$name" --run.overwrite=true --train.eval_batches=1 \
    --train.log_interval=10 --train.eval_interval=1000 "$@" || { echo "$name: the step-time run failed ($S/cal-$name.log)"; return 1; }
  local st steps set
  st=$(python3 -c "
import json
w = {d['step']: d['wall_s'] for d in map(json.loads, open('$S/cal-$name/metrics.jsonl')) if 'step' in d and 'split' not in d}
print((w[40] - w[10]) / 30)")
  steps=$(python3 -c "print(int($BUDGET / $st))")
  echo "$(date +%T) $name: $st s a step on core $core -> $steps steps"
  train "$core" "$name" "$steps" --run.dir="$S/$name" --run.overwrite=true --train.eval_interval="$steps" "$@" \
    || { echo "$name: training failed ($S/$name.log)"; return 1; }
  for set in eval heldout; do
    taskset -c "$core" mpirun -np 2 --bind-to none "$B/dflash_rank" --mode eval --target.path="$W/target" \
      --data.sets="$(printf '%s\n' "$W"/prompts-$set/*.h5 | paste -sd,)" --eval.drafter="$S/$name/drafter" \
      --run.dir="$S/$name-$set" --run.overwrite=true >"$S/$name-$set.log" 2>&1
  done
  echo "$(date +%T) $name: $st s a step, $steps steps; tau_decode: recorded held-out $(tau "$S/$name/metrics.jsonl")," \
    "held-out categories $(tau "$S/$name-heldout/eval.json"), another source $(tau "$S/$name-eval/eval.json")"
}
echo "$(date +%T) $1 | $3, $BUDGET s each (load $(cut -d' ' -f1-3 /proc/loadavg))"
read -ra args1 <<<"$2"; read -ra args2 <<<"$4" # ARGS: several overrides in one string, split at blanks
one 0 "$1" "${args1[@]}" & one 1 "$3" "${args2[@]}" & wait
