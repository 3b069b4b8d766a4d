#!/usr/bin/env python3
"""half_set.py IN.h5 OUT.h5: the held-out samples of a training set and the first half of its training samples,
in order, with /heldout renumbered (the data-volume row of the recipe sweep: the same held-out prompts, half
the replies). Needs h5py (run.sh's venv)."""
import h5py, numpy as np, sys
src, dst = sys.argv[1], sys.argv[2]
with h5py.File(src) as f:
    off = f["/offsets"][:]; tok = f["/tokens"][:]; lm = f["/loss_mask"][:]; fr = f["/finish_reason"][:]
    ho = set(int(i) for i in f["/heldout"][:]); attrs = dict(f.attrs)
n = len(off) - 1
train = [i for i in range(n) if i not in ho]
keep = sorted(ho | set(train[: len(train) // 2]))
new_off = [0]; toks = []; lms = []
for i in keep:
    toks.append(tok[off[i]:off[i+1]]); lms.append(lm[off[i]:off[i+1]]); new_off.append(new_off[-1] + off[i+1] - off[i])
with h5py.File(dst, "w") as g:
    for k, v in attrs.items(): g.attrs[k] = v
    g.attrs["subset"] = f"held-out and the first half of the training samples of {src}"
    g.create_dataset("/offsets", data=np.array(new_off, dtype=np.int64))
    g.create_dataset("/tokens", data=np.concatenate(toks).astype(np.int32))
    g.create_dataset("/loss_mask", data=np.concatenate(lms).astype(np.uint8))
    g.create_dataset("/finish_reason", data=fr[keep].astype(np.uint8))
    g.create_dataset("/heldout", data=np.array([keep.index(i) for i in sorted(ho)], dtype=np.int64))
print(len(keep), "samples,", new_off[-1], "tokens;", len(train) // 2, "training of", len(train))
