#!/usr/bin/env python3
"""compare.py: the side-by-side table of one run.sh run (bench/peers), as Markdown on stdout.

    python compare.py OUT --recipe ours|peer [--threads N] [--blas TEXT]

OUT is WORKDIR/peers/TAG. Read:
  OUT/ours/metrics.jsonl   dflash_rank's: step lines (wall_s), held-out eval lines (split "heldout":
                           tau_decode at a step and wall time), the summary (steps, wall_s, peak_bytes)
  OUT/ours.maxrss_kb       GNU time's peak resident memory of our training (KB)
  OUT/peer/metrics.jsonl   speculators_cpu.py's: the trainer's records (global_step, wall_s, profile
                           step_ms) and its summary (s_per_step, peak_rss_bytes)
  OUT/eval/SIDE/heldout/eval.json, OUT/eval/SIDE/{heldout,eval}-by-category/CAT/eval.json
                           --mode eval of each drafter: tau_decode, tau_decode_steps, tau_decode_tokens
  OUT/eval/SIDE/eval-by-category/CAT.spec_decode.log
                           tools/spec_decode.py: its "total:" line and OK/FAIL
  OUT/curve/peer-epoch-E/{eval/eval.json,training_state.json}
                           the peer's curve points (global_step of that epoch's checkpoint)
s per step: ours from the wall clock between consecutive logged steps with no evaluation between
them; the peer's from its trainer's own step timer (fetch to optimizer step), the first step left out
of both. Pooled acceptance of a source: all its tokens over all its steps.
"""
import argparse
import glob
import json
import os
import re
import sys


def jl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def jload(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ours_stats(rows):
    steps = [r for r in rows if "step" in r and "loss" in r and r.get("split") is None and "summary" not in r]
    evals = [r for r in rows if r.get("split") == "heldout"]
    summ = next((r for r in rows if r.get("summary")), {})
    per = []
    for a, b in zip(steps, steps[1:]):
        if a["step"] <= 1:
            continue  # the first step (allocation, first touches) left out
        if any(a["wall_s"] < e.get("wall_s", -1) <= b["wall_s"] for e in evals):
            continue
        if b["step"] > a["step"]:
            per.append((b["wall_s"] - a["wall_s"]) / (b["step"] - a["step"]))
    sps = sum(per) / len(per) if per else None
    curve = [(e["step"], e.get("wall_s"), e.get("tau_decode")) for e in evals]
    peak = max(summ.get("peak_bytes") or [0]) or None
    return {"s_per_step": sps, "steps": summ.get("steps"), "wall_s": summ.get("wall_s"), "peak": peak,
            "curve": curve}


def peer_stats(rows, out):
    summ = next((r for r in reversed(rows) if r.get("summary")), {})  # the last run's (a resumed run appends)
    walls = {r["global_step"]: r["wall_s"] for r in rows if "train" in r and "global_step" in r}
    curve = []
    for d in sorted(glob.glob(os.path.join(out, "curve", "peer-epoch-*"))):
        ev = jload(os.path.join(d, "eval", "eval.json"))
        st = jload(os.path.join(d, "training_state.json"))
        if ev and st:
            s = st.get("global_step")
            curve.append((s, walls.get(s - 1) if s else None, ev.get("tau_decode")))
    curve.sort(key=lambda c: c[0] or 0)
    return {"s_per_step": summ.get("s_per_step"), "steps": summ.get("global_step", summ.get("steps")), "wall_s": summ.get("wall_s"),
            "peak": summ.get("peak_rss_bytes"), "curve": curve}


def eval_sets(out, side):
    """[(source, category, tau, steps, tokens)] of one drafter."""
    res = []
    e = jload(os.path.join(out, "eval", side, "heldout", "eval.json"))
    if e:
        res.append(("recorded held-out split", "all", e.get("tau_decode"), e.get("tau_decode_steps"),
                    e.get("tau_decode_tokens")))
    for src, name in (("heldout", "held-out categories"), ("eval", "another source")):
        for d in sorted(glob.glob(os.path.join(out, "eval", side, f"{src}-by-category", "*", "eval.json"))):
            e = jload(d)
            if e:
                res.append((name, os.path.basename(os.path.dirname(d)), e.get("tau_decode"),
                            e.get("tau_decode_steps"), e.get("tau_decode_tokens")))
    return res


def spec_lines(out, side):
    res = {}
    for log in sorted(glob.glob(os.path.join(out, "eval", side, "eval-by-category", "*.spec_decode.log"))):
        cat = os.path.basename(log)[: -len(".spec_decode.log")]
        text = open(log, errors="replace").read()
        m = re.search(r"^total: .*?mean acceptance per step ([0-9.]+)", text, re.M)
        ok = "OK" if re.search(r"^OK$", text, re.M) else ("FAIL" if re.search(r"^FAIL$", text, re.M) else "?")
        res[cat] = (float(m.group(1)) if m else None, ok)
    return res


def fmt(x, nd=3):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def mib(b):
    return "-" if not b else f"{b / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--recipe", default="?")
    ap.add_argument("--threads", default="?")
    ap.add_argument("--blas", default="")
    a = ap.parse_args()
    if not os.path.isdir(a.out):
        print(f"error: compare.py: {a.out}: no such directory", file=sys.stderr)
        sys.exit(1)
    ours = ours_stats(jl(os.path.join(a.out, "ours", "metrics.jsonl")))
    try:
        with open(os.path.join(a.out, "ours.maxrss_kb")) as f:
            ours["rss"] = int(f.read().split()[-1]) * 1024
    except (OSError, ValueError, IndexError):
        ours["rss"] = None
    peer = peer_stats(jl(os.path.join(a.out, "peer", "metrics.jsonl")), a.out)
    ev = {s: eval_sets(a.out, s) for s in ("ours", "peer")}
    sp = {s: spec_lines(a.out, s) for s in ("ours", "peer")}
    p = print
    p(f"# {os.path.basename(os.path.normpath(a.out))}: recipe {a.recipe}, ours (dflash_rank) and the peer (speculators 0.9.0)")
    p()
    p(f"Threads per trainer: {a.threads}. {a.blas}".rstrip())
    p()
    p("| | ours | peer | peer / ours |")
    p("|---|---:|---:|---:|")
    ratio = (peer["s_per_step"] / ours["s_per_step"]) if ours["s_per_step"] and peer["s_per_step"] else None
    p(f"| s per step (first step left out) | {fmt(ours['s_per_step'])} | {fmt(peer['s_per_step'])} | {fmt(ratio, 2)} |")
    p(f"| steps | {fmt(ours['steps'])} | {fmt(peer['steps'])} | |")
    p(f"| wall time of the training, s | {fmt(ours['wall_s'], 0)} | {fmt(peer['wall_s'], 0)} | |")
    rr = (peer["peak"] / ours["rss"]) if ours["rss"] and peer["peak"] else None
    p(f"| peak resident memory of the training process | {mib(ours['rss'])} | {mib(peer['peak'])} | {fmt(rr, 2)} |")
    p(f"| ours: the student's planned peak (tensors only) | {mib(ours['peak'])} | | |")
    p()
    p("## Acceptance (tau_decode, --mode eval; pooled: all tokens over all steps of a source)")
    p()
    p("| source | category | ours | peer | steps (ours / peer) |")
    p("|---|---|---:|---:|---|")
    rows_o = {(s, c): (t, st, tk) for s, c, t, st, tk in ev["ours"]}
    rows_p = {(s, c): (t, st, tk) for s, c, t, st, tk in ev["peer"]}
    keys = list(dict.fromkeys([(s, c) for s, c, *_ in ev["ours"]] + [(s, c) for s, c, *_ in ev["peer"]]))
    pooled = {}
    for k in keys:
        o, q = rows_o.get(k, (None, None, None)), rows_p.get(k, (None, None, None))
        p(f"| {k[0]} | {k[1]} | {fmt(o[0])} | {fmt(q[0])} | {fmt(o[1])} / {fmt(q[1])} |")
        if k[1] != "all":
            for side, r in (("ours", o), ("peer", q)):
                if r[1] and r[2]:
                    acc = pooled.setdefault((k[0], side), [0, 0])
                    acc[0] += r[2]
                    acc[1] += r[1]
    for src in dict.fromkeys(s for s, _ in pooled):
        vo, vp = pooled.get((src, "ours")), pooled.get((src, "peer"))
        p(f"| {src} | **pooled** | {fmt(vo[0] / vo[1] if vo else None)} | {fmt(vp[0] / vp[1] if vp else None)} | |")
    if sp["ours"] or sp["peer"]:
        p()
        p("## The dflash package's decoding (tools/spec_decode.py) of another source: mean acceptance per step, lossless check")
        p()
        p("| category | ours | peer |")
        p("|---|---:|---:|")
        for c in sorted(set(sp["ours"]) | set(sp["peer"])):
            o, q = sp["ours"].get(c, (None, "-")), sp["peer"].get(c, (None, "-"))
            p(f"| {c} | {fmt(o[0])} ({o[1]}) | {fmt(q[0])} ({q[1]}) |")
    p()
    p("## The curve: held-out tau_decode against step and wall time")
    p()
    p("| side | step | wall s | tau_decode |")
    p("|---|---:|---:|---:|")
    for side, st in (("ours", ours), ("peer", peer)):
        for s, w, t in st["curve"]:
            p(f"| {side} | {fmt(s)} | {fmt(w, 0)} | {fmt(t)} |")
    if peer["wall_s"] and ours["curve"]:
        at = [c for c in ours["curve"] if c[1] is not None and c[1] <= peer["wall_s"]]
        if at:
            p()
            p(f"At the peer's whole training time ({peer['wall_s']:.0f} s), ours had reached step {at[-1][0]} "
              f"with held-out tau_decode {fmt(at[-1][2])} (its last evaluation within that time).")


if __name__ == "__main__":
    main()
