"""make_muon_fixture.py: one Muon step on a few matrices, computed by PyTorch, for
tests/unit/test_optim_muon.c.

Muon as src/student/train/optim.h states it (Keller Jordan's, Moonlight's scale), written here in
torch, float32 on the CPU: per matrix W [R, C] with gradient g and momentum m,
  m' = mu m + g;  u = g + mu m' (Nesterov);  X = u / (||u||_F + 1e-7), transposed when R > C;
  5 times: A = X X^T, B = b A + c A A, X = a X + B X  with (a, b, c) = (3.4445, -4.7750, 2.0315);
  W' = W (1 - lr wd) - lr 0.2 sqrt(max(R, C)) X.
Shapes 7x13 (wide), 13x7 (tall: the transposed iteration), 16x16 and 24x40; a nonzero starting
momentum; lr 0.01, wd 0.1, mu 0.95 (numbers not tuned to anything).

It also records, in the log, how far the float32 step is from the same step in float64 (what the C
test's tolerance rests on), and how far torch.optim.Muon (adjust_lr_fn "match_rms_adamw", the same
weight decay) lands from it: torch keeps its momentum as an average (m = mu m + (1 - mu) g), which
the normalisation cancels, and runs the iteration in bfloat16, so it agrees to bf16 precision only.

Writes data/muon.safetensors (per case i: w<i>, g<i>, m<i> the inputs; w<i>_out, m<i>_out torch's
step; "hyper" = [lr, wd, mu]) and data/muon.log.
Run: /work/venv/bin/python tests/reference/make_muon_fixture.py
"""
import os
import sys

import safetensors.torch
import torch

A, B, C = 3.4445, -4.7750, 2.0315
LR, WD, MU = 0.01, 0.1, 0.95
SHAPES = [(7, 13), (13, 7), (16, 16), (24, 40)]
here = os.path.dirname(os.path.abspath(__file__))


def muon_step(w, g, m, lr=LR, wd=WD, mu=MU):
    m = mu * m + g
    u = g + mu * m
    x = u
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(5):
        a = x @ x.T
        b = B * a + C * a @ a
        x = A * x + b @ x
    if tall:
        x = x.T
    w = w * (1 - lr * wd) - lr * 0.2 * max(w.shape) ** 0.5 * x
    return w, m


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


torch.manual_seed(4242)
out = {"hyper": torch.tensor([LR, WD, MU], dtype=torch.float32)}
log = [f"python {sys.version.split()[0]}, torch {torch.__version__}",
       f"Muon (optim.h's formula) in torch float32 on the CPU; lr {LR}, wd {WD}, mu {MU}"]
for i, (r, c) in enumerate(SHAPES):
    w = torch.randn(r, c) * 0.02
    g = torch.randn(r, c) * 0.3
    m = torch.randn(r, c) * 0.1
    w1, m1 = muon_step(w, g, m)
    w64, _ = muon_step(w.double(), g.double(), m.double())
    d32, d64 = w1 - w, w64 - w.double()
    # torch.optim.Muon on the same matrix: its buffer is (1 - mu) times ours
    p = torch.nn.Parameter(w.clone())
    opt = torch.optim.Muon([p], lr=LR, weight_decay=WD, momentum=MU, nesterov=True,
                           adjust_lr_fn="match_rms_adamw")
    opt.state[p]["momentum_buffer"] = (1 - MU) * m.clone()
    p.grad = g.clone()
    opt.step()
    dt = p.detach() - w
    log.append(f"case {i}: W [{r}, {c}]  max|update| {d32.abs().max().item():.6g}  "
               f"float32 vs float64 update: max rel {rel(d32.double(), d64):.3g}  "
               f"torch.optim.Muon (bf16 NS) vs float32 update: max rel {rel(dt, d32):.3g}")
    out.update({f"w{i}": w, f"g{i}": g, f"m{i}": m, f"w{i}_out": w1.contiguous(), f"m{i}_out": m1})
safetensors.torch.save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(here, "data", "muon.safetensors"))
with open(os.path.join(here, "data", "muon.log"), "w") as f:
    f.write("\n".join(log) + "\n")
print("\n".join(log))
