#!/usr/bin/env python3
"""to_zlab.py: a drafter speculators saved (DFlash) as the z-lab dflash package's format.

    python to_zlab.py CHECKPOINT_DIR OUT_DIR [TARGET_DIR]

CHECKPOINT_DIR: what speculators' trainer saves per epoch (save_path/<epoch>: config.json with
"speculators_config" and "transformer_layer_config", model.safetensors in bf16). OUT_DIR gets what
`dflash_rank --mode eval --eval.drafter=OUT_DIR`, tools/spec_decode.py and the z-lab package load:

  config.json: the draft decoder's Qwen3 config (speculators' transformer_layer_config, as saved),
    with architectures ["DFlashDraftModel"], "block_size", "num_target_layers" (the verifier's layer
    count, from TARGET_DIR's config.json, else from the verifier path the checkpoint names) and "dflash_config" {"target_layer_ids", "mask_token_id", "block_size"}. The layer ids are
    moved back by one: speculators' aux id k is the input of decoder layer k (vLLM's convention),
    z-lab's id k the output of layer k (transformers' hidden_states[k + 1]); speculators' own
    converter (speculators/convert/dflash/converter.py) maps z-lab -> speculators as k + 1. When the
    sliding layers were trained with bidirectional blocks (sliding_window_non_causal), "is_causal":
    false, since the package makes sliding layers causal by default.
  model.safetensors: the body tensors under their names (layers.*, fc, hidden_norm, norm: the same
    names as z-lab's); the verifier's copies (embed_tokens, lm_head, verifier_norm, verifier_lm_head)
    and vocabulary maps (t2d, d2t) are dropped: the package and dflash_rank take embedding and head
    from the target. A reduced draft vocabulary has no z-lab equivalent and is refused.
"""
import json
import pathlib
import os
import sys

DROP = ("embed_tokens.weight", "lm_head.weight", "verifier_norm.weight", "verifier_lm_head.weight", "t2d", "d2t")
# speculators-only keys of a saved transformer_layer_config that are not Qwen3Config's
NOT_QWEN3 = ("_attn_implementation", "_name_or_path", "transformers_version", "architectures", "auto_map")


def die(msg):
    print(f"error: to_zlab.py: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) not in (3, 4):
        die("usage: to_zlab.py CHECKPOINT_DIR OUT_DIR [TARGET_DIR]")
    src, out = sys.argv[1], sys.argv[2]
    from safetensors import safe_open
    from safetensors.torch import save_file
    cfg_path = os.path.join(src, "config.json")
    try:
        sc = json.loads(pathlib.Path(cfg_path).read_text())
    except (OSError, ValueError) as e:
        die(f"{cfg_path}: {e}")
    spec = sc.get("speculators_config") or {}
    if spec.get("algorithm") != "dflash" and sc.get("speculators_model_type") != "dflash":
        die(f"{cfg_path}: not a speculators DFlash checkpoint (algorithm {spec.get('algorithm')!r})")
    tl = dict(sc.get("transformer_layer_config") or {})
    if not tl:
        die(f"{cfg_path}: no transformer_layer_config")
    if sc.get("draft_vocab_size") not in (None, tl.get("vocab_size")):
        die(f"{cfg_path}: draft_vocab_size {sc.get('draft_vocab_size')} != vocab_size {tl.get('vocab_size')}: "
            "a reduced draft vocabulary has no z-lab format")
    if sc.get("sample_from_anchor"):
        die(f"{cfg_path}: sample_from_anchor is true: the z-lab format predicts from slot 1")
    aux = sc.get("aux_hidden_state_layer_ids")
    if not aux:
        die(f"{cfg_path}: no aux_hidden_state_layer_ids")
    block = sc.get("block_size")
    mask = sc.get("mask_token_id")
    if block is None or mask is None:
        die(f"{cfg_path}: block_size or mask_token_id missing")
    verifier = sys.argv[3] if len(sys.argv) == 4 else (spec.get("verifier") or {}).get("name_or_path")
    n_target = None
    if verifier and os.path.exists(os.path.join(verifier, "config.json")):
        with open(os.path.join(verifier, "config.json")) as f:
            vc = json.load(f)
        n_target = (vc.get("text_config") or vc).get("num_hidden_layers")
    elif len(sys.argv) == 4:
        die(f"{verifier}: no config.json")
    ids = [int(k) - 1 for k in aux]
    if min(ids) < 0:
        die(f"{cfg_path}: aux id 0 (the embeddings) has no z-lab target layer id")
    for k in NOT_QWEN3:
        tl.pop(k, None)
    tl["architectures"] = ["DFlashDraftModel"]
    tl["model_type"] = "qwen3"
    tl["block_size"] = block
    if n_target is not None:
        tl["num_target_layers"] = n_target
    tl["dflash_config"] = {"target_layer_ids": ids, "mask_token_id": mask, "block_size": block}
    if sc.get("sliding_window_non_causal") and "sliding_attention" in (tl.get("layer_types") or []):
        tl["is_causal"] = False
    w_path = os.path.join(src, "model.safetensors")
    tensors = {}
    try:
        with safe_open(w_path, framework="pt") as f:
            for k in f.keys():
                if k not in DROP:
                    tensors[k] = f.get_tensor(k).contiguous()
    except (OSError, Exception) as e:  # safetensors raises its own error types
        die(f"{w_path}: {e}")
    if "fc.weight" not in tensors or not any(k.startswith("layers.") for k in tensors):
        die(f"{w_path}: no fc.weight or layers.* tensors")
    dt = {str(t.dtype) for t in tensors.values()}
    tl["torch_dtype"] = "bfloat16" if dt == {"torch.bfloat16"} else "float32"
    tmp = out + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(tl, f, indent=2)
    if os.path.exists(out):
        import shutil
        shutil.rmtree(out)
    os.replace(tmp, out)
    print(f"to_zlab: {src} -> {out}: {len(tensors)} tensors ({', '.join(sorted(dt))}), "
          f"target_layer_ids {ids}, block {block}, mask {mask}")


if __name__ == "__main__":
    main()
