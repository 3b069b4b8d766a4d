#!/usr/bin/env python3
# crc32c_reseal.py: the tests' twin of src/common/core/crc32c.c, for making a deliberate edit to a
# checkpoint or a feature dump look intact again (so that the check behind the checksums is what a
# test reaches: a NaN moment, an impossible optim_step, an exploding loss). Standard library, plus
# Debian's h5py/numpy for shards.
#   crc32c_reseal.py json FILE        recompute the seal of a sealed JSON file (features.json)
#   crc32c_reseal.py unseal FILE      remove the seal (an index as written before checksums)
#   crc32c_reseal.py checkpoint DIR   recompute state.json's "checksums" of the two files, then its seal
#   crc32c_reseal.py shard FILE       recompute every row of a shard's /crc32c
import json, re, sys

TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


SEAL = re.compile(r', "crc32c": "[0-9a-f]{8}"\}\s*$')


def unsealed(text):
    m = SEAL.search(text)
    return text[: m.start()] + "}\n" if m else text


def seal(text):
    body = text.rstrip(" \n")
    assert body.endswith("}")
    body = body[:-1]
    return body + ', "crc32c": "%08x"}\n' % crc32c(body.encode())


def file_crc(path):
    with open(path, "rb") as f:
        return crc32c(f.read())


def main():
    what, path = sys.argv[1], sys.argv[2]
    if what in ("json", "unseal"):
        text = unsealed(open(path).read())
        open(path, "w").write(seal(text) if what == "json" else text)
    elif what == "checkpoint":
        state = path + "/state.json"
        text = unsealed(open(state).read())
        for name in ("model.safetensors", "optimizer.safetensors"):
            text = re.sub(r'"%s": "[0-9a-f]{8}"' % re.escape(name), '"%s": "%08x"' % (name, file_crc(path + "/" + name)), text)
        open(state, "w").write(seal(text))
    elif what == "shard":
        import h5py, numpy as np
        with h5py.File(path, "r+") as f:
            off = f["offsets"][...]
            parts = [f[k] for k in ("tokens", "loss_mask", "features", "topk_idx", "topk_val", "lse")]
            rows = f["crc32c"]
            for i in range(len(off) - 1):
                a, b = int(off[i]), int(off[i + 1])
                rows[i, :] = [crc32c(np.ascontiguousarray(p[a:b]).tobytes()) for p in parts]
    else:
        sys.exit("crc32c_reseal.py: unknown command " + what)


if __name__ == "__main__":
    main()
