#!/usr/bin/env python3
"""make_hf_saved.py: config.json files as the installed transformers saves them, for every
architecture the teacher serves (issue 27 item 8), and the tensors each checkpoint holds.

For each architecture a tiny model is built from its configuration class, given only the sizes
(every other key left to the class, so the file holds exactly what `save_pretrained` writes today:
its key names, its aliases from `attribute_map`, its defaults), saved with `save_pretrained`, and
two small files are committed under data/hf_saved/:

  <name>.config.json    the saved config.json, byte for byte
  <name>.tensors.json   {"tensor name": {"dtype": "BF16", "shape": [...]}, ...} of the saved
                        safetensors (the weights themselves are not committed)

tests/unit/test_hf_saved.c reads both: it parses the config, writes a model.safetensors with those
names, dtypes and shapes, and loads it as a target (so the config's shapes must match what
transformers wrote), and it removes each structural key in turn (an error naming it, never a
default). Run from the repository root with torch and transformers (the /work/venv here):

  /work/venv/bin/python tests/reference/make_hf_saved.py

It records the library versions and what it wrote in data/hf_saved/hf_saved.log.
"""
import json
import os
import sys
import tempfile

import torch
import transformers
from safetensors import safe_open

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "hf_saved")

# The sizes given; the rest is the class's. Small enough that the models build in a second.
DENSE = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)
HYBRID = dict(DENSE, num_hidden_layers=4, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
              linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=4,
              temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16)


def cases():
    from transformers import (LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                              Qwen3MoeForCausalLM, Qwen3_5Config, Qwen3_5ForCausalLM,
                              Qwen3_5ForConditionalGeneration, Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM,
                              Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeTextConfig, Qwen3_5TextConfig)
    yield "llama", LlamaForCausalLM, LlamaConfig(**DENSE)
    yield "qwen3", Qwen3ForCausalLM, Qwen3Config(**DENSE, head_dim=8)
    yield "qwen3_moe", Qwen3MoeForCausalLM, Qwen3MoeConfig(**DENSE, **MOE)
    yield "qwen3_5_text", Qwen3_5ForCausalLM, Qwen3_5TextConfig(**HYBRID)
    yield "qwen3_5", Qwen3_5ForConditionalGeneration, Qwen3_5Config(text_config=HYBRID, vision_config=VISION)
    moe5 = dict(HYBRID, **MOE, shared_expert_intermediate_size=16)
    del moe5["intermediate_size"]
    yield "qwen3_5_moe_text", Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig(**moe5)
    yield "qwen3_5_moe", Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeConfig(text_config=moe5, vision_config=VISION)


def main():
    os.makedirs(OUT, exist_ok=True)
    log = [f"transformers {transformers.__version__}, torch {torch.__version__}",
           "command: /work/venv/bin/python tests/reference/make_hf_saved.py"]
    for name, cls, cfg in cases():
        torch.manual_seed(0)
        model = cls(cfg).to(torch.bfloat16)
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            files = sorted(f for f in os.listdir(tmp) if f.endswith(".safetensors"))
            tensors = {}
            for f in files:
                with safe_open(os.path.join(tmp, f), "pt") as st:
                    for k in st.keys():
                        sl = st.get_slice(k)
                        tensors[k] = {"dtype": sl.get_dtype(), "shape": list(sl.get_shape())}
            with open(os.path.join(tmp, "config.json")) as f:
                text = f.read()
        with open(os.path.join(OUT, name + ".config.json"), "w") as f:
            f.write(text)
        with open(os.path.join(OUT, name + ".tensors.json"), "w") as f:
            json.dump(dict(sorted(tensors.items())), f, indent=0)
            f.write("\n")
        saved = json.loads(text)
        keys = sorted(saved.get("text_config", saved))
        maps = {type(c).__name__: dict(type(c).attribute_map) for c in (cfg, getattr(cfg, "text_config", None)) if c is not None}
        log.append(f"{name}: {cls.__name__}, {len(tensors)} tensors in {len(files)} file(s); attribute_map {maps}; "
                   f"keys: {', '.join(keys)}")
    with open(os.path.join(OUT, "hf_saved.log"), "w") as f:
        f.write("\n".join(log) + "\n")
    print("\n".join(log))


if __name__ == "__main__":
    sys.exit(main())
