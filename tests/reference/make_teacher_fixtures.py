#!/usr/bin/env python3
"""Reference outputs of the teacher (SPEC section 2), computed with Hugging Face transformers.

For each configuration below this script
  1. makes a random-weight model directory with `dflash_tool make-target` (the C tool),
  2. loads it with AutoModelForCausalLM.from_pretrained(dir, dtype=float32) and checks that
     transformers sees the named architecture, with no missing or unexpected weights,
  3. runs two token sequences of different lengths, each on its own (a packed batch of two
     sequences: positions restart at 0, attention never crosses the boundary), and
  4. writes, under tests/reference/data/:
       teacher_<name>.safetensors   tokens i32 [T], cu_seqlens i32 [3], layer_ids i32 [n],
                                    features f32 [T, n*H] (HF hidden_states[id + 1] for each id
                                    of layer_ids, in that order: the output of decoder layer id,
                                    after the final norm for id = L-1),
                                    topk_idx i32 [T, k], topk_val f32 [T, k] (descending),
                                    lse f32 [T] (logsumexp of the fp32 logits),
                                    logits_last f32 [2, V] (each sequence's last position)
       teacher_<name>.args          the make-target arguments, layer ids and k (bash-sourceable)
       teacher_tokens_<name>.json   {"sequences": [[...], [...]]}, the input of teacher-dump
       teacher_<name>.prenorm.safetensors  (only when L-1 is among the ids) features f32 [T, n*H]
                                    in the old convention: the last layer's block before the final
                                    norm (the decoder layer's own output); the other blocks equal.
                                    The test shows it fails against the reference.
     and the console output into teacher_fixtures.log.

The C side rebuilds the identical model from the .args line (weights are a pure function of the
arguments) and runs `dflash_tool teacher-dump MODEL teacher_tokens_<name>.json OUT --layers IDS
--topk K` on it.

The features are exactly what the z-lab dflash package feeds the drafter
(dflash/model.py, extract_context_feature: hidden_states[layer_id + 1] of output_hidden_states=True).
In transformers 5.x the hidden states are recorded by hooks on the decoder layers
(utils/output_capturing.py, capture_outputs), and the last entry is then replaced by
last_hidden_state, which LlamaModel/Qwen3Model.forward compute as self.norm(hidden_states): so
hidden_states[id + 1] is decoder layer id's output for id < L-1, and model.norm of it for id = L-1.
The script checks both against a forward hook on the layer. Two fixtures (one Qwen3, one Llama)
include the last layer among their ids, next to earlier ones; the others use earlier ids only.

The seed of each model is the first one, counting from the configured start, for which every gap
between consecutive values among the top k+1 logits (so both the order and the set of the top k)
is at least MIN_GAP: a reimplementation that is right to 1e-4 cannot flip the order.

Not part of CI: it needs torch + transformers. Run it from the repository root:
    python3 tests/reference/make_teacher_fixtures.py [--tool build/dflash_tool] [--out DIR]
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

K = 8                # top-k written
MIN_GAP = 5e-3       # smallest acceptable gap between consecutive top-(k+1) logits
SEQ_LENS = (13, 6)   # two sequences of different lengths

# name, make-target arguments (without OUT_DIR and --seed), first seed to try, layer ids
FIXTURES = [
    # (a) Qwen3, GQA 4 q heads / 2 kv heads, head_dim 24 != 64/4, untied, bf16 weights
    ("qwen3_gqa",
     "--arch qwen3 --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 96"
     " --vocab 307 --dtype bf16 --rope-theta 1000000",
     1, [0, 2]),   # 2 = L-1: after the final norm
    # (b) Qwen3, tied embeddings, a single kv head, head_dim 12 = 48/4
    ("qwen3_tied_mqa",
     "--arch qwen3 --layers 3 --hidden 48 --heads 4 --kv-heads 1 --intermediate 80"
     " --vocab 500 --dtype bf16 --tie",
     1, [0, 1]),
    # (c) Llama with llama3 RoPE scaling (original context 64 puts frequencies in all three
    #     branches: kept, smoothed, divided), GQA, untied, f32 weights
    ("llama3_rope",
     "--arch llama --layers 4 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128"
     " --vocab 389 --dtype f32 --rope-llama3 8 --rope-original-max 64",
     1, [0, 1, 3]),   # 3 = L-1: after the final norm
    # (d) Llama, tied, weights in 2 shards (model.safetensors.index.json), f16 weights
    ("llama_tied_shards",
     "--arch llama --layers 3 --hidden 96 --heads 6 --kv-heads 3 --intermediate 160"
     " --vocab 500 --dtype f16 --tie --shards 2 --eps 1e-5",
     1, [0, 1]),
]

ARCH_CLASS = {"qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}


def log(lines, msg=""):
    print(msg, flush=True)
    lines.append(msg)


def make_sequences(name, vocab):
    rng = random.Random("teacher-" + name)
    return [[rng.randrange(vocab) for _ in range(n)] for n in SEQ_LENS]


def run_sequence(model, ids, layer_ids):
    """Run one sequence (positions 0..n-1). Returns (features [n, len(ids)*H], logits [n, V],
    prenorm features [n, len(ids)*H]: the decoder layers' own outputs, the old convention)."""
    captured = {}
    hooks = [model.model.layers[i].register_forward_hook(
        lambda mod, inp, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
        for i in sorted(set(layer_ids))]
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids], dtype=torch.long), output_hidden_states=True,
                        use_cache=False)
            L = model.config.num_hidden_layers
            assert len(out.hidden_states) == L + 1, f"{len(out.hidden_states)} hidden states for {L} layers"
            feats, prenorm = [], []
            for i in layer_ids:
                hs = out.hidden_states[i + 1][0]   # exactly dflash's extract_context_feature
                layer_out = captured[i][0]
                if i < L - 1:
                    assert torch.equal(hs, layer_out), f"hidden_states[{i + 1}] is not layer {i}'s output"
                else:
                    assert torch.equal(hs, model.model.norm(layer_out)), \
                        f"hidden_states[{L}] is not model.norm of layer {i}'s output"
                    assert not torch.allclose(hs, layer_out), f"hidden_states[{L}] equals the pre-norm output"
                feats.append(hs)
                prenorm.append(layer_out)
    finally:
        for h in hooks:
            h.remove()
    return torch.cat(feats, dim=-1).float(), out.logits[0].float(), torch.cat(prenorm, dim=-1).float()


def min_topk_gap(logits, k):
    vals = torch.topk(logits, k + 1, dim=-1).values
    return (vals[:, :-1] - vals[:, 1:]).min().item()


def build(tool, name, margs, seed, tmp):
    model_dir = os.path.join(tmp, f"{name}_seed{seed}")
    cmd = [tool, "make-target", model_dir] + shlex.split(margs) + ["--seed", str(seed)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return model_dir


def make_fixture(tool, out_dir, tmp, lines, name, margs, seed0, layer_ids):
    from transformers import AutoModelForCausalLM

    arch = shlex.split(margs)[shlex.split(margs).index("--arch") + 1]
    vocab = int(shlex.split(margs)[shlex.split(margs).index("--vocab") + 1])
    seqs = make_sequences(name, vocab)
    for seed in range(seed0, seed0 + 50):
        model_dir = build(tool, name, margs, seed, tmp)
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                           attn_implementation="eager",
                                                           output_loading_info=True)
        model.eval()
        cls = type(model).__name__
        assert cls == ARCH_CLASS[arch], f"{name}: transformers made a {cls}"
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            assert not info.get(key), f"{name}: {key} {info.get(key)}"
        L = model.config.num_hidden_layers
        assert all(0 <= i < L for i in layer_ids), f"{name}: layer ids must be in [0, L)"
        results = [run_sequence(model, s, layer_ids) for s in seqs]
        logits = torch.cat([r[1] for r in results])
        gap = min_topk_gap(logits, K)
        if gap >= MIN_GAP:
            break
        log(lines, f"  {name}: seed {seed}: min top-{K + 1} gap {gap:.3g} < {MIN_GAP:g}, next seed")
    else:
        raise SystemExit(f"{name}: no seed with top-k gaps >= {MIN_GAP}")

    features = torch.cat([r[0] for r in results]).contiguous()
    prenorm = torch.cat([r[2] for r in results]).contiguous()
    topk = torch.topk(logits, K, dim=-1)
    lse = torch.logsumexp(logits, dim=-1)
    T = sum(len(s) for s in seqs)
    cu = [0]
    for s in seqs:
        cu.append(cu[-1] + len(s))
    tensors = {
        "tokens": torch.tensor([t for s in seqs for t in s], dtype=torch.int32),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "layer_ids": torch.tensor(layer_ids, dtype=torch.int32),
        "features": features,
        "topk_idx": topk.indices.to(torch.int32).contiguous(),
        "topk_val": topk.values.contiguous(),
        "lse": lse.contiguous(),
        "logits_last": torch.stack([r[1][-1] for r in results]).contiguous(),
    }
    assert tensors["features"].shape == (T, len(layer_ids) * model.config.hidden_size)

    from safetensors.torch import save_file
    import transformers
    st_path = os.path.join(out_dir, f"teacher_{name}.safetensors")
    save_file(tensors, st_path, metadata={
        "format": "pt", "made_by": "tests/reference/make_teacher_fixtures.py",
        "torch": torch.__version__, "transformers": transformers.__version__})
    paths = [st_path]
    last = L - 1 in layer_ids
    if last:  # the old convention (pre-norm last layer), to show the test tells them apart
        H = model.config.hidden_size
        for f, i in enumerate(layer_ids):
            blk = slice(f * H, (f + 1) * H)
            if i < L - 1:
                assert torch.equal(prenorm[:, blk], features[:, blk])
            else:
                d = (prenorm[:, blk] - features[:, blk]).abs().max().item()
                rel = d / features.abs().max().item()
                log(lines, f"  {name}: feature block {f} (id {i} = L-1): max |post-norm - pre-norm| {d:.4f}"
                           f" = {rel:.3g} of the features' scale")
        pre_path = os.path.join(out_dir, f"teacher_{name}.prenorm.safetensors")
        save_file({"features": prenorm}, pre_path, metadata={
            "format": "pt", "made_by": "tests/reference/make_teacher_fixtures.py",
            "convention": "old: layer L-1 before the final norm (not what dflash feeds)"})
        paths.append(pre_path)
    tok_path = os.path.join(out_dir, f"teacher_tokens_{name}.json")
    with open(tok_path, "w") as f:
        json.dump({"sequences": seqs}, f)
        f.write("\n")
    args_path = os.path.join(out_dir, f"teacher_{name}.args")
    full_args = f"{margs} --seed {seed}"
    with open(args_path, "w") as f:
        f.write(f"# teacher fixture {name}, made by tests/reference/make_teacher_fixtures.py (bash-sourceable)\n"
                f"# dflash_tool make-target MODEL $make_target\n"
                f"# dflash_tool teacher-dump MODEL $tokens OUT --layers $layer_ids --topk $topk\n"
                f"make_target='{full_args}'\n"
                f"layer_ids={','.join(str(i) for i in layer_ids)}\n"
                f"topk={K}\n"
                f"tokens=teacher_tokens_{name}.json\n"
                f"reference=teacher_{name}.safetensors\n"
                + (f"last_id={L - 1}\nprenorm=teacher_{name}.prenorm.safetensors\n" if last else ""))

    rope = model.config.rope_parameters
    log(lines, f"{name}: {cls}, L={L}, H={model.config.hidden_size}, heads {model.config.num_attention_heads}/"
               f"{model.config.num_key_value_heads} x {model.config.head_dim}, V={model.config.vocab_size}, "
               f"tied={model.config.tie_word_embeddings}, rope={dict(rope)}")
    log(lines, f"  make-target {full_args}")
    log(lines, f"  layer_ids {layer_ids}, k {K}, sequences {[len(s) for s in seqs]} (T={T})")
    log(lines, f"  max |logit| {logits.abs().max().item():.4f}, lse in [{lse.min().item():.4f}, "
               f"{lse.max().item():.4f}], max |feature| {features.abs().max().item():.4f}")
    log(lines, f"  min gap between consecutive top-{K + 1} logits: {gap:.4g} (>= {MIN_GAP:g})")
    for p in paths + [args_path, tok_path]:
        log(lines, f"  {os.path.relpath(p, out_dir)}: {os.path.getsize(p)} bytes")
        assert os.path.getsize(p) < 100_000, f"{p} is too big for a committed fixture"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default=os.environ.get("DFLASH_TOOL", os.path.join(root, "build", "dflash_tool")),
                    help="dflash_tool binary (default $DFLASH_TOOL, else build/dflash_tool)")
    ap.add_argument("--out", default=os.path.join(here, "data"), help="output folder (default tests/reference/data)")
    ap.add_argument("--only", default=None, help="make only this fixture")
    a = ap.parse_args()
    if not os.access(a.tool, os.X_OK):
        sys.exit(f"error: {a.tool} is not an executable dflash_tool (build it, or pass --tool / DFLASH_TOOL)")
    os.makedirs(a.out, exist_ok=True)

    import transformers
    import safetensors
    torch.manual_seed(0)
    torch.set_num_threads(1)  # deterministic reductions
    lines = []
    log(lines, "make_teacher_fixtures.py: transformers reference for the teacher (SPEC section 2)")
    log(lines, f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__},"
               f" safetensors {safetensors.__version__}")
    log(lines, f"tool {a.tool}")
    with tempfile.TemporaryDirectory(prefix="dflash_teacher_fixtures_") as tmp:
        for name, margs, seed0, layer_ids in FIXTURES:
            if a.only and name != a.only:
                continue
            make_fixture(a.tool, a.out, tmp, lines, name, margs, seed0, layer_ids)
    if not a.only:
        with open(os.path.join(a.out, "teacher_fixtures.log"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
