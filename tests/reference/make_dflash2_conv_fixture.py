"""make_dflash2_conv_fixture.py: the DFlash2 drafter's GroupedDynamicCausalConv, as the dflash
package computes it, with PyTorch autograd gradients, for tests/unit/test_dflash2_conv.c.

One module of the package (dflash.model.GroupedDynamicCausalConv, hidden 60, kernel 3, group 4:
15 groups; numbers not tuned to anything) on C = 2 blocks of B = 5 slots (the package's batch
dimension holds the blocks, as a decoding call does). Around it a fixed linear map M stands in for
the attention / MLP: prepared, dyn = conv.prepare(x); y = prepared @ M; z = conv.finish(y, dyn);
loss = sum(z * Gz). base_kernel is created by the package with torch.empty, so it is filled here
with normal values; kernel_projection likewise. float64 throughout (the C side runs fp32).

Writes data/dflash2_conv.safetensors (inputs x, M, Gz, the module's base_kernel and
kernel_projection.weight under their package names, outputs prepared, z, and the gradients
dx, d_base_kernel, d_kernel_projection) and data/dflash2_conv.log.
Run: /work/venv/bin/python tests/reference/make_dflash2_conv_fixture.py
"""
import os
import sys

import dflash
import safetensors.torch
import torch
from dflash.model import GroupedDynamicCausalConv

H, K, G, C, B = 60, 3, 4, 2, 5
here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(2801)
conv = GroupedDynamicCausalConv(H, K, G).double()
with torch.no_grad():
    conv.base_kernel.normal_(0.0, 0.5)
    conv.kernel_projection.weight.normal_(0.0, 0.1)
x = torch.randn(C, B, H, dtype=torch.float64, requires_grad=True)
M = torch.randn(H, H, dtype=torch.float64) / H**0.5
Gz = torch.randn(C, B, H, dtype=torch.float64)

prepared, dyn = conv.prepare(x)
y = prepared @ M
z = conv.finish(y, dyn)
(z * Gz).sum().backward()

out = {
    "x": x.detach(), "M": M, "Gz": Gz,
    "base_kernel": conv.base_kernel.detach(),
    "kernel_projection.weight": conv.kernel_projection.weight.detach(),
    "prepared": prepared.detach(), "z": z.detach(),
    "dx": x.grad, "d_base_kernel": conv.base_kernel.grad,
    "d_kernel_projection.weight": conv.kernel_projection.weight.grad,
}
out = {k: v.float().contiguous() for k, v in out.items()}
safetensors.torch.save_file(out, os.path.join(here, "data", "dflash2_conv.safetensors"))
with open(os.path.join(here, "data", "dflash2_conv.log"), "w") as f:
    f.write(f"python {sys.version.split()[0]}, torch {torch.__version__}, dflash {getattr(dflash, '__version__', '?')}\n")
    f.write(f"GroupedDynamicCausalConv(hidden {H}, kernel {K}, group {G}); {C} blocks of {B} slots; float64, stored fp32\n")
    for k, v in out.items():
        f.write(f"{k:28s} {list(v.shape)}  max|.| {v.abs().max().item():.6g}\n")
print("wrote data/dflash2_conv.safetensors")
