#!/usr/bin/env python3
"""make_step_input.py OUT_PREFIX [options]: a random step-dump input (IN.safetensors + CONFIG.json).

Test helper that needs only numpy (Debian's python3-numpy): random drafter weights under the export
names, a random target embedding/lm_head, a packed batch of sequences with random features and a
consistent teacher top-k/LSE, and `--anchors` anchors drawn from the valid positions (with
replacement when more are asked than exist, so the memory test can grow the anchor count freely).
With --dflash2 K,G,k,r the drafter is a DFlash2DraftModel (conv kernel K, group G, selector top-k k,
rank r): its conv and selector tensors are drawn after everything else, so the other tensors are
those of the same command without it.
Writes OUT_PREFIX.in.safetensors and OUT_PREFIX.config.json.
"""
import argparse, json, struct
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--hidden", type=int, default=32)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--kv-heads", type=int, default=2)
ap.add_argument("--head-dim", type=int, default=8)
ap.add_argument("--intermediate", type=int, default=48)
ap.add_argument("--vocab", type=int, default=211)
ap.add_argument("--block", type=int, default=4)
ap.add_argument("--n-feat", type=int, default=2)
ap.add_argument("--seq-lens", default="30,21")
ap.add_argument("--anchors", type=int, default=6)
ap.add_argument("--topk", type=int, default=4)
ap.add_argument("--sliding", type=int, default=0, help="window of layer 0 (0 = all layers full)")
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--dflash2", default="", metavar="K,G,k,r", help="a DFlash2 drafter with these conv / selector sizes")
a = ap.parse_args()
r = np.random.default_rng(a.seed)
H, L, nq, nkv, hd, I, V, B = a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.intermediate, a.vocab, a.block
lens = [int(x) for x in a.seq_lens.split(",")]
S = sum(lens)
t = {}
def mat(o, i): return (r.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
def norm(n): return (1 + 0.1 * r.standard_normal(n)).astype(np.float32)
t["fc.weight"] = mat(H, a.n_feat * H)
t["hidden_norm.weight"] = norm(H)
for l in range(L):
    p = f"layers.{l}."
    t[p + "input_layernorm.weight"] = norm(H)
    t[p + "self_attn.q_proj.weight"] = mat(nq * hd, H)
    t[p + "self_attn.k_proj.weight"] = mat(nkv * hd, H)
    t[p + "self_attn.v_proj.weight"] = mat(nkv * hd, H)
    t[p + "self_attn.o_proj.weight"] = mat(H, nq * hd)
    t[p + "self_attn.q_norm.weight"] = norm(hd)
    t[p + "self_attn.k_norm.weight"] = norm(hd)
    t[p + "post_attention_layernorm.weight"] = norm(H)
    t[p + "mlp.gate_proj.weight"] = mat(I, H)
    t[p + "mlp.up_proj.weight"] = mat(I, H)
    t[p + "mlp.down_proj.weight"] = mat(H, I)
t["norm.weight"] = norm(H)
t["target.embed_tokens.weight"] = r.standard_normal((V, H)).astype(np.float32)
t["target.lm_head.weight"] = (r.standard_normal((V, H)) * 0.5).astype(np.float32)
t["features"] = r.standard_normal((S, a.n_feat * H)).astype(np.float32)
t["tokens"] = r.integers(0, V - 1, S).astype(np.int32)
mask = np.ones(S, np.uint8)
cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
for s in range(len(lens)):
    mask[cu[s]:cu[s] + 2] = 0  # a short "prompt"
t["loss_mask"] = mask
t["cu_seqlens"] = cu
logits = r.standard_normal((S, V)) * 3
idx = np.argsort(-logits, axis=1, kind="stable")[:, :a.topk]
t["topk_idx"] = idx.astype(np.int32)
t["topk_val"] = np.take_along_axis(logits, idx, 1).astype(np.float32)
m = logits.max(1, keepdims=True)
t["lse"] = (m[:, 0] + np.log(np.exp(logits - m).sum(1))).astype(np.float32)
valid = [p for s in range(len(lens)) for p in range(cu[s], cu[s + 1] - 1) if mask[p] and mask[p + 1]]
pick = r.choice(valid, a.anchors, replace=a.anchors > len(valid))
t["anchors"] = np.sort(pick).astype(np.int32)

if a.dflash2:
    K, G, k, rank = (int(x) for x in a.dflash2.split(","))
    for l in range(L):
        for conv in ("attention_conv", "mlp_conv"):
            base = (0.2 * r.standard_normal((2, K, H))).astype(np.float32)
            base[:, 0, :] += 1
            t[f"layers.{l}.{conv}.base_kernel"] = base
            t[f"layers.{l}.{conv}.kernel_projection.weight"] = (0.1 * mat(2 * K * (H // G), H))
    t["candidate_selector.predecessor_codebook"] = (0.5 * r.standard_normal((V, rank))).astype(np.float32)
    t["candidate_selector.successor_codebook"] = (0.5 * r.standard_normal((V, rank))).astype(np.float32)
    t["candidate_selector.hidden_projection.weight"] = mat(rank, H)

codes = {np.float32: "F32", np.int32: "I32", np.uint8: "U8"}
header, blobs, off = {}, [], 0
# 4-byte types first, the bytes last: every tensor starts aligned to its element size, as the
# safetensors package writes them
for name, arr in sorted(t.items(), key=lambda kv: -kv[1].dtype.itemsize):
    arr = np.ascontiguousarray(arr)
    b = arr.tobytes()
    header[name] = {"dtype": codes[arr.dtype.type], "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(a.out + ".in.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
layer_types = ["sliding_attention" if (a.sliding and l == 0) else "full_attention" for l in range(L)]
cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": L,
       "num_attention_heads": nq, "num_key_value_heads": nkv, "head_dim": hd, "intermediate_size": I,
       "vocab_size": V, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 4096,
       "layer_types": layer_types, "sliding_window": a.sliding if a.sliding else None,
       "use_sliding_window": bool(a.sliding), "num_target_layers": 8,
       "block_size": B, "dflash_config": {"target_layer_ids": list(range(1, 1 + a.n_feat)), "mask_token_id": V - 1, "block_size": B},
       "loss": {"alpha": 0.15, "lambda": 0.1, "gamma": 7, "weighting": "decay", "label": "data"}}
if a.dflash2:
    cfg["architectures"] = ["DFlash2DraftModel"]
    cfg["dflash_config"].update(conv_kernel_size=K, conv_group_size=G, selector_top_k=k, selector_rank=rank)
json.dump(cfg, open(a.out + ".config.json", "w"), indent=1)
