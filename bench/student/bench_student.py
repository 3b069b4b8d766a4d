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
    lib = None
    for path in ("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"):
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            break
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


# ---------------------------------------------------------------- PyTorch, the usual way
def torch_step(variant, threads, anchors, repeat, seed, ckpt_rows):
    import torch, torch.nn as nn, torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    torch.set_num_threads(threads)
    s = SHAPE
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
    ap.add_argument("--torch-variant", help=argparse.SUPPRESS)  # internal: one PyTorch step in this process
    args = ap.parse_args()
    if args.torch_variant:
        print(json.dumps(torch_step(args.torch_variant, args.threads, args.anchors, args.repeat, args.seed, args.ckpt_rows)))
        return
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


if __name__ == "__main__":
    main()
