#!/usr/bin/env bash
# quickstart.sh: from a fresh machine to a drafter that learns, on the CPU, in a few minutes.
#
#   1. install the dependencies (Debian/Ubuntu packages; nothing when they are there)
#   2. build (CUDA backend too when nvcc is found; the demo runs on the CPU)
#   3. a tiny random-weight target (Qwen3 layout: 4 layers, H 128, vocabulary 64)
#   4. self-distilled data: random prompts continued greedily by the target itself (DFlash's recipe)
#   5. mpirun -np 3: 2 teacher ranks run the target, 1 student rank trains a 1-layer drafter for
#      1000 steps; progress every 20 steps, a held-out evaluation (forward only, every anchor) every
#      250, and at the end the held-out tau_decode (tokens per decoding step, what serving reports)
#      at the first and the last evaluation (about 1.0 -> 1.7 on a 2-core machine)
#
# Runs from any directory; writes under runs/quickstart/ (metrics.jsonl, the exported drafter).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
echo "== build"
cmake -S . -B build >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"

out=runs/quickstart
mkdir -p "$out"
# (a target of an earlier quickstart, of another vocabulary, is made anew with its data)
if [ -f "$out/target/config.json" ] && ! grep -qE '"vocab_size":[[:space:]]*64[,}[:space:]]' "$out/target/config.json"; then
  rm -rf "$out/target" "$out/train.h5"
fi
if [ ! -f "$out/target/config.json" ]; then
  echo "== target: a random-weight Qwen3 (4 layers, H 128, vocab 64) in $out/target"
  ./build/dflash_tool make-target "$out/target" --arch qwen3 --layers 4 --hidden 128 --heads 4 --kv-heads 2 \
    --intermediate 384 --vocab 64 --seed 1
fi
if [ ! -f "$out/train.h5" ]; then
  echo "== data: 1024 random prompts of 4 tokens continued greedily by the target for 60 tokens"
  ./build/dflash_tool make-data "$out/train.h5" --target "$out/target" --samples 1024 --prompt-len 4 --gen-len 60 --seed 1
fi

echo "== job: mpirun -np 3 dflash_rank --config examples/tiny/train.json"
# Open MPI refuses to run as root and to put 3 ranks on fewer cores unless told; both are fine here.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# --run.resume=true: a second run of this script continues the first (a finished one: nothing to do,
# its result shown again) instead of being refused for the run.dir it left
mpirun -np 3 --oversubscribe --bind-to none ./build/dflash_rank --config examples/tiny/train.json --run.resume=true
# The headline: the held-out decoding acceptance length (tau_decode, what serving sees) at the first and
# the last evaluation, from the summary line of metrics.jsonl.
summary=$(grep '"summary": true' "$out/run/metrics.jsonl" | tail -1)
num() { echo "$summary" | sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }
echo "== held-out tau_decode (tokens per decoding step) $(num tau_decode_first) -> $(num tau_decode_last) over $(num tau_decode_steps_last) decoding steps (tau_chain $(num tau_chain_first) -> $(num tau_chain_last))"
echo "== done: metrics in $out/run/metrics.jsonl, drafter in $out/run/drafter"
echo "   (plot them with: python3 tools/plot_metrics.py $out/run/metrics.jsonl $out/run/metrics.png)"
