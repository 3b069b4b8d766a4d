#!/usr/bin/env python3
"""merge_sets.py OUT.h5 DIR: every sample of the training sets DIR/*.h5 in one set (in file-name order), no
/heldout: the 64 other-source requests (WORKDIR/prompts-eval, a set per category) as one set, for
tools/vllm_check.py --pick all and `--mode eval`. Needs h5py (run.sh's venv); writes with
tools/spec_decode.py's write_subset."""
import glob, os, sys
import h5py, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from spec_decode import write_subset

out = sys.argv[1]; srcs = sorted(glob.glob(sys.argv[2] + "/*.h5"))
seqs, masks, frs = [], [], []
for s in srcs:
    with h5py.File(s) as f:
        o = f["/offsets"][:]; t = f["/tokens"][:]; m = f["/loss_mask"][:]; frs.append(f["/finish_reason"][:])
        seqs += [t[o[i]:o[i + 1]] for i in range(len(o) - 1)]; masks += [m[o[i]:o[i + 1]] for i in range(len(o) - 1)]
        attrs = dict(f.attrs)
attrs["merged"] = ",".join(srcs)
write_subset(out, seqs, masks, attrs, {"finish_reason": np.concatenate(frs).astype(np.uint8)})
print(len(seqs), "samples,", sum(len(x) for x in seqs), "tokens from", len(srcs), "sets")
