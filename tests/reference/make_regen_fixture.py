#!/usr/bin/env python3
"""Reference replies for `dflash_rank --mode regenerate`, computed with transformers' generate.

For each target below (a dense Qwen3, the Qwen3.5 hybrid, a Qwen3-MoE; random weights made by the C
tool `dflash_tool make-target`, weights a pure function of its arguments) this script
  1. loads the directory with transformers (make_teacher_fixtures.load_model: the named class, no
     missing or unexpected weights) and picks the first seed, from 1, whose greedy continuations
     of the prompts (no eos) have a top-2 logit gap >= make_decode_fixture.MIN_GAP at every step
     (and, for the MoE, router gaps >= MIN_ROUTER_GAP with every expert chosen): near ties would make
     the reference depend on summation order;
  2. chooses two stop ids from those continuations so that some prompts stop early at different
     steps (mid-batch: the decoder's other slots keep going and take the next prompts) and at
     least one reaches max_new_tokens (the first candidate pair, in a fixed order, that does);
  3. runs model.generate(prompt, do_sample=False, max_new_tokens=G, eos_token_id=[e0, e1]) on each
     prompt alone (no padding) and checks the reply is the no-eos continuation cut after its first
     stop id (transformers agreeing with itself);
  4. writes tests/reference/data/regen_<name>.json:
       {"name", "make_target": "<make-target arguments after OUT_DIR, --seed included>",
        "max_new_tokens": G, "eos_token_id": [e0, e1], "prompts": [[ids...] x 5 or 6],
        "replies": [[ids...], ...] (the stop id included when the reply stopped),
        "finish_reason": [0 = stop, 1 = length, ...], "min_top2_gap", "min_router_gap" (MoE),
        "class", "made_by", "torch", "transformers"}
     and the console output into data/regen_fixtures.log.

tests/cli/test_regenerate.sh rebuilds each model with make-target, writes eos_token_id e0 into its
generation_config.json and gives e1 as regenerate.stop_ids, runs `dflash_rank --mode regenerate` with
fewer slots than prompts, and checks every reply and finish reason equals this file's.

Not part of CI: it needs torch + transformers. Run it from the repository root:
    python3 tests/reference/make_regen_fixture.py [--tool build/dflash_tool] [--out DIR]
"""
import argparse
import itertools
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile

import torch

from make_decode_fixture import MIN_GAP, greedy
from make_teacher_fixtures import MIN_ROUTER_GAP, load_model, router_stats, routing_ok

MAX_NEW = 24
PROMPT_LENS = (5, 17, 3, 29, 9, 12)
HYBRID_PROMPT_LENS = (6, 29, 67, 4, 15, 40)  # one prefill crosses the delta rule's 64-token chunk
# The MoE: fewer tokens in all, so that a seed exists whose router probabilities never nearly tie
# over every token (as in make_decode_fixture.py's MoE fixtures)
MOE_PROMPT_LENS = (4, 9, 3, 7, 5)

# name, make-target arguments (without OUT_DIR and --seed), prompt lengths, max_new_tokens
TARGETS = [
    ("qwen3_dense",
     "--arch qwen3 --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 96"
     " --vocab 307 --dtype bf16 --rope-theta 1000000", PROMPT_LENS, MAX_NEW),
    ("qwen35_hybrid",
     "--arch qwen3_5 --layers 4 --hidden 48 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 80"
     " --vocab 301 --dtype bf16 --lin-k-heads 2 --lin-v-heads 6 --lin-k-dim 12 --lin-v-dim 10"
     " --conv-kernel 3 --layer-types linear,full,linear,linear", HYBRID_PROMPT_LENS, MAX_NEW),
    ("qwen3moe",
     "--arch qwen3_moe --layers 3 --hidden 48 --heads 4 --kv-heads 2 --head-dim 12 --intermediate 64"
     " --vocab 223 --dtype bf16 --experts 6 --experts-per-tok 2 --moe-intermediate 24 --norm-topk --mlp-only 1",
     MOE_PROMPT_LENS, 16),
]


def log(lines, msg=""):
    print(msg, flush=True)
    lines.append(msg)


def cut(cont, stops):
    """The reply generate gives with these stop ids: up to and including the first stop id."""
    for k, t in enumerate(cont):
        if t in stops:
            return cont[:k + 1], 0
    return cont, 1


def pick_stops(conts):
    """The first pair of ids (in order of first appearance) that stops >= 2 prompts at different
    steps, none at the first token, and leaves >= 1 prompt at the length limit."""
    seen = []
    for c in conts:
        for t in c:
            if t not in seen:
                seen.append(t)
    for e0, e1 in itertools.combinations(seen, 2):
        res = [cut(c, {e0, e1}) for c in conts]
        steps = {len(r) for r, f in res if f == 0}
        if sum(f == 0 for _, f in res) >= 2 and len(steps) >= 2 and min(steps) > 1 and any(f == 1 for _, f in res):
            return [e0, e1], res
    raise SystemExit("no pair of stop ids stops the prompts mid-batch")


def make_fixture(tool, out_dir, tmp, lines, name, margs, prompt_lens, max_new):
    import transformers

    argv = shlex.split(margs)
    arch, vocab = argv[argv.index("--arch") + 1], int(argv[argv.index("--vocab") + 1])
    rng = random.Random("regen-" + name)
    prompts = [[rng.randrange(vocab) for _ in range(n)] for n in prompt_lens]
    moe = "_moe" in arch
    for seed in range(1, 301 if moe else 51):
        model_dir = os.path.join(tmp, f"{name}_seed{seed}")
        subprocess.run([tool, "make-target", model_dir] + argv + ["--seed", str(seed)], check=True,
                       stdout=subprocess.DEVNULL)
        model, cls, _ = load_model(model_dir, arch, name)
        model.generation_config.eos_token_id = None
        results = [greedy(model, p, max_new) for p in prompts]
        gap = min(min(g) for _, g in results)
        routed, rgap = routing_ok(router_stats(model, [p + c for p, (c, _) in zip(prompts, results)]))
        if gap >= MIN_GAP and routed:
            break
        log(lines, f"  {name}: seed {seed}: min top-2 gap {gap:.3g}, router ok {routed}: next seed")
    else:
        raise SystemExit(f"{name}: no seed with top-2 gaps >= {MIN_GAP}")
    conts = [c for c, _ in results]
    stops, expect = pick_stops(conts)
    replies, finish = [], []
    for p, (want, f) in zip(prompts, expect):
        ids = torch.tensor([p], dtype=torch.long)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                                 eos_token_id=stops, pad_token_id=0)[0, len(p):].tolist()
        assert out == want, f"{name}: generate with eos {stops} gave {out}, the cut continuation is {want}"
        replies.append(out)
        finish.append(f)
    doc = {
        "name": name,
        "make_target": f"{margs} --seed {seed}",
        "class": cls,
        "max_new_tokens": max_new,
        "eos_token_id": stops,
        "prompts": prompts,
        "replies": replies,
        "finish_reason": finish,
        "min_top2_gap": gap,
        **({"min_router_gap": rgap} if moe else {}),
        "made_by": "tests/reference/make_regen_fixture.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    path = os.path.join(out_dir, f"regen_{name}.json")
    with open(path, "w") as f:
        json.dump(doc, f)
        f.write("\n")
    log(lines, f"{name}: {cls}, make-target {margs} --seed {seed}")
    log(lines, f"  prompts of {list(prompt_lens)} tokens, max_new_tokens {max_new}, stop ids {stops}")
    log(lines, f"  reply lengths {[len(r) for r in replies]}, finish reasons {finish} (0 stop, 1 length)")
    log(lines, f"  min top-2 logit gap {gap:.4g} (>= {MIN_GAP:g})" +
        (f", min router gap {rgap:.4g} (>= {MIN_ROUTER_GAP:g})" if moe else ""))
    log(lines, f"  {os.path.relpath(path, out_dir)}: {os.path.getsize(path)} bytes")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default=os.environ.get("DFLASH_TOOL", os.path.join(root, "build", "dflash_tool")))
    ap.add_argument("--out", default=os.path.join(here, "data"))
    ap.add_argument("--only", help="make only this target's fixture (the log then holds only it)")
    a = ap.parse_args()
    if not os.access(a.tool, os.X_OK):
        sys.exit(f"error: {a.tool} is not an executable dflash_tool (build it, or pass --tool / DFLASH_TOOL)")
    import transformers
    torch.manual_seed(0)
    torch.set_num_threads(1)
    lines = []
    log(lines, "make_regen_fixture.py: transformers generate (greedy, KV cache, eos ids) for --mode regenerate")
    log(lines, f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}")
    with tempfile.TemporaryDirectory(prefix="dflash_regen_fixture_") as tmp:
        for name, margs, lens, max_new in TARGETS:
            if a.only in (None, name):
                make_fixture(a.tool, a.out, tmp, lines, name, margs, lens, max_new)
    with open(os.path.join(a.out, "regen_fixtures.log" if a.only is None else f"regen_{a.only}.log"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
