#!/usr/bin/env python3
"""step_kernels.py: one student step (dflash_tool mem-check --time-anchors) under the BLAS kernel
dflash_rank chooses by default against every kernel OpenBLAS can be forced to on this processor,
side by side in one run (Debian python3 only; no PyPI package).

The default column is the binaries as a user runs them: no OPENBLAS_CORETYPE, so the start-up re-exec
(threads.h, blas_kernel.h) picks the kernel; "library" is what the library picks by itself (the
kernel the project ran before blas_kernel.c: forced here with OPENBLAS_CORETYPE set to the name the
library reports); the others force each kernel. Rounds interleave the columns and each keeps its
fastest median, so a busy moment costs one round, not one column. The shape is bench_student.py's
(H 512, 2 layers, V 32000, block 16, 1024 context tokens).

  python3 bench/gemm/step_kernels.py --build build --threads 2 --anchors 256 --rounds 2
"""
import argparse, json, os, re, subprocess, tempfile

SHAPE = ["--hidden", "512", "--layers", "2", "--heads", "8", "--kv-heads", "4", "--head-dim", "64", "--intermediate",
         "1536", "--vocab", "32000", "--block", "16", "--n-feat", "5", "--tokens", "1024", "--seqs", "1", "--topk", "32"]


def step(build, threads, anchors, repeat, kernel):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("DFLASH_BLAS_CHOSE", None)
    if kernel:
        env["OPENBLAS_CORETYPE"] = kernel
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "t.json")
        cmd = [os.path.join(build, "dflash_tool"), "--threads", str(threads), "mem-check", "--device", "cpu", *SHAPE,
               "--anchors", "16", "--time-anchors", str(anchors), "--repeat", str(repeat), "--json", js]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"step_kernels: {' '.join(cmd)} failed:\n{p.stderr}")
        return json.load(open(js))["timing"]["median_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--anchors", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kernels", default="Haswell,SkylakeX,Cooperlake")
    args = ap.parse_args()
    ver = subprocess.run([os.path.join(args.build, "dflash_rank"), "--version"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "DFLASH_BLAS_CHOSE")}).stdout
    chosen = re.search(r"kernel (\w+)", ver).group(1)
    lib = re.search(r"the library runs (\w+)", ver)
    lib = lib.group(1) if lib else chosen
    cols = [("default (" + chosen + ")", None), ("library (" + lib + ")", lib)] + [(k, k) for k in args.kernels.split(",")]
    best = {name: float("inf") for name, _ in cols}
    for _ in range(args.rounds):
        for name, kernel in cols:
            best[name] = min(best[name], step(args.build, args.threads, args.anchors, args.repeat, kernel))
    fastest = min(best.values())
    load = os.getloadavg()[0]
    print(f"student step, {args.anchors} anchors, {args.threads} thread(s), median of {args.repeat} steps, "
          f"fastest of {args.rounds} rounds; load {load:.2f} at the end; {ver.splitlines()[-1]}")
    print("| kernel | step s | vs the fastest kernel |\n|---|---|---|")
    for name, _ in cols:
        print(f"| {name} | {best[name]:.3f} | {best[name] / fastest:.2f}x |")


if __name__ == "__main__":
    main()
