#!/usr/bin/env python3
"""`dflash_tool make-target` for the families written from the teacher's tensor list, against transformers.

make-target writes Qwen2, Mistral, Gemma 3, Gemma 4, gpt-oss, GLM-4.5 and DeepSeek-V3 targets from
the teacher's own tensor list (target_tensor_names) and each table's to_json (tools/tool_make_target.c).
For every case in CASES this script
  1. runs `dflash_tool make-target DIR ARGS`,
  2. loads DIR with AutoModelForCausalLM.from_pretrained(dtype=float32, attn_implementation="eager",
     experts_implementation="eager" for the MoE classes, output_loading_info=True): the class must be
     the expected one, with no missing, unexpected or mismatched keys, and every loaded tensor must
     equal the file's (upcast exactly; per-expert files against the slices of transformers' fused
     gate_up_proj [E, 2I, H] / down_proj [E, H, I]),
  3. runs `dflash_tool teacher-dump DIR TOKENS OUT --device cpu --layers IDS --topk 8` on 3 random
     sequences and transformers' fp32 forward on each sequence alone, and compares: features
     (hidden_states[id + 1], the last layer's after the final norm) and lse (of the logits after any
     final soft-cap) within TOL of each tensor's max |value|; the top-k values likewise, and
     transformers' logits at the teacher's top-k indices equal the teacher's values within TOL,
and writes what it found to tests/reference/data/make_target_families.log.

tests/cli/test_make_target_families.sh runs the same make-target lines without torch (exit codes,
determinism, teacher-dump's outputs finite, dflash_rank --plan's loading); keep CASES in step with it.

Not part of CI: it needs torch + transformers. From the repository root:
    python tests/reference/check_make_target_families.py [--tool build/dflash_tool] [--only NAME,...]
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import torch

TOL = 2e-4
K = 8
SEQS = (13, 9, 5)

# name, class, make-target arguments, layer ids
CASES = [
    ("qwen2_llama3", "Qwen2ForCausalLM",
     "--arch qwen2 --layers 3 --hidden 64 --heads 4 --kv-heads 2 --vocab 251 --rope-llama3 8 --rope-original-max 64 "
     "--max-positions 4096 --seed 1", [0, 2]),
    ("qwen2_swa_tied", "Qwen2ForCausalLM",
     "--arch qwen2 --layers 3 --hidden 48 --heads 4 --kv-heads 1 --head-dim 16 --sliding-window 4 "
     "--layer-types full,sliding,sliding --vocab 199 --tie --dtype f32 --seed 2", [0, 1]),
    ("mistral_swa", "MistralForCausalLM",
     "--arch mistral --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --sliding-window 5 --vocab 283 "
     "--dtype f16 --eps 1e-5 --seed 3", [0, 1, 2]),
    ("gemma3", "Gemma3ForCausalLM",
     "--arch gemma3 --layers 3 --hidden 48 --heads 4 --kv-heads 2 --head-dim 20 --intermediate 80 --sliding-window 5 "
     "--layer-types sliding,full,sliding --vocab 262 --dtype f32 --tie --seed 4", [0, 2]),
    ("gemma4", "Gemma4ForCausalLM",
     "--arch gemma4 --layers 4 --hidden 48 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 80 --sliding-window 5 "
     "--layer-types sliding,full,sliding,full --vocab 211 --tie --seed 5", [0, 2, 3]),
    ("gpt_oss", "GptOssForCausalLM",
     "--arch gpt_oss --layers 2 --hidden 48 --heads 4 --kv-heads 2 --head-dim 24 --sliding-window 5 "
     "--layer-types sliding,full --vocab 317 --experts 5 --experts-per-tok 3 --moe-intermediate 56 --eps 1e-5 --seed 6",
     [0, 1]),
    ("glm4_moe", "Glm4MoeForCausalLM",
     "--arch glm4_moe --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 96 --vocab 227 "
     "--experts 6 --experts-per-tok 2 --moe-intermediate 24 --dtype f16 --eps 1e-5 --seed 7", [0, 2]),
    ("deepseek_v3", "DeepseekV3ForCausalLM",
     "--arch deepseek_v3 --layers 3 --hidden 64 --heads 4 --kv-heads 4 --head-dim 24 --intermediate 96 --vocab 281 "
     "--experts 8 --experts-per-tok 3 --moe-intermediate 24 --seed 8", [0, 2]),
    ("deepseek_v3_fused", "DeepseekV3ForCausalLM",
     "--arch deepseek_v3 --layers 2 --hidden 48 --heads 3 --kv-heads 3 --head-dim 18 --intermediate 80 --vocab 239 "
     "--experts 6 --experts-per-tok 2 --moe-intermediate 20 --experts-layout fused --shards 2 --dtype f32 --seed 9",
     [0, 1]),
]

EXPERT_RE = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


def log(lines, msg=""):
    print(msg, flush=True)
    lines.append(msg)


def read_safetensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def file_tensors(model_dir):
    from safetensors.torch import load_file
    out = {}
    for f in sorted(os.listdir(model_dir)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(model_dir, f)))
    return out


def check_loaded(model, files):
    """Every file tensor equals the loaded model's (per-expert ones: the fused parameter's slice)."""
    sd = model.state_dict()
    n = 0
    for k, v in files.items():
        want = v.float()
        if k in sd:
            got = sd[k].float()
        else:
            m = EXPERT_RE.match(k)
            if not m or m.group(1) + ".gate_up_proj" not in sd:
                raise SystemExit(f"file tensor {k} is not in the loaded model")
            e, part = int(m.group(2)), m.group(3)
            if part == "down":
                got = sd[m.group(1) + ".down_proj"][e].float()
            else:
                gu = sd[m.group(1) + ".gate_up_proj"][e].float()
                I = gu.shape[0] // 2
                got = gu[:I] if part == "gate" else gu[I:]
        if got.shape != want.shape or not torch.equal(got, want):
            raise SystemExit(f"loaded {k} differs from the file's")
        n += 1
    return n


def text_model(model):
    return getattr(model.model, "language_model", model.model)


def reference(model, seqs, layer_ids):
    feats, logits = [], []
    L = model.config.num_hidden_layers
    for ids in seqs:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
        assert len(out.hidden_states) == L + 1
        feats.append(torch.cat([out.hidden_states[i + 1][0] for i in layer_ids], -1).float())
        logits.append(out.logits[0].float())
    return torch.cat(feats), torch.cat(logits)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def run_case(name, cls, args, layer_ids, tool, tmp, lines):
    import transformers
    d = os.path.join(tmp, name)
    mt = subprocess.run([tool, "make-target", d] + shlex.split(args), capture_output=True, text=True)
    if mt.returncode:
        raise SystemExit(f"{name}: make-target failed: {mt.stderr.strip()}")
    cfg = json.load(open(os.path.join(d, "config.json")))
    log(lines, f"{name}: {cls}")
    log(lines, f"  make-target {args}")
    log(lines, "  " + mt.stdout.strip().replace(tmp + "/", ""))
    moe = any(k in cfg for k in ("num_local_experts", "n_routed_experts"))
    extra = {"experts_implementation": "eager"} if moe else {}
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True, **extra)
    model.eval()
    if type(model).__name__ != cls:
        raise SystemExit(f"{name}: transformers made a {type(model).__name__}, want {cls}")
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info.get(key):
            raise SystemExit(f"{name}: {key} {info[key]}")
    files = file_tensors(d)
    n = check_loaded(model, files)
    log(lines, f"  from_pretrained: {type(model).__name__}, no missing/unexpected/mismatched keys; "
               f"{n} file tensors equal to the loaded ones")

    g = torch.Generator().manual_seed(len(name))
    V = cfg["vocab_size"]
    seqs = [torch.randint(0, V, (n_tok,), generator=g).tolist() for n_tok in SEQS]
    tok = os.path.join(tmp, name + ".tokens.json")
    json.dump({"sequences": seqs}, open(tok, "w"))
    out = os.path.join(tmp, name + ".dump.safetensors")
    td = subprocess.run([tool, "teacher-dump", d, tok, out, "--device", "cpu", "--layers",
                         ",".join(map(str, layer_ids)), "--topk", str(K)], capture_output=True, text=True)
    if td.returncode:
        raise SystemExit(f"{name}: teacher-dump failed: {td.stderr.strip()}")
    c = read_safetensors(out)
    feats, logits = reference(model, seqs, layer_ids)
    lse = torch.logsumexp(logits, -1)
    top = torch.topk(logits, K, -1)
    r_feat = rel(c["features"].float(), feats)
    r_lse = rel(c["lse"].float(), lse)
    r_topv = rel(c["topk_val"].float(), top.values)
    at_idx = torch.gather(logits, 1, c["topk_idx"].long())
    r_atidx = ((at_idx - c["topk_val"].float()).abs().max() / logits.abs().max()).item()
    same_idx = (c["topk_idx"].long() == top.indices).float().mean().item()
    ok = max(r_feat, r_lse, r_topv, r_atidx) <= TOL
    log(lines, f"  teacher-dump --layers {','.join(map(str, layer_ids))} on sequences {list(SEQS)} (T={sum(SEQS)}): "
               f"features rel {r_feat:.2e}, lse rel {r_lse:.2e}, top-{K} values rel {r_topv:.2e}, "
               f"logits at the teacher's top-{K} rel {r_atidx:.2e}, indices equal {same_idx:.1%} "
               f"(max |feature| {feats.abs().max():.4g}, lse in [{lse.min():.4f}, {lse.max():.4f}]): "
               f"{'ok' if ok else 'OVER TOL'} (tol {TOL})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default="build/dflash_tool")
    ap.add_argument("--only", default="")
    ap.add_argument("--log", default="tests/reference/data/make_target_families.log")
    a = ap.parse_args()
    import transformers
    torch.set_num_threads(1)
    lines = []
    log(lines, "check_make_target_families.py: dflash_tool make-target's families from the teacher's tensor list,"
               " against transformers")
    log(lines, f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__};"
               f" tol {TOL} (relative to each tensor's max |value|), fp32 on both sides")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    log(lines, f"run: python tests/reference/check_make_target_families.py --tool {a.tool} (the tree at {head or '?'}"
               f" with this work uncommitted)")
    only = set(filter(None, a.only.split(",")))
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, cls, args, ids in CASES:
            if only and name not in only:
                continue
            bad += not run_case(name, cls, args, ids, a.tool, tmp, lines)
    log(lines, f"{'all within tolerance' if not bad else f'{bad} over tolerance'}")
    if not only:
        with open(a.log, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
