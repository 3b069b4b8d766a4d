#!/usr/bin/env python3
"""eval_table.py: the per-category evaluations of the SmolLM2 example as one markdown table.

    python3 examples/smollm2-135m/eval_table.py OUT.md SET=DIR [SET=DIR ...]

Each DIR holds one `--mode eval` run directory per category, DIR/CATEGORY/eval.json (tau_decode,
tau_decode_steps, tau_decode_tokens, samples), and optionally DIR/CATEGORY/spec_decode.log
(tools/spec_decode.py's output: its "total: ... mean acceptance per step X" line). Each set gets a
row per category and a pooled row: all its categories' tokens over all their steps, which is what
decoding every prompt of the set one after another would measure. Printed and written to OUT.md.
"""
import json
import os
import re
import sys


def die(msg):
    sys.exit(f"error: eval_table: {msg}")


def spec_acceptance(path):
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"^total: .*mean acceptance per step ([0-9.]+)", text, re.M)
    return float(m.group(1)) if m else None


def main():
    if len(sys.argv) < 3 or any("=" not in a for a in sys.argv[2:]):
        die("usage: eval_table.py OUT.md SET=DIR [SET=DIR ...]")
    lines = ["| set | category | samples | tau_decode | steps | tokens | the dflash package's acceptance |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for arg in sys.argv[2:]:
        name, d = arg.split("=", 1)
        if not os.path.isdir(d):
            die(f"{d}: no such directory ({name})")
        tot = [0, 0, 0]
        for cat in sorted(os.listdir(d)):
            p = os.path.join(d, cat, "eval.json")
            if not os.path.isfile(p):
                continue
            try:
                e = json.load(open(p))
            except ValueError:
                die(f"{p}: not JSON")
            steps, tokens, n = e.get("tau_decode_steps", 0), e.get("tau_decode_tokens", 0), e.get("samples", 0)
            acc = spec_acceptance(os.path.join(d, cat, "spec_decode.log"))
            lines.append(f"| {name} | {cat} | {n} | {e.get('tau_decode', 0):.3f} | {steps} | {tokens} | "
                         + (f"{acc:.3f}" if acc is not None else "") + " |")
            tot[0] += n
            tot[1] += steps
            tot[2] += tokens
        if tot[1] == 0:
            die(f"{d}: no CATEGORY/eval.json with decoding steps ({name})")
        lines.append(f"| **{name}** | **all** | {tot[0]} | **{tot[2] / tot[1]:.3f}** | {tot[1]} | {tot[2]} | |")
    text = "\n".join(lines) + "\n"
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, sys.argv[1])
    print(text, end="")


if __name__ == "__main__":
    main()
