#!/usr/bin/env python3
"""bench_student.py: one student step (forward + loss + backward) on the CPU, ours against PyTorch.

One run of this script, the same shapes, random inputs of the same distribution, the same threads:
  sgemm     the machine's fp32 GEMM rate (OpenBLAS, the library our step uses, n = 2048)
  ours      `dflash_tool mem-check --time-anchors A --repeat N [--time-budget BYTES] --json`: our step
            without a budget, under the budget of 16 anchors per chunk with the 2-GEMM loss (the
            issue's case), and under 1.5x, 2x and 4x the smallest budget the planner accepts (read
            from its refusal of a 1 KiB budget); the planner's plan, median step time, arena peak
            (the memory the plan carves) and the process's peak RSS
  pytorch   the same drafter written the usual way in fp32 (nn.Linear, sdpa with a [queries, keys]
            mask over context + blocks, the full [N, V] logits, log_softmax): "full"; and the usual
            fix, the lm_head + loss in row chunks under torch.utils.checkpoint: "ckpt"; each in its
            own process (peak RSS), median step time
Each row: step time, block tokens/s (anchors x block / step), peak memory, the step's model FLOPs
(drafter layers fwd + dX + dW, attention over the visible keys fwd + bwd, 2 lm_head GEMMs, the
context projections) per second as a fraction of the sgemm rate, and the ratio to our unbudgeted
step. Needs the pyenv python with torch (not part of the tests).

  python3 bench/student/bench_student.py --build build --threads 1

--compare: one table instead, per thread count (--threads-list 1,2) and anchor count (--anchors-list
64,256,1024; the context grows to 2 x anchors tokens when that is above 1024, so the anchors stay
distinct on both sides): the load average, the sgemm rate at n 2048 and over the step's own shapes
(step_gemms: every product of the step at its size, the attention tiles one thread each), our
unbudgeted step, PyTorch full and checkpointed (skipped when sdpa's attention tensors would exceed
--torch-max-gib), and the ratios.

  /work/venv/bin/python bench/student/bench_student.py --build build --compare --repeat 2
"""
import argparse, ctypes, json, math, os, re, statistics, subprocess, sys, tempfile, time

SHAPE = dict(hidden=512, layers=2, heads=8, kv_heads=4, head_dim=64, intermediate=1536, vocab=32000, block=16,
             n_feat=5, tokens=1024, seqs=1, topk=32)


def model_flops(s, anchors, kv_mean):
    H, L, B, V = s["hidden"], s["layers"], s["block"], s["vocab"]
    qd, kvd = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    T, R, S = anchors * B, anchors * (B - 1), s["tokens"]
    lin = H * qd + 2 * H * kvd + qd * H + 3 * H * s["intermediate"]
    f = L * 6 * T * lin + L * 12 * T * qd * kv_mean + 2 * 2 * R * H * V
    return f + 4 * S * s["n_feat"] * H * H + L * 6 * S * H * 2 * kvd


def run_rss(cmd, env):
    """Run cmd; (stdout, stderr, rc, peak RSS bytes of the child)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        out.seek(0), err.seek(0)
        return out.read(), err.read(), os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024


def sgemm_rate(threads, n=2048):
    lib = ctypes.CDLL(openblas_path())
    import numpy as np
    lib.openblas_set_num_threads(threads)
    a, b, c = (np.random.rand(n, n).astype(np.float32) for _ in range(3))
    p = lambda x: x.ctypes.data_as(ctypes.c_void_p)
    f = lambda: lib.cblas_sgemm(101, 111, 112, n, n, n, ctypes.c_float(1), p(a), n, p(b), n, ctypes.c_float(0), p(c), n)
    f()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / min(ts)


def step_gemms(s, anchors, kv_mean):
    """The step's products as (m, n, k, trans_a, trans_b, count) with the FLOPs model_flops counts:
    the drafter's linears forward, dX and dW; the attention tiles of the CPU kernel (one anchor and
    kv head: [B x group, hd] against [kv_mean, hd], 6 such products, the 12 T qd kv_mean FLOPs); the
    lm_head forward and dX; the fc forward and dW; the context K/V projections fwd, dX, dW."""
    H, L, B, V, S = s["hidden"], s["layers"], s["block"], s["vocab"], s["tokens"]
    qd, kvd, I, nf = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"], s["intermediate"], s["n_feat"]
    T, R = anchors * B, anchors * (B - 1)
    g = []
    for (n, k) in [(qd, H), (kvd, H), (kvd, H), (H, qd), (I, H), (I, H), (H, I)]:
        g += [(T, n, k, 0, 0, L), (T, k, n, 0, 1, L), (k, n, T, 1, 0, L)]
    group, hd = s["heads"] // s["kv_heads"], s["head_dim"]
    kv = max(int(kv_mean), 1)
    tiles = anchors * s["kv_heads"] * L
    g += [(B * group, kv, hd, 0, 1, 6 * tiles)]  # fwd S, P V; bwd S, dP, dQ, dK: one shape for all six
    g += [(R, V, H, 0, 1, 1), (R, H, V, 0, 0, 1)]
    g += [(S, H, nf * H, 0, 0, 1), (nf * H, H, S, 1, 0, 1)]
    for _ in range(2):
        g += [(S, kvd, H, 0, 0, L), (S, H, kvd, 0, 1, L), (H, kvd, S, 1, 0, L)]
    return g


def sgemm_shapes_rate(threads, gemms):
    """Measured OpenBLAS sgemm over the step's own shapes: sum of FLOPs / sum of (min of 2) times.
    The attention tiles are timed one GEMM and scaled by their count (as they run: one thread each)."""
    lib = ctypes.CDLL(openblas_path())
    import numpy as np
    p = lambda x: x.ctypes.data_as(ctypes.c_void_p)
    flops = secs = 0.0
    for (m, n, k, ta, tb, count) in gemms:
        tile = count > 64
        lib.openblas_set_num_threads(1 if tile else threads)
        a = np.random.rand(*((k, m) if ta else (m, k))).astype(np.float32)
        b = np.random.rand(*((n, k) if tb else (k, n))).astype(np.float32)
        c = np.zeros((m, n), np.float32)
        f = lambda: lib.cblas_sgemm(101, 112 if ta else 111, 112 if tb else 111, m, n, k, ctypes.c_float(1), p(a),
                                    a.shape[1], p(b), b.shape[1], ctypes.c_float(0), p(c), n)
        reps = 20 if tile else 1
        f()
        best = 1e30
        for _ in range(2):
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            best = min(best, (time.perf_counter() - t0) / reps)
        # the tiles run one per thread side by side: `threads` of them in the time of one
        secs += best * count / (threads if tile else 1)
        flops += 2.0 * m * n * k * count
    return flops / secs


def match_kernel(build):
    """The sgemm rates above are measured in this process: make its OpenBLAS load the kernel our
    binary runs (dflash_rank --version's blas line; blas_kernel.h), unless OPENBLAS_CORETYPE is set."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    out = subprocess.run([os.path.join(build, "dflash_rank"), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"kernel (\w+)", out)
    if m:
        os.environ["OPENBLAS_CORETYPE"] = m.group(1)
    return m.group(1) if m else "?"


def openblas_path():
    for path in ("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"):
        if os.path.exists(path):
            return path
    sys.exit("bench_student: no libopenblas.so.0")


# ---------------------------------------------------------------- PyTorch, the usual way
def torch_step(variant, threads, anchors, repeat, seed, ckpt_rows, tokens=None):
    import torch, torch.nn as nn, torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    torch.set_num_threads(threads)
    s = dict(SHAPE, tokens=tokens or SHAPE["tokens"])
    H, L, B, V, S, k = s["hidden"], s["layers"], s["block"], s["vocab"], s["tokens"], s["topk"]
    nq, nkv, d, I = s["heads"], s["kv_heads"], s["head_dim"], s["intermediate"]
    g = torch.Generator().manual_seed(seed)

    class RMS(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.w = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2, self.qn, self.kn = RMS(H), RMS(H), RMS(d), RMS(d)
            self.q, self.k, self.v = nn.Linear(H, nq * d, bias=False), nn.Linear(H, nkv * d, bias=False), nn.Linear(H, nkv * d, bias=False)
            self.o = nn.Linear(nq * d, H, bias=False)
            self.gate, self.up, self.down = nn.Linear(H, I, bias=False), nn.Linear(H, I, bias=False), nn.Linear(I, H, bias=False)

    def rope(x, pos):  # x [n, heads, d]
        inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = pos[:, None].float() * inv[None]
        cos, sin = ang.cos()[:, None], ang.sin()[:, None]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    fc, hnorm, fnorm = nn.Linear(s["n_feat"] * H, H, bias=False), RMS(H), RMS(H)
    layers = nn.ModuleList(Layer() for _ in range(L))
    emb = (torch.rand(V, H, generator=g) * 0.1 - 0.05)
    head = (torch.rand(V, H, generator=g) * 0.1 - 0.05)
    feats = torch.rand(S, s["n_feat"] * H, generator=g) * 2 - 1
    tokens = torch.randint(0, V - 1, (S,), generator=g)
    t_idx = torch.rand(S, V, generator=g).topk(k, -1).indices
    t_val = 10.0 - 0.25 * torch.arange(k, dtype=torch.float32).expand(S, k)
    t_lse = torch.full((S,), 12.0)
    anc = torch.randperm(S - 2, generator=g)[:anchors].sort().values + 1  # valid: 1..S-2 (the first two are prompt)
    A = anchors
    off = torch.arange(B)
    bpos = (anc[:, None] + off[None]).reshape(-1)                      # [A*B] block positions
    btok = torch.full((A, B), V - 1)
    btok[:, 0] = tokens[anc]
    x0 = emb[btok.reshape(-1)]                                          # frozen embedding
    # mask [A*B, S + A*B]: context keys before the anchor, and its own block
    ctx_ok = torch.arange(S)[None] < anc[:, None]
    blk_ok = torch.eye(A, dtype=torch.bool)
    mask = torch.cat([ctx_ok.repeat_interleave(B, 0), blk_ok.repeat_interleave(B, 0).repeat_interleave(B, 1)], 1)
    kv_mean = float(anc.float().mean()) + B
    # scored slots k = 1..B-1: label tokens[a+k], teacher data at a+k-1, weight exp(-(k-1)/7) inside the batch
    pos = anc[:, None] + torch.arange(1, B)[None]
    inside = pos < S
    posc = pos.clamp(max=S - 1)
    label, tp = tokens[posc].reshape(-1), (posc - 1).reshape(-1)
    w = (torch.exp(-(torch.arange(1, B) - 1) / 7.0)[None] * inside).reshape(-1)
    ti, tv, tl = t_idx[tp], t_val[tp], t_lse[tp]
    alpha, lam = 0.15, 0.1

    def loss_of(h, label, ti, tv, tl, w):
        logits = h @ head.t()
        logp = F.log_softmax(logits, -1)
        ce = -logp.gather(1, label[:, None])[:, 0]
        p = torch.exp(tv - tl[:, None])
        pr = (1 - p.sum(-1)).clamp(min=0)
        lq = logp.gather(1, ti)
        lqr = logp.scatter(1, ti, float("-inf")).logsumexp(-1)
        kl = (p * (torch.log(p) - lq)).sum(-1) + torch.where(pr > 0, pr * (torch.log(pr.clamp(min=1e-30)) - lqr), torch.zeros_like(pr))
        gi = logits.detach().argmax(-1)
        cap = (gi != label).float() * logp.gather(1, gi[:, None])[:, 0].exp()
        return (w * ((1 - alpha) * ce + alpha * kl + lam * cap)).sum()

    def step():
        ctx = hnorm(fc(feats))
        x = x0
        cpos = torch.arange(S)
        for ly in layers:
            hx = ly.ln1(x)
            q = rope(ly.qn(ly.q(hx).view(-1, nq, d)), bpos)
            kb = rope(ly.kn(ly.k(hx).view(-1, nkv, d)), bpos)
            kc = rope(ly.kn(ly.k(ctx).view(-1, nkv, d)), cpos)
            vb, vc = ly.v(hx).view(-1, nkv, d), ly.v(ctx).view(-1, nkv, d)
            K = torch.cat([kc, kb]).transpose(0, 1).repeat_interleave(nq // nkv, 0)
            Vv = torch.cat([vc, vb]).transpose(0, 1).repeat_interleave(nq // nkv, 0)
            a = F.scaled_dot_product_attention(q.transpose(0, 1), K, Vv, attn_mask=mask)
            x = x + ly.o(a.transpose(0, 1).reshape(-1, nq * d))
            hx = ly.ln2(x)
            x = x + ly.down(F.silu(ly.gate(hx)) * ly.up(hx))
        h = fnorm(x).view(A, B, H)[:, 1:].reshape(-1, H)
        if variant == "full":
            total = loss_of(h, label, ti, tv, tl, w)
        else:
            total = 0
            for r0 in range(0, h.shape[0], ckpt_rows):
                sl = slice(r0, r0 + ckpt_rows)
                total = total + checkpoint(loss_of, h[sl], label[sl], ti[sl], tv[sl], tl[sl], w[sl], use_reentrant=False)
        (total / w.sum()).backward()

    times = []
    for r in range(repeat + 1):
        for prm in list(fc.parameters()) + list(hnorm.parameters()) + list(fnorm.parameters()) + list(layers.parameters()):
            prm.grad = None
        t0 = time.perf_counter()
        step()
        if r:
            times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "times_s": times, "kv_mean": kv_mean}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--anchors", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ckpt-rows", type=int, default=960, help="rows per checkpointed lm_head + loss chunk")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--compare", action="store_true",
                    help="ours unbudgeted against PyTorch full and checkpointed, for --threads-list x --anchors-list")
    ap.add_argument("--threads-list", default="1,2")
    ap.add_argument("--anchors-list", default="64,256,1024")
    ap.add_argument("--torch-max-gib", type=float, default=12.0,
                    help="skip a PyTorch run whose sdpa attention tensors alone would exceed this")
    ap.add_argument("--torch-variant", help=argparse.SUPPRESS)  # internal: one PyTorch step in this process
    ap.add_argument("--tokens", type=int, default=0, help=argparse.SUPPRESS)  # internal, with --torch-variant
    args = ap.parse_args()
    if args.torch_variant:
        print(json.dumps(torch_step(args.torch_variant, args.threads, args.anchors, args.repeat, args.seed, args.ckpt_rows,
                                    args.tokens or None)))
        return
    print(f"bench_student: OpenBLAS kernel {match_kernel(args.build)} (ours and the sgemm rates)", flush=True)
    if args.compare:
        return compare(args)
    s, A = SHAPE, args.anchors
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    rate = sgemm_rate(args.threads)
    tool = os.path.join(args.build, "dflash_tool")
    shape = []
    for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "block", "n_feat", "tokens",
                "seqs", "topk"):
        shape += ["--" + key.replace("_", "-"), str(s[key])]
    base = [tool, "mem-check", "--device", "cpu", *shape, "--time-anchors", str(A), "--repeat", str(args.repeat),
            "--seed", str(args.seed)]

    def ours(budget, name, anchors_list="1"):
        with tempfile.TemporaryDirectory() as tmp:
            js = os.path.join(tmp, "out.json")
            cmd = base + ["--anchors", anchors_list, "--json", js] + (["--time-budget", str(budget)] if budget else [])
            out, err, rc, rss = run_rss(cmd, env)
            if rc:
                return None, out + err
            j = json.load(open(js))
            t = j["timing"]
            return {"name": name, "budget": budget, "plan": f"C {t['chunk']}, {t['loss_mode']}, rows {t['row_chunk']}",
                    "median_s": t["median_s"], "peak": t["arena_peak"], "rss": rss, "kv_mean": t["kv_mean"],
                    "mem_budget": j["budget"]}, out

    # the smallest budget: from the planner's refusal of 1 KiB
    _, msg = ours(1024, "probe")
    m = re.search(r"needs at least .*?\((\d+) bytes\)", msg)
    if not m:
        sys.exit("bench_student: no smallest budget in: " + msg)
    bmin = int(m.group(1))
    rows = []
    r, out = ours(0, "ours, no budget", anchors_list="16")  # its memory run: the budget of 16 anchors with rows
    if r is None:
        sys.exit(out)
    rows.append(r)
    b16 = r["mem_budget"]
    for budget, name in [(b16, "ours, budget of 16 anchors with rows"), (int(1.5 * bmin), "ours, 1.5x the minimum"),
                         (2 * bmin, "ours, 2x the minimum"), (4 * bmin, "ours, 4x the minimum")]:
        r, out = ours(budget, name)
        if r is None:
            sys.exit(out)
        rows.append(r)
    if not args.skip_torch:
        for variant, name in [("full", "pytorch, full logits"), ("ckpt", f"pytorch, checkpointed lm_head+loss ({args.ckpt_rows} rows)")]:
            out, err, rc, rss = run_rss([sys.executable, __file__, "--torch-variant", variant, "--threads", str(args.threads),
                                         "--anchors", str(A), "--repeat", str(args.repeat), "--seed", str(args.seed),
                                         "--ckpt-rows", str(args.ckpt_rows)], env)
            if rc:
                sys.exit(f"{name}: {err}")
            t = json.loads(out.strip().splitlines()[-1])
            rows.append({"name": name, "budget": 0, "plan": "-", "median_s": t["median_s"], "peak": rss, "rss": rss,
                         "kv_mean": t["kv_mean"]})
    import torch
    print(f"# {args.threads} thread(s); H {s['hidden']}, {s['layers']} layers, {s['heads']}/{s['kv_heads']} heads x "
          f"{s['head_dim']}, I {s['intermediate']}, V {s['vocab']}, block {s['block']}, {s['tokens']}-token context, "
          f"{A} anchors, top-{s['topk']}; median of {args.repeat}; torch {torch.__version__}")
    print(f"# sgemm (OpenBLAS, n 2048, {args.threads} thread(s)): {rate / 1e9:.1f} GFLOP/s; smallest budget {bmin / 2**20:.1f} MiB")
    print("| run | budget | plan | step s | block tok/s | peak (plan / RSS) | GFLOP/s | of sgemm | vs ours unbudgeted |")
    print("|---|---|---|---|---|---|---|---|---|")
    ref = rows[0]["median_s"]
    for r in rows:
        fl = model_flops(s, A, r["kv_mean"]) / r["median_s"]
        bud = f"{r['budget'] / 2**20:.0f} MiB" if r["budget"] else "none"
        peak = f"{r['peak'] / 2**30:.2f} / {r['rss'] / 2**30:.2f} GiB" if r["plan"] != "-" else f"- / {r['rss'] / 2**30:.2f} GiB"
        print(f"| {r['name']} | {bud} | {r['plan']} | {r['median_s']:.2f} | {A * s['block'] / r['median_s']:.0f} | {peak} | "
              f"{fl / 1e9:.1f} | {100 * fl / rate:.0f} % | {r['median_s'] / ref:.2f}x |")
        sys.stdout.flush()


def compare(args):
    """One table: per thread count and anchor count, the load, the sgemm rates, our unbudgeted step
    and the two PyTorch steps, side by side in this one run (the machine may be shared: compare the
    ratios, each measured within minutes of the other)."""
    tool = os.path.join(args.build, "dflash_tool")
    print("| threads | anchors | tokens | load (1 min) | sgemm n2048 GFLOP/s | sgemm step shapes GFLOP/s | ours s "
          "| ours GFLOP/s (of step-shape sgemm) | torch full s | torch ckpt s | full / ours | ckpt / ours |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    for th in [int(x) for x in args.threads_list.split(",")]:
        env = dict(os.environ, OMP_NUM_THREADS=str(th), OPENBLAS_NUM_THREADS=str(th))
        for A in [int(x) for x in args.anchors_list.split(",")]:
            s = dict(SHAPE, tokens=max(SHAPE["tokens"], 2 * A))  # distinct anchors (the PyTorch side samples them so)
            load = os.getloadavg()[0]
            shape = []
            for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "block", "n_feat",
                        "tokens", "seqs", "topk"):
                shape += ["--" + key.replace("_", "-"), str(s[key])]
            with tempfile.TemporaryDirectory() as tmp:
                js = os.path.join(tmp, "out.json")
                cmd = [tool, "--threads", str(th), "mem-check", "--device", "cpu", *shape, "--time-anchors", str(A),
                       "--repeat", str(args.repeat), "--seed", str(args.seed), "--anchors", "16", "--json", js]
                out, err, rc, _ = run_rss(cmd, env)
                if rc:
                    sys.exit(out + err)
                t = json.load(open(js))["timing"]
            ours, kv_mean = t["median_s"], t["kv_mean"]
            flops = model_flops(s, A, kv_mean)
            rate_sq, rate_shapes = sgemm_rate(th), sgemm_shapes_rate(th, step_gemms(s, A, kv_mean))
            tt = {}
            attn_gib = s["heads"] * A * s["block"] * (s["tokens"] + A * s["block"]) * 4 * 3 / 2**30
            for variant in ("full", "ckpt"):
                if attn_gib > args.torch_max_gib:
                    tt[variant] = None
                    continue
                out, err, rc, _ = run_rss([sys.executable, __file__, "--torch-variant", variant, "--threads", str(th),
                                           "--anchors", str(A), "--repeat", str(args.repeat), "--seed", str(args.seed),
                                           "--ckpt-rows", str(args.ckpt_rows), "--tokens", str(s["tokens"])], env)
                if rc:
                    sys.exit(f"torch {variant}: {err}")
                tt[variant] = json.loads(out.strip().splitlines()[-1])["median_s"]
            f = lambda v: f"{v:.2f}" if v else f"not run (sdpa's [heads, queries, keys] x 3: {attn_gib:.0f} GiB)"
            r = lambda v: f"{v / ours:.2f}x" if v else "-"
            print(f"| {th} | {A} | {s['tokens']} | {load:.1f} | {rate_sq / 1e9:.1f} | {rate_shapes / 1e9:.1f} | {ours:.2f} | "
                  f"{flops / ours / 1e9:.1f} ({100 * flops / ours / rate_shapes:.0f} %) | {f(tt['full'])} | {f(tt['ckpt'])} | "
                  f"{r(tt['full'])} | {r(tt['ckpt'])} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
