#!/usr/bin/python3
# make_bad_trainset.py: training sets with defects, derived from a good one (the layout of
# src/common/data/trainset.h), for tests/cli/test_bad_input.sh. Debian's python3-h5py/numpy only.
#
#   make_bad_trainset.py GOOD.h5 OUT.h5 KIND [N]
#
# KIND:
#   mixed       the good samples, then N with an id outside [0, vocab_size), N with an id of -1 and
#               N whose offsets decrease (end before start; each inserted after one of the first N
#               good samples, whose successor then starts 3 tokens early): the good ones stay usable
#               and the offsets still run from 0 to the length of /tokens
#   all-bad-ids every sample has an id equal to vocab_size: nothing is usable
#   no-tokens   /offsets, /loss_mask and the attributes, but no /tokens dataset
#   offsets-out the last offset points past the end of /tokens (the whole file is unusable)
import sys

import h5py
import numpy as np

good, out, kind = sys.argv[1], sys.argv[2], sys.argv[3]
n_bad = int(sys.argv[4]) if len(sys.argv) > 4 else 3

with h5py.File(good, "r") as f:
    tokens = f["tokens"][...].astype(np.int32)
    mask = f["loss_mask"][...].astype(np.uint8)
    offsets = f["offsets"][...].astype(np.int64)
    attrs = {k: f.attrs[k] for k in f.attrs}
vocab = int(attrs["vocab_size"])
samples = [(tokens[a:b].copy(), mask[a:b].copy()) for a, b in zip(offsets[:-1], offsets[1:])]
n_broken = 0  # samples whose offsets decrease

if kind == "mixed":
    tok0, m0 = samples[0]
    for i in range(n_bad):
        t = tok0.copy()
        t[len(t) // 2] = vocab + i  # outside the vocabulary
        samples.append((t, m0.copy()))
    for i in range(n_bad):
        t = tok0.copy()
        t[1] = -1 - i  # negative
        samples.append((t, m0.copy()))
    n_broken = n_bad
elif kind == "all-bad-ids":
    for t, _ in samples:
        t[0] = vocab
elif kind in ("no-tokens", "offsets-out"):
    pass
else:
    sys.exit("unknown kind " + kind)

toks = np.concatenate([t for t, _ in samples]).astype(np.int32)
msk = np.concatenate([m for _, m in samples]).astype(np.uint8)
offs, end = [0], 0
for i, (t, _) in enumerate(samples):
    end += len(t)
    offs.append(end)
    if i < n_broken:  # a sample that ends 3 tokens before it starts, inside /tokens
        offs.append(end - 3)
offs = np.array(offs, np.int64)
if kind == "offsets-out":
    offs[-1] = len(toks) + 5

with h5py.File(out, "w") as f:
    if kind != "no-tokens":
        f.create_dataset("tokens", data=toks, chunks=True, maxshape=(None,))
    f.create_dataset("loss_mask", data=msk, chunks=True, maxshape=(None,))
    f.create_dataset("offsets", data=offs, chunks=True, maxshape=(None,))
    for k, v in attrs.items():
        f.attrs[k] = v
