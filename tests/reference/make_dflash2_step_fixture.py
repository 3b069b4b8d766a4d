#!/usr/bin/env python3
"""Reference output of one DFlash2 student step: the z-lab `dflash` package's DFlash2DraftModel
(its two GroupedDynamicCausalConv per layer and its CandidateSelector) run in float64 with torch
autograd -- the package's own forward, not a re-implementation.

One configuration, chosen away from the published defaults and from the C unit tests' shapes:
H 35 (odd) in groups of 5 (7 groups, odd), conv kernel 3, selector top-k 5 of V 89, rank 7,
2 layers (a sliding layer with window 7, then a full one), 3 query heads / 1 kv head of head_dim
10 (!= H / heads), block 6, two features, two packed sequences.

For the batch (make_student_fixtures.py's inputs plus the conv and selector tensors) the script
  1. runs DFlash2DraftModel per anchor (target_hidden = features[s:a], noise_embedding =
     embed([tok[a], MASK...]), position_ids 0 .. a-s+B-1, the package's masks): the final-normed
     hidden x [B, H], logits = x lm_head^T;
  2. the loss of SPEC section 4 per scored slot (make_student_fixtures.slot_terms: CE, KL with the
     tail bucket, CAP; decay weights; data labels) plus DFlash2's selector term (SPEC section 3.1,
     docs/student.md): the candidates are the slot's top-k logits, rescored by the package's
     modules exactly as CandidateSelector.select does (unary logit + <predecessor_codebook(prev) *
     hidden_projection(x), successor_codebook(c)>) with prev the previous slot's label (teacher
     forcing; the anchor's token for slot 1), and the k-way cross-entropy against the label when it
     is a candidate (0 otherwise), times loss.selector_weight;
  3. the gradient of sum_r w_r (slot loss_r) / sum_r w_r with respect to every parameter of the
     package model (autograd), written under the export names (the codebooks without `.weight`:
     DFlash2DraftModel.from_pretrained's key_mapping adds it).
Writes under tests/reference/data/:
  student_dflash2_odd.in.safetensors, .config.json, .out.safetensors (the student-fixture format:
  tests/cli/test_student_reference.sh runs `dflash_tool step-dump` on it and compares), and the
  console output into dflash2_step.log.

Not part of CI (needs torch, transformers, safetensors, dflash). From the repository root:
    python3 tests/reference/make_dflash2_step_fixture.py [--out DIR]
"""
import argparse
import importlib.metadata
import io
import json
import math
import os
import platform
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_student_fixtures as msf  # noqa: E402  (inputs, config.json, slot terms, writer)

F64 = torch.float64
SELECTOR_WEIGHT = 0.7  # not 1: a weight applied twice or not at all shows

FIX = dict(name="dflash2_odd", layers=2, hidden=35, heads=3, kv_heads=1, head_dim=10, intermediate=24, vocab=89,
           block=6, layer_ids=[1, 3], num_target_layers=5, layer_types=["sliding_attention", "full_attention"],
           window=7, is_causal=None, mask_token=88, rope_theta=10000.0, eps=1e-6, seq_lens=[26, 17], zero_mask=[9],
           start_mask=[0, 1], anchors=[3, 12, 19, 23, 28, 35], topk=5,
           loss=dict(alpha=0.15, **{"lambda": 0.1}, gamma=7.0, weighting="decay", label="data",
                     selector_weight=SELECTOR_WEIGHT),
           conv_kernel=3, conv_group=5, sel_top_k=5, sel_rank=7)


def conv_selector_names(f):
    """DFlash2's tensors after DFlash's, in export order (src/student/model/drafter_dflash2.c)."""
    H, K, G, V, r = f["hidden"], f["conv_kernel"], f["conv_group"], f["vocab"], f["sel_rank"]
    out = []
    for l in range(f["layers"]):
        for conv in ("attention_conv", "mlp_conv"):
            out += [(f"layers.{l}.{conv}.base_kernel", (2, K, H)),
                    (f"layers.{l}.{conv}.kernel_projection.weight", (2 * K * (H // G), H))]
    out += [("candidate_selector.predecessor_codebook", (V, r)), ("candidate_selector.successor_codebook", (V, r)),
            ("candidate_selector.hidden_projection.weight", (r, H))]
    return out


def make_inputs(f, seed):
    t = msf.make_inputs(f, seed)
    r = np.random.default_rng(seed + 7777)
    for name, shape in conv_selector_names(f):
        if name.endswith("base_kernel"):  # around the identity (1 at offset 0), as trained ones are
            b = 0.3 * r.standard_normal(shape)
            b[:, 0, :] += 1.0
            t[name] = b.astype(np.float32)
        elif "codebook" in name:
            t[name] = (0.6 * r.standard_normal(shape)).astype(np.float32)
        else:
            t[name] = (0.5 * r.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
    return t


def config_json(f):
    c = msf.drafter_config_json(f)
    c["architectures"] = ["DFlash2DraftModel"]
    c["dflash_config"].update(conv_kernel_size=f["conv_kernel"], conv_group_size=f["conv_group"],
                              selector_top_k=f["sel_top_k"], selector_rank=f["sel_rank"])
    return c


def module_name(export):
    return export + ".weight" if export.endswith("_codebook") else export


def step(f, t, cfg):
    """Loss parts, gradients (export names) and the selector's counts, float64 autograd through the package."""
    from dflash.model import DFlash2DraftModel
    from transformers import Qwen3Config

    model = DFlash2DraftModel(Qwen3Config.from_dict(cfg)).to(F64).train()
    names = [n for n, _ in msf.drafter_names(f)] + [n for n, _ in conv_selector_names(f)]
    state = {module_name(n): torch.tensor(t[n], dtype=F64) for n in names}
    res = model.load_state_dict(state, strict=False)
    assert not res.missing_keys and not res.unexpected_keys, res
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(state), (sorted(params), sorted(state))
    sel = model.candidate_selector
    assert sel.top_k == f["sel_top_k"] and model.block_size == f["block"]

    embed = torch.tensor(t["target.embed_tokens.weight"], dtype=F64)
    lm_head = torch.tensor(t["target.lm_head.weight"], dtype=F64)
    feats = torch.tensor(t["features"], dtype=F64)
    tokens, mask, cu = t["tokens"], t["loss_mask"], t["cu_seqlens"]
    t_idx = torch.tensor(t["topk_idx"], dtype=torch.int64)
    t_val, t_lse = torch.tensor(t["topk_val"], dtype=F64), torch.tensor(t["lse"], dtype=F64)
    lo = f["loss"]
    alpha, lam, gamma, sw = lo["alpha"], lo["lambda"], lo["gamma"], lo["selector_weight"]
    B, S = f["block"], len(tokens)
    total = torch.zeros((), dtype=F64)
    sums = dict(w=0.0, ce=0.0, kl=0.0, cap=0.0, sel=0.0)
    hits = misses = rows = 0
    gaps = []
    for a in (int(x) for x in t["anchors"]):
        seq = int(np.searchsorted(cu, a, side="right")) - 1
        s, e = int(cu[seq]), int(cu[seq + 1])
        ids = torch.tensor([int(tokens[a])] + [f["mask_token"]] * (B - 1))
        x = model(position_ids=torch.arange(0, a - s + B)[None], noise_embedding=embed[ids][None],
                  target_hidden=feats[s:a][None])[0]                         # [B, H]
        logits = x @ lm_head.T                                                # [B, V]
        z = sel.hidden_projection(x)                                          # [B, r]
        prev = int(tokens[a])
        for k in range(1, B):
            pos = a + k
            inside = pos < e
            tp = min(pos - 1, S - 1)
            y = int(tokens[pos]) if inside else 0
            w = math.exp(-(k - 1) / gamma) if inside and mask[pos] else 0.0
            cand = torch.topk(logits[k].detach(), f["sel_top_k"]).indices      # the slot's top-k
            scores = logits[k][cand] + (sel.predecessor_codebook(torch.tensor(prev)) * z[k]) @ \
                sel.successor_codebook(cand).T                                # CandidateSelector.select's
            prev = y                                                          # teacher forcing
            if w == 0.0:
                continue
            ce, kl, cap = msf.slot_terms(logits[k], y, t_idx[tp], t_val[tp], t_lse[tp])
            hit = (cand == y).nonzero()
            sel_ce = torch.zeros((), dtype=F64)
            if len(hit):
                sel_ce = torch.logsumexp(scores, 0) - scores[int(hit[0, 0])]
                hits += 1
            else:
                misses += 1
            rows += 1
            total = total + w * ((1 - alpha) * ce + alpha * kl + lam * cap + sw * sel_ce)
            for key, val in (("w", 1.0), ("ce", ce), ("kl", kl), ("cap", cap), ("sel", sel_ce)):
                sums[key] += w * float(val.detach() if torch.is_tensor(val) else val)
            # margins the C side's float32 must not flip: the argmax (CAP) and the candidate set's edge
            top = torch.topk(logits[k].detach(), f["sel_top_k"] + 1).values
            gaps.append(float(min(top[0] - top[1], top[-2] - top[-1])))
    loss = total / sums["w"]
    loss.backward()
    grads = {n: (torch.zeros_like(params[module_name(n)]) if params[module_name(n)].grad is None  # no hit: untouched
                 else params[module_name(n)].grad).detach().numpy() for n in names}
    W = sums["w"]
    out = dict(loss=float(loss), ce=sums["ce"] / W, kl=sums["kl"] / W, cap=sums["cap"] / W, sel=sums["sel"] / W,
               sum_w=W, rows=rows, hits=hits, misses=misses, min_gap=min(gaps))
    assert abs(out["loss"] - ((1 - alpha) * out["ce"] + alpha * out["kl"] + lam * out["cap"] + sw * out["sel"])) < 1e-12
    return out, grads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    log = io.StringIO()

    def say(msg=""):
        print(msg)
        log.write(msg + "\n")

    import safetensors
    import transformers
    f = FIX
    say("make_dflash2_step_fixture.py: one DFlash2 student step, the dflash package's DFlash2DraftModel in float64 "
        "with torch autograd")
    say(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"safetensors {safetensors.__version__}, numpy {np.__version__}, dflash {importlib.metadata.version('dflash')}")
    cfg = config_json(f)
    # the first seed whose scored rows all have their top-2 logits and their k-th and (k+1)-th apart
    # by MIN_GAP (CAP's argmax and the candidate set cannot change under the C side's float32
    # rounding), with selector hits and misses both present
    for seed in range(1, 400):
        t = make_inputs(f, 5000 + seed)
        res, grads = step(f, t, cfg)
        if res["min_gap"] >= msf.MIN_GAP and res["hits"] > 0 and res["misses"] > 0:
            break
    else:
        raise SystemExit(f"no seed with min gap {msf.MIN_GAP} and both hits and misses")
    say(f"== {f['name']}: seed {5000 + seed}, {f['layers']} layers {f['layer_types']} (window {f['window']}), H {f['hidden']}, "
        f"heads {f['heads']}/{f['kv_heads']} x {f['head_dim']}, MLP {f['intermediate']}, V {f['vocab']}, B {f['block']}, "
        f"features {f['layer_ids']}, teacher k {f['topk']}")
    say(f"   conv kernel {f['conv_kernel']}, group {f['conv_group']} ({f['hidden'] // f['conv_group']} groups); selector "
        f"top-k {f['sel_top_k']}, rank {f['sel_rank']}, selector_weight {SELECTOR_WEIGHT}")
    say(f"   sequences {f['seq_lens']}, anchors {f['anchors']}, loss {f['loss']}")
    say(f"   scored rows {res['rows']} (selector: {res['hits']} labels among the candidates, {res['misses']} not), "
        f"sum of weights {res['sum_w']:.6f}, min gap at the argmax and the candidates' edge {res['min_gap']:.4f}")
    say(f"   loss {res['loss']:.9f}  ce {res['ce']:.9f}  kl {res['kl']:.9f}  cap {res['cap']:.9f}  sel {res['sel']:.9f}")
    for n, g in grads.items():
        if "conv" in n or "selector" in n or n == "fc.weight":
            say(f"   grad {n}: max |g| {np.abs(g).max():.4e}")
    base = os.path.join(args.out, f"student_{f['name']}")
    n_in = msf.write_safetensors(base + ".in.safetensors", t)
    out = {k: np.array([res[k]], np.float32) for k in ("loss", "ce", "kl", "cap")}
    out.update({"grad." + n: g.astype(np.float32) for n, g in grads.items()})
    n_out = msf.write_safetensors(base + ".out.safetensors", out)
    with open(base + ".config.json", "w") as fh:
        json.dump(dict(cfg, loss=f["loss"]), fh, indent=2)
        fh.write("\n")
    say(f"   wrote student_{f['name']}.in.safetensors ({n_in} B), .config.json, .out.safetensors ({n_out} B)")
    assert max(n_in, n_out) < msf.MAX_FILE_BYTES, "fixture too large"
    with open(os.path.join(args.out, "dflash2_step.log"), "w") as fh:
        fh.write(log.getvalue())


if __name__ == "__main__":
    sys.exit(main())
