#!/usr/bin/env bash
# bench/pipeline/run.sh: throughput of the whole CPU job for 1, 2 and 3 teachers with one student:
# block and context tokens/s and the student's idle share (time waiting for teacher data), from
# metrics.jsonl, all in one run on the same machine and data.
#
#   bench/pipeline/run.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
STEPS=${2:-60}
W=$(mktemp -d "${TMPDIR:-/tmp}/dflash_pipeline_XXXXXX")
trap 'rm -rf "$W"' EXIT
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
"$B/dflash_tool" make-target "$W/target" --arch qwen3 --layers 4 --hidden 256 --heads 4 --kv-heads 2 --intermediate 768 \
  --vocab 4096 --seed 1 >/dev/null
"$B/dflash_tool" make-data "$W/data.h5" --target "$W/target" --samples 256 --prompt-len 16 --gen-len 48 --seed 1 >/dev/null 2>&1
echo "# $(date -u +%F), $(nproc) cores ($(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}')), $STEPS steps, target 4 layers H 256 V 4096, drafter 1 layer, B 8, 1024-token batches"
echo "| teachers | students | block tokens/s | context tokens/s | student idle share | wall s |"
echo "|---|---|---|---|---|---|"
for T in 1 2 3; do
  mpirun -np $((T + 1)) --oversubscribe --bind-to none "$B/dflash_rank" --mode train --device cpu --target.path="$W/target" \
    --data.path="$W/data.h5" --target.layer_ids=0,1,2,3 --teacher.topk=16 --drafter.block_size=8 --train.steps="$STEPS" \
    --train.max_anchors=64 --train.log_interval=10 --train.eval_interval=1000000 --train.eval_batches=1 \
    --data.max_tokens_per_batch=1024 --data.heldout_samples=8 --run.dir="$W/run$T" >/dev/null 2>"$W/err$T"
  python3 - "$W/run$T/metrics.jsonl" "$T" <<'PYEOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
train = [l for l in lines if "step" in l and "split" not in l]
summ = [l for l in lines if l.get("summary")][0]
idle = sum(l["teacher_wait_frac"] for l in train[1:]) / max(1, len(train) - 1)  # the first interval includes start-up
print(f"| {sys.argv[2]} | 1 | {summ['block_tokens_per_s']:.0f} | {summ['ctx_tokens_per_s']:.0f} | {100 * idle:.0f} % | {summ['wall_s']:.1f} |")
PYEOF
done
