#!/usr/bin/env python3
"""Fixtures of quantised target checkpoints (src/teacher/target_quant.h), made with torch and
transformers' own functions. Not part of CI (it needs torch + transformers); the C tests read what
it writes. Run from the repository root:
    python3 tests/reference/make_quant_fixture.py [--tool build/dflash_tool] [--out DIR]

It writes under tests/reference/data/ (and the console output into quant_fixtures.log):

  quant_fp8.safetensors     (tests/unit/test_target_quant.c)
    e4m3.f32 / e5m2.f32 / e8m0.f32  F32 [256]: torch's .to(float32) of every code 0..255 viewed as
                            float8_e4m3fn / float8_e5m2 / float8_e8m0fnu
    three block-quantised weights, named as a checkpoint names them, with their weight_scale_inv
    (weight_block_size [16, 32]; 37 rows and 70 columns leave a partial last block in both dims):
      model.layers.0.mlp.down_proj.weight            F8_E4M3 [37, 70]    scale F32 [3, 3]
      model.layers.0.mlp.experts.gate_up_proj        F8_E4M3 [2, 37, 70] scale BF16 [2, 3, 3]
      model.layers.0.self_attn.o_proj.weight         F8_E4M3 [20, 40]    scale F8_E8M0 [2, 2]
    and ref.<name> F32: W[.., o, i] = f32(w) * f32(s[.., o // 16, i // 32]) computed here by
    broadcasting the scales (repeat_interleave, cut to the weight's shape) and checked against a
    loop over the blocks; ref.model.layers.0.mlp.down_proj.weight.bf16 the first rounded to bf16
    as torch's .to(bfloat16) rounds.
  quant_mxfp4.safetensors   (tests/unit/test_target_quant.c)
    model.layers.0.mlp.experts.{gate_up,down}_proj_{blocks,scales} U8 (random bytes, scales mostly
    near 127 plus the extremes 0, 1, 254, 255) and ref.<name>.f32: transformers'
    integrations.mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=float32), transposed back to
    [E, rows, cols] (the function returns transformers' parameter layout [E, cols, rows]). The script
    checks that layout against GptOssExperts' parameters (gate_up_proj [E, H, 2I], down_proj [E, I, H]),
    and that the bf16 de-quantisation is the fp32 one (every value exact in bf16).
  quant_qwen3_fp8_partial/, quant_qwen3_fp8_even/  (tests/cli/test_quant_target.sh)
    a Qwen3 target made by `dflash_tool make-target` ($make_target in the .args file) with every
    q/k/v/o/gate/up/down_proj.weight quantised to float8_e4m3fn in blocks (the embedding, the norms
    and lm_head stay bf16, lm_head in modules_to_not_convert as Qwen3-*-FP8 ship it):
      partial  weight_block_size [32, 40]: rows 48/24/80 and columns 48/80 leave partial last
               blocks (one scale, layer 1's down_proj, is BF16); the reference de-quantises with the
               rule above (transformers' Fp8Dequantize derives the block from the scale grid,
               rows // scale_rows, which is wrong for a partial block or refused when it does not
               divide: the log shows what it does with each, and that its load fails)
      even     weight_block_size [8, 16] (every dim a multiple), in two shards with an index (layer 1's
               q_proj.weight and its scale in different shards): the reference is transformers' own
               load of the directory (AutoModelForCausalLM on the CPU de-quantises FP8)
    quant_qwen3_fp8_<v>.safetensors   transformers' fp32 forward of the de-quantised model, in
                                      teacher-dump's layout (features, topk_idx, topk_val, lse,
                                      logits_last, tokens, cu_seqlens, layer_ids)
    quant_qwen3_fp8_<v>.args          make_target, layer_ids, topk, tokens, reference, and
                                      orig_err: how far the unquantised model's outputs are
    quant_tokens_qwen3.json           the sequences
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
from safetensors import safe_open
from safetensors.torch import save_file

K = 8
MIN_GAP = 5e-3
SEQ_LENS = (13, 6)
LAYER_IDS = [0, 1]   # 1 = L-1: after the final norm
MAKE_TARGET = ("--arch qwen3 --layers 2 --hidden 48 --heads 4 --kv-heads 2 --head-dim 12 --intermediate 80"
               " --vocab 97 --dtype bf16 --rope-theta 1000000")
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

LOG = []


def log(msg=""):
    print(msg, flush=True)
    LOG.append(msg)


def cdiv(a, b):
    return (a + b - 1) // b


def expand_scales(s, shape, bo, bi):
    """s [..., ceil(O/bo), ceil(I/bi)] broadcast to [..., O, I]: element (o, i) gets s[o // bo, i // bi]."""
    O, I = shape[-2], shape[-1]
    return s.float().repeat_interleave(bo, dim=-2)[..., :O, :].repeat_interleave(bi, dim=-1)[..., :I]


def dequant(q, s, bo, bi):
    return q.float() * expand_scales(s, q.shape, bo, bi)


def quantise(w, bo, bi, scale_dtype=torch.float32, pow2=False):
    """Block quantisation as DeepSeek's and transformers' Fp8Quantize (amax per block -> scale
    448 / amax, weight_scale_inv = 1 / scale), with ceil(O/bo) x ceil(I/bi) blocks: the last block
    of a dimension may be partial. pow2: scale_inv rounded up to a power of two (ue8m0)."""
    O, I = w.shape[-2], w.shape[-1]
    so, si = cdiv(O, bo), cdiv(I, bi)
    pad = torch.zeros(*w.shape[:-2], so * bo, si * bi)
    pad[..., :O, :I] = w.float()
    blocks = pad.reshape(*w.shape[:-2], so, bo, si, bi)
    amax = blocks.abs().amax(dim=(-3, -1))
    amax = torch.where(amax > 0, amax, torch.ones_like(amax))
    inv = amax / FP8_MAX
    if pow2:
        inv = torch.pow(2.0, torch.ceil(torch.log2(inv)))
    inv = inv.to(scale_dtype)
    q = (w.float() / expand_scales(inv, w.shape, bo, bi)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, inv


# ------------------------------------------------------------------------------------- unit fixtures

def make_fp8_unit(out_dir):
    g = torch.Generator().manual_seed(7)
    codes = torch.arange(256, dtype=torch.uint8)
    t = {"e4m3.f32": codes.view(torch.float8_e4m3fn).float(),
         "e5m2.f32": codes.view(torch.float8_e5m2).float(),
         "e8m0.f32": codes.view(torch.float8_e8m0fnu).float()}
    log(f"e4m3: {int(t['e4m3.f32'].isnan().sum())} NaN codes (0x7f, 0xff), max {t['e4m3.f32'].nan_to_num(0).max().item()},"
        f" smallest subnormal {t['e4m3.f32'][1].item()}")
    bo, bi = 16, 32
    cases = [("model.layers.0.mlp.down_proj.weight", (37, 70), torch.float32, False),
             ("model.layers.0.mlp.experts.gate_up_proj", (2, 37, 70), torch.bfloat16, False),
             ("model.layers.0.self_attn.o_proj.weight", (20, 40), torch.float8_e8m0fnu, True)]
    for name, shape, sdt, pow2 in cases:
        # block magnitudes over six orders, so the codes run from subnormals to 448
        w = torch.randn(*shape, generator=g) * torch.exp(torch.randn(*shape[:-2], cdiv(shape[-2], bo), 1,
                                                                    generator=g) * 3).repeat_interleave(bo, -2)[..., :shape[-2], :]
        q, s = quantise(w, bo, bi, torch.float32 if sdt == torch.float8_e8m0fnu else sdt, pow2)
        if sdt == torch.float8_e8m0fnu:
            s32 = s
            s = s.to(torch.float8_e8m0fnu)
            assert torch.equal(s.float(), s32), "ue8m0 scales are powers of two"
        sname = name + "_scale_inv"
        ref = dequant(q, s, bo, bi)
        # the same by an explicit loop over blocks (a second reading of the rule)
        qs = q.float().reshape(-1, shape[-2], shape[-1])
        ss = s.float().reshape(-1, cdiv(shape[-2], bo), cdiv(shape[-1], bi))
        loop = torch.empty_like(qs)
        for m in range(qs.shape[0]):
            for a in range(ss.shape[1]):
                for b in range(ss.shape[2]):
                    loop[m, a * bo:(a + 1) * bo, b * bi:(b + 1) * bi] = qs[m, a * bo:(a + 1) * bo, b * bi:(b + 1) * bi] * ss[m, a, b]
        assert torch.equal(loop.reshape(ref.shape), ref)
        t[name], t[sname] = q, s
        t["ref." + name] = ref
        if name.endswith("down_proj.weight"):
            t["ref." + name + ".bf16"] = ref.to(torch.bfloat16)
        sub = int((q.view(torch.uint8) & 0x78 == 0).sum())
        log(f"{name}: F8_E4M3 {list(shape)}, {sname} {str(s.dtype).replace('torch.', '')} {list(s.shape)}"
            f" (blocks [{bo}, {bi}]: last block {shape[-2] % bo} rows x {shape[-1] % bi} columns),"
            f" {sub} subnormal/zero codes, |W| max {ref.abs().max().item():.4g}")
    path = os.path.join(out_dir, "quant_fp8.safetensors")
    save_file(t, path, metadata={"made_by": "tests/reference/make_quant_fixture.py"})
    log(f"wrote {path} ({os.path.getsize(path)} bytes)")


def make_mxfp4_unit(out_dir):
    from transformers.integrations.mxfp4 import FP4_VALUES, convert_moe_packed_tensors
    from transformers.models.gpt_oss.configuration_gpt_oss import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    log(f"transformers FP4_VALUES (e2m1, index = nibble): {FP4_VALUES}")
    g = torch.Generator().manual_seed(11)
    E, H, I = 2, 64, 32   # hidden 64 = 2 groups of 32, intermediate 32 = 1 group
    cfg = GptOssConfig(hidden_size=H, intermediate_size=I, num_local_experts=E, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=32)
    ex = GptOssExperts(cfg)
    log(f"GptOssExperts parameters: gate_up_proj {list(ex.gate_up_proj.shape)} = [E, H, 2I],"
        f" down_proj {list(ex.down_proj.shape)} = [E, I, H]")
    t = {}
    for proj, rows, cols, param in (("gate_up_proj", 2 * I, H, ex.gate_up_proj), ("down_proj", H, I, ex.down_proj)):
        G = cols // 32
        blocks = torch.randint(0, 256, (E, rows, G, 16), dtype=torch.uint8, generator=g)
        scales = (127 + torch.randint(-12, 8, (E, rows, G), generator=g)).to(torch.uint8)
        flat = scales.view(-1)
        flat[:5] = torch.tensor([0, 1, 254, 255, 127], dtype=torch.uint8)   # the extremes, pinned
        name = f"model.layers.0.mlp.experts.{proj}"
        t[name + "_blocks"], t[name + "_scales"] = blocks, scales
        d = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.float32)
        assert list(d.shape) == list(param.shape), f"{proj}: de-quantised {list(d.shape)} vs parameter {list(param.shape)}"
        t[f"ref.{name}.f32"] = d.transpose(1, 2).contiguous()   # back to [E, rows, cols]
        # in bf16 (as transformers de-quantises for a bf16 model) every value is the fp32 one: exact
        d16 = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.bfloat16)
        assert torch.equal(d16.float(), d), f"{proj}: bf16 de-quantisation is not the fp32 one"
        # nibble order: element 2j is the low nibble of byte j, 2j+1 the high one
        ref = t[f"ref.{name}.f32"]
        b0, e0 = blocks[0, 0, 0, 0].item(), scales[0, 0, 0].item()
        lo, hi = FP4_VALUES[b0 & 15] * 2.0 ** (e0 - 127), FP4_VALUES[b0 >> 4] * 2.0 ** (e0 - 127)
        assert (ref[0, 0, 0].item(), ref[0, 0, 1].item()) == (lo, hi)
        log(f"{name}: blocks {list(blocks.shape)} scales {list(scales.shape)} -> transformers {list(param.shape)}"
            f" (the parameter), ref [E, rows, cols] {list(ref.shape)}; byte 0x{b0:02x} scale {e0}:"
            f" elements 0, 1 = {ref[0, 0, 0].item()}, {ref[0, 0, 1].item()} (low nibble first);"
            f" NaN {int(ref.isnan().sum())}, inf {int(ref.isinf().sum())} (torch.ldexp is exact: with scale 254 or 255,"
            f" 2^127 / 2^128, values past the fp32 range are inf, zeros stay 0)")
    path = os.path.join(out_dir, "quant_mxfp4.safetensors")
    save_file(t, path, metadata={"made_by": "tests/reference/make_quant_fixture.py"})
    log(f"wrote {path} ({os.path.getsize(path)} bytes)")


# ------------------------------------------------------------------------------------- end to end

def load_dir(d):
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def forward(model, seqs):
    feats, logits = [], []
    with torch.no_grad():
        for ids in seqs:
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
            feats.append(torch.cat([out.hidden_states[i + 1][0] for i in LAYER_IDS], -1).float())
            logits.append(out.logits[0].float())
    return torch.cat(feats), torch.cat(logits)


def outputs(seqs, feats, logits):
    last = torch.stack([logits[sum(map(len, seqs[:i + 1])) - 1] for i in range(len(seqs))])
    top = torch.topk(logits, K, dim=-1)
    cu = [0]
    for s in seqs:
        cu.append(cu[-1] + len(s))
    return {"features": feats.contiguous(), "topk_idx": top.indices.to(torch.int32), "topk_val": top.values,
            "lse": torch.logsumexp(logits, -1), "logits_last": last.contiguous(),
            "tokens": torch.tensor([x for s in seqs for x in s], dtype=torch.int32),
            "cu_seqlens": torch.tensor(cu, dtype=torch.int32), "layer_ids": torch.tensor(LAYER_IDS, dtype=torch.int32)}


def model_from(config, state):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    c = dict(config)
    c.pop("quantization_config", None)
    m = Qwen3ForCausalLM(Qwen3Config(**c)).eval().float()
    missing, unexpected = m.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    assert not unexpected and set(missing) <= ({"lm_head.weight"} if c.get("tie_word_embeddings") else set()), (missing, unexpected)
    return m


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def make_e2e(tool, out_dir, tmp):
    vocab = int(shlex.split(MAKE_TARGET)[shlex.split(MAKE_TARGET).index("--vocab") + 1])
    rng = random.Random("quant-qwen3")
    seqs = [[rng.randrange(vocab) for _ in range(n)] for n in SEQ_LENS]
    variants = (("partial", (32, 40)), ("even", (8, 16)))
    # one seed for both: the first whose de-quantised models (both) keep the top-(k+1) logits apart
    for seed in range(1, 200):
        mdir = os.path.join(tmp, f"m{seed}")
        subprocess.run([tool, "make-target", mdir] + shlex.split(MAKE_TARGET) + ["--seed", str(seed)], check=True,
                       stdout=subprocess.DEVNULL)
        state, _ = load_dir(mdir)
        config = json.load(open(os.path.join(mdir, "config.json")))
        built, ok = [], True
        for tag, (bo, bi) in variants:
            qstate, deq = {}, {}
            for k, v in state.items():
                if any(k.endswith(f"{p}.weight") for p in PROJ):
                    sdt = torch.bfloat16 if (tag == "partial" and k.endswith("layers.1.mlp.down_proj.weight")) else torch.float32
                    q, s = quantise(v, bo, bi, sdt)
                    qstate[k], qstate[k + "_scale_inv"] = q, s
                    deq[k] = dequant(q, s, bo, bi)
                else:
                    qstate[k] = v
                    deq[k] = v.float()
            model = model_from(config, deq)
            feats, logits = forward(model, seqs)
            gap = (lambda v: (v[:, :-1] - v[:, 1:]).min().item())(torch.topk(logits, K + 1, -1).values)
            ok = ok and gap >= MIN_GAP
            built.append((tag, bo, bi, qstate, deq, feats, logits, gap))
        if ok:
            break
    log(f"qwen3 target: make-target {MAKE_TARGET} --seed {seed}; sequences of {list(SEQ_LENS)} tokens")
    orig = model_from(config, {k: v.float() for k, v in state.items()})
    of, ol = forward(orig, seqs)
    json.dump({"sequences": seqs}, open(os.path.join(out_dir, "quant_tokens_qwen3.json"), "w"))
    for tag, bo, bi, qstate, deq, feats, logits, gap in built:
        name = f"quant_qwen3_fp8_{tag}"
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        qc = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [bo, bi],
              "modules_to_not_convert": ["lm_head"]}
        cfg = dict(config, quantization_config=qc)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        if tag == "partial":
            save_file(qstate, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        else:   # two shards, layer 1's q_proj.weight in the first and its scale in the second
            names = sorted(qstate)
            first = [k for k in names if k < "model.layers.1.self_attn.q_proj.weight_scale_inv"]
            shards = {"model-00001-of-00002.safetensors": first,
                      "model-00002-of-00002.safetensors": [k for k in names if k not in first]}
            assert "model.layers.1.self_attn.q_proj.weight" in first
            wm = {}
            for f, ks in shards.items():
                save_file({k: qstate[k] for k in ks}, os.path.join(d, f), metadata={"format": "pt"})
                wm.update({k: f for k in ks})
            total = sum(v.numel() * v.element_size() for v in qstate.values())
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2, sort_keys=True)
                f.write("\n")
        nq = sum(1 for k in qstate if k.endswith("_scale_inv"))
        partial = sorted({f"{list(v.shape)}" for k, v in qstate.items() if v.dtype == torch.float8_e4m3fn
                          and (v.shape[0] % bo or v.shape[1] % bi)})
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))
        log(f"{name}: weight_block_size [{bo}, {bi}], {nq} weights F8_E4M3 (partial last blocks in {partial or 'none'}),"
            f" {size} bytes in {len(os.listdir(d)) - 1} file(s); top-(k+1) logit gap {gap:.4g}")
        if tag == "partial":   # what transformers' de-quantisation (Fp8Dequantize) makes of a partial block
            from transformers.integrations.finegrained_fp8 import Fp8Dequantize
            for k in sorted(qstate):
                v = qstate[k]
                if v.dtype != torch.float8_e4m3fn or not (v.shape[0] % bo or v.shape[1] % bi) or ".layers.0." not in k:
                    continue
                s = qstate[k + "_scale_inv"]
                try:
                    got = Fp8Dequantize(None)._dequantize_one(v, s, torch.float32)
                    log(f"  Fp8Dequantize {k} {list(v.shape)}, scales {list(s.shape)}: block taken as"
                        f" [{v.shape[0] // s.shape[0]}, {v.shape[1] // s.shape[1]}], max |error| {(got - deq[k]).abs().max().item():.4g}")
                except ValueError as e:
                    log(f"  Fp8Dequantize {k} {list(v.shape)}, scales {list(s.shape)}: ValueError: {e}")
        # transformers' own load of the quantised directory (on the CPU it de-quantises)
        from transformers import AutoModelForCausalLM
        try:
            hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
            hsd = hf.state_dict()
            same = [k for k in deq if torch.equal(hsd[k].float(), deq[k])]
            diff = [k for k in deq if k not in same]
            log(f"  transformers {type(hf).__name__}.from_pretrained (de-quantised on the CPU): {len(same)} of {len(deq)}"
                f" tensors equal to the block rule's{'' if not diff else '; different: ' + ', '.join(diff[:4]) + (' ...' if len(diff) > 4 else '')}")
            if diff:
                k = diff[0]
                log(f"    e.g. {k}: max |transformers - rule| {(hsd[k].float() - deq[k]).abs().max().item():.4g}"
                    f" (Fp8Dequantize takes the block as rows // scale_rows = {qstate[k].shape[0]} // {qstate[k + '_scale_inv'].shape[0]},"
                    f" not {bo})")
            hf_f, hf_l = forward(hf, seqs)
            log(f"  transformers' forward of that load vs the rule's model: features {rel(hf_f, feats):.3g}, logits {rel(hf_l, logits):.3g}")
            if tag == "even":
                assert not diff, "transformers de-quantises even blocks as the rule does"
                feats, logits = hf_f, hf_l   # the reference is transformers' own
        except Exception as e:  # noqa: BLE001 (recorded in the log)
            log(f"  transformers' load of the directory failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            assert tag != "even"
        ref = outputs(seqs, feats, logits)
        save_file(ref, os.path.join(out_dir, name + ".safetensors"), metadata={"made_by": "make_quant_fixture.py"})
        err = max(rel(of, feats), rel(torch.topk(ol, K, -1).values, ref["topk_val"]), rel(torch.logsumexp(ol, -1), ref["lse"]))
        log(f"  reference {name}.safetensors: the unquantised model's outputs are {err:.3g} away (relative max;"
            f" features {rel(of, feats):.3g})")
        with open(os.path.join(out_dir, name + ".args"), "w") as f:
            f.write(f"# quantised target fixture {name}, made by tests/reference/make_quant_fixture.py (bash-sourceable)\n")
            f.write(f"make_target='{MAKE_TARGET} --seed {seed}'\n")
            f.write(f"model={name}\nlayer_ids={','.join(map(str, LAYER_IDS))}\ntopk={K}\n")
            f.write(f"tokens=quant_tokens_qwen3.json\nreference={name}.safetensors\norig_err={err:.4g}\n")
            f.write(f"block='{bo} {bi}'\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default=os.environ.get("DFLASH_TOOL", "build/dflash_tool"))
    ap.add_argument("--out", default="tests/reference/data")
    a = ap.parse_args()
    import transformers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    make_fp8_unit(a.out)
    make_mxfp4_unit(a.out)
    with tempfile.TemporaryDirectory() as tmp:
        make_e2e(a.tool, a.out, tmp)
    with open(os.path.join(a.out, "quant_fixtures.log"), "w") as f:
        f.write("\n".join(LOG) + "\n")


if __name__ == "__main__":
    sys.exit(main())
