#!/usr/bin/env python3
"""make_safetensors_fixture.py: interop fixtures between the C safetensors module and the Python
`safetensors` package (the reference implementation).

CI has no PyPI, so the Python side runs on a developer machine and its results are committed:

  Python -> C   tests/reference/data/written_by_python.safetensors, written here with
                safetensors.numpy.save_file (BF16 through the raw TensorSpec API, numpy has no
                bfloat16). tests/unit/test_safetensors.c reads it and checks every value against
                the same formulas as below. (The package keeps __metadata__ in a hash map, so the
                order of its two keys, and so the file's bytes, may change from run to run.)
  C -> Python   tests/reference/data/written_by_c.safetensors, written by the C unit test when run
                with DFLASH_WRITE_FIXTURE=<path> (--test-bin does that). This script loads it with
                the `safetensors` package and asserts every value and the metadata; the record of
                that run is tests/reference/data/safetensors_interop.log. The unit test checks on
                every run that the C writer still produces that committed file byte for byte, so the
                recorded proof stays valid without Python.

Usage (from the repository root, after building test_safetensors):
  python3 tests/reference/make_safetensors_fixture.py --test-bin build-st/tests/test_safetensors
  python3 tests/reference/make_safetensors_fixture.py --check FILE   # only check a C-written file
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
ROOT = os.path.dirname(os.path.dirname(HERE))


def bf16_bits(values):
    """float values -> bf16 bit patterns (uint16); the values chosen are exact in bf16."""
    f = np.asarray(values, dtype=np.float32)
    bits = f.view(np.uint32)
    assert np.all(bits & 0xFFFF == 0), "value not exact in bf16"
    return (bits >> 16).astype(np.uint16)


def serialize_with_bf16(tensors, bf16, path, metadata):
    """save_file for numpy dtypes plus BF16 tensors given as uint16 bits (shape, bits)."""
    if not bf16:
        save_file(tensors, path, metadata=metadata)
        return
    from safetensors.numpy import _flatten  # the package's own numpy -> TensorSpec helper

    keep = []
    flat = _flatten(tensors, keep)
    for name, bits in bf16.items():
        bits = np.ascontiguousarray(bits, dtype="<u2")
        keep.append(bits)
        if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.7
            flat[name] = safetensors.TensorSpec(dtype="bfloat16", shape=list(bits.shape),
                                                data_ptr=bits.ctypes.data, data_len=bits.nbytes)
        else:  # older releases take plain dicts
            flat[name] = {"dtype": "bfloat16", "shape": list(bits.shape), "data": bits.tobytes()}
    safetensors.serialize_file(flat, path, metadata=metadata)


# ------------------------------------------------------------------------------ Python -> C
# The C test (test_python_fixture) checks exactly these formulas.
def python_fixture():
    i = np.arange
    tensors = {
        "f32": (i(12, dtype=np.float32) * 0.25 - 1).reshape(3, 4),
        "f16": ((i(5) - 2) * 0.5).astype(np.float16),
        "i32": (i(4) * i(4) - 3).astype(np.int32),
        "u8": ((i(7) * 37) % 256).astype(np.uint8),
        "i64": np.array([-(2**40), 2**40 + 5], dtype=np.int64),
        "f64": np.array(3.141592653589793, dtype=np.float64),  # 0-d scalar
        "flags": np.array([True, False, True]),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    bf16 = {"bf16": bf16_bits((i(6) + 1) * 1.5).reshape(2, 3)}
    meta = {"format": "np", "producer": "make_safetensors_fixture.py"}
    return tensors, bf16, meta


# ------------------------------------------------------------------------------ C -> Python
# What test_safetensors.c (c_fixture_write) writes; checked here with the reference reader.
def expected_c_fixture():
    i = np.arange
    tensors = {
        "u8": (i(5) * 51).astype(np.uint8),
        "weight": (i(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3),
        "ids": np.array([-7, 0, 123456], dtype=np.int32),
        "scalar": np.array(0.125, dtype=np.float64),
        "empty": np.zeros((0,), dtype=np.float32),
        "flags": np.array([True, False]),
        "big": np.array([-(2**40), 2**40 + 5], dtype=np.int64),
        'name with "quotes"\tand tab': np.array([1, 2], dtype=np.int16),
    }
    bf16 = {"bf16": bf16_bits([-1.5, -0.5, 0.5, 1.5])}
    meta = {"format": "pt", "written_by": "dflash_rank", "note": 'line1\nline2 "q" \\ end'}
    order = ["u8", "weight", "bf16", "ids", "scalar", "empty", "flags", "big",
             'name with "quotes"\tand tab']
    return tensors, bf16, meta, order


def check_c_file(path, log):
    tensors, bf16, meta, order = expected_c_fixture()
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    log(f"file {os.path.basename(path)}: {len(raw)} bytes, header {n} bytes")
    assert (8 + n) % 8 == 0, "data region not 8-byte aligned"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    keys = list(header.keys())
    assert keys[0] == "__metadata__", keys
    assert keys[1:] == order, f"header order {keys[1:]} != insertion order {order}"
    log("header: __metadata__ first, tensors in insertion order, padded to 8 bytes")

    with safe_open(path, framework="numpy") as f:
        got_meta = f.metadata()
        assert got_meta == meta, f"metadata {got_meta!r} != {meta!r}"
        log(f"metadata: {len(meta)} keys match, escapes included")
        names = set(f.keys())
        assert names == set(order), names
        for name, want in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
            assert got.shape == want.shape, (name, got.shape, want.shape)
            assert np.array_equal(got, want), (name, got, want)
            log(f"tensor {name!r}: {got.dtype} {list(got.shape)} equal")
    # BF16: numpy has no bfloat16, so read the raw bytes through the package's deserializer.
    for name, info in safetensors.deserialize(raw):
        if name in bf16:
            assert info["dtype"] == "BF16", info["dtype"]
            assert info["shape"] == list(bf16[name].shape), info["shape"]
            bits = np.frombuffer(bytes(info["data"]), dtype="<u2")
            assert np.array_equal(bits, bf16[name].ravel()), (bits, bf16[name])
            log(f"tensor {name!r}: BF16 {info['shape']} bits equal")
    # Every tensor is aligned to its element size in the file.
    for name, info in header.items():
        if name == "__metadata__":
            continue
        size = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "BF16": 2, "I16": 2, "U8": 1, "BOOL": 1}
        assert info["data_offsets"][0] % size[info["dtype"]] == 0, (name, info)
    log("every tensor's data offset is a multiple of its element size")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--test-bin", help="test_safetensors binary: regenerate written_by_c.safetensors")
    ap.add_argument("--check", metavar="FILE", help="only check FILE as written by the C writer")
    args = ap.parse_args()

    if args.check:
        check_c_file(args.check, lambda s: print(s))
        print("OK")
        return

    os.makedirs(DATA, exist_ok=True)
    tensors, bf16, meta = python_fixture()
    py_path = os.path.join(DATA, "written_by_python.safetensors")
    serialize_with_bf16(tensors, bf16, py_path, meta)
    # Read it back with the package itself, so the committed file is known good.
    with safe_open(py_path, framework="numpy") as f:
        for name, want in tensors.items():
            assert np.array_equal(f.get_tensor(name), want), name

    c_path = os.path.join(DATA, "written_by_c.safetensors")
    if args.test_bin:
        env = dict(os.environ, DFLASH_WRITE_FIXTURE=c_path, DFLASH_SRC=ROOT)
        subprocess.run([args.test_bin], check=True, env=env)

    lines = []

    def log(s):
        print(s)
        lines.append(s)

    log(f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    log(f"wrote written_by_python.safetensors ({os.path.getsize(py_path)} bytes) with save_file")
    check_c_file(c_path, log)
    log("OK: the safetensors package reads written_by_c.safetensors as the C writer meant it")
    with open(os.path.join(DATA, "safetensors_interop.log"), "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
