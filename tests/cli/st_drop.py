#!/usr/bin/env python3
"""st_drop.py IN OUT NAME: copy a safetensors file without tensor NAME (test helper; stdlib only)."""
import json, struct, sys

src, dst, name = sys.argv[1:4]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
out, blobs, off = {}, [], 0
for key, e in header.items():
    if key == "__metadata__":
        out[key] = e
        continue
    if key == name:
        continue
    b, end = e["data_offsets"]
    blobs.append(data[b:end])
    out[key] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [off, off + end - b]}
    off += end - b
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
