#!/usr/bin/env python3
"""bench_loss_torch.py: the drafter loss (SPEC §4) in PyTorch on the CPU, one method per process.

  python3 bench/loss/bench_loss_torch.py --method full|chunked --n N --vocab V --hidden H
          [--k 32] [--topk 8] [--slots 15] [--row-chunk 240] [--repeat 2] [--threads 2]

  full     the usual way: logits = x @ W^T over all rows ([N, V]), the loss with autograd,
           loss.backward() for dx
  chunked  the usual workaround: rows in chunks of --row-chunk, each chunk's loss under
           torch.utils.checkpoint (its [rows, V] tensors are dropped after the forward and
           recomputed in the backward), one backward over the sum

Same problem as bench_loss.c (inputs are a hash of the index), same outputs: per-row terms,
the student's top-K, dx. Prints one JSON line like bench_loss; peak_extra_bytes is the peak
resident memory during the loss minus the resident memory before it (/proc/self/clear_refs + VmHWM).
Needs the pyenv python with torch; not part of the tests.
"""
import argparse, json, time

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix(z):  # splitmix64's finaliser on a uint64 array (wrapping arithmetic)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def unif(seed, count, amp):  # bench_loss.c unif(seed, i, amp) for i < count, as float32
    out = np.empty(count, np.float32)
    step = 1 << 22
    for i0 in range(0, count, step):
        i = np.arange(i0, min(count, i0 + step), dtype=np.uint64)
        z = mix((np.uint64(seed) << np.uint64(32)) + i)
        out[i0:i0 + len(i)] = (((z >> np.uint64(40)).astype(np.float64) / 16777216.0 * 2.0 - 1.0) * amp)
    return out


def make_problem(n, V, H, k):
    x = torch.from_numpy(unif(1, n * H, 1.0).reshape(n, H))
    W = torch.from_numpy(unif(2, V * H, 0.05).reshape(V, H))
    r = np.arange(n, dtype=np.uint64)
    label = torch.from_numpy((mix((np.uint64(3) << np.uint64(32)) + r) % np.uint64(V)).astype(np.int64))
    base = mix((np.uint64(4) << np.uint64(32)) + r) % np.uint64(V)
    a = np.arange(k, dtype=np.uint64)
    t_idx = torch.from_numpy(((base[:, None] + a[None, :] * np.uint64(7919)) % np.uint64(V)).astype(np.int64))
    t_val = (10.0 - 0.25 * torch.arange(k, dtype=torch.float64)).float().expand(n, k).contiguous()
    t_lse = torch.full((n,), 12.0)
    mask = torch.tensor([0.0 if i % 8 == 7 else 1.0 for i in range(n)])
    return x, W, label, t_idx, t_val, t_lse, mask


def slot_terms(logits, label, t_idx, t_val, t_lse, K):
    """CE, KL (top-k + tail bucket), CAP per row, and the student's top-K log-probs (no grad)."""
    lse = torch.logsumexp(logits, 1)
    ce = lse - logits.gather(1, label[:, None])[:, 0]
    logp = t_val - t_lse[:, None]
    p = logp.exp()
    kl_top = (p * (logp - (logits.gather(1, t_idx) - lse[:, None]))).sum(1)
    tail_lse = torch.logsumexp(logits.scatter(1, t_idx, float("-inf")), 1)  # log sum over j not in I
    p_r = (1 - p.sum(1)).clamp_min(0)
    kl_tail = torch.where(p_r > 0, p_r * (p_r.clamp_min(1e-30).log() - (tail_lse - lse)), torch.zeros_like(p_r))
    g = logits.detach().argmax(1)
    cap = torch.where(g != label, (logits.gather(1, g[:, None])[:, 0] - lse).exp(), torch.zeros_like(lse))
    with torch.no_grad():
        top = torch.topk(logits, K, 1) if K else None
        top_logp = (top.values - lse[:, None]) if K else None
    return ce, kl_tail + kl_top, cap, top_logp


def chunk_loss(x, W, label, t_idx, t_val, t_lse, w, alpha, lam, K):
    ce, kl, cap, _ = slot_terms(x @ W.T, label, t_idx, t_val, t_lse, K)
    return (w * ((1 - alpha) * ce + alpha * kl + lam * cap)).sum()


def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=["full", "chunked"], required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--slots", type=int, default=15)
    ap.add_argument("--row-chunk", type=int, default=240)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n, V, H, k, K, S = args.n, args.vocab, args.hidden, args.k, args.topk, args.slots
    alpha, lam, gamma = 0.15, 0.1, 7.0
    x0, W, label, t_idx, t_val, t_lse, mask = make_problem(n, V, H, k)
    slot = torch.arange(n) % S + 1
    w = mask * torch.exp(-(slot - 1).double() / gamma).float()

    base_kb = status_kb("VmRSS")
    open("/proc/self/clear_refs", "w").write("5")
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        x = x0.clone().requires_grad_(True)
        if args.method == "full":
            total = chunk_loss(x, W, label, t_idx, t_val, t_lse, w, alpha, lam, K)
        else:
            total = 0
            for r0 in range(0, n, args.row_chunk):
                sl = slice(r0, min(n, r0 + args.row_chunk))
                total = total + checkpoint(chunk_loss, x[sl], W, label[sl], t_idx[sl], t_val[sl], t_lse[sl], w[sl],
                                           alpha, lam, K, use_reentrant=False)
        total.backward()
        times.append(time.perf_counter() - t0)
        dx = x.grad
    peak_kb = status_kb("VmHWM")
    print(json.dumps({"method": "torch-" + args.method, "n": n, "vocab": V, "hidden": H, "k": k, "topk": K,
                      "row_chunk": args.row_chunk if args.method == "chunked" else 0, "tile": 0,
                      "threads": torch.get_num_threads(), "times_s": [round(t, 4) for t in times],
                      "peak_extra_bytes": (peak_kb - base_kb) * 1024, "workspace_bytes": 0,
                      "loss": float(total), "sum_w": float(w.sum()), "dx_abs_sum": float(dx.abs().sum()),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
