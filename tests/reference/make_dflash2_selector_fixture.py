"""make_dflash2_selector_fixture.py: the DFlash2 drafter's CandidateSelector, as the dflash package
computes it, with the training term of docs/student.md ("The candidate selector") and PyTorch
autograd gradients, for tests/unit/test_dflash2_selector.c.

The package's module (dflash.model.CandidateSelector built from a DFlash2 config: vocab 37,
hidden 21 (divisible by the conv group 3), selector_top_k 5, selector_rank 7; numbers not tuned to
anything) on C = 2 anchors of B - 1 = 4 scored slots. x [C, 4, H] stands for the slots' final
hidden states, lm_head [V, H] is frozen, logits = x lm_head^T (so x's gradient has the unary path).
  - greedy: CandidateSelector.select(x, logits, anchor_ids, temperature 0), the package's own
    decoding walk (prev = the chosen token).
  - training (ours, SPEC 3.1): candidates = the top-5 of the logits (sorted, as our loss keeps them),
    prev = the label of the slot before (the anchor's token for slot 1), scores
    s = logit_c + <pred[prev] * proj(x), succ[c]> through the module's own submodules,
    loss = sum over slots whose label is a candidate of scale * (-log softmax(s)_label); the labels
    of two slots are no candidate (they contribute 0). scale = per-slot weight * selector_weight.
Codebooks and projection are filled with normal values (the package's init, 0.02, would make the
bilinear term vanish next to the logits). float64 throughout (the C side runs fp32).

Writes data/dflash2_selector.safetensors and data/dflash2_selector.log.
Run: /work/venv/bin/python tests/reference/make_dflash2_selector_fixture.py
"""
import os
import sys

import dflash
import safetensors.torch
import torch
from dflash.model import CandidateSelector
from transformers import Qwen3Config

V, H, R, K, C, S = 37, 21, 7, 5, 2, 4
here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(2802)
cfg = Qwen3Config(vocab_size=V, hidden_size=H, num_hidden_layers=1, num_attention_heads=3, num_key_value_heads=1,
                  head_dim=8, dflash_config={"conv_kernel_size": 3, "conv_group_size": 3, "selector_top_k": K,
                                             "selector_rank": R, "block_size": S + 1, "mask_token_id": V - 1})
sel = CandidateSelector(cfg).double()
with torch.no_grad():
    sel.predecessor_codebook.weight.normal_(0.0, 0.8)
    sel.successor_codebook.weight.normal_(0.0, 0.8)
    sel.hidden_projection.weight.normal_(0.0, 0.4)
lm_head = torch.randn(V, H, dtype=torch.float64) * 0.5
x = torch.randn(C, S, H, dtype=torch.float64, requires_grad=True)
anchor = torch.tensor([4, 29])
weight = torch.tensor([[1.0, 0.9, 0.8, 0.7], [1.0, 0.9, 0.0, 0.7]], dtype=torch.float64) # one unscored slot
selector_weight = 1.3

logits = x @ lm_head.T                                       # [C, S, V]
cand = torch.topk(logits.detach(), K, dim=-1, sorted=True).indices  # [C, S, K]
# labels: a candidate (at varying ranks) for most slots, no candidate for two
label = torch.empty(C, S, dtype=torch.long)
for i in range(C):
    for j in range(S):
        label[i, j] = cand[i, j, (i + 2 * j) % K]
outside = [t for t in range(V) if t not in cand[0, 1].tolist()][3]
label[0, 1] = outside
label[1, 3] = [t for t in range(V) if t not in cand[1, 3].tolist()][0]

prev = torch.cat([anchor[:, None], label[:, :-1]], dim=1)   # teacher forcing
unary = logits.gather(-1, cand)
z = sel.hidden_projection(x)                                 # [C, S, R]
scores = unary + torch.einsum("csr,cskr->csk", sel.predecessor_codebook(prev) * z, sel.successor_codebook(cand))
hit = (cand == label[..., None])
loss = torch.zeros((), dtype=torch.float64)
for i in range(C):
    for j in range(S):
        if hit[i, j].any():
            idx = int(hit[i, j].nonzero()[0, 0])
            loss = loss + selector_weight * weight[i, j] * (torch.logsumexp(scores[i, j], 0) - scores[i, j, idx])
loss.backward()

with torch.no_grad():
    path, _, _ = sel.select(x, logits, anchor, 0.0)          # the package's greedy walk

out = {
    "x": x.detach(), "lm_head": lm_head, "weight": weight,
    "candidate_selector.predecessor_codebook": sel.predecessor_codebook.weight.detach(),
    "candidate_selector.successor_codebook": sel.successor_codebook.weight.detach(),
    "candidate_selector.hidden_projection.weight": sel.hidden_projection.weight.detach(),
    "scores": scores.detach(), "loss": loss.detach().reshape(1),
    "d_x": x.grad, "d_predecessor_codebook": sel.predecessor_codebook.weight.grad,
    "d_successor_codebook": sel.successor_codebook.weight.grad,
    "d_hidden_projection": sel.hidden_projection.weight.grad,
}
out = {k: v.float().contiguous() for k, v in out.items()}
ints = {"anchor": anchor, "label": label, "candidates": cand, "greedy": path}
out.update({k: v.to(torch.int32).contiguous() for k, v in ints.items()})
safetensors.torch.save_file(out, os.path.join(here, "data", "dflash2_selector.safetensors"))
with open(os.path.join(here, "data", "dflash2_selector.log"), "w") as f:
    f.write(f"python {sys.version.split()[0]}, torch {torch.__version__}, dflash {getattr(dflash, '__version__', '?')}\n")
    f.write(f"CandidateSelector(vocab {V}, hidden {H}, top_k {K}, rank {R}); {C} anchors x {S} slots; "
            f"selector_weight {selector_weight}; float64, stored fp32\n")
    f.write(f"hits per slot {hit.any(-1).int().tolist()}, loss {loss.item():.9g}\n")
    f.write(f"greedy path {path.tolist()}\n")
    for k, v in out.items():
        f.write(f"{k:44s} {list(v.shape)}  max|.| {v.abs().max().item():.6g}\n")
print("wrote data/dflash2_selector.safetensors")
