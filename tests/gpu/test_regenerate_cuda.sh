#!/usr/bin/env bash
# test_regenerate_cuda.sh: `--mode regenerate --device cuda` (the whole decode on the device:
# target_decode.h, ops_decode.h) against --device cpu, for the dense, hybrid and MoE targets of
# tests/reference/data/regen_*.json (rebuilt with make-target, the fixtures' prompts, stop ids
# hit mid-batch, 2 slots: continuous batching). Runs with a CUDA device and in the CUDA emulator
# build (tests/emu); skipped (exit 77) elsewhere.
#   greedy: every reply and finish reason equals the CPU's, except where the CPU's own top-2 logits
#     at the first differing position are a near tie (gap <= 2 % of max(1, |top-1 logit|)): CUDA
#     keeps bf16 activations (ops.h), whose rounding (~2^-8 relative per step) can swap two logits
#     that close, after which the replies part. The CPU's top-2 come from dump-features of the CPU's
#     set (teacher.topk=2), whose top-1 must also be the CPU's greedy token there. At least one reply
#     per target must equal the CPU's whole.
#   a teacher group of 2 (two GPUs, or two emulated devices; the rows over NCCL): byte-identical to
#     one GPU's file.
#   make-data --device cuda writes the samples asked for.
#   sampling (temperature 0.8, top_k 20, top_p 0.9): the same seed twice gives byte-identical
#     files, another seed other replies, and replies other than greedy.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
D=$SRC/tests/reference/data
PY=/usr/bin/python3
need_cuda
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }
# a teacher group of 2 needs a device per rank: the emulator gives each its own (DFLASH_EMU_DEVICES)
if "$R" --version | grep -q "cuda(emulated)"; then
  export DFLASH_EMU_DEVICES=2 DFLASH_EMU_NCCL_DIR=$TMP # NCCL between the emulated devices: files in $TMP
  gpus=2
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi

cat >"$TMP/cmp.py" <<'PYEOF'
import json, sys
import h5py
name, cpu, gpu, feat = sys.argv[1:5]
a, b = h5py.File(cpu, "r"), h5py.File(gpu, "r")
ta, tb, oa, ob = a["tokens"][:].tolist(), b["tokens"][:].tolist(), a["offsets"][:].tolist(), b["offsets"][:].tolist()
ma = a["loss_mask"][:].tolist()
assert len(oa) == len(ob), f"{name}: {len(oa) - 1} samples on the CPU, {len(ob) - 1} on CUDA"
top = {}  # the CPU's sample (tokens) -> its top-2 values and top-1 ids per position
fi = json.load(open(f"{feat}/features.json"))
for s in fi["shards"]:
    with h5py.File(f"{feat}/{s}", "r") as f:
        t, o, v, ix = f["tokens"][:].tolist(), f["offsets"][:].tolist(), f["topk_val"][:], f["topk_idx"][:]
        for i in range(len(o) - 1):
            top[tuple(t[o[i]:o[i + 1]])] = (v[o[i]:o[i + 1]], ix[o[i]:o[i + 1], 0].tolist())
same = tie = 0
for i in range(len(oa) - 1):
    x, y = ta[oa[i]:oa[i + 1]], tb[ob[i]:ob[i + 1]]
    if x == y:
        same += 1
        continue
    P = oa[i + 1] - oa[i] - sum(ma[oa[i]:oa[i + 1]])
    j = next(k for k in range(min(len(x), len(y))) if x[k] != y[k])
    assert j >= P, f"{name} sample {i}: the prompt differs at {j}"
    assert tuple(x) in top, f"{name} sample {i}: replies part at {j - P} and the CPU's sample has no top-k (dropped by dump-features)"
    val, ids = top[tuple(x)]
    gap, v0 = float(val[j - 1][0] - val[j - 1][1]), float(val[j - 1][0])
    assert ids[j - 1] == x[j], f"{name} sample {i}: the CPU's greedy token {x[j]} is not its packed forward's top-1 {ids[j - 1]}"
    assert gap <= 0.02 * max(1.0, abs(v0)), f"{name} sample {i}: CUDA chose {y[j]}, the CPU {x[j]} at reply token {j - P}, top-2 gap {gap:.4f} at logit {v0:.3f}"
    tie += 1
    print(f"{name} sample {i}: parts from the CPU at reply token {j - P}, a near tie (gap {gap:.4f} at logit {v0:.3f})")
assert same >= 1, f"{name}: no reply equals the CPU's"
print(f"{name}: {same} of {len(oa) - 1} replies equal the CPU's, {tie} part at a near tie")
PYEOF

n=0
for fx in "$D"/regen_*.json; do
  [ -e "$fx" ] || continue
  name=$(basename "$fx" .json)
  n=$((n + 1))
  margs=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["make_target"])' "$fx")
  read -r e0 e1 G <<<"$($PY -c 'import json, sys; d = json.load(open(sys.argv[1])); print(*d["eos_token_id"], d["max_new_tokens"])' "$fx")"
  # shellcheck disable=SC2086
  "$T" make-target "$TMP/$name" $margs >/dev/null 2>&1 || { bad "$name: make-target"; continue; }
  echo "{\"eos_token_id\": $e0}" >"$TMP/$name/generation_config.json"
  $PY -c 'import json, sys; [print(json.dumps({"input_ids": p})) for p in json.load(open(sys.argv[1]))["prompts"]]' "$fx" >"$TMP/$name.jsonl"
  common=(--mode regenerate --target.path="$TMP/$name" --regenerate.prompts="$TMP/$name.jsonl" --regenerate.heldout=0
          --regenerate.max_new_tokens="$G" --regenerate.stop_ids="$e1" --regenerate.shard_prompts=4 --regenerate.max_seqs=2)
  expect_ok "$name cpu" "$R" "${common[@]}" --device cpu --regenerate.out="$TMP/$name.cpu.h5"
  expect_ok "$name cuda" "$R" "${common[@]}" --device cuda --regenerate.out="$TMP/$name.cuda.h5"
  if [ "$gpus" -ge 2 ]; then
    expect_ok "$name cuda group of 2" mpirun -np 2 "$R" "${common[@]}" --device cuda --world.teacher_group_size=2 \
      --regenerate.out="$TMP/$name.g2.h5"
    cmp -s "$TMP/$name.cuda.h5" "$TMP/$name.g2.h5" && ok || bad "$name: a teacher group of 2 GPUs and one GPU give different files"
    grep -q "rows over NCCL" "$TMP/err" && ok || bad "$name: the group's stages did not pass their rows over NCCL"
  fi
  expect_ok "$name cpu top-2" "$R" --mode dump-features --device cpu --target.path="$TMP/$name" --data.path="$TMP/$name.cpu.h5" \
    --target.layer_ids=0 --teacher.topk=2 --features.dir="$TMP/$name.f" --drafter.block_size=2 --data.heldout_samples=0
  if $PY "$TMP/cmp.py" "$name" "$TMP/$name.cpu.h5" "$TMP/$name.cuda.h5" "$TMP/$name.f" >"$TMP/py.out" 2>&1; then
    ok
    cat "$TMP/py.out"
  else
    bad "$name: CUDA vs CPU:"
    cat "$TMP/py.out" >&2
  fi
done
[ "$n" -ge 3 ] && ok || bad "only $n regen_*.json fixtures in $D (want the dense, hybrid and MoE ones)"

# make-data decodes on the device too (the same decoder): it runs and writes what was asked
expect_ok "make-data cuda" "$T" make-data "$TMP/md.h5" --target "$TMP/regen_qwen3_dense" --samples 3 --prompt-len 5 \
  --gen-len 8 --seed 2 --device cuda
"$PY" - "$TMP/md.h5" <<'PYEOF' && ok || bad "make-data on CUDA: the set is not 3 samples of 13 tokens"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
off, tok = f["offsets"][:].tolist(), f["tokens"][:]
assert off == [0, 13, 26, 39] and 0 <= tok.min() and tok.max() < 307, (off, tok.min(), tok.max())
PYEOF

# sampling on the device: reproducible from the seed
name=regen_qwen3_dense
smp=(--mode regenerate --device cuda --target.path="$TMP/$name" --regenerate.prompts="$TMP/$name.jsonl" --regenerate.heldout=0
     --regenerate.max_new_tokens=12 --regenerate.shard_prompts=4 --regenerate.max_seqs=2 --regenerate.temperature=0.8
     --regenerate.top_k=20 --regenerate.top_p=0.9)
expect_ok "sample seed 1" "$R" "${smp[@]}" --regenerate.seed=1 --regenerate.out="$TMP/s1.h5"
expect_ok "sample seed 1 again" "$R" "${smp[@]}" --regenerate.seed=1 --regenerate.out="$TMP/s1b.h5"
expect_ok "sample seed 2" "$R" "${smp[@]}" --regenerate.seed=2 --regenerate.out="$TMP/s2.h5"
cmp -s "$TMP/s1.h5" "$TMP/s1b.h5" && ok || bad "sampling on CUDA: the same seed gave different files"
"$PY" - "$TMP/s1.h5" "$TMP/s2.h5" "$TMP/$name.cuda.h5" <<'PYEOF' && ok || bad "sampling on CUDA: the seeds or greedy gave the same replies"
import sys, h5py
s1, s2, g = (h5py.File(p, "r")["tokens"][:].tolist() for p in sys.argv[1:])
assert s1 != s2 and s1 != g[:len(s1)], "no difference"
PYEOF
finish
