#!/usr/bin/env python3
"""more_prompts.py WORKDIR NEW_MAGPIE.jsonl OUT.jsonl: Magpie user turns for more training replies (grow.sh).

The turns of WORKDIR/magpie.jsonl (run.sh's first Magpie pass) that the prompt mix did not take, then those of
NEW_MAGPIE.jsonl (a second pass, another sampling seed), each kept once and only when it is in none of
WORKDIR's prompts: the training mix (prompts_messages.jsonl), the held-out categories (prompts-heldout/) and
the other source (prompts-eval/). Compared as magpie.py collect compares (lowercase, letters and digits only;
also the first 48 such characters). Written as chat JSONL for tools/prepare_data.py --prompts-only; prints the
counts."""
import glob, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from magpie import norm  # collect's comparison: lowercase, letters and digits only

if len(sys.argv) != 4:
    sys.exit("usage: more_prompts.py WORKDIR NEW_MAGPIE.jsonl OUT.jsonl")
W, newf, out = sys.argv[1:4]


def rows(path):
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                r = json.loads(line)
                yield r, " ".join(m["content"] for m in r["messages"] if m["role"] == "user")
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"error: more_prompts: {path}: not chat JSONL ({e})")


seen = set()
for path in [os.path.join(W, "prompts_messages.jsonl")] + sorted(glob.glob(os.path.join(W, "prompts-heldout", "*.jsonl"))) \
        + sorted(glob.glob(os.path.join(W, "prompts-eval", "*.jsonl"))):
    for _, t in rows(path):
        seen.update((norm(t), norm(t)[:48]))
kept, counts = [], []
for tag, path in (("first pass", os.path.join(W, "magpie.jsonl")), ("second pass", newf)):
    n = 0
    for r, t in rows(path):
        k = norm(t)
        if k in seen or k[:48] in seen:
            continue
        seen.update((k, k[:48]))
        r["source"] = f"{tag.split()[0]}-{r.get('source', '')}"
        kept.append(r)
        n += 1
    counts.append(f"{n} of the {tag}")
tmp = out + ".tmp"
with open(tmp, "w") as f:
    for r in kept:
        f.write(json.dumps(r) + "\n")
os.replace(tmp, out)
print(f"more_prompts: {len(kept)} user turns ({', '.join(counts)}) -> {out}")
