#!/usr/bin/env python3
"""half_set.py IN.h5 OUT.h5: the held-out samples of a training set and the first half of its training samples,
in order, with /heldout renumbered (the data-volume row of the recipe sweep: the same held-out prompts, half
the replies). Needs h5py (run.sh's venv); writes with tools/spec_decode.py's write_subset."""
import os, sys
import h5py, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from spec_decode import write_subset

src, dst = sys.argv[1], sys.argv[2]
with h5py.File(src) as f:
    off = f["/offsets"][:]; tok = f["/tokens"][:]; lm = f["/loss_mask"][:]; fr = f["/finish_reason"][:]
    ho = set(int(i) for i in f["/heldout"][:]); attrs = dict(f.attrs)
n = len(off) - 1
train = [i for i in range(n) if i not in ho]
keep = sorted(ho | set(train[: len(train) // 2]))
attrs["subset"] = f"held-out and the first half of the training samples of {src}"
write_subset(dst, [tok[off[i]:off[i + 1]] for i in keep], [lm[off[i]:off[i + 1]] for i in keep], attrs,
             {"finish_reason": fr[keep].astype(np.uint8),
              "heldout": np.array([keep.index(i) for i in sorted(ho)], dtype=np.int64)})
print(len(keep), "samples,", int(sum(off[i + 1] - off[i] for i in keep)), "tokens;", len(train) // 2, "training of", len(train))
