#!/usr/bin/env bash
# test_convert_jsonl.sh: `dflash_tool convert-jsonl`. A few hundred generated JSON lines (lengths
# from 1 to past the writer's buffer, with and without loss_mask, blank lines) are converted and
# read back with h5py: every dataset, dtype, attribute and sample is compared with the input.
# Malformed lines must stop the conversion with exit 1, one stderr line naming the line, and no
# output file; usage errors exit 2.
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
# Debian's python3 has numpy and h5py; a python3 earlier on PATH (pyenv) may not.
PY=/usr/bin/python3
if ! $PY -c 'import h5py, numpy' 2>/dev/null; then
  echo "test_convert_jsonl: $PY lacks h5py/numpy (scripts/install-deps.sh installs python3-h5py)" >&2
  exit 1
fi

# expect_bad NAME PATTERN OUT CMD...: exit 1 exactly, one stderr line matching PATTERN, and neither
# OUT nor any temporary next to it left behind.
expect_bad() {
  local name=$1 pattern=$2 out=$3; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne 1 ]; then bad "$name: exit $rc, wanted 1"; cat "$TMP/err" >&2; return; fi
  if [ "$(grep -c . "$TMP/err")" -ne 1 ]; then bad "$name: wanted one stderr line:"; cat "$TMP/err" >&2; return; fi
  if ! grep -q -- "$pattern" "$TMP/err"; then bad "$name: stderr lacks '$pattern':"; cat "$TMP/err" >&2; return; fi
  if compgen -G "$out*" >/dev/null; then bad "$name: left $(ls "$out"*) behind"; return; fi
  ok
}

# expect_rc NAME RC CMD...: the command exits with RC.
expect_rc() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: exit $rc, wanted $want"; cat "$TMP/err" >&2; fi
}

# ---------------------------------------------------------------- generated input
$PY - "$TMP/in.jsonl" <<'PYEOF'
import json, random, sys
random.seed(1234)
with open(sys.argv[1], "w") as f:
    for i in range(300):
        if i % 37 == 5:
            f.write("\n")              # blank lines are skipped
        if i % 53 == 7:
            f.write("   \t\n")
        n = 1 if i % 50 == 0 else 300001 if i == 123 else random.randint(1, 1500)
        ids = [random.randrange(32000) for _ in range(n)]
        if i == 77:
            ids[0] = 31999             # the largest id
        rec = {"text": "ignored", "input_ids": ids}
        if i % 10 == 3:
            pass                       # no loss_mask: every token trained on
        elif i % 10 == 4:
            rec["loss_mask"] = [random.random() < 0.5 for _ in range(n)]  # JSON booleans
        else:
            rec["loss_mask"] = [1 if random.random() < 0.6 else 0 for _ in range(n)]
        sep = (",", ":") if i % 2 else (", ", ": ")
        f.write(json.dumps(rec, separators=sep) + ("\r\n" if i == 9 else "\n"))
PYEOF

# check.py IN OUT VOCAB TOKENIZER MIN_LOSS SUMMARY_FILE: compare the HDF5 file with the JSON lines.
cat >"$TMP/check.py" <<'PYEOF'
import json, sys
import h5py, numpy as np
src, out, vocab, tokenizer, min_loss, summary = sys.argv[1:7]
min_loss = int(min_loss)
samples = []
for line in open(src):
    if not line.strip():
        continue
    r = json.loads(line)
    ids = r["input_ids"]
    mask = [int(m) for m in r.get("loss_mask", [1] * len(ids))]
    if sum(mask) >= min_loss:
        samples.append((ids, mask))
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
with h5py.File(out, "r") as f:
    check(sorted(f.keys()) == ["loss_mask", "offsets", "tokens"], "datasets: %s" % sorted(f.keys()))
    tok, off, msk = f["tokens"], f["offsets"], f["loss_mask"]
    check(tok.dtype == np.int32 and off.dtype == np.int64 and msk.dtype == np.uint8,
          "dtypes %s %s %s" % (tok.dtype, off.dtype, msk.dtype))
    check(tok.chunks is not None and off.chunks is not None and msk.chunks is not None, "not chunked")
    check(tok.maxshape == (None,) and off.maxshape == (None,), "not extensible")
    n_tok = sum(len(s[0]) for s in samples)
    check(tok.shape == (n_tok,) and msk.shape == (n_tok,), "tokens shape %s, want %d" % (tok.shape, n_tok))
    check(off.shape == (len(samples) + 1,), "offsets shape %s, want %d" % (off.shape, len(samples) + 1))
    want_vocab = int(vocab) if int(vocab) > 0 else max(max(s[0]) for s in samples) + 1
    a = f.attrs
    check(sorted(a.keys()) == ["format_version", "tokenizer", "vocab_size"], "attributes %s" % sorted(a.keys()))
    check(a["vocab_size"] == want_vocab and a["vocab_size"].dtype == np.int64, "vocab_size %r" % a["vocab_size"])
    check(a["format_version"] == 1 and a["format_version"].dtype == np.int64, "format_version %r" % a["format_version"])
    # a fixed-length string (never the global heap, src/common/data/h5safe.h): h5py gives bytes
    tk = a["tokenizer"]
    check(isinstance(tk, bytes) and tk.decode() == tokenizer, "tokenizer %r" % tk)
    T, O, M = tok[:], off[:], msk[:]
    check(O[0] == 0 and O[-1] == n_tok, "offsets ends %d %d" % (O[0], O[-1]))
    bad = [i for i, (ids, mask) in enumerate(samples)
           if not (np.array_equal(T[O[i]:O[i + 1]], ids) and np.array_equal(M[O[i]:O[i + 1]], mask))]
    check(not bad, "samples differ: %s" % bad[:10])
    n_loss = sum(sum(s[1]) for s in samples)
    want = "%s: %d samples, %d tokens, %d loss tokens, vocab_size %d" % (out, len(samples), n_tok, n_loss, want_vocab)
    got = open(summary).read()
    check(got.startswith(want), "summary %r, want %r" % (got, want))
for e in errors:
    print("check.py: " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PYEOF

# ---------------------------------------------------------------- conversions that work
expect_ok "convert with --vocab-size" $T convert-jsonl "$TMP/in.jsonl" "$TMP/a.h5" --vocab-size 32000 --tokenizer "test/tok-v1"
cp "$TMP/out" "$TMP/summary_a"
expect_ok "read back (vocab given)" $PY "$TMP/check.py" "$TMP/in.jsonl" "$TMP/a.h5" 32000 "test/tok-v1" 0 "$TMP/summary_a"

expect_ok "convert without --vocab-size" $T convert-jsonl "$TMP/in.jsonl" "$TMP/b.h5"
cp "$TMP/out" "$TMP/summary_b"
expect_ok "read back (vocab = largest id + 1)" $PY "$TMP/check.py" "$TMP/in.jsonl" "$TMP/b.h5" 0 "" 0 "$TMP/summary_b"

expect_ok "convert with --min-loss-tokens" $T convert-jsonl --min-loss-tokens 400 "$TMP/in.jsonl" "$TMP/c.h5" --vocab-size 32000
cp "$TMP/out" "$TMP/summary_c"
expect_ok "read back (short samples left out)" $PY "$TMP/check.py" "$TMP/in.jsonl" "$TMP/c.h5" 32000 "" 400 "$TMP/summary_c"
if grep -q "samples with fewer than 400 loss tokens left out" "$TMP/summary_c"; then ok; else bad "summary lacks the left-out count: $(cat "$TMP/summary_c")"; fi

expect_ok "the trainer's reader opens it" $T inspect "$TMP/a.h5"
if grep -q "rejected samples: 0 " "$TMP/out"; then ok; else bad "inspect: $(cat "$TMP/out")"; fi

# ---------------------------------------------------------------- malformed lines
good='{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}'
bad_case() { # NAME PATTERN LINE3 [options]: line 3 is the bad one (line 2 is blank)
  local name=$1 pattern=$2 line=$3; shift 3
  printf '%s\n\n%s\n%s\n' "$good" "$line" "$good" >"$TMP/bad.jsonl"
  expect_bad "$name" "$pattern" "$TMP/bad.h5" $T convert-jsonl "$TMP/bad.jsonl" "$TMP/bad.h5" "$@"
}
bad_case "bad JSON" 'line 3: invalid JSON' '{"input_ids": [1, 2,'
bad_case "trailing garbage" 'line 3: invalid JSON' '{"input_ids": [1, 2]} x'
bad_case "not an object" 'line 3: expected a JSON object' '[1, 2, 3]'
bad_case "missing input_ids" 'line 3: missing "input_ids"' '{"loss_mask": [1, 1]}'
bad_case "input_ids not an array" 'line 3: "input_ids" is not an array' '{"input_ids": 5}'
bad_case "empty input_ids" 'line 3: "input_ids" is empty' '{"input_ids": []}'
bad_case "length mismatch" 'line 3: "loss_mask" has 2 values, "input_ids" has 3' '{"input_ids": [1, 2, 3], "loss_mask": [1, 1]}'
bad_case "negative id" 'line 3: input_ids\[1\] = -4 is negative' '{"input_ids": [1, -4, 3]}'
bad_case "fractional id" 'line 3: input_ids\[2\] = 2.5 is not an integer' '{"input_ids": [1, 2, 2.5]}'
bad_case "string id" 'line 3: input_ids\[0\] = "7" is not an integer' '{"input_ids": ["7"]}'
bad_case "id past int32" 'line 3: input_ids\[0\] = 3000000000' '{"input_ids": [3000000000]}'
bad_case "id >= --vocab-size" 'line 3: input_ids\[0\] = 50 is not below the vocabulary size 50' '{"input_ids": [50]}' --vocab-size 50
bad_case "mask value 2" 'line 3: loss_mask\[1\] = 2 is not 0 or 1' '{"input_ids": [1, 2], "loss_mask": [1, 2]}'
bad_case "mask not an array" 'line 3: "loss_mask" is not an array' '{"input_ids": [1, 2], "loss_mask": 1}'
# nothing to write: an empty input, only blank lines, every sample short of --min-loss-tokens
: >"$TMP/empty.jsonl"
expect_bad "empty input" 'empty.jsonl: no sample to write: the file has no non-blank line' "$TMP/bad.h5" \
  $T convert-jsonl "$TMP/empty.jsonl" "$TMP/bad.h5"
printf '\n  \n\n' >"$TMP/blank.jsonl"
expect_bad "blank lines only" 'blank.jsonl: no sample to write' "$TMP/bad.h5" $T convert-jsonl "$TMP/blank.jsonl" "$TMP/bad.h5"
printf '%s\n%s\n' "$good" "$good" >"$TMP/short.jsonl"
expect_bad "every sample short" 'short.jsonl: no sample to write: all 2 have fewer than 5 loss tokens' "$TMP/bad.h5" \
  $T convert-jsonl "$TMP/short.jsonl" "$TMP/bad.h5" --min-loss-tokens 5
expect_bad "missing input file" 'nope.jsonl: cannot open' "$TMP/bad.h5" $T convert-jsonl "$TMP/nope.jsonl" "$TMP/bad.h5"
expect_bad "output directory missing" 'cannot create' "$TMP/no/dir/x.h5" $T convert-jsonl "$TMP/in.jsonl" "$TMP/no/dir/x.h5"

# a failed conversion leaves an existing OUT as it was
cp "$TMP/a.h5" "$TMP/keep.h5"
printf '%s\n{oops\n' "$good" >"$TMP/bad.jsonl"
expect_rc "failed conversion over an existing file" 1 $T convert-jsonl "$TMP/bad.jsonl" "$TMP/keep.h5"
if cmp -s "$TMP/a.h5" "$TMP/keep.h5" && ! compgen -G "$TMP/keep.h5.tmp*" >/dev/null; then ok; else bad "existing output changed"; fi

# --heldout: a recorded held-out split (count or fraction, seeded), the same for the same seed
expect_ok "convert --heldout 10" $T convert-jsonl "$TMP/in.jsonl" "$TMP/h1.h5" --heldout 10 --heldout-seed 4
expect_ok "convert --heldout 10 again" $T convert-jsonl "$TMP/in.jsonl" "$TMP/h2.h5" --heldout 10 --heldout-seed 4
expect_ok "convert --heldout 0.1 seed 5" $T convert-jsonl "$TMP/in.jsonl" "$TMP/h3.h5" --heldout 0.1 --heldout-seed 5
cmp -s "$TMP/h1.h5" "$TMP/h2.h5" && ok || bad "--heldout: the same seed gave different files"
if $PY - "$TMP/h1.h5" "$TMP/h3.h5" "$TMP/b.h5" <<'PYEOF'
import sys, h5py
a, c, b = (h5py.File(p, "r") for p in sys.argv[1:4])
n = len(a["offsets"]) - 1
h = a["heldout"][:].tolist()
assert len(h) == 10 and h == sorted(set(h)) and 0 <= h[0] and h[-1] < n, h
assert len(c["heldout"]) == int(0.1 * n) and c["heldout"][:].tolist() != h[:len(c["heldout"])], "fraction / other seed"
assert b"seeded random 10 of" in a.attrs["heldout_rule"] and b"seed 4" in a.attrs["heldout_rule"]
assert "heldout" not in b, "a split written without --heldout"
assert (a["tokens"][:] == b["tokens"][:]).all(), "--heldout changed the samples"
PYEOF
then ok; else bad "--heldout datasets"; fi
expect_rc "bad --heldout" 2 $T convert-jsonl "$TMP/in.jsonl" "$TMP/x.h5" --heldout -1

# ---------------------------------------------------------------- usage
expect_rc "no arguments" 2 $T convert-jsonl
expect_rc "one argument" 2 $T convert-jsonl "$TMP/in.jsonl"
expect_rc "three positional arguments" 2 $T convert-jsonl a b c
expect_rc "unknown option" 2 $T convert-jsonl "$TMP/in.jsonl" "$TMP/x.h5" --frobnicate
expect_rc "option without value" 2 $T convert-jsonl "$TMP/in.jsonl" "$TMP/x.h5" --vocab-size
expect_rc "bad --vocab-size" 2 $T convert-jsonl "$TMP/in.jsonl" "$TMP/x.h5" --vocab-size 0
expect_rc "bad --min-loss-tokens" 2 $T convert-jsonl "$TMP/in.jsonl" "$TMP/x.h5" --min-loss-tokens x
expect_rc "--help" 0 $T convert-jsonl --help
if grep -q "usage: dflash_tool convert-jsonl" "$TMP/out"; then ok; else bad "--help output"; fi

finish
