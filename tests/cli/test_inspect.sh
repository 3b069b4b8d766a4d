#!/usr/bin/env bash
# test_inspect.sh: `dflash_tool inspect`. A training set (made with convert-jsonl, known counts),
# a generic HDF5 file and a safetensors file (written byte by byte by Python) are inspected and key
# lines of the output checked; bad files (corrupt groups, heaps and attributes, virtual datasets
# included) exit 1 with one stderr line and nothing on stdout; usage errors exit 2.
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
PY=/usr/bin/python3 # Debian's, with numpy and h5py (a pyenv python3 on PATH may lack them)
if ! $PY -c 'import h5py, numpy' 2>/dev/null; then
  echo "test_inspect: $PY lacks h5py/numpy (scripts/install-deps.sh installs python3-h5py)" >&2
  exit 1
fi

# has NAME LINE: the last command's stdout contains LINE as a whole line.
has() {
  if grep -qxF -- "$2" "$TMP/out"; then ok; else bad "$1: no line '$2' in:"; cat "$TMP/out" >&2; fi
}

# expect_rc NAME RC CMD...
expect_rc() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: exit $rc, wanted $want"; cat "$TMP/err" >&2; fi
}

# expect_bad NAME PATTERN CMD...: exit 1 exactly, one stderr line matching PATTERN, nothing on stdout.
expect_bad() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne 1 ]; then bad "$name: exit $rc, wanted 1"; cat "$TMP/err" >&2; return; fi
  if [ "$(grep -c . "$TMP/err")" -ne 1 ]; then bad "$name: wanted one stderr line:"; cat "$TMP/err" >&2; return; fi
  if ! grep -q -- "$pattern" "$TMP/err"; then bad "$name: stderr lacks '$pattern':"; cat "$TMP/err" >&2; return; fi
  if [ -s "$TMP/out" ]; then bad "$name: printed on stdout:"; cat "$TMP/out" >&2; return; fi
  ok
}

# ---------------------------------------------------------------- a training set
# lengths 4, 2, 6, 1 (13 tokens); loss tokens 2, 0, 5, 1 (8)
cat >"$TMP/ts.jsonl" <<'JEOF'
{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1]}
{"input_ids": [5, 6], "loss_mask": [0, 0]}
{"input_ids": [7, 8, 9, 10, 11, 99], "loss_mask": [0, 1, 1, 1, 1, 1]}
{"input_ids": [42]}
JEOF
expect_ok "convert" $T convert-jsonl "$TMP/ts.jsonl" "$TMP/ts.h5" --vocab-size 100 --tokenizer my/tok
expect_ok "inspect training set" $T inspect "$TMP/ts.h5"
has "format" "format: HDF5"
has "tokens dataset" "  /tokens  int32  [13]  chunks [65536]"
has "offsets dataset" "  /offsets  int64  [5]  chunks [65536]"
has "mask dataset" "  /loss_mask  uint8  [13]  chunks [65536]"
has "vocab_size attribute" "  vocab_size = 100"
has "format_version attribute" "  format_version = 1"
has "tokenizer attribute" '  tokenizer = "my/tok"'
has "training set" "training set:"
has "samples" "  samples: 4"
has "usable" "  usable samples: 4"
has "tokens" "  tokens: 13"
has "loss tokens" "  loss tokens: 8"
has "lengths" "  sample length: min 1, mean 3.25, max 6"

expect_ok "inspect with --min-loss-tokens 2" $T inspect --min-loss-tokens 2 "$TMP/ts.h5"
has "usable (min 2)" "  usable samples: 2"
has "rejected (min 2)" "  rejected samples: 2 (offsets not increasing 0, ids out of range 0, no valid anchor or fewer than 2 loss tokens 2)"
has "usable tokens (min 2)" "  usable tokens: 10"
has "loss tokens (min 2)" "  loss tokens: 7"
has "lengths (min 2)" "  sample length: min 4, mean 5.00, max 6"

# a training set with bad samples in it (written by h5py): counted, not an error
$PY - "$TMP/rej.h5" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = np.array([1, 2, 3, 500, 5, 6, 7], np.int32)
    f["offsets"] = np.array([0, 3, 2, 5, 7], np.int64)   # sample 1 goes backwards
    f["loss_mask"] = np.ones(7, np.uint8)                # sample 2 holds id 500 >= vocab_size
    f.attrs["vocab_size"] = 100
    f.attrs["format_version"] = 1
PYEOF
expect_ok "inspect a set with rejected samples" $T inspect "$TMP/rej.h5"
has "rejected counts" "  rejected samples: 2 (offsets not increasing 1, ids out of range 1, no valid anchor or fewer than 0 loss tokens 0)"
has "contiguous dataset" "  /tokens  int32  [7]"
if grep -q "warning: .*2 of 4 samples rejected" "$TMP/err"; then ok; else bad "no rejection warning: $(cat "$TMP/err")"; fi

# ---------------------------------------------------------------- other HDF5 files
$PY - "$TMP/feat.h5" "$TMP/ts.h5" "$TMP/feat_ts.h5" <<'PYEOF'
import sys, shutil, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["features"] = np.zeros((4, 8), np.uint16)
    f["features"].attrs["what"] = "bf16 bits"
    g = f.create_group("sub")
    g["lse"] = np.zeros(4, np.float32)
    f.attrs["target"] = "Qwen/Qwen3-8B"
    f.attrs["target_layer_ids"] = np.array([1, 17, 33], np.int64)
shutil.copy(sys.argv[2], sys.argv[3])       # a feature file built on a training set
with h5py.File(sys.argv[3], "a") as f:
    f["topk_idx"] = np.zeros((13, 5), np.int32)
PYEOF
expect_ok "inspect generic HDF5" $T inspect "$TMP/feat.h5"
has "generic dataset" "  /features  uint16  [4, 8]"
has "dataset attribute" '      @what = "bf16 bits"'
has "group" "  /sub/"
has "dataset in group" "  /sub/lse  float32  [4]"
has "string attribute" '  target = "Qwen/Qwen3-8B"'
has "array attribute" "  target_layer_ids = [1, 17, 33]"
if grep -q "training set" "$TMP/out"; then bad "generic file shown as a training set"; else ok; fi

expect_ok "inspect a feature file on a training set" $T inspect "$TMP/feat_ts.h5"
has "extra dataset" "  /topk_idx  int32  [13, 5]"
has "samples (feature file)" "  samples: 4"

# ---------------------------------------------------------------- safetensors
$PY - "$TMP/model.safetensors" <<'PYEOF'
import sys, json, struct, numpy as np
tensors = [("embed.weight", "F32", np.arange(6, dtype=np.float32).reshape(2, 3)),
           ("layers.0.bias", "BF16", np.zeros(4, np.uint16)),
           ("ids", "I32", np.arange(5, dtype=np.int32))]
header, data = {"__metadata__": {"format": "pt", "note": "made by test_inspect"}}, b""
for name, dt, a in tensors:
    b = a.tobytes()
    header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
PYEOF
expect_ok "inspect safetensors" $T inspect "$TMP/model.safetensors"
has "format" "format: safetensors"
has "tensor count" "tensors: 3"
if grep -qE '^  embed\.weight +F32 +\[2, 3\] +24 bytes$' "$TMP/out"; then ok; else bad "embed.weight line:"; cat "$TMP/out" >&2; fi
if grep -qE '^  layers\.0\.bias +BF16 +\[4\] +8 bytes$' "$TMP/out"; then ok; else bad "layers.0.bias line"; fi
if grep -qE '^  ids +I32 +\[5\] +20 bytes$' "$TMP/out"; then ok; else bad "ids line"; fi
has "metadata" "  format = pt"
has "metadata 2" "  note = made by test_inspect"
if grep -qE '^total: 3 tensors, 15 elements, 52 bytes of data' "$TMP/out"; then ok; else bad "total line"; fi

# ---------------------------------------------------------------- bad files
echo "hello, not a model" >"$TMP/text.bin"
expect_bad "text file" "text.bin" $T inspect "$TMP/text.bin"
head -c 5 "$TMP/model.safetensors" >"$TMP/short.safetensors"
expect_bad "5-byte file" "short.safetensors" $T inspect "$TMP/short.safetensors"
head -c 2000 "$TMP/ts.h5" >"$TMP/cut.h5"
expect_bad "truncated HDF5" "cut.h5: cannot open as HDF5: truncated file" $T inspect "$TMP/cut.h5"
expect_bad "missing file" "absent.h5: cannot open" $T inspect "$TMP/absent.h5"
$PY - "$TMP/nomask.h5" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = np.arange(4, dtype=np.int32)
    f["offsets"] = np.array([0, 4], np.int64)
    f.attrs["vocab_size"] = 10
    f.attrs["format_version"] = 1
PYEOF
expect_bad "training set without /loss_mask" "missing dataset /loss_mask" $T inspect "$TMP/nomask.h5"

# corrupt files: the root group's local heap (its free list offset), a legacy variable-length
# tokenizer whose global heap object has a corrupt size (libhdf5 crashes reading it in-process), a
# virtual /tokens over a missing file, a corrupt string attribute of a file that is no training set
$PY - "$TMP/ts.h5" "$TMP" <<'PYEOF'
import sys, h5py, numpy as np
good, tmp = sys.argv[1], sys.argv[2]
b = bytearray(open(good, "rb").read())
i = b.find(b"HEAP")
assert i > 0, "no local heap"
b[i + 16:i + 18] = b"\x77\x03"  # offset to the head of the free list: past the heap
open(tmp + "/bad_group.h5", "wb").write(b)
with h5py.File(good, "r") as f, h5py.File(tmp + "/vlen.h5", "w") as g:
    for k in ("tokens", "loss_mask", "offsets"):
        g[k] = f[k][...]
    g.attrs["vocab_size"] = 100
    g.attrs["format_version"] = 1
    g.attrs["tokenizer"] = "vlen/tok"  # a Python str: variable length, in the global heap
with h5py.File(tmp + "/generic_vlen.h5", "w") as g:
    g["x"] = np.zeros(3, np.float32)
    g.attrs["note"] = "in the heap"
for src, dst in (("vlen.h5", "vlen_bad.h5"), ("generic_vlen.h5", "generic_vlen_bad.h5")):
    b = bytearray(open(tmp + "/" + src, "rb").read())
    i = b.find(b"GCOL")
    assert i > 0, "no global heap in " + src
    b[i + 31] = 0xBB  # the top byte of the first object's size
    open(tmp + "/" + dst, "wb").write(b)
with h5py.File(tmp + "/virtual.h5", "w") as g:
    lay = h5py.VirtualLayout(shape=(13,), dtype=np.int32)
    lay[:] = h5py.VirtualSource(tmp + "/absent_source.h5", "tokens", shape=(13,))
    g.create_virtual_dataset("tokens", lay, fillvalue=0)
    with h5py.File(good, "r") as f:
        g["loss_mask"] = f["loss_mask"][...]
        g["offsets"] = f["offsets"][...]
    g.attrs["vocab_size"] = 100
    g.attrs["format_version"] = 1
PYEOF
expect_bad "corrupt root group" "bad_group.h5: cannot read the root group: bad heap free list" $T inspect "$TMP/bad_group.h5"
expect_ok "legacy vlen tokenizer" $T inspect "$TMP/vlen.h5"
has "legacy vlen tokenizer read" '  tokenizer = "vlen/tok"'
expect_bad "corrupt vlen tokenizer" "vlen_bad.h5: attribute 'tokenizer' is corrupt" $T inspect "$TMP/vlen_bad.h5"
expect_bad "corrupt vlen attribute" "generic_vlen_bad.h5: attribute 'note' is corrupt" $T inspect "$TMP/generic_vlen_bad.h5"
expect_bad "virtual /tokens" "virtual.h5: dataset /tokens is a virtual dataset" $T inspect "$TMP/virtual.h5"

# ---------------------------------------------------------------- usage
expect_rc "no arguments" 2 $T inspect
expect_rc "two files" 2 $T inspect a b
expect_rc "unknown option" 2 $T inspect --frobnicate "$TMP/ts.h5"
expect_rc "bad --min-loss-tokens" 2 $T inspect --min-loss-tokens -3 "$TMP/ts.h5"
expect_rc "--help" 0 $T inspect --help
if grep -q "usage: dflash_tool inspect" "$TMP/out"; then ok; else bad "--help output"; fi

finish
