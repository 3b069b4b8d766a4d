#!/usr/bin/env python3
# features_equal.py A B: every dataset of every shard of the feature directory B (dump-features)
# equals A's: tokens, masks and top-k ids exactly; LSE and top-k values to 1e-5 of their scale,
# features to one bf16 step of theirs. For runs of the same kernels on the same numbers (a teacher
# group against a single-rank teacher): what may differ is the thread count per rank, which can
# change a GEMM's rounding in the last fp32 bit and so flip a bf16 rounding. Prints "equal"; exit 1
# with the first difference otherwise. Needs numpy and h5py (Debian's python3-h5py).
import json, sys
import h5py, numpy as np
a_dir, b_dir = sys.argv[1], sys.argv[2]
ia, ib = json.load(open(f"{a_dir}/features.json")), json.load(open(f"{b_dir}/features.json"))
assert ia["shards"] == ib["shards"] and ia["samples"] == ib["samples"], (ia["shards"], ib["shards"])
def bf16(u): return (u.astype(np.uint32) << 16).view(np.float32)
for s in ia["shards"]:
    with h5py.File(f"{a_dir}/{s}", "r") as fa, h5py.File(f"{b_dir}/{s}", "r") as fb:
        assert sorted(fa.keys()) == sorted(fb.keys()), (list(fa.keys()), list(fb.keys()))
        for k in fa.keys():
            x, y = fa[k][:], fb[k][:]
            assert x.shape == y.shape, (s, k, x.shape, y.shape)
            if k == "features":
                x, y = bf16(x), bf16(y)
                bad = np.abs(x - y) > np.abs(x) * 2.0**-7 + 1e-30
                assert not bad.any(), (s, k, int(bad.sum()), float(np.abs(x - y).max()))
            elif x.dtype.kind == "f":
                err = float(np.abs(x - y).max()) / max(1.0, float(np.abs(x).max()))
                assert err <= 1e-5, (s, k, err)
            else:
                assert np.array_equal(x, y), (s, k, int((x != y).sum()))
print("equal")
