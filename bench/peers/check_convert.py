#!/usr/bin/env python3
"""check_convert.py: the converted drafter computes what the peer's own model computes.

    python check_convert.py --checkpoint CKPT --converted DIR --data INPUTS/data --target T [--rows 2]

For the first held-out rows of the peer's dataset (INPUTS/data, rows after split.json's train_rows),
with the hidden states make_inputs.py wrote for them:
  - speculators: DFlashDraftModel.from_pretrained(CKPT) (the verifier's embedding and head loaded from
    T), its own forward (_backbone_forward) with every valid anchor of the row, float32, no autocast;
  - z-lab: dflash.model.DFlashDraftModel.from_pretrained(DIR) (the to_zlab.py output), for each of
    up to 8 of those anchors a: context features of positions < a (the same hidden-state slots: the
    package's target_layer_ids read hidden_states[id + 1], which make_inputs.py stored in the same
    order), the block [tok[a], MASK x (B-1)] at positions a..a+B-1, logits through T's lm_head.
Both logits of slots 1..B-1 must agree (max |diff| relative to max |logit| below --tol, the same
argmax on at least 99 % of the slots): the converted config (layer ids, mask token, block size,
attention) and tensors are the ones the peer trained. Exit 1 otherwise.
"""
import argparse
import json
import os
import sys


def die(msg):
    print(f"error: check_convert.py: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--converted", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    import torch
    from datasets import load_from_disk
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from dflash.model import DFlashDraftModel as ZDraft
    from speculators.models.dflash import DFlashDraftModel as SDraft
    from speculators.models.dflash.core import DFlashSpeculatorConfig

    torch.set_num_threads(a.threads)
    cfg = DFlashSpeculatorConfig.from_pretrained(a.checkpoint)
    cfg.transformer_layer_config._attn_implementation = "sdpa"
    cfg.speculators_config.verifier.name_or_path = a.target
    peer = SDraft.from_pretrained(a.checkpoint, config=cfg, verifier=a.target).float().eval()
    # from_pretrained builds the model in the checkpoint's bf16 and copies the verifier's embedding and
    # head into it (rounded); training used them in float32: load them again after .float()
    peer.load_verifier_weights()
    z = ZDraft.from_pretrained(a.converted, dtype=torch.float32, attn_implementation="sdpa").eval()
    target = AutoModelForCausalLM.from_pretrained(a.target, dtype=torch.float32)
    head = target.get_output_embeddings()
    emb = target.get_input_embeddings()
    B = peer.block_size
    with open(os.path.join(a.data, "split.json")) as f:
        n_train = json.load(f)["train_rows"]
    d = load_from_disk(a.data).with_format(None)
    worst, agree, total, blocks = 0.0, 0, 0, 0
    for i in range(n_train, min(len(d), n_train + a.rows)):
        ids = torch.as_tensor(d[i]["input_ids"], dtype=torch.long)
        mask = torch.as_tensor(d[i]["loss_mask"], dtype=torch.long)
        hs = load_file(os.path.join(a.data, "hidden_states", f"hs_{i}.safetensors"))["hidden_states"].float()
        T = ids.numel()
        aux = hs[:, :-1].flatten(1)[None]
        last = hs[:, -1][None]
        with torch.no_grad():
            _, logits, _, _, idx = peer._backbone_forward(
                aux, ids[None], mask[None], last, torch.zeros(1, T, dtype=torch.long),
                torch.arange(T)[None], max_anchors=T)
            anchors = idx[::B].tolist()
            n_blocks = len(anchors)
            valid = [j for j in range(n_blocks) if 0 < anchors[j] and mask[anchors[j]] and anchors[j] + 1 < T
                     and mask[anchors[j] + 1]]
            for j in valid[:: max(1, len(valid) // 8)][:8]:
                p = anchors[j]
                block = torch.full((1, B), z.mask_token_id, dtype=torch.long)
                block[0, 0] = ids[p]
                h = z(position_ids=torch.arange(p + B)[None], noise_embedding=emb(block),
                      target_hidden=aux[:, :p], use_cache=False)
                zl = head(h)[0, 1:]
                pl = logits[0, j * B + 1:(j + 1) * B]
                worst = max(worst, float((zl - pl).abs().max() / pl.abs().max()))
                agree += int((zl.argmax(-1) == pl.argmax(-1)).sum())
                total += B - 1
                blocks += 1
    if not blocks:
        die("no held-out anchor checked (rows too short?)")
    frac = agree / total
    print(f"check_convert: {blocks} blocks of {a.rows} held-out rows: max |z-lab - speculators| / max |logit| = "
          f"{worst:.2e}, same argmax on {agree}/{total} slots")
    if worst > a.tol or frac < 0.99:
        die(f"the converted drafter differs from the peer's model (tolerance {a.tol}, argmax 99 %)")


if __name__ == "__main__":
    main()
