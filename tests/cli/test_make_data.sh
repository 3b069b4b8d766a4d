#!/usr/bin/env bash
# test_make_data.sh: `dflash_tool make-data` (random prompts continued greedily by the target with the
# KV-cached decode of src/teacher/target_decode.c).
#   1. transformers: for each tests/reference/data/decode_<name>.json (made by
#      tests/reference/make_decode_fixture.py with transformers' generate), rebuild the model with
#      make-target and run make-data on the fixture's prompts (--prompts, three prompts of different
#      lengths, decoded in lockstep): every generated token must equal transformers' exactly; also
#      with --batch 1 and 2. The fixtures include the Qwen3.5 hybrid (decode_qwen35_*: K/V cache on
#      the full-attention layers, conv and recurrent state on the Gated DeltaNet layers), text-only
#      and the multimodal wrapper decoded by its own generate, prompts of 6, 29 and 67 tokens (the
#      prefill and the decode both cross the delta rule's 64-token chunk), and the mixture-of-experts
#      targets (decode_*moe_*: Qwen3-MoE with a dense layer among sparse ones, Qwen3.5-MoE with its
#      shared expert; seeds whose router probabilities never nearly tie).
#   2. the file, read with h5py: sample count, offsets, loss_mask 0 on the prompt and 1 on the
#      generated tokens, prompt ids in [A, V), attributes vocab_size / format_version / tokenizer;
#      the same seed gives the same datasets, another seed other prompts, the prompts of sample i do
#      not depend on --samples, and --batch does not change the output.
#   3. the decode against the packed forward, no fixture needed: teacher-dump --topk 1 over the
#      generated sequences; its top-1 at every position from the prompt's last token on must be
#      the next token of the sequence (Qwen3 and Llama with llama3 RoPE, untied and tied; the
#      Qwen3.5 hybrid, whose --batch 1 and --batch 4 files must also be the same).
#   4. bad arguments: usage errors exit 2, bad values one error line and exit 1, no OUT.h5 left.
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
D=$SRC/tests/reference/data
# Debian's python3 has numpy and h5py; a python3 earlier on PATH (pyenv) may not.
PY=/usr/bin/python3
if ! $PY -c 'import h5py, numpy' 2>/dev/null; then
  echo "test_make_data: $PY lacks h5py/numpy (scripts/install-deps.sh installs python3-h5py)" >&2
  exit 1
fi

# expect_rc NAME RC CMD...: the command exits with RC.
expect_rc() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: exit $rc, wanted $want"; cat "$TMP/err" >&2; fi
}

# pycheck NAME SCRIPT ARGS...: a Python check (prints what is wrong and exits 1 on a failure).
pycheck() {
  local name=$1; shift
  if $PY "$@" >"$TMP/py.out" 2>&1; then ok; else bad "$name:"; cat "$TMP/py.out" >&2; fi
}

# ---------------------------------------------------------------- 1. against transformers
n=0
for fx in "$D"/decode_*.json; do
  [ -e "$fx" ] || continue
  name=$(basename "$fx" .json)
  n=$((n + 1))
  margs=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["make_target"])' "$fx")
  glen=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["gen_len"])' "$fx")
  # shellcheck disable=SC2086
  if ! "$T" make-target "$TMP/$name" $margs >"$TMP/mt.log" 2>&1; then bad "$name: make-target failed: $(cat "$TMP/mt.log")"; continue; fi
  for b in 8 2 1; do
    expect_ok "$name make-data --batch $b" "$T" make-data "$TMP/$name.b$b.h5" --target "$TMP/$name" --prompts "$fx" \
      --gen-len "$glen" --batch "$b" --device cpu
    pycheck "$name --batch $b vs transformers" "$SRC/tests/cli/decode_check.py" "$fx" "$TMP/$name.b$b.h5"
    [ "$b" = 8 ] && sed "s/^/  /" "$TMP/py.out"
  done
  # ... and the packed forward agrees on these sequences too (section 3's check, mixed lengths)
  cp "$TMP/$name.b8.h5" "$TMP/fx_$name.h5"
done
[ "$n" -ge 1 ] && ok || bad "expected decode_*.json fixtures in $D, found none"
nh=$(compgen -G "$D/decode_qwen35_*.json" | wc -l)
[ "$nh" -ge 2 ] && ok || bad "expected the Qwen3.5 hybrid fixtures decode_qwen35_*.json (text and multimodal) in $D, found $nh"
nm=$(compgen -G "$D/decode_*moe_*.json" | wc -l)
[ "$nm" -ge 2 ] && ok || bad "expected the MoE fixtures decode_*moe_*.json (Qwen3-MoE and Qwen3.5-MoE) in $D, found $nm"

# ---------------------------------------------------------------- 2. the file
V=256
"$T" make-target "$TMP/qwen" --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab $V --seed 11 >/dev/null 2>&1 || bad "make-target qwen"
"$T" make-target "$TMP/llama" --arch llama --layers 3 --hidden 48 --heads 4 --kv-heads 1 --vocab 389 --tie \
  --rope-llama3 8 --rope-original-max 16 --seed 5 >/dev/null 2>&1 || bad "make-target llama"
gen() { # gen OUT MODEL N P G SEED [more args]
  local out=$1 model=$2 n=$3 p=$4 g=$5 s=$6; shift 6
  expect_ok "make-data $(basename "$out")" "$T" make-data "$out" --target "$model" --samples "$n" --prompt-len "$p" \
    --gen-len "$g" --seed "$s" "$@"
}
gen "$TMP/a.h5" "$TMP/qwen" 13 6 20 5 --vocab-low 3 --batch 5
grep -q "make-data: 13 samples" "$TMP/err" && ok || { bad "no summary line"; cat "$TMP/err" >&2; }
gen "$TMP/a2.h5" "$TMP/qwen" 13 6 20 5 --vocab-low 3 --batch 5
gen "$TMP/a_b1.h5" "$TMP/qwen" 13 6 20 5 --vocab-low 3 --batch 1
gen "$TMP/a_n3.h5" "$TMP/qwen" 3 6 20 5 --vocab-low 3
gen "$TMP/b.h5" "$TMP/qwen" 13 6 20 6 --vocab-low 3 --batch 5
gen "$TMP/l.h5" "$TMP/llama" 9 7 30 1
# the hybrid: linear heads 2/6, dims 12/10, kernel 3; 9 + 60 positions cross the 64-token chunk
"$T" make-target "$TMP/hyb" --arch qwen3_5 --layers 4 --hidden 48 --heads 4 --kv-heads 2 --head-dim 20 --vocab 301 \
  --lin-k-heads 2 --lin-v-heads 6 --lin-k-dim 12 --lin-v-dim 10 --conv-kernel 3 --layer-types linear,full,linear,linear \
  --partial-rotary 0.5 --seed 1 >/dev/null 2>&1 || bad "make-target hyb"
gen "$TMP/h.h5" "$TMP/hyb" 7 9 60 3 --batch 4
gen "$TMP/h_b1.h5" "$TMP/hyb" 7 9 60 3 --batch 1

cat >"$TMP/file.py" <<'PYEOF'
import sys
import h5py, numpy as np
out, model, n, p, g, low, vocab = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:8])
f = h5py.File(out, "r")
tok, off, mask = f["tokens"][:], f["offsets"][:], f["loss_mask"][:]
assert tok.dtype == np.int32 and off.dtype == np.int64 and mask.dtype == np.uint8, (tok.dtype, off.dtype, mask.dtype)
assert off.tolist() == [i * (p + g) for i in range(n + 1)], f"offsets {off.tolist()}"
assert len(tok) == len(mask) == n * (p + g)
for i in range(n):
    s, m = tok[off[i]:off[i + 1]], mask[off[i]:off[i + 1]]
    assert m.tolist() == [0] * p + [1] * g, f"sample {i}: loss_mask {m.tolist()}"
    assert s[:p].min() >= low and s[:p].max() < vocab, f"sample {i}: prompt ids {s[:p].tolist()} not in [{low}, {vocab})"
assert tok.min() >= 0 and tok.max() < vocab
a = f.attrs
assert int(a["vocab_size"]) == vocab and int(a["format_version"]) == 1, dict(a)
tk = a["tokenizer"]
tk = tk.decode() if isinstance(tk, bytes) else str(tk)
assert tk == f"random-prompts+greedy({model})", tk
gen = np.concatenate([tok[off[i] + p:off[i + 1]] for i in range(n)])
print(f"{out}: {n} samples of {p}+{g}, mask and attributes right, {len(np.unique(gen))} distinct generated ids")
PYEOF
pycheck "a.h5 layout" "$TMP/file.py" "$TMP/a.h5" "$TMP/qwen" 13 6 20 3 $V
pycheck "l.h5 layout" "$TMP/file.py" "$TMP/l.h5" "$TMP/llama" 9 7 30 0 389
pycheck "h.h5 layout" "$TMP/file.py" "$TMP/h.h5" "$TMP/hyb" 7 9 60 0 301

cat >"$TMP/same.py" <<'PYEOF'
import sys
import h5py, numpy as np
x, y, what = sys.argv[1:4]
a, b = h5py.File(x, "r"), h5py.File(y, "r")
def ds(f):
    return {k: f[k][:] for k in ("tokens", "offsets", "loss_mask")}
da, db = ds(a), ds(b)
if what == "same":
    for k in da:
        assert np.array_equal(da[k], db[k]), f"{k} differs"
    assert dict(a.attrs) == dict(b.attrs), (dict(a.attrs), dict(b.attrs))
elif what == "prefix":   # y's samples are x's first ones
    n = len(db["offsets"]) - 1
    end = da["offsets"][n]
    assert np.array_equal(db["offsets"], da["offsets"][:n + 1]) and np.array_equal(db["tokens"], da["tokens"][:end])
else:                    # other prompts
    assert not np.array_equal(da["tokens"], db["tokens"]), "another seed gave the same tokens"
PYEOF
pycheck "same seed, same file" "$TMP/same.py" "$TMP/a.h5" "$TMP/a2.h5" same
pycheck "--batch 1 = --batch 5" "$TMP/same.py" "$TMP/a.h5" "$TMP/a_b1.h5" same
pycheck "hybrid --batch 1 = --batch 4" "$TMP/same.py" "$TMP/h.h5" "$TMP/h_b1.h5" same
pycheck "sample i independent of --samples" "$TMP/same.py" "$TMP/a.h5" "$TMP/a_n3.h5" prefix
pycheck "another seed, other prompts" "$TMP/same.py" "$TMP/a.h5" "$TMP/b.h5" differ

# ---------------------------------------------------------------- 3. the decode against the packed forward
# tojson.py OUT.h5 TOKENS.json PROMPTLENS: the samples as teacher-dump input, and each prompt length.
cat >"$TMP/tojson.py" <<'PYEOF'
import json, sys
import h5py
f = h5py.File(sys.argv[1], "r")
tok, off, mask = f["tokens"][:], f["offsets"][:], f["loss_mask"][:]
seqs = [tok[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
plens = [int((mask[off[i]:off[i + 1]] == 0).sum()) for i in range(len(off) - 1)]
json.dump({"sequences": seqs}, open(sys.argv[2], "w"))
json.dump(plens, open(sys.argv[3], "w"))
PYEOF
# chain.py DUMP.safetensors PROMPTLENS: teacher-dump's top-1 at t equals token t+1 for t >= P-1.
cat >"$TMP/chain.py" <<'PYEOF'
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
from st_read import st_load
t = st_load(sys.argv[1])
plens = json.load(open(sys.argv[2]))
tok, cu, top = t["tokens"], t["cu_seqlens"], t["topk_idx"][:, 0]
checked = 0
for s, p in enumerate(plens):
    for i in range(cu[s] + p - 1, cu[s + 1] - 1):
        assert top[i] == tok[i + 1], (f"sequence {s}, position {i - cu[s]}: the packed forward's argmax is {top[i]}, "
                                      f"make-data generated {tok[i + 1]}")
        checked += 1
print(f"{len(plens)} sequences, {checked} generated tokens = the packed forward's argmax chain")
PYEOF
for pair in "a:qwen" "l:llama" "h:hyb" $(for f in "$TMP"/fx_*.h5; do [ -e "$f" ] && b=$(basename "$f" .h5) && echo "$b:${b#fx_}"; done); do
  data=${pair%%:*} model=${pair#*:}
  $PY "$TMP/tojson.py" "$TMP/$data.h5" "$TMP/$data.seqs.json" "$TMP/$data.plens.json" || { bad "$data: tojson"; continue; }
  expect_ok "$data teacher-dump" "$T" teacher-dump "$TMP/$model" "$TMP/$data.seqs.json" "$TMP/$data.dump.safetensors" \
    --topk 1 --layers 0 --device cpu
  pycheck "$data: decode = packed forward" "$TMP/chain.py" "$TMP/$data.dump.safetensors" "$TMP/$data.plens.json"
  sed "s/^/  $data: /" "$TMP/py.out"
done

# ---------------------------------------------------------------- 4. bad arguments
q=(--target "$TMP/qwen" --samples 2 --prompt-len 3 --gen-len 4)
expect_rc "no arguments" 2 "$T" make-data
expect_rc "no --gen-len" 2 "$T" make-data "$TMP/x.h5" --target "$TMP/qwen" --samples 2 --prompt-len 3
expect_rc "no --target" 2 "$T" make-data "$TMP/x.h5" --samples 2 --prompt-len 3 --gen-len 4
expect_rc "unknown option" 2 "$T" make-data "$TMP/x.h5" "${q[@]}" --bogus 1
expect_rc "two outputs" 2 "$T" make-data "$TMP/x.h5" "$TMP/y.h5" "${q[@]}"
expect_rc "--help" 0 "$T" make-data --help
expect_fail "samples 0" "samples" "$T" make-data "$TMP/x.h5" "${q[@]}" --samples 0
expect_fail "gen-len x" "gen-len" "$T" make-data "$TMP/x.h5" "${q[@]}" --gen-len x
expect_fail "seed -1" "seed" "$T" make-data "$TMP/x.h5" "${q[@]}" --seed -1
expect_fail "vocab-low = V" "vocab-low" "$T" make-data "$TMP/x.h5" "${q[@]}" --vocab-low $V
expect_fail "no model" "config.json" "$T" make-data "$TMP/x.h5" "${q[@]}" --target "$TMP/nothing"
expect_fail "no output dir" "cannot create" "$T" make-data "$TMP/nodir/x.h5" "${q[@]}"
if ! "$R" --version | grep -q cuda; then # a binary without CUDA names it (with CUDA, make-data decodes there)
  expect_fail "device cuda" "cuda\|CUDA" "$T" make-data "$TMP/x.h5" "${q[@]}" --device cuda
fi
echo '{"prompts": [[1, 2], [3, 99999]]}' >"$TMP/p_big.json"
expect_fail "prompt id too big" "outside the target vocabulary" "$T" make-data "$TMP/x.h5" --target "$TMP/qwen" --prompts "$TMP/p_big.json" --gen-len 3
echo '{"prompts": [[1, 2], []]}' >"$TMP/p_empty.json"
expect_fail "empty prompt" "prompt 1" "$T" make-data "$TMP/x.h5" --target "$TMP/qwen" --prompts "$TMP/p_empty.json" --gen-len 3
echo '{"prompts": [[1, 2' >"$TMP/p_bad.json"
expect_fail "bad JSON" "not valid JSON" "$T" make-data "$TMP/x.h5" --target "$TMP/qwen" --prompts "$TMP/p_bad.json" --gen-len 3
"$T" make-target "$TMP/short" --arch llama --layers 1 --hidden 32 --heads 2 --kv-heads 2 --vocab 64 --max-positions 16 >/dev/null 2>&1 || bad "make-target short"
expect_fail "past max_position_embeddings" "max_position_embeddings" "$T" make-data "$TMP/x.h5" --target "$TMP/short" \
  --samples 2 --prompt-len 8 --gen-len 9
compgen -G "$TMP/x.h5*" >/dev/null && bad "a failed make-data left $(ls "$TMP"/x.h5*)" || ok
finish
