#!/usr/bin/env bash
# test_input_bounds.sh: issue 27 items 5 and 6. Only regular files are read: a FIFO given as a
# config.json, a training set, a --config file or a JSONL, an index.json whose shard is /dev/zero,
# a training set whose datasets promise 2^33 tokens it does not store, each end in one error line
# naming the file, never a hang (every command runs under a 30 s
# timeout; the code of 33b0059 blocked in open() or read /dev/zero for ever). An absurd size in a
# target's config.json (a hidden size, vocabulary, layer count or width past the build's bounds, or
# a shape whose parameter count overflows) is refused at parse, before any size is computed or
# allocated from it: by --plan (which printed "16.0 EiB ... every role fits" or an internal "arena
# full"), by --preflight and by a job (which read past a 1024-entry table for a dense target of a
# million layers).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
W=(timeout 30)

# expect_fail_job NAME PATTERN CMD...: a job (mpirun) that ends non-zero, not by the timeout, without a
# crash, with PATTERN once in what it printed (--mode check prints its table on stdout).
expect_fail_job() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then bad "$name: exit $rc, wanted an error (124: the timeout)"; return; fi
  if grep -qiE "segmentation|core dumped|signal|runtime error|AddressSanitizer" "$TMP/err"; then bad "$name: crashed"; cat "$TMP/err" >&2; return; fi
  local n
  n=$(cat "$TMP/out" "$TMP/err" | grep -c -- "$pattern")
  if [ "$n" -ne 1 ]; then bad "$name: '$pattern' appears $n times:"; cat "$TMP/out" "$TMP/err" >&2; return; fi
  ok
}

# cfg NAME KEY=JSON...: $TMP/NAME/config.json, the tiny target's with those keys replaced (and its weights).
cfg() {
  local name=$1; shift
  mkdir -p "$TMP/$name"
  ln -s "$TMP/target/model.safetensors" "$TMP/$name/model.safetensors"
  /usr/bin/python3 - "$TMP/target/config.json" "$TMP/$name/config.json" "$@" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    c[k] = json.loads(v)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
}

# ---- only regular files (item 5)
mkdir -p "$TMP/fifo_target"
mkfifo "$TMP/fifo_target/config.json" "$TMP/data.fifo" "$TMP/config.fifo" "$TMP/in.jsonl"
expect_fail plan-fifo-config "config.json: not a regular file (a FIFO)" \
  "${W[@]}" "$R" --plan --target.path="$TMP/fifo_target" --target.layer_ids=1
expect_fail config-fifo "config.fifo: not a regular file (a FIFO)" "${W[@]}" "$R" --config "$TMP/config.fifo"
expect_fail inspect-fifo "data.fifo: not a regular file (a FIFO)" "${W[@]}" "$T" inspect "$TMP/data.fifo"
expect_fail inspect-dev-zero "/dev/zero: not a regular file (a character device)" "${W[@]}" "$T" inspect /dev/zero
expect_fail convert-fifo "in.jsonl: not a regular file (a FIFO)" \
  "${W[@]}" "$T" convert-jsonl "$TMP/in.jsonl" "$TMP/out.h5" --vocab-size 150
[ ! -e "$TMP/out.h5" ] && ok || bad "convert-fifo: wrote $TMP/out.h5"

# an index.json naming a shard that is /dev/zero (a link to it inside the model directory)
mkdir -p "$TMP/zero"
cp "$TMP/target/config.json" "$TMP/zero/"
echo '{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}' \
  >"$TMP/zero/model.safetensors.index.json"
ln -s /dev/zero "$TMP/zero/model-00001-of-00001.safetensors"
job=(--device cpu --world.students=1 --target.layer_ids=0,1 --drafter.block_size=6 --train.max_anchors=8
     --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6)
expect_fail_job check-dev-zero-shard "model-00001-of-00001.safetensors: not a regular file (a character device)" \
  "${W[@]}" mpirun -np 2 "$R" --mode check --target.path="$TMP/zero" --data.path="$TMP/data.h5" "${job[@]}"
expect_fail_job check-fifo-data "data.fifo: not a regular file (a FIFO)" \
  "${W[@]}" mpirun -np 2 "$R" --mode check --target.path="$TMP/target" --data.path="$TMP/data.fifo" "${job[@]}"
expect_fail_job train-fifo-data "data.fifo: not a regular file (a FIFO)" \
  "${W[@]}" mpirun -np 2 "$R" --mode train --train.steps=1 --run.dir="$TMP/run" --target.path="$TMP/target" \
  --data.path="$TMP/data.fifo" "${job[@]}"

# a training set whose datasets promise 2^33 tokens the file does not store (unallocated chunks,
# read as fill values): refused at open, before a read or an allocation by that size
/usr/bin/python3 - "$TMP/data.h5" "$TMP/sparse.h5" <<'PYEOF' || bad "sparse.h5"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    for k, v in f.attrs.items():
        g.attrs[k] = v
    n = 2**33
    g.create_dataset("tokens", shape=(n,), dtype="i4", chunks=(1 << 16,))
    g.create_dataset("loss_mask", shape=(n,), dtype="u1", chunks=(1 << 16,))
    g["offsets"] = np.array([0, n], dtype=np.int64)
PYEOF
expect_fail sparse-inspect "sparse.h5: dataset /tokens holds 8589934592 elements .* not in the file" \
  "${W[@]}" "$T" inspect "$TMP/sparse.h5"

# ---- absurd sizes, refused at parse (items 5 and 6)
cfg huge_hidden hidden_size=4503599627370496 intermediate_size=4503599627370496 head_dim=1073741824
cfg huge_vocab vocab_size=4503599627370496 hidden_size=1048576
cfg big_vocab vocab_size=4294967296
cfg wide intermediate_size=1099511627776
cfg many_layers num_hidden_layers=1048576
cfg many_heads num_attention_heads=1048576 num_key_value_heads=1048576 head_dim=8
# each dimension within its bound, the whole model not: 1024 layers x 3 x 131072 x 1048576
cfg too_many_params hidden_size=131072 intermediate_size=1048576 num_hidden_layers=1024 num_attention_heads=64 head_dim=128
plan=(--plan --world.students=1 --target.layer_ids=1)
expect_fail plan-huge-hidden "'hidden_size' 4503599627370496 is over the 131072" "$R" "${plan[@]}" --target.path="$TMP/huge_hidden"
expect_fail plan-huge-vocab "'hidden_size' 1048576 is over the 131072" "$R" "${plan[@]}" --target.path="$TMP/huge_vocab"
expect_fail plan-big-vocab "'vocab_size' 4294967296 is over the 16777216" "$R" "${plan[@]}" --target.path="$TMP/big_vocab"
expect_fail plan-wide "'intermediate_size' 1099511627776 is over the 1048576" "$R" "${plan[@]}" --target.path="$TMP/wide"
expect_fail plan-layers "'num_hidden_layers' 1048576 is over the 1024" "$R" "${plan[@]}" --target.path="$TMP/many_layers"
expect_fail plan-heads "'num_attention_heads' 1048576 is over the 4096" "$R" "${plan[@]}" --target.path="$TMP/many_heads"
expect_fail plan-params "parameters, over the 35184372088832 this build supports" "$R" "${plan[@]}" --target.path="$TMP/too_many_params"
for f in "$TMP"/err; do
  grep -q "every role fits\|please report" "$f" "$TMP/out" && bad "plan: 'every role fits' or 'please report' after an error"
done
# batch settings whose products left int (UBSan: 10000000 * 1023 in plan.c at 33b0059), and a plan
# whose count passes 2^64 bytes with every key in its bounds: one line each, never "fits"
expect_fail plan-anchors "train.max_anchors 10000000 x drafter.block_size 1024 = 10240000000 block positions" \
  "$R" "${plan[@]}" --target.path="$TMP/target" --train.max_anchors=10000000 --drafter.block_size=1024
cfg moe_wide 'architectures=["Qwen3MoeForCausalLM"]' 'model_type="qwen3_moe"' hidden_size=4096 intermediate_size=1048576 \
  num_hidden_layers=64 num_attention_heads=4096 num_key_value_heads=4096 head_dim=4096 vocab_size=16777216 \
  num_experts=65536 num_experts_per_tok=64 moe_intermediate_size=64
expect_fail plan-overflow "overflows 64 bits" "$R" --plan --world.students=1 --target.path="$TMP/moe_wide" \
  --data.max_tokens_per_batch=1073741824 --teacher.max_tokens=1073741824 --train.max_anchors=16384 \
  --drafter.block_size=1024 --drafter.layers=64 --drafter.intermediate=10000000 --teacher.vocab_tile=1073741824 --target.n_features=64 \
  --teacher.topk=256
grep -q "every role fits" "$TMP/out" && bad "plan-overflow: 'every role fits'" || ok
# the plan of a real-sized target still fits
cfg llama70b hidden_size=8192 intermediate_size=28672 num_hidden_layers=80 num_attention_heads=64 \
  num_key_value_heads=8 head_dim=128 vocab_size=128256
expect_ok plan-70b "$R" "${plan[@]}" --target.path="$TMP/llama70b"
grep -q "^plan: every role fits" "$TMP/out" && ok || bad "plan-70b: no 'every role fits'"

# --preflight (a FAIL row of the target check) and a job refuse them the same way
mpirun_pf() { "${W[@]}" mpirun -np 2 "$R" --preflight --mode train --target.path="$1" --data.path="$TMP/data.h5" \
  --run.dir="$TMP/pf_run" "${job[@]}"; }
for name in many_layers too_many_params; do
  mpirun_pf "$TMP/$name" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ "$rc" -eq 0 ]; then bad "preflight-$name: exit 0"
  elif grep -qiE "segmentation|core dumped|signal|runtime error|AddressSanitizer" "$TMP/err"; then bad "preflight-$name: crashed"; cat "$TMP/err" >&2
  elif ! grep -qE "^target +[-0-9]+ +FAIL .*(over the|parameters)" "$TMP/out"; then bad "preflight-$name: no FAIL row of the target"; cat "$TMP/out" "$TMP/err" >&2
  else ok; fi
done
expect_fail_job check-many-layers "'num_hidden_layers' 1048576 is over the 1024" \
  "${W[@]}" mpirun -np 2 "$R" --mode check --target.path="$TMP/many_layers" --data.path="$TMP/data.h5" "${job[@]}"
finish
