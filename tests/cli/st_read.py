"""st_read.py: a minimal safetensors reader for the test drivers (numpy only, no PyPI package).

    sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
    from st_read import st_load
    t = st_load("dump.safetensors")       # {name: numpy array of the file's dtype and shape}
    x = st_expect(t, "lse", np.float32)   # the same, failing when the tensor's dtype is not that

BF16 tensors come as their uint16 bits (shift left 16 and view as float32 to read them).
"""
import json, struct

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64, "I32": np.int32,
           "I64": np.int64, "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}


def st_load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for name, e in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + end], dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
    return out


def st_expect(t, name, dtype):
    assert t[name].dtype == dtype, (name, t[name].dtype, dtype)
    return t[name]
