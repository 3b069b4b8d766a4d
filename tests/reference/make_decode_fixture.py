#!/usr/bin/env python3
"""Reference greedy continuations for `dflash_tool make-data`, computed with transformers' generate.

For each configuration below this script
  1. makes a random-weight model directory with `dflash_tool make-target` (the C tool),
  2. loads it with AutoModelForCausalLM.from_pretrained(dir, dtype=float32, eager attention), or
     for the Qwen3.5 layouts the named class (Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration),
     and checks that transformers sees the named architecture with no missing or unexpected weights
     (make_teacher_fixtures.load_model),
  3. runs model.generate(prompt, do_sample=False, max_new_tokens=G) (KV cache, greedy) on three
     fixed prompts of different lengths, each on its own (no padding), with eos disabled so every
     continuation has exactly G tokens; for the Qwen3.5 hybrids (SPEC section 2.1) the cache is
     transformers' hybrid one (K/V for the full-attention layers, conv and recurrent state for the
     Gated DeltaNet layers), and the multimodal wrapper decodes with
     Qwen3_5ForConditionalGeneration.generate itself,
  4. checks the continuation against a plain argmax chain of one full forward without cache over
     prompt + continuation (transformers agreeing with itself), and
  5. writes tests/reference/data/decode_<name>.json:
       {"name", "make_target": "<arguments after OUT_DIR, --seed included>", "gen_len": G,
        "prompts": [[ids...] x 3], "continuations": [[G ids] x 3], "class",
        "min_top2_gap": smallest logit gap between the best and second-best token over every
                        generated step of every prompt,
        "made_by", "torch", "transformers"}
     and the console output into data/decode_fixtures.log.

The C side (tests/cli/test_make_data.sh) rebuilds the identical model from "make_target" (weights are
a pure function of the arguments) and runs `dflash_tool make-data OUT.h5 --target MODEL --prompts
decode_<name>.json --gen-len G`; every generated token must equal transformers' exactly.

Near ties: a random-weight model can have two logits within rounding of each other, and then fp32
implementations that differ only in summation order may pick different tokens (and the chains
diverge from there). Each model's seed is the first one, counting from 1, for which the top-2 gap at
every generated step is at least MIN_GAP = 1e-3 (fp32 errors of the forward are ~1e-5 of the
logits' scale); the log and the JSON give the smallest gap. For the mixture-of-experts targets
(SPEC section 2.2, loaded with the eager experts) the seed must also keep every token's k-th and
(k+1)-th router probabilities of every sparse layer, over each prompt + continuation, at least
make_teacher_fixtures.MIN_ROUTER_GAP = 1e-3 apart (a near tie there could route a token elsewhere),
with every expert chosen; the JSON gives "min_router_gap". Their fixtures are shorter (two prompts,
fewer generated tokens, one or two sparse layers) so that such seeds exist.

Not part of CI: it needs torch + transformers. Run it from the repository root:
    python3 tests/reference/make_decode_fixture.py [--tool build/dflash_tool] [--out DIR]
(--tool defaults to $DFLASH_TOOL, else build/dflash_tool.)
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile

import torch

# the same loading and weight checks as the teacher fixtures (the class named for each layout; for
# Qwen3.5 also that only mtp.* is skipped and the multimodal wrapper loads model.visual.*)
from make_teacher_fixtures import MIN_ROUTER_GAP, load_model, router_stats, routing_ok

MIN_GAP = 1e-3
GEN_LEN = 40
PROMPT_LENS = (5, 11, 17)
# The hybrids: one prompt longer than the delta rule's chunk of 64 (the prefill crosses a chunk),
# one whose prompt + continuation crosses 64 while decoding, one short.
HYBRID_PROMPT_LENS = (6, 29, 67)

# name, make-target arguments (without OUT_DIR and --seed), prompt lengths, tokens generated
FIXTURES = [
    # Qwen3: q_norm/k_norm, GQA 4/2, head_dim 24 != 64/4, untied, bf16 weights, rope_theta 1e6
    ("qwen3_gqa",
     "--arch qwen3 --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 96"
     " --vocab 307 --dtype bf16 --rope-theta 1000000", PROMPT_LENS, GEN_LEN),
    # Llama: tied embeddings, one kv head, llama3 RoPE scaling with an original context of 16 (so the
    # three frequency branches all act at the positions reached), f32 weights
    ("llama3_tied_mqa",
     "--arch llama --layers 3 --hidden 48 --heads 4 --kv-heads 1 --intermediate 112"
     " --vocab 389 --dtype f32 --tie --rope-llama3 8 --rope-original-max 16", PROMPT_LENS, GEN_LEN),
    # Qwen3.5 text-only (Qwen3_5ForCausalLM): linear key/value heads 2/6, key/value head dims 12/10,
    # conv kernel 3, layer_types linear,full,linear,linear (the last layer linear), gated attention
    # GQA 4/2 x 24 with the default partial rotary 0.25 (6 rotary dims), untied, bf16 weights
    ("qwen35_text",
     "--arch qwen3_5 --layers 4 --hidden 48 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 80"
     " --vocab 301 --dtype bf16 --lin-k-heads 2 --lin-v-heads 6 --lin-k-dim 12 --lin-v-dim 10"
     " --conv-kernel 3 --layer-types linear,full,linear,linear", HYBRID_PROMPT_LENS, GEN_LEN),
    # Qwen3.5 multimodal wrapper (Qwen3_5ForConditionalGeneration, text under model.language_model.,
    # model.visual.* and mtp.* besides), decoded by its own generate: linear heads 2/6 with dims 10/14,
    # conv kernel 4, layer types from full_attention_interval 2 (linear, full, linear, full, linear),
    # one kv head x 20 with partial rotary 0.3 (6 dims), tied, f32 weights, rope_theta 1e6
    ("qwen35_vl_tied",
     "--arch qwen3_5_vl --layers 5 --hidden 40 --heads 4 --kv-heads 1 --head-dim 20 --intermediate 72"
     " --vocab 283 --dtype f32 --tie --lin-k-heads 2 --lin-v-heads 6 --lin-k-dim 10 --lin-v-dim 14"
     " --conv-kernel 4 --full-interval 2 --partial-rotary 0.3 --rope-theta 1000000",
     HYBRID_PROMPT_LENS, GEN_LEN),
    # Qwen3-MoE (Qwen3MoeForCausalLM): layers 0 and 2 sparse (layer 1 in mlp_only_layers), 6 experts,
    # top 2, renormalised, experts per expert (as published), untied, bf16 weights
    ("qwen3moe_step",
     "--arch qwen3_moe --layers 3 --hidden 48 --heads 4 --kv-heads 2 --head-dim 12 --intermediate 64"
     " --vocab 223 --dtype bf16 --experts 6 --experts-per-tok 2 --moe-intermediate 24 --norm-topk --mlp-only 1",
     (5, 11, 17), 24),
    # Qwen3.5-MoE text-only (Qwen3_5MoeForCausalLM): linear + full layers, both sparse (6 experts,
    # top 2, renormalised, a shared expert of 32), experts fused (as published), untied, bf16
    # weights; the 58-token prompt's decode crosses the delta rule's chunk of 64
    ("qwen35moe_text",
     "--arch qwen3_5_moe --layers 2 --hidden 48 --heads 4 --kv-heads 2 --head-dim 24 --vocab 211"
     " --dtype bf16 --lin-k-heads 2 --lin-v-heads 6 --lin-k-dim 12 --lin-v-dim 10 --conv-kernel 3"
     " --layer-types linear,full --experts 6 --experts-per-tok 2 --moe-intermediate 20 --shared-intermediate 32",
     (6, 58), 16),
]

def log(lines, msg=""):
    print(msg, flush=True)
    lines.append(msg)


def greedy(model, prompt, gen_len):
    """generate() greedily; returns (continuation ids, per-step top-2 gaps)."""
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=gen_len, min_new_tokens=gen_len, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    seq = out.sequences[0].tolist()
    assert seq[:len(prompt)] == prompt and len(seq) == len(prompt) + gen_len, "generate changed the prompt or length"
    cont = seq[len(prompt):]
    gaps = []
    for step, lg in enumerate(out.logits):
        top = torch.topk(lg[0].float(), 2)
        assert top.indices[0].item() == cont[step], "generate did not take the argmax"
        gaps.append((top.values[0] - top.values[1]).item())
    # transformers against itself: one full forward without a cache over prompt + continuation
    with torch.no_grad():
        full = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0]
    chain = full.argmax(dim=-1).tolist()[len(prompt) - 1:-1]
    assert chain == cont, "the cached generate and the full forward's argmax chain differ"
    return cont, gaps


def make_fixture(tool, out_dir, tmp, lines, name, margs, prompt_lens, gen_len):
    import transformers

    argv = shlex.split(margs)
    arch, vocab = argv[argv.index("--arch") + 1], int(argv[argv.index("--vocab") + 1])
    rng = random.Random("decode-" + name)
    prompts = [[rng.randrange(vocab) for _ in range(n)] for n in prompt_lens]
    moe = "_moe" in arch
    for seed in range(1, 301 if moe else 51):
        model_dir = os.path.join(tmp, f"{name}_seed{seed}")
        cmd = [tool, "make-target", model_dir] + argv + ["--seed", str(seed)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        model, cls, _ = load_model(model_dir, arch, name)
        model.generation_config.eos_token_id = None
        results = [greedy(model, p, gen_len) for p in prompts]
        gap = min(min(g) for _, g in results)
        routed, rgap = routing_ok(router_stats(model, [p + c for p, (c, _) in zip(prompts, results)]))
        if gap >= MIN_GAP and routed:
            break
        if gap < MIN_GAP:
            log(lines, f"  {name}: seed {seed}: min top-2 gap {gap:.3g} < {MIN_GAP:g}, next seed")
        else:
            log(lines, f"  {name}: seed {seed}: min router gap {rgap:.3g} (< {MIN_ROUTER_GAP:g}?) or an expert"
                       f" never chosen, next seed")
    else:
        raise SystemExit(f"{name}: no seed with top-2 gaps >= {MIN_GAP}" + (" and router gaps" if moe else ""))

    full_args = f"{margs} --seed {seed}"
    doc = {
        "name": name,
        "make_target": full_args,
        "class": cls,
        "gen_len": gen_len,
        "prompts": prompts,
        "continuations": [c for c, _ in results],
        "min_top2_gap": gap,
        **({"min_router_gap": rgap} if moe else {}),
        "made_by": "tests/reference/make_decode_fixture.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    path = os.path.join(out_dir, f"decode_{name}.json")
    with open(path, "w") as f:
        json.dump(doc, f)
        f.write("\n")
    tc = getattr(model.config, "text_config", model.config)  # the wrapper keeps the text model's keys there
    log(lines, f"{name}: {cls}, L={tc.num_hidden_layers}, H={tc.hidden_size}, heads "
               f"{tc.num_attention_heads}/{tc.num_key_value_heads}, V={tc.vocab_size}, "
               f"tied={model.config.tie_word_embeddings}, rope={dict(tc.rope_parameters)}")
    if getattr(tc, "layer_types", None) and "linear_attention" in tc.layer_types:
        log(lines, f"  layer_types {tc.layer_types}; linear heads {tc.linear_num_key_heads}/{tc.linear_num_value_heads} "
                   f"x {tc.linear_key_head_dim}/{tc.linear_value_head_dim}, conv kernel {tc.linear_conv_kernel_dim}, "
                   f"head_dim {tc.head_dim}")
    if moe:
        log(lines, f"  MoE: {tc.num_experts} experts x {tc.moe_intermediate_size}, top {tc.num_experts_per_tok}; "
                   f"min k-th - (k+1)-th router probability over every sparse layer and token {rgap:.4g} "
                   f"(>= {MIN_ROUTER_GAP:g}), every expert chosen")
    log(lines, f"  make-target {full_args}")
    log(lines, f"  prompts of {list(prompt_lens)} tokens, {gen_len} generated each; generate == full-forward argmax chain")
    log(lines, f"  min top-2 logit gap over the generated steps: {gap:.4g} (>= {MIN_GAP:g}); "
               f"per prompt: {', '.join(f'{min(g):.4g}' for _, g in results)}")
    log(lines, f"  {os.path.relpath(path, out_dir)}: {os.path.getsize(path)} bytes")
    assert os.path.getsize(path) < 20_000, f"{path} is too big for a committed fixture"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default=os.environ.get("DFLASH_TOOL", os.path.join(root, "build", "dflash_tool")),
                    help="dflash_tool binary (default $DFLASH_TOOL, else build/dflash_tool)")
    ap.add_argument("--out", default=os.path.join(here, "data"), help="output folder (default tests/reference/data)")
    a = ap.parse_args()
    if not os.access(a.tool, os.X_OK):
        sys.exit(f"error: {a.tool} is not an executable dflash_tool (build it, or pass --tool / DFLASH_TOOL)")
    os.makedirs(a.out, exist_ok=True)

    import transformers
    torch.manual_seed(0)
    torch.set_num_threads(1)  # deterministic reductions
    lines = []
    log(lines, "make_decode_fixture.py: transformers generate (greedy, KV cache) for make-data's decode")
    log(lines, f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}")
    with tempfile.TemporaryDirectory(prefix="dflash_decode_fixture_") as tmp:
        for name, margs, prompt_lens, gen_len in FIXTURES:
            make_fixture(a.tool, a.out, tmp, lines, name, margs, prompt_lens, gen_len)
    with open(os.path.join(a.out, "decode_fixtures.log"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
