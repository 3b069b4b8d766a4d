#!/usr/bin/env python3
"""magpie.py: user turns written by the target itself (Magpie, arXiv 2406.08464), for the SmolLM2 example.

    python3 examples/smollm2-135m/magpie.py prefix  --model TARGET_DIR --n N OUT_PROMPTS.jsonl
    python3 examples/smollm2-135m/magpie.py collect --model TARGET_DIR SET.h5 OUT_MESSAGES.jsonl

An aligned chat model given only its chat template's opening up to the user turn's header (the
system turn and "<|im_start|>user\\n" for SmolLM2) writes a user request, the kind of request it was
aligned on, and stops at its end-of-turn id. Sampled N times (dflash_rank --mode regenerate with a
temperature: every prompt line has its own sampling stream), that gives N user turns in the
target's own distribution of requests, with no prompt set to download.

prefix: the template rendered around a placeholder user message, cut before the placeholder,
tokenized once, written N times as {"input_ids": [...]} lines (regenerate.prompts).

collect: the regenerated set's replies (the loss-masked tokens) that ended at a stop id, decoded
with the target's tokenizer; kept when 4 to 120 words, not a refusal-shaped fragment, and new after
normalising (lowercase, letters and digits only; also the first 48 such characters, so near copies
differ by more than their ending). Written as chat JSONL ({"messages": [{"role": "user", ...}],
"source": "magpie:INDEX"}) for make_prompts.py. Prints the counts of each filter.

Needs transformers (the tokenizer) and h5py; not used by the tests.
"""
import argparse
import json
import os
import re
import sys


def die(msg):
    sys.exit(f"error: magpie: {msg}")


def tokenizer(model):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        die("needs transformers (pip install transformers)")
    if not os.path.isfile(os.path.join(model, "config.json")):
        die(f"--model {model}: not a model directory (no config.json)")
    return AutoTokenizer.from_pretrained(model)


def cmd_prefix(a):
    tok = tokenizer(a.model)
    mark = "\x00MAGPIE\x00"
    text = tok.apply_chat_template([{"role": "user", "content": mark}], tokenize=False)
    if mark not in text:
        die(f"{a.model}: the chat template does not render the user message")
    ids = tok(text[: text.index(mark)], add_special_tokens=False)["input_ids"]
    if a.n < 1:
        die(f"--n {a.n}: needs at least 1")
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        line = json.dumps({"input_ids": ids}) + "\n"
        for _ in range(a.n):
            f.write(line)
    os.replace(tmp, a.out)
    print(f"magpie: {a.n} copies of the {len(ids)}-token user prefix -> {a.out}")


def norm(text):
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def cmd_collect(a):
    try:
        import h5py
        import numpy as np
    except ImportError:
        die("needs h5py and numpy (pip install h5py)")
    tok = tokenizer(a.model)
    try:
        f = h5py.File(a.set, "r")
    except OSError as e:
        die(f"{a.set}: cannot open as HDF5 ({e})")
    with f:
        tokens, offsets, mask = f["tokens"][:], f["offsets"][:], f["loss_mask"][:]
        finish = f["finish_reason"][:] if "finish_reason" in f else np.zeros(len(offsets) - 1, np.uint8)
    seen, seen_head, rows = set(), set(), []
    count = {"cut at the length limit": 0, "too short or too long": 0, "repeated": 0}
    for i in range(len(offsets) - 1):
        if finish[i] != 0:
            count["cut at the length limit"] += 1
            continue
        a0, a1 = int(offsets[i]), int(offsets[i + 1])
        reply = tokens[a0:a1][mask[a0:a1] == 1]
        text = tok.decode(reply.tolist(), skip_special_tokens=True).strip()
        words = len(text.split())
        if words < 4 or words > 120:
            count["too short or too long"] += 1
            continue
        k = norm(text)
        if k in seen or k[:48] in seen_head:
            count["repeated"] += 1
            continue
        seen.add(k)
        seen_head.add(k[:48])
        rows.append({"messages": [{"role": "user", "content": text}], "source": f"magpie:{i}"})
    if not rows:
        die(f"{a.set}: no usable user turn among {len(offsets) - 1} samples")
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, a.out)
    dropped = ", ".join(f"{v} {k}" for k, v in count.items())
    print(f"magpie: {len(rows)} user turns of {len(offsets) - 1} samples kept ({dropped}) -> {a.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prefix")
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("out")
    c = sub.add_parser("collect")
    c.add_argument("--model", required=True)
    c.add_argument("set")
    c.add_argument("out")
    a = ap.parse_args()
    (cmd_prefix if a.cmd == "prefix" else cmd_collect)(a)


if __name__ == "__main__":
    main()
