#!/usr/bin/env python3
"""merge_sets.py OUT.h5 DIR | OUT.h5 FIRST.h5 MORE.h5...: every sample of several training sets in one set.

DIR: the sets DIR/*.h5 in file-name order, no /heldout: the 64 other-source requests (WORKDIR/prompts-eval,
a set per category) as one set, for tools/vllm_check.py --pick all and `--mode eval`.
FIRST.h5 MORE.h5...: FIRST's samples first, then each further set's, in the order given; FIRST's /heldout is
kept as it is (its samples keep their indices), the others' samples are all training samples: a set grown by
more replies of the same target with the same held-out prompts (the data-volume row of bench/RESULTS.md).

Needs h5py (run.sh's venv); writes with tools/spec_decode.py's write_subset. The root attributes are the first
set's, plus "merged" (the sources)."""
import glob, os, sys
import h5py, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from spec_decode import write_subset

if len(sys.argv) < 3:
    sys.exit(__doc__.split("\n")[0].replace('"""', "usage: "))
out = sys.argv[1]
grow = len(sys.argv) > 3 or not os.path.isdir(sys.argv[2])
srcs = sys.argv[2:] if grow else sorted(glob.glob(sys.argv[2] + "/*.h5"))
if not srcs:
    sys.exit(f"error: merge_sets: {sys.argv[2]}: no .h5 set in it")
seqs, masks, frs, extra, attrs = [], [], [], {}, None
for s in srcs:
    try:
        f = h5py.File(s, "r")
    except OSError as e:
        sys.exit(f"error: merge_sets: {s}: cannot open as HDF5 ({e})")
    with f:
        o = f["/offsets"][:]; t = f["/tokens"][:]; m = f["/loss_mask"][:]; frs.append(f["/finish_reason"][:])
        if attrs is None:
            attrs = dict(f.attrs)
            if grow and "heldout" in f:
                extra["heldout"] = f["/heldout"][:].astype(np.int64)
        if attrs.get("vocab_size") != f.attrs.get("vocab_size"):
            sys.exit(f"error: merge_sets: {s}: vocab_size {f.attrs.get('vocab_size')} differs from the first set's")
        seqs += [t[o[i]:o[i + 1]] for i in range(len(o) - 1)]; masks += [m[o[i]:o[i + 1]] for i in range(len(o) - 1)]
attrs["merged"] = ",".join(srcs)
extra["finish_reason"] = np.concatenate(frs).astype(np.uint8)
write_subset(out, seqs, masks, attrs, extra)
print(len(seqs), "samples,", sum(len(x) for x in seqs), "tokens from", len(srcs), "sets;",
      len(extra.get("heldout", [])), "held out (the first set's /heldout)")
