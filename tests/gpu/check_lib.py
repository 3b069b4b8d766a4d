#!/usr/bin/env python3
"""check_lib.py: the parsing and the JSON summary of tests/gpu/check.sh (not a test itself).

  check_lib.py summary WORK OUT [final]  write OUT/summary.json from WORK/parts.tsv, WORK/*.num, WORK/meta.num
                                         ("complete": true only with final, at the end of the check, and
                                         every part run; "not_run" names the parts that were not)
  check_lib.py compare FILE              `dflash_tool compare` output -> "max_rel_err tensors failed"
  check_lib.py ctest FILE NUMS           `ctest -V` output -> per-test results and op error lines into NUMS;
                                         prints "passed failed skipped"
  check_lib.py losses METRICS NUMS       metrics.jsonl of a run -> first/last loss, held-out tau, tokens/s;
                                         exit 1 unless the loss fell
  check_lib.py mem JSON NUMS SLACK       `dflash_tool mem-check --json` -> the memory criteria (docs/gpu-check.md);
                                         exit 1 when one fails
Only the standard library: it runs under the GPU machine's python3 and the development machine's.
"""
import json, os, re, statistics, sys, time


def read_nums(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if "\t" not in line:
            continue
        k, v = line.split("\t", 1)
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def put(nums_path, key, value):
    with open(nums_path, "a") as f:
        f.write(f"{key}\t{json.dumps(value)}\n")


def summary(work, out, final=False):
    meta = read_nums(os.path.join(work, "meta.num"))
    parts = []
    tsv = os.path.join(work, "parts.tsv")
    if os.path.exists(tsv):
        for line in open(tsv):
            f = line.rstrip("\n").split("\t")
            if len(f) < 5:
                continue
            name, status, seconds, limit, note = f[:5]
            ran = len(f) < 6 or f[5] != "0"
            nums = read_nums(os.path.join(work, name + ".num"))
            parts.append({"name": name, "status": status, "seconds": round(float(seconds), 1),
                          "limit_s": int(limit), "ran": ran, "note": note, "numbers": nums})
    statuses = [p["status"] for p in parts]
    not_run = [p["name"] for p in parts if not p["ran"]]
    # a part not run (no time left, no build) makes the check incomplete, and an incomplete check fails
    result = "FAIL" if "FAIL" in statuses or not_run else ("PASS" if "PASS" in statuses else "SKIP")
    doc = dict(meta)
    doc.update({"result": result, "complete": bool(final) and not not_run, "not_run": not_run,
                "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "parts": parts})
    tmp = os.path.join(out, ".summary.json.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "summary.json"))


def compare(path):
    worst, n, failed = 0.0, 0, 0
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) >= 4 and f[-1] in ("ok", "FAIL") and "/" in f[-2]:
            n += 1
            failed += f[-1] == "FAIL"
            try:
                worst = max(worst, float(f[-3]))
            except ValueError:
                pass
    print(f"{worst:.3e} {n} {failed}")


def ctest(path, nums):
    text = open(path, errors="replace").read()
    tests = {}
    for m in re.finditer(r"Test +#\d+: (\S+) \.+\s*(\*+)?\s*(Passed|Failed|Not Run|Skipped|Timeout|\w[\w ]*?)\s+[\d.]+ sec", text):
        tests[m.group(1)] = m.group(3)
    # op / case lines of the CUDA tests: "name  max_err  tol  ok|FAIL" (test_ops_cuda) or "case max_err ok|FAIL"
    ops, worst = 0, None
    for line in text.splitlines():
        m = re.match(r"^\d+: (.+?)\s+([0-9.]+e[-+]\d+)\s+([0-9.]+e[-+]\d+)\s+(ok|FAIL)\s*$", line)
        if m:
            ops += 1
            err, tol = float(m.group(2)), float(m.group(3))
            ratio = err / tol if tol > 0 else (0.0 if err == 0 else float("inf"))
            if worst is None or ratio > worst[0]:
                worst = (ratio, m.group(1).strip(), err, tol)
    # test_loss_cuda: "... rows off N, dx E  ok|FAIL" (dx against 1e-2, the row terms counted in "rows off")
    loss_cases, loss_rows_off, loss_dx = 0, 0, 0.0
    for m in re.finditer(r"rows off (\d+), dx ([0-9.]+e[-+]\d+)\s+(ok|FAIL)", text):
        loss_cases += 1
        loss_rows_off += int(m.group(1))
        loss_dx = max(loss_dx, float(m.group(2)))
    if loss_cases:
        put(nums, "loss_cases", loss_cases)
        put(nums, "loss_rows_off", loss_rows_off)
        put(nums, "loss_dx_max_err", loss_dx)
    put(nums, "fail_lines", len(re.findall(r"\bFAIL\s*$", text, re.M)))
    passed = sum(1 for s in tests.values() if s == "Passed")
    skipped = sum(1 for s in tests.values() if s in ("Skipped", "Not Run"))
    failed = len(tests) - passed - skipped
    put(nums, "tests", tests)
    put(nums, "op_lines", ops)
    if worst:
        put(nums, "worst_op", {"op": worst[1], "max_err": worst[2], "tol": worst[3], "err_over_tol": round(worst[0], 4)})
    print(passed, failed, skipped)


def losses(path, nums):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    train = [r for r in rows if "step" in r and "loss" in r and r.get("split") != "heldout"]
    held = [r for r in rows if r.get("split") == "heldout"]
    summ = [r for r in rows if r.get("summary")]
    if not train:
        print("no training lines in", path)
        sys.exit(1)
    put(nums, "steps", train[-1]["step"])
    put(nums, "loss_first", train[0]["loss"])
    put(nums, "loss_last", train[-1]["loss"])
    if held:
        put(nums, "heldout_tau_decode_first", held[0].get("tau_decode"))
        put(nums, "heldout_tau_decode_last", held[-1].get("tau_decode"))
        put(nums, "heldout_tau_first", held[0].get("tau_chain"))
        put(nums, "heldout_tau_last", held[-1].get("tau_chain"))
    if summ:
        for k in ("block_tokens_per_s", "ctx_tokens_per_s", "wall_s", "peak_bytes"):
            if k in summ[-1]:
                put(nums, k, summ[-1][k])
    print(f"loss {train[0]['loss']:.4f} -> {train[-1]['loss']:.4f} over {train[-1]['step']} steps")
    sys.exit(0 if train[-1]["loss"] < train[0]["loss"] else 1)


def mem(path, nums, slack):
    d = json.load(open(path))
    runs = d["runs"]
    budget = d["budget"]
    cuda = d.get("cuda", False)
    bad = []
    rows = []
    for r in runs:
        row = {k: r[k] for k in ("anchors", "chunk", "loss_mode", "plan_total", "arena_peak", "device_used")}
        rows.append(row)
        if not r["fits"] or r["plan_total"] > budget:
            bad.append(f"{r['anchors']} anchors: plan {r['plan_total']} over the budget {budget}")
        if r["arena_peak"] > budget:
            bad.append(f"{r['anchors']} anchors: arena peak {r['arena_peak']} over the budget {budget}")
        if cuda and r["device_used"] > budget + slack:
            bad.append(f"{r['anchors']} anchors: device memory in use {r['device_used']} over the budget {budget} + {slack}")
    peaks = [r["arena_peak"] for r in runs]
    put(nums, "budget", budget)
    put(nums, "anchors", [r["anchors"] for r in runs])
    put(nums, "growth", round(runs[-1]["anchors"] / runs[0]["anchors"], 2))
    put(nums, "runs", rows)
    put(nums, "arena_peak_max_over_min", round(max(peaks) / max(1, min(peaks)), 4))
    if cuda:
        used = [r["device_used"] for r in runs]
        put(nums, "device_used_max", max(used))
        put(nums, "device_over_arena_max", max(r["device_used"] - r["arena_peak"] for r in runs))
        if max(used) - min(used) > slack:
            bad.append(f"device memory in use grows with the anchors: {min(used)} .. {max(used)} (slack {slack})")
    t = d.get("timing")
    if t:
        put(nums, "timing", {"anchors": t["anchors"], "chunk": t["chunk"], "median_s": t["median_s"],
                             "plan_total": t["plan_total"], "arena_peak": t["arena_peak"], "device_used": t["device_used"]})
        p = t.get("profile")
        if p:  # mem-check --profile: the step op by op (ms, share of the step; GEMMs with their TFLOP/s)
            step = p["step_s"]
            ops = [{"op": o["name"], "calls": o["calls"], "ms": round(1e3 * o["seconds"], 3),
                    "share": round(o["seconds"] / step, 4) if step > 0 else None,
                    **({"tflops": round(o["flops"] / o["seconds"] / 1e12, 1)} if o["flops"] and o["seconds"] else {})}
                   for o in p["ops"]]
            put(nums, "profile", {"step_s": step, "outside_ops_ms": round(1e3 * (step - sum(o["seconds"] for o in p["ops"])), 3),
                                  "ops": ops})
    put(nums, "params", d["params"])
    put(nums, "init_s", d["init_s"])
    for b in bad:
        print("FAIL:", b)
    sys.exit(1 if bad else 0)


def main():
    cmd = sys.argv[1]
    if cmd == "summary":
        summary(sys.argv[2], sys.argv[3], len(sys.argv) > 4 and sys.argv[4] == "final")
    elif cmd == "compare":
        compare(sys.argv[2])
    elif cmd == "ctest":
        ctest(sys.argv[2], sys.argv[3])
    elif cmd == "losses":
        losses(sys.argv[2], sys.argv[3])
    elif cmd == "mem":
        mem(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "put":
        v = sys.argv[4]
        try:
            v = json.loads(v)
        except ValueError:
            pass
        put(sys.argv[2], sys.argv[3], v)
    else:
        sys.exit(f"check_lib.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
