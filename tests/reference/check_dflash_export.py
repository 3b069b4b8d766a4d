#!/usr/bin/env python3
"""check_dflash_export.py DIR: does the z-lab `dflash` package load a drafter exported by dflash_rank?

DIR holds what drafter_export writes: config.json + model.safetensors (the trainable tensors only:
no embed_tokens, no lm_head -- those are the target's). The script
  1. lists model.safetensors and refuses embedding / lm_head tensors in it,
  2. loads DIR with dflash.DFlashDraftModel.from_pretrained(DIR, dtype=float32) and requires no
     missing, unexpected or mis-shaped keys (a missing key would be silently random-initialised),
  3. checks every loaded parameter equals the file's tensor (upcast to float32),
  4. prints the config's DFlash fields and what each layer's attention became (causal, window),
  5. runs a forward on random inputs (a context of 2*block_size rows, one block) and requires a
     finite [1, B, H] output, then prints OK.
Exit status 0 only when everything passed.

Needs torch, transformers, safetensors and the dflash package (not CI). Run from anywhere:
    python3 tests/reference/check_dflash_export.py DIR
"""
import json
import os
import sys

import torch
from safetensors import safe_open


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = sys.argv[1]
    import importlib.metadata
    import transformers
    from dflash import DFlashDraftModel
    transformers.utils.logging.disable_progress_bar()
    print(f"check_dflash_export.py {d}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"dflash {importlib.metadata.version('dflash')}")

    # 1. the file: trainable tensors only
    path = os.path.join(d, "model.safetensors")
    if not os.path.exists(path) or not os.path.exists(os.path.join(d, "config.json")):
        fail(f"{d} needs config.json and model.safetensors")
    with safe_open(path, framework="pt") as f:
        file_tensors = {k: f.get_tensor(k) for k in f.keys()}
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in file_tensors.values()})
    print(f"model.safetensors: {len(file_tensors)} tensors, {sum(t.numel() for t in file_tensors.values())} "
          f"elements, dtype {', '.join(dtypes)}")
    frozen = [k for k in file_tensors if "embed_tokens" in k or "lm_head" in k]
    if frozen:
        fail(f"the export carries the target's frozen tensors {frozen}")

    # 2. load with the package, exactly as a user would
    model, info = DFlashDraftModel.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    model.eval()
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        got = list(info.get(kind, []) or [])
        print(f"{kind}: {got if got else 'none'}")
        if got:
            fail(f"{kind}: {got}")

    # 3. every parameter is the file's tensor
    params = dict(model.named_parameters())
    if set(params) != set(file_tensors):
        fail(f"parameters {sorted(set(params) ^ set(file_tensors))} differ between the model and the file")
    for k, p in params.items():
        if p.shape != file_tensors[k].shape or not torch.equal(p.detach(), file_tensors[k].to(torch.float32)):
            fail(f"{k}: loaded values differ from model.safetensors")
    print(f"all {len(params)} parameters equal model.safetensors")

    # 4. the DFlash fields, as the package resolved them
    cfg = model.config
    raw = json.load(open(os.path.join(d, "config.json")))
    print(f"architectures {raw.get('architectures')}, model_type {cfg.model_type}, torch_dtype/dtype in file "
          f"{raw.get('torch_dtype', raw.get('dtype'))}")
    print(f"hidden {cfg.hidden_size}, layers {cfg.num_hidden_layers}, heads {cfg.num_attention_heads}/"
          f"{cfg.num_key_value_heads}, head_dim {cfg.head_dim}, MLP {cfg.intermediate_size}, vocab {cfg.vocab_size}, "
          f"rms_norm_eps {cfg.rms_norm_eps}, rope {cfg.rope_parameters}")
    print(f"dflash_config {getattr(cfg, 'dflash_config', None)}; num_target_layers {getattr(cfg, 'num_target_layers', None)}")
    print(f"model.block_size {model.block_size}, model.mask_token_id {model.mask_token_id}, "
          f"model.target_layer_ids {list(model.target_layer_ids)}")
    print(f"layer_types {cfg.layer_types}, use_sliding_window {cfg.use_sliding_window}, sliding_window "
          f"{cfg.sliding_window}, is_causal {getattr(cfg, 'is_causal', None)}")
    for i, layer in enumerate(model.layers):
        a = layer.self_attn
        print(f"  layer {i}: is_causal {a.is_causal}, sliding_window {a.sliding_window}")
    if model.mask_token_id is None or not 0 <= int(model.mask_token_id) < cfg.vocab_size:
        fail(f"mask_token_id {model.mask_token_id} is not a token of the vocabulary [0, {cfg.vocab_size})")

    # 5. a forward on random inputs
    torch.manual_seed(0)
    B, H, nf = model.block_size, cfg.hidden_size, len(model.target_layer_ids)
    ctx = 2 * B
    with torch.no_grad():
        out = model(position_ids=torch.arange(ctx + B)[None], noise_embedding=torch.randn(1, B, H),
                    target_hidden=torch.randn(1, ctx, nf * H))
    print(f"forward: context {ctx}, block {B} -> output {list(out.shape)}, mean |x| {out.abs().mean():.4f}")
    if list(out.shape) != [1, B, H] or not torch.isfinite(out).all():
        fail("the forward gave a wrong shape or non-finite values")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
