#!/usr/bin/env python3
"""gpu_student.py: the DFlash drafter's training step three ways on one GPU, side by side.

  python3 bench/gpu_student.py [--sizes 8b,27b] [--repeat 3] [--dflash-tool build-gpu/dflash_tool]
                               [--json OUT.json] [--ours-json 8b=FILE] [--time-left SECONDS]
  python3 bench/gpu_student.py --tiny          toy sizes on the CPU (checks the script, not a benchmark)

Sizes (issue 7):
  8b   a Qwen3-8B drafter: 5 layers, H 4096, 32 q / 8 kv heads x 128, MLP 12288, vocab 151936,
       block 16, 512 anchors on one packed 3072-token context, 5 target layers of features, top-32
  27b  H 5120, 24 q heads x 256, 4 kv heads, MLP 17408, vocab 248320, block 32, 1024 anchors, 3072
       tokens, 5 layers (the issue names no layer count; 5 as for 8b)
Methods (one student step: forward, loss, backward to every trainable weight; no optimizer):
  torch-full     the usual way: PyTorch, fp32 weights under bf16 autocast, the lm_head over all
                 scored rows ([A*(B-1), V] logits), the loss (CE + top-k/tail KL + CAP, decay
                 weights: bench/loss/bench_loss_torch.py's slot_terms) with autograd
  torch-chunked  the usual workaround: the same, but lm_head + loss in row chunks, each under
                 torch.utils.checkpoint (the [rows, V] tensors are recomputed in the backward)
  ours           dflash_rank's student step (`dflash_tool mem-check`, same shapes, random inputs,
                 the planner with no memory limit): fp32 master weights, bf16 compute, fused loss
Reported per method: median step time of --repeat after a warm-up, block tokens/s (anchors x
block / step), peak GPU memory (torch.cuda.max_memory_allocated for PyTorch, weights and gradients
included; ours: the arenas' high-water mark, and the device memory in use by cudaMemGetInfo), and
model-FLOP utilisation: the step's model FLOPs (below) / time / the chip's bf16 GEMM rate measured
here (an 8192^3 torch.matmul on random data, median of 10).

The PyTorch drafter follows the DFlash drafter as dflash_rank implements it (docs/student.md,
src/student/model/step.c): ctx = hidden_norm(fc(features)); per layer context K = rope(k_norm(k_proj(ctx))),
V = v_proj(ctx); the block input is the frozen embedding of [anchor token, mask, ..., mask]; Qwen3
layers (RMSNorm, q/k norm, RoPE, SwiGLU) whose attention lets slot j of anchor a see the context
positions [seq_start, a) and every slot of its own block; final norm, the frozen lm_head. It is
written for speed comparison, approximately: attention is PyTorch SDPA over [context; the chunk's
blocks] with a boolean mask, 32 anchors per call, K/V heads repeated as transformers' repeat_kv does
(so it computes scores for masked context positions too), and it is not checked against the C step
numerically (tests/reference/ does that for dflash_rank).

Model FLOPs (the same count for every method; recomputation is not counted): fc 4 S F H^2 (forward
+ weight gradient), context K/V 6 S H 2 kvd per layer, block projections and MLP 6 N P_layer,
attention 12 N nq hd kv_mean per layer (kv_mean = mean keys a query sees), lm_head 4 R H V (forward
+ input gradient; frozen), with S context tokens, N = A B block rows, R = A (B - 1) scored rows.
"""
import argparse, gc, importlib.util, json, math, os, statistics, subprocess, sys, tempfile, time

try:  # the GPU machine may have no PyTorch: say so in one line (exit 77: tests/gpu/check.sh's skip)
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError as e:
    print(f"gpu_student.py: {sys.executable} cannot import PyTorch ({e}): not run", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_loss_torch", os.path.join(HERE, "loss", "bench_loss_torch.py"))
_bl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bl)
slot_terms = _bl.slot_terms  # CE, KL (top-k + tail), CAP per row, student top-K (SPEC §4)

SIZES = {
    "8b": dict(hidden=4096, layers=5, heads=32, kv_heads=8, head_dim=128, intermediate=12288, vocab=151936,
               block=16, n_feat=5, tokens=3072, seqs=1, topk=32, anchors=512),
    "27b": dict(hidden=5120, layers=5, heads=24, kv_heads=4, head_dim=256, intermediate=17408, vocab=248320,
                block=32, n_feat=5, tokens=3072, seqs=1, topk=32, anchors=1024),
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=1000,
                 block=8, n_feat=3, tokens=512, seqs=1, topk=8, anchors=64),
}
ALPHA, LAMBDA, ROPE_THETA, EPS = 0.15, 0.1, 1e6, 1e-6


def gamma_of(B):
    return 7.0 if B <= 16 else 10.0


def model_flops(s, A, kv_mean):
    H, L, nq, nkv, hd, I, V, B, Fn, S = (s[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim",
                                                         "intermediate", "vocab", "block", "n_feat", "tokens"))
    qd, kvd, N, R = nq * hd, nkv * hd, A * B, A * (B - 1)
    fc = 4 * S * Fn * H * H
    ctx_kv = L * 6 * S * H * 2 * kvd
    blk = L * 6 * N * (H * qd + 2 * H * kvd + qd * H + 3 * H * I)
    attn = L * 12 * N * nq * hd * kv_mean
    head = 4 * R * H * V
    return fc + ctx_kv + blk + attn + head


# ----------------------------------------------------------------------------- timing helpers

class Clock:
    def __init__(self, dev):
        self.dev = dev

    def sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize()

    def time(self, fn):
        self.sync()
        if self.dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def gemm_rate(dev, n, reps=10):
    """FLOP/s of an n^3 matmul on random data (bf16 on the GPU, fp32 on the CPU), median of reps."""
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=dt, generator=g)
    b = torch.randn(n, n, device=dev, dtype=dt, generator=g)
    clk = Clock(dev)
    for _ in range(3):
        a @ b
    ts = [clk.time(lambda: a @ b) for _ in range(reps)]
    del a, b
    return 2.0 * n ** 3 / statistics.median(ts)


# ----------------------------------------------------------------------------- the drafter in PyTorch

def rmsnorm(x, w):
    dt = x.dtype
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)
    return w * y.to(dt)


def rope_cos_sin(pos, hd, dev):
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    f = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def rope(x, cos, sin):  # x [T, h, hd]
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return (x.float() * cos[:, None, :] + rot.float() * sin[:, None, :]).to(x.dtype)


class Problem:
    """Weights (fp32, trainable), the frozen bf16 embedding and lm_head, one batch and its anchors."""

    def __init__(self, s, dev, seed=0):
        self.s, self.dev = s, dev
        g = torch.Generator(device=dev).manual_seed(seed)
        H, L, nq, nkv, hd, I, V = (s[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab"))
        qd, kvd, Fn, S, B, k, A = nq * hd, nkv * hd, s["n_feat"], s["tokens"], s["block"], s["topk"], s["anchors"]

        def mat(o, i):
            return (torch.randn(o, i, device=dev, generator=g) * 0.02).requires_grad_(True)

        def one(n):
            return torch.ones(n, device=dev).requires_grad_(True)

        self.params = {"fc": mat(H, Fn * H), "hidden_norm": one(H), "norm": one(H)}
        self.layers = []
        for _ in range(L):
            self.layers.append({"in_norm": one(H), "wq": mat(qd, H), "wk": mat(kvd, H), "wv": mat(kvd, H), "wo": mat(H, qd),
                                "q_norm": one(hd), "k_norm": one(hd), "post_norm": one(H), "wg": mat(I, H),
                                "wu": mat(I, H), "wd": mat(H, I)})
        self.embed = (torch.randn(V, H, device=dev, generator=g) * 0.05).to(torch.bfloat16)
        self.lm_head = (torch.randn(V, H, device=dev, generator=g) * 0.05).to(torch.bfloat16)
        # the batch: one packed sequence set, features bf16, teacher top-k with its LSE
        lens = [S // s["seqs"]] * s["seqs"]
        lens[-1] += S - sum(lens)
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        self.features = torch.randn(S, Fn * H, device=dev, generator=g).to(torch.bfloat16)
        self.tokens = torch.randint(0, V - 1, (S,), device=dev, generator=g)
        mask = torch.ones(S, device=dev)
        start = torch.empty(S, dtype=torch.long, device=dev)
        end = torch.empty(S, dtype=torch.long, device=dev)
        for i in range(len(lens)):
            mask[cu[i]:cu[i] + 2] = 0
            start[cu[i]:cu[i + 1]] = cu[i]
            end[cu[i]:cu[i + 1]] = cu[i + 1]
        base = torch.randint(0, V, (S,), device=dev, generator=g)
        self.t_idx = (base[:, None] + torch.arange(k, device=dev)[None, :] * 7919) % V
        self.t_val = (10.0 - 0.25 * torch.arange(k, device=dev, dtype=torch.float32)).expand(S, k).contiguous()
        self.t_lse = torch.full((S,), 12.0, device=dev)
        self.pos_ctx = torch.arange(S, device=dev) - start
        # anchors: distinct valid positions (the next token inside the sequence and scored)
        valid = [p for i in range(len(lens)) for p in range(cu[i], cu[i + 1] - 1) if p + 1 >= cu[i] + 2]
        perm = torch.randperm(len(valid), generator=torch.Generator().manual_seed(seed))[:A]
        self.anchors = torch.tensor(sorted(valid[j] for j in perm.tolist()), device=dev)
        self.a_start = start[self.anchors]
        a_end = end[self.anchors]
        self.kv_mean = float((self.anchors - self.a_start + B).float().mean())
        # block inputs and the scored rows
        j = torch.arange(B, device=dev)
        mask_id = V - 1
        blk = torch.full((A, B), mask_id, device=dev, dtype=torch.long)
        blk[:, 0] = self.tokens[self.anchors]
        self.blk_tokens = blk.reshape(-1)
        self.pos_blk = (self.anchors[:, None] + j[None, :] - self.a_start[:, None]).reshape(-1)
        pos = self.anchors[:, None] + j[None, 1:]                       # [A, B-1] position of slot j
        inside = pos < a_end[:, None]
        tpos = torch.where(inside, pos - 1, a_end[:, None] - 1)           # the teacher's view of slot j
        self.label = torch.where(inside, self.tokens[pos.clamp_max(S - 1)], torch.zeros_like(pos)).reshape(-1)
        m = (inside & (mask[pos.clamp_max(S - 1)] > 0)).float()
        decay = torch.exp(-(j[1:].float() - 1) / gamma_of(B))
        self.w = (m * decay[None, :]).reshape(-1)
        self.r_tidx = self.t_idx[tpos.reshape(-1)]
        self.r_tval = self.t_val[tpos.reshape(-1)]
        self.r_tlse = self.t_lse[tpos.reshape(-1)]

    def all_params(self):
        out = list(self.params.values())
        for lay in self.layers:
            out += list(lay.values())
        return out

    def attention(self, q, kb, vb, Kc, Vc, chunk=32):
        """q [N, nq, hd], kb/vb [N, nkv, hd], Kc/Vc [S, nkv, hd] -> [N, nq*hd]."""
        s, dev = self.s, self.dev
        A, B, nq, nkv, hd, S = s["anchors"], s["block"], s["heads"], s["kv_heads"], s["head_dim"], s["tokens"]
        rep = nq // nkv
        outs = []
        cpos = torch.arange(S, device=dev)
        for i0 in range(0, A, chunk):
            i1 = min(A, i0 + chunk)
            c = i1 - i0
            qc = q[i0 * B:i1 * B].transpose(0, 1)[None]                       # [1, nq, cB, hd]
            k = torch.cat([Kc, kb[i0 * B:i1 * B]], 0).repeat_interleave(rep, 1).transpose(0, 1)[None]
            v = torch.cat([Vc, vb[i0 * B:i1 * B]], 0).repeat_interleave(rep, 1).transpose(0, 1)[None]
            a, st = self.anchors[i0:i1], self.a_start[i0:i1]
            ctx_ok = (cpos[None, :] >= st[:, None]) & (cpos[None, :] < a[:, None])   # [c, S]
            blk_ok = torch.eye(c, dtype=torch.bool, device=dev)                     # [c, c] own block
            m = torch.cat([ctx_ok[:, None, :].expand(c, B, S), blk_ok[:, None, :, None].expand(c, B, c, B).reshape(c, B, c * B)], -1)
            o = F.scaled_dot_product_attention(qc, k, v, attn_mask=m.reshape(c * B, S + c * B)[None, None],
                                               scale=1.0 / math.sqrt(hd))
            outs.append(o[0].transpose(0, 1).reshape(c * B, nq * hd))
        return torch.cat(outs, 0)

    def hidden(self):
        """The final normed hidden states of the scored rows, [R, H] (autocast bf16)."""
        s, p = self.s, self.params
        H, nq, nkv, hd, B, A = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["block"], s["anchors"]
        S, N = s["tokens"], A * B
        cos_c, sin_c = rope_cos_sin(self.pos_ctx, hd, self.dev)
        cos_b, sin_b = rope_cos_sin(self.pos_blk, hd, self.dev)
        ctx = rmsnorm(self.features @ p["fc"].T, p["hidden_norm"])
        h = self.embed[self.blk_tokens]
        for lay in self.layers:
            Kc = rope(rmsnorm((ctx @ lay["wk"].T).view(S, nkv, hd), lay["k_norm"]), cos_c, sin_c)
            Vc = (ctx @ lay["wv"].T).view(S, nkv, hd)
            u = rmsnorm(h, lay["in_norm"])
            q = rope(rmsnorm((u @ lay["wq"].T).view(N, nq, hd), lay["q_norm"]), cos_b, sin_b)
            kb = rope(rmsnorm((u @ lay["wk"].T).view(N, nkv, hd), lay["k_norm"]), cos_b, sin_b)
            vb = (u @ lay["wv"].T).view(N, nkv, hd)
            h = h + self.attention(q, kb, vb, Kc, Vc) @ lay["wo"].T
            u2 = rmsnorm(h, lay["post_norm"])
            h = h + (F.silu(u2 @ lay["wg"].T) * (u2 @ lay["wu"].T)) @ lay["wd"].T
        x = rmsnorm(h, p["norm"])
        return x.view(A, B, H)[:, 1:].reshape(A * (B - 1), H)

    def loss_rows(self, x, sl):
        logits = (x @ self.lm_head.T).float()
        ce, kl, cap, _ = slot_terms(logits, self.label[sl], self.r_tidx[sl], self.r_tval[sl], self.r_tlse[sl], 8)
        return (self.w[sl] * ((1 - ALPHA) * ce + ALPHA * kl + LAMBDA * cap)).sum()

    def step(self, method, row_chunk):
        for t in self.all_params():
            t.grad = None
        with torch.autocast(self.dev.type, dtype=torch.bfloat16):
            xs = self.hidden()
            R = xs.shape[0]
            if method == "torch-full":
                total = self.loss_rows(xs, slice(0, R))
            else:
                total = 0
                for r0 in range(0, R, row_chunk):
                    sl = slice(r0, min(R, r0 + row_chunk))
                    total = total + checkpoint(self.loss_rows, xs[sl], sl, use_reentrant=False)
        total.backward()
        return float(total.detach())


def run_torch(s, method, dev, repeat, row_chunk, seed):
    clk = Clock(dev)
    res = {"method": method}
    prob = None
    try:
        prob = Problem(s, dev, seed)
        res["kv_mean"] = prob.kv_mean
        base = torch.cuda.memory_allocated() if dev.type == "cuda" else 0
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        loss = prob.step(method, row_chunk)  # warm-up
        times = []
        for _ in range(repeat):
            times.append(clk.time(lambda: prob.step(method, row_chunk)))
        res.update(status="ok", times_s=[round(t, 5) for t in times], median_s=statistics.median(times),
                   loss=loss)
        if dev.type == "cuda":
            res["peak_bytes"] = torch.cuda.max_memory_allocated()
            res["peak_over_start_bytes"] = torch.cuda.max_memory_allocated() - base
    except torch.cuda.OutOfMemoryError as e:
        res.update(status="oom", error=str(e).split("\n")[0][:200])
    except RuntimeError as e:
        if "out of memory" in str(e):
            res.update(status="oom", error=str(e).split("\n")[0][:200])
        else:
            raise
    finally:
        del prob
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return res


def run_ours(s, size, dev, tool, repeat, ours_json):
    res = {"method": "ours"}
    path = ours_json
    if not path:
        if not tool or not os.path.exists(tool):
            res.update(status="skipped", error=f"no dflash_tool at {tool}")
            return res
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        A = s["anchors"]
        cmd = [tool, "mem-check", "--device", "cuda" if dev.type == "cuda" else "cpu", "--anchors", str(A),
               "--budget-chunk", str(A), "--time-anchors", str(A), "--repeat", str(repeat), "--json", path, "--untied", "1"]
        for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "block", "n_feat",
                  "tokens", "seqs", "topk"):
            cmd += ["--" + k.replace("_", "-"), str(s[k])]
        print("  " + " ".join(cmd), flush=True)
        env = dict(os.environ)
        if dev.type == "cpu":
            env.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print("  " + p.stdout.strip().replace("\n", "\n  "), flush=True)
        if p.returncode != 0:
            res.update(status="error", error=p.stdout.strip().splitlines()[-1][:300] if p.stdout.strip() else f"exit {p.returncode}")
            return res
    d = json.load(open(path))
    t = d.get("timing")
    if not t:
        res.update(status="error", error="mem-check ran no timing")
        return res
    if t["anchors"] != s["anchors"] or any(d["shape"][k] != s[k] for k in ("hidden", "layers", "vocab", "block", "tokens")):
        res.update(status="error", error="the mem-check JSON is of another shape")
        return res
    res.update(status="ok", times_s=t["times_s"], median_s=t["median_s"], kv_mean=t["kv_mean"],
               peak_bytes=t["arena_peak"], device_used_bytes=t["device_used"] if t["device_used"] >= 0 else None,
               chunk=t["chunk"], loss_mode=t["loss_mode"], init_s=d.get("init_s"), from_json=bool(ours_json))
    return res


def gib(r):
    return f"{r['peak_gib']:.2f}" if r.get("peak_gib") is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="8b,27b")
    ap.add_argument("--tiny", action="store_true", help="toy sizes on the CPU: checks the script")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--methods", default="ours,torch-full,torch-chunked")
    ap.add_argument("--row-chunk-anchors", type=int, default=32, help="torch-chunked: anchors per loss chunk")
    ap.add_argument("--dflash-tool", default=os.path.join(HERE, "..", "build-gpu", "dflash_tool"))
    ap.add_argument("--ours-json", action="append", default=[], help="SIZE=FILE: ours from an earlier mem-check --json")
    ap.add_argument("--gemm", type=int, default=None, help="matmul size of the GEMM rate (8192 on the GPU)")
    ap.add_argument("--time-left", type=float, default=None, help="seconds: skip a size that would not fit")
    ap.add_argument("--json", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t_start = time.time()
    if args.tiny:
        dev = torch.device(args.device or "cpu")
        sizes = ["tiny"]
    else:
        dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        sizes = [x for x in args.sizes.split(",") if x]
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_student.py: --device cuda but torch sees no GPU")
    ours_json = dict(x.split("=", 1) for x in args.ours_json)
    methods = [m for m in args.methods.split(",") if m]
    gpu = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu (%d threads)" % torch.get_num_threads()
    n = args.gemm or (8192 if dev.type == "cuda" else 512)
    rate = gemm_rate(dev, n)
    print(f"gpu_student: {gpu}, torch {torch.__version__}; {'bf16' if dev.type == 'cuda' else 'fp32'} GEMM "
          f"{n}^3: {rate / 1e12:.3g} TFLOP/s (the MFU denominator)", flush=True)
    doc = {"bench": "bench/gpu_student.py", "gpu": gpu, "torch": torch.__version__, "device": dev.type,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gemm_n": n, "gemm_tflops": rate / 1e12,
           "sizes": []}
    # rough seconds each size needs (ours' host-side weight init dominates), to honour --time-left
    need = {"8b": 100, "27b": 200, "tiny": 10}
    for size in sizes:
        s = dict(SIZES[size])
        entry = {"size": size, "shape": s, "methods": []}
        doc["sizes"].append(entry)
        left = None if args.time_left is None else args.time_left - (time.time() - t_start)
        if left is not None and left < need.get(size, 100):
            entry["skipped"] = f"{left:.0f} s left, about {need.get(size, 100)} s needed"
            print(f"\n{size}: skipped ({entry['skipped']})", flush=True)
            continue
        A, B = s["anchors"], s["block"]
        row_chunk = args.row_chunk_anchors * (B - 1)
        print(f"\n{size}: {s}", flush=True)
        for m in methods:
            t0 = time.time()
            if m == "ours":
                r = run_ours(s, size, dev, args.dflash_tool, args.repeat, ours_json.get(size))
            else:
                r = run_torch(s, m, dev, args.repeat, row_chunk, args.seed)
            r["size"] = size
            r["wall_s"] = round(time.time() - t0, 1)
            if r.get("status") == "ok":
                fl = model_flops(s, A, r["kv_mean"])
                r["model_flops"] = fl
                r["block_tokens_per_s"] = A * B / r["median_s"]
                r["mfu"] = fl / r["median_s"] / rate
                if r.get("peak_bytes") is not None:
                    r["peak_gib"] = r["peak_bytes"] / 2 ** 30
            entry["methods"].append(r)
            if r.get("status") == "ok":
                print(f"  {m:14s} {r['median_s']:.4f} s/step, {r['block_tokens_per_s']:.0f} block tokens/s, "
                      f"peak {gib(r)} GiB, MFU {100 * r['mfu']:.1f} %, loss {r.get('loss', '-')}", flush=True)
            else:
                print(f"  {m:14s} {r.get('status')}: {r.get('error', '')}", flush=True)
        if args.json:  # after each size: a later failure keeps what was measured
            json.dump(doc, open(args.json, "w"), indent=1)
    print(f"\n| size | method | step s | block tokens/s | peak GiB | MFU | vs torch-full |")
    print("|---|---|---|---|---|---|---|")
    for e in doc["sizes"]:
        full = next((m for m in e["methods"] if m["method"] == "torch-full" and m.get("status") == "ok"), None)
        if "skipped" in e:
            print(f"| {e['size']} | - | skipped: {e['skipped']} | | | | |")
        for m in e["methods"]:
            if m.get("status") != "ok":
                print(f"| {e['size']} | {m['method']} | {m.get('status')} | | | | |")
                continue
            vs = f"{full['median_s'] / m['median_s']:.2f}x" if full else ""
            print(f"| {e['size']} | {m['method']} | {m['median_s']:.4f} | {m['block_tokens_per_s']:.0f} | "
                  f"{gib(m)} | {100 * m['mfu']:.1f} % | {vs} |")
    if args.json:
        json.dump(doc, open(args.json, "w"), indent=1)
    ok = all(m.get("status") in ("ok", "oom") for e in doc["sizes"] for m in e["methods"] if m["method"] != "ours") and \
        all(m.get("status") == "ok" for e in doc["sizes"] for m in e["methods"] if m["method"] == "ours")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
