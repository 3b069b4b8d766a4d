#!/usr/bin/env python3
"""merge_sets.py OUT.h5 DIR: every sample of the training sets DIR/*.h5 in one set (in file-name order), no
/heldout: the 64 other-source requests (WORKDIR/prompts-eval, a set per category) as one set, for
tools/vllm_check.py --pick all and `--mode eval`. Needs h5py (run.sh's venv)."""
import h5py, numpy as np, sys, glob
out = sys.argv[1]; srcs = sorted(glob.glob(sys.argv[2] + "/*.h5"))
offs = [0]; toks = []; lms = []; frs = []
for s in srcs:
    with h5py.File(s) as f:
        o = f["/offsets"][:]; toks.append(f["/tokens"][:]); lms.append(f["/loss_mask"][:]); frs.append(f["/finish_reason"][:])
        offs += [offs[-1] + int(x) for x in o[1:]]
        attrs = dict(f.attrs)
with h5py.File(out, "w") as g:
    for k, v in attrs.items(): g.attrs[k] = v
    g.attrs["merged"] = ",".join(srcs)
    g.create_dataset("/offsets", data=np.array(offs, dtype=np.int64))
    g.create_dataset("/tokens", data=np.concatenate(toks).astype(np.int32))
    g.create_dataset("/loss_mask", data=np.concatenate(lms).astype(np.uint8))
    g.create_dataset("/finish_reason", data=np.concatenate(frs).astype(np.uint8))
print(len(offs) - 1, "samples,", offs[-1], "tokens from", len(srcs), "sets")
