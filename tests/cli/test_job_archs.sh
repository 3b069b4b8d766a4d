#!/usr/bin/env bash
# test_job_archs.sh: the whole job on the new target families, nothing of it specific to them:
# for a Qwen3.5 hybrid (the multimodal wrapper: Gated DeltaNet + gated attention), a Qwen3-MoE
# (per-expert files, a dense layer) and a Qwen3.5-MoE (the text-only layout, a shared expert):
#   make-data (the decoder with its conv/recurrent state and K/V cache), a short training run
#   (1 teacher + 1 student: the loss falls), --mode eval of its drafter (tau_decode >= 1), and
#   dump-features under 2 ranks equal to teacher-dump on the same sequences (features to the bf16
#   storage, 2^-8 of their scale; top-k values and LSE to 1e-5: one forward per batch either way,
#   packed differently, fp32).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }

common="--layers 3 --hidden 48 --heads 4 --kv-heads 2 --head-dim 16 --vocab 173 --seed 4"
hybrid="--lin-k-heads 2 --lin-v-heads 4 --lin-k-dim 12 --lin-v-dim 10 --conv-kernel 3 --full-interval 2"
declare -A archs=(
  [hybrid]="--arch qwen3_5_vl $common --intermediate 72 $hybrid"
  [moe]="--arch qwen3_moe $common --intermediate 72 --experts 6 --experts-per-tok 2 --moe-intermediate 40 --sparse-step 1 --mlp-only 1 --norm-topk"
  [hybrid_moe]="--arch qwen3_5_moe $common --experts 5 --experts-per-tok 3 --moe-intermediate 24 --shared-intermediate 32 $hybrid"
)
for name in hybrid moe hybrid_moe; do
  dir=$TMP/$name
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  "$T" make-target "$dir/target" ${archs[$name]} >"$TMP/mt.log" 2>&1 && ok || { bad "$name: make-target: $(cat "$TMP/mt.log")"; continue; }
  expect_ok "$name make-data" "$T" make-data "$dir/data.h5" --target "$dir/target" --samples 24 --prompt-len 6 --gen-len 30 --seed 2
  job=(--device cpu --target.path="$dir/target" --target.layer_ids=0,2 --teacher.topk=6 --data.max_tokens_per_batch=200)
  expect_ok "$name train" mpirun -np 2 "$R" --mode train "${job[@]}" --data.path="$dir/data.h5" --run.dir="$dir/run" \
    --drafter.block_size=6 --train.max_anchors=8 --train.log_interval=10 --data.heldout_samples=4 --train.steps=60 \
    --train.lr=5e-3 --train.eval_interval=1000
  "$PY" - "$dir/run/metrics.jsonl" <<'PYEOF' && ok || bad "$name: the loss did not fall"
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"step"' in x and "heldout" not in x]
print(f"  losses {l[0]:.4f} -> {l[-1]:.4f} over {len(l)} logs")
assert len(l) >= 2 and l[-1] < l[0], l
PYEOF
  expect_ok "$name eval" mpirun -np 2 "$R" --mode eval "${job[@]}" --data.path="$dir/data.h5" --eval.drafter="$dir/run/drafter" --run.dir="$dir/ev"
  "$PY" -c "import json, sys; e = json.load(open(sys.argv[1])); print('  tau_decode', e['tau_decode']); assert e['samples'] == 24 and e['tau_decode'] >= 1" \
    "$dir/ev/eval.json" && ok || bad "$name: bad eval.json"
  # dump-features (2 ranks) against teacher-dump on the same sequences
  "$PY" - "$dir" <<'PYEOF'
import h5py, json, sys
d = sys.argv[1]
with h5py.File(f"{d}/data.h5", "r") as f:
    tok, off = f["tokens"][:], f["offsets"][:]
json.dump({"sequences": [tok[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]}, open(f"{d}/seqs.json", "w"))
PYEOF
  expect_ok "$name dump-features" mpirun -np 2 "$R" --mode dump-features "${job[@]}" --data.path="$dir/data.h5" \
    --features.dir="$dir/feat" --features.shard_samples=10 --teacher.max_tokens=300 --drafter.block_size=6
  expect_ok "$name teacher-dump" "$T" teacher-dump "$dir/target" "$dir/seqs.json" "$dir/ref.safetensors" --layers 0,2 --topk 6 --device cpu
  "$PY" - "$dir" <<'PYEOF' && ok || bad "$name: the feature file does not match teacher-dump"
import json, os, sys
import h5py, numpy as np
sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
from st_read import st_expect, st_load
d = sys.argv[1]
ref_t = st_load(f"{d}/ref.safetensors")
st = lambda name, dt: st_expect(ref_t, name, dt)
idx = json.load(open(f"{d}/feat/features.json"))
got = {k: [] for k in ("features", "topk_idx", "topk_val", "lse", "tokens")}
for shard in idx["shards"]:
    with h5py.File(f"{d}/feat/{shard}", "r") as f:
        for k in got: got[k].append(f[k][:])
got = {k: np.concatenate(v) for k, v in got.items()}
F = (got["features"].astype(np.uint32) << 16).view(np.float32)
assert np.array_equal(got["tokens"], st("tokens", np.int32)), "token order differs"
ref = st("features", np.float32)
errs = {"features": np.abs(F - ref).max() / np.abs(ref).max()}
for k in ("topk_val", "lse"):
    r = st(k, np.float32)
    errs[k] = np.abs(got[k] - r).max() / np.abs(r).max()
print("  dump-features vs teacher-dump: " + ", ".join(f"{k} {v:.2g}" for k, v in errs.items()))
assert errs["features"] <= 2 ** -8 and errs["topk_val"] <= 1e-5 and errs["lse"] <= 1e-5, errs
assert (got["topk_idx"] == st("topk_idx", np.int32)).mean() > 0.99
PYEOF
done
finish
