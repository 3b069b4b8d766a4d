#!/usr/bin/env python3
"""curve.py: held-out tau_decode against step and wall time, from a run's metrics.jsonl.

    python3 examples/smollm2-135m/curve.py RUN_DIR/metrics.jsonl OUT.png OUT.md [--spec SPEC_LOG]

Reads the held-out lines ("split": "heldout": step, tau_decode, tau_decode_steps, loss, wall_s) and
writes a markdown table (step, wall time, held-out loss, tau_decode, its decoding steps) and a PNG of
two panels (tau_decode against the step, and against the wall time in minutes). --spec adds the
dflash package's acceptance from a tools/spec_decode.py log as one more row of the table. Needs
matplotlib for the PNG (the table is written without it).
"""
import argparse
import json
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics")
    ap.add_argument("png")
    ap.add_argument("md")
    ap.add_argument("--spec", help="a tools/spec_decode.py log")
    a = ap.parse_args()
    rows = []
    try:
        for line in open(a.metrics):
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if isinstance(o, dict) and o.get("split") == "heldout" and "tau_decode" in o:
                rows.append(o)
    except OSError as e:
        sys.exit(f"error: curve: {a.metrics}: {e.strerror}")
    if not rows:
        sys.exit(f"error: curve: {a.metrics}: no held-out lines with tau_decode")
    with open(a.md, "w") as f:
        f.write("| step | wall (min) | held-out loss | tau_decode | decoding steps |\n|---:|---:|---:|---:|---:|\n")
        for o in rows:
            wall = o.get("wall_s")
            f.write(f"| {o['step']} | {'' if wall is None else f'{wall / 60:.1f}'} | {o.get('loss', float('nan')):.3f} "
                    f"| {o['tau_decode']:.3f} | {o.get('tau_decode_steps', '')} |\n")
        if a.spec:
            m = None
            for line in open(a.spec):
                m = re.search(r"mean acceptance per step[^0-9]*([0-9.]+)", line) or m
            if m:
                f.write(f"\nthe dflash package's acceptance on the same held-out prompts (spec_decode.py): {m.group(1)}\n")
    print(f"curve: {len(rows)} held-out evaluations, tau_decode {rows[0]['tau_decode']:.3f} -> {rows[-1]['tau_decode']:.3f} -> {a.md}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("curve: no matplotlib, no PNG", file=sys.stderr)
        return
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot([o["step"] for o in rows], [o["tau_decode"] for o in rows], "o-k")
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("held-out tau_decode")
    walls = [(o["wall_s"] / 60, o["tau_decode"]) for o in rows if "wall_s" in o]
    if walls:
        ax[1].plot([w for w, _ in walls], [t for _, t in walls], "o-k")
    ax[1].set_xlabel("wall time (min)")
    for x in ax:
        x.grid(alpha=0.3)
    fig.suptitle(a.metrics)
    fig.tight_layout()
    fig.savefig(a.png, dpi=100)


if __name__ == "__main__":
    main()
