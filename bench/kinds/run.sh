#!/usr/bin/env bash
# bench/kinds/run.sh: DFlash against DFlash2 (drafter.kind dflash / dflash2, issue 28) trained with
# the same shape, data, seed, steps and optimiser in one run, then evaluated two ways on the same
# held-out samples: our tau_decode (SPEC §6, --mode eval) and the dflash package's own speculative
# decoding (tools/spec_decode.py: DFlashDraftModel / DFlash2DraftModel.from_pretrained with no
# missing or unexpected keys, lossless against greedy generate, acceptance next to ours).
#
#   bench/kinds/run.sh [--build build] [--work DIR] [--steps N] [--py PYTHON] [-- TRAIN_ARGS...]
#
# Default data: the quickstart's (a random-weight Qwen3, 4 layers, H 128, V 64; 1024 greedy
# continuations; examples/tiny/train.json), made in WORK if missing. TRAIN_ARGS after `--` replace
# the target and data, e.g. the SmolLM2 example's dumped features:
#   bench/kinds/run.sh --work /tmp/kinds_smol --steps 400 -- --config examples/smollm2-135m/train.json \
#     --target.path=W/target --data.features=W/features --spec-data=W/regen.h5
# (--spec-data: the training set whose held-out samples spec_decode decodes; W the example's work dir).
# Prints one table row per kind: tau_decode first -> last, the package's acceptance and |diff|,
# block tokens/s and the largest rank's peak bytes. Needs the dflash package (PYTHON: a venv
# with torch, transformers, dflash; the tools/ README says how to make one).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build work=/tmp/dflash_kinds steps=1000 py=python3 spec_data="" extra=()
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$2; shift 2 ;;
  --work) work=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --py) py=$2; shift 2 ;;
  --) shift; extra=("$@"); break ;;
  *) echo "bench/kinds/run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for a in "${extra[@]+"${extra[@]}"}"; do
  case $a in --spec-data=*) spec_data=${a#--spec-data=} ;; esac
done
[ -x "$build/dflash_rank" ] || { echo "bench/kinds/run.sh: no $build/dflash_rank (build first)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$work"
train=()
if [ ${#extra[@]} -eq 0 ]; then # the quickstart's target and data
  [ -f "$work/target/config.json" ] || "$build/dflash_tool" make-target "$work/target" --arch qwen3 --layers 4 \
    --hidden 128 --heads 4 --kv-heads 2 --intermediate 384 --vocab 64 --seed 1 >/dev/null
  [ -f "$work/train.h5" ] || "$build/dflash_tool" make-data "$work/train.h5" --target "$work/target" --samples 1024 \
    --prompt-len 4 --gen-len 60 --seed 1 >/dev/null 2>&1
  train=(--config "$root/examples/tiny/train.json" --target.path="$work/target" --data.path="$work/train.h5")
  spec_data=$work/train.h5 target=$work/target np=3
else
  for a in "${extra[@]}"; do
    case $a in
    --spec-data=*) ;;
    --target.path=*) target=${a#--target.path=}; train+=("$a") ;;
    *) train+=("$a") ;;
    esac
  done
  np=1 # student-only on dumped features (with --data.path instead, pass a teacher: use the default np)
  case " ${train[*]} " in *" --data.path="*) np=3 ;; esac
fi
[ -n "$spec_data" ] || { echo "bench/kinds/run.sh: --spec-data=SET.h5 is needed with TRAIN_ARGS" >&2; exit 2; }
summary() { grep '"summary": true' "$1/metrics.jsonl" | tail -1; }
num() { echo "$1" | sed -n "s/.*\"$2\": \[*\([0-9.e+-]*\).*/\1/p"; }
rows=()
for kind in dflash dflash2; do
  run=$work/run_$kind
  echo "== $kind: $steps steps -> $run"
  mpirun -np "$np" --bind-to none "$build/dflash_rank" "${train[@]}" --run.device=cpu --drafter.kind=$kind --train.steps="$steps" \
    --run.dir="$run" --run.overwrite=true >"$work/$kind.train.log" 2>&1 ||
    { tail -5 "$work/$kind.train.log" >&2; exit 1; }
  s=$(summary "$run")
  pick=(--pick heldout) # the set's recorded split (regenerated sets); the quickstart's: its last 64
  [ ${#extra[@]} -eq 0 ] && pick=(--pick last --samples 64)
  "$py" "$root/tools/spec_decode.py" --target "$target" --drafter "$run/drafter" --data "$spec_data" "${pick[@]}" \
    --eval-binary "$build/dflash_rank" --work "$work/spec_$kind" >"$work/$kind.spec.log" 2>&1 ||
    { tail -5 "$work/$kind.spec.log" >&2; exit 1; }
  agree=$(grep '^project tau_decode' "$work/$kind.spec.log")
  pkg=$(echo "$agree" | sed -n 's/.*package \([0-9.]*\).*/\1/p')
  diff=$(echo "$agree" | sed -n 's/.*|diff| \([0-9.]*\).*/\1/p')
  peak=$(echo "$s" | sed -n 's/.*"peak_bytes": \[\([0-9, ]*\)\].*/\1/p' | tr ',' '\n' | sort -n | tail -1)
  rows+=("| $kind | $steps | $(num "$s" tau_decode_first) -> $(num "$s" tau_decode_last) | $pkg | $diff | $(num "$s" block_tokens_per_s) | $((peak / 1048576)) MiB |")
done
echo
echo "| kind | steps | tau_decode (ours, held out) | package acceptance | abs diff | block tok/s | peak (largest rank) |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
