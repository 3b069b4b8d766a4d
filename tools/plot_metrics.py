#!/usr/bin/env python3
"""Plot a dflash_rank run's metrics.jsonl as a PNG with three panels.

    python3 tools/plot_metrics.py RUN_DIR/metrics.jsonl OUT.png [--title TEXT]

metrics.jsonl holds one JSON object per line (docs/student.md): training lines
({"step", "loss", "ce", "kl", "cap", "tau_chain", "tau_tree": {"<budget>": tau, ...},
"block_tokens_per_s", "ctx_tokens_per_s", ...}), held-out lines (the same with
"split": "heldout" and "tau_decode", the acceptance length decoding sees, without the throughput
keys) and a final {"summary": true, ...} line.

Panels, all against the step:
  1. losses: loss, ce, kl, cap of the training lines (solid) and held-out loss (markers)
  2. acceptance: the held-out tau_decode first (what serving sees: the headline, black, thickest),
     then tau_chain and each tau_tree budget, training (thin) and held-out (markers, bold)
  3. throughput: block_tokens_per_s and ctx_tokens_per_s of the training lines
A key missing from every line is left out (its legend entry too), a line with no "step" or with
"summary" is ignored, and lines that are not JSON objects are skipped with a count on stderr. A panel
with nothing to draw says so. Exit 1 with one line when the input cannot be read or holds no
metrics lines; exit 2 on a usage error.

Needs matplotlib (PyPI `pip install matplotlib`, or Debian's python3-matplotlib); drawn with the Agg
backend (no display needed).

Checked by hand: a synthetic metrics.jsonl (120 training lines with loss/ce/kl/cap, tau_chain,
tau_tree {"8", "32", "128"}, both throughputs; 7 held-out lines; a summary line; one garbage line;
some lines lacking cap and ctx_tokens_per_s) plotted into three panels with the expected curves and
legends and "1 line skipped" on stderr; a file of held-out lines only (empty throughput panel says
"no data"); an empty file (exit 1, one line); a missing file (exit 1, one line).
"""
import argparse
import json
import sys

LOSS_KEYS = ("loss", "ce", "kl", "cap")
SPEED_KEYS = ("block_tokens_per_s", "ctx_tokens_per_s")


def read_metrics(path):
    """Returns (train lines, held-out lines, skipped count), each a list of dicts with a step."""
    train, held, skipped = [], [], 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(rec, dict):
                skipped += 1
                continue
            if rec.get("summary") or not isinstance(rec.get("step"), (int, float)):
                continue
            (held if rec.get("split") == "heldout" else train).append(rec)
    return train, held, skipped


def series(lines, key, sub=None):
    """(steps, values) of lines that have the key (and sub-key of an object value)."""
    xs, ys = [], []
    for r in lines:
        v = r.get(key)
        if sub is not None:
            v = v.get(sub) if isinstance(v, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def tree_budgets(lines):
    budgets = set()
    for r in lines:
        if isinstance(r.get("tau_tree"), dict):
            budgets.update(r["tau_tree"].keys())
    return sorted(budgets, key=lambda b: (float(b) if b.replace(".", "", 1).isdigit() else float("inf"), b))


def empty(ax, what):
    ax.text(0.5, 0.5, f"no {what} in the file", ha="center", va="center", transform=ax.transAxes, color="gray")


def plot(train, held, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 11), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    ax = axes[0]
    drawn = 0
    for i, k in enumerate(LOSS_KEYS):
        xs, ys = series(train, k)
        if xs:
            ax.plot(xs, ys, color=colors[i % len(colors)], lw=1.5 if k == "loss" else 1, label=f"train {k}")
            drawn += 1
    xs, ys = series(held, "loss")
    if xs:
        ax.plot(xs, ys, "o--", color=colors[0], ms=5, label="held-out loss")
        drawn += 1
    if drawn:
        ax.legend(fontsize=8, ncol=2)
    else:
        empty(ax, "losses")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)

    ax = axes[1]
    drawn = 0
    xs, ys = series(held, "tau_decode")
    if xs:
        ax.plot(xs, ys, "s-", color="black", lw=2.5, ms=6, label="held-out tau_decode (decoding)")
        drawn += 1
        ax.set_title("held-out tau_decode %.3f -> %.3f" % (ys[0], ys[-1]), fontsize=9)
    curves = [("tau_chain", None, "chain")] + [("tau_tree", b, f"tree@{b}") for b in tree_budgets(train + held)]
    for i, (k, sub, name) in enumerate(curves):
        c = colors[i % len(colors)]
        xs, ys = series(train, k, sub)
        if xs:
            ax.plot(xs, ys, color=c, lw=1, alpha=0.7, label=f"train {name}")
            drawn += 1
        xs, ys = series(held, k, sub)
        if xs:
            ax.plot(xs, ys, "o-", color=c, lw=2, ms=5, label=f"held-out {name}")
            drawn += 1
    if drawn:
        ax.legend(fontsize=8, ncol=2)
    else:
        empty(ax, "tau_chain / tau_tree")
    ax.set_ylabel("acceptance length tau")
    ax.grid(alpha=0.3)

    ax = axes[2]
    drawn = 0
    for i, k in enumerate(SPEED_KEYS):
        xs, ys = series(train, k)
        if xs:
            ax.plot(xs, ys, color=colors[i % len(colors)], label=k)
            drawn += 1
    if drawn:
        ax.legend(fontsize=8)
    else:
        empty(ax, "throughput")
    ax.set_ylabel("tokens / s")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)

    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics", help="RUN_DIR/metrics.jsonl")
    ap.add_argument("out", help="output PNG")
    ap.add_argument("--title", default=None, help="figure title (default: the metrics path)")
    a = ap.parse_args()
    try:
        train, held, skipped = read_metrics(a.metrics)
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"error: plot_metrics: {a.metrics}: {e}")
    if skipped:
        print(f"plot_metrics: {skipped} line(s) of {a.metrics} are not JSON objects, skipped", file=sys.stderr)
    if not train and not held:
        sys.exit(f"error: plot_metrics: {a.metrics} holds no metrics lines (objects with a \"step\")")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("error: plot_metrics: needs matplotlib (pip install matplotlib, or apt install python3-matplotlib)")
    try:
        plot(train, held, a.out, a.title if a.title is not None else a.metrics)
    except OSError as e:
        sys.exit(f"error: plot_metrics: {a.out}: {e}")
    print(f"plot_metrics: {len(train)} training and {len(held)} held-out lines -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
