#!/usr/bin/env bash
# test_dump_features.sh: `dflash_rank --mode dump-features` under mpirun with 2 teacher ranks:
# the feature file has the documented datasets and attributes (read back with h5py), matches
# teacher-dump on the same sequences, has the last layer's features (id 2 of 3) after the final
# norm (hidden_states[id+1], SPEC section 2), resumes without redoing finished shards, and refuses shards
# made with other settings; its index records data.min_loss_tokens, and training under another
# rule is refused.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PY=/usr/bin/python3
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }

"$T" make-target "$TMP/target" --arch llama --layers 3 --hidden 48 --heads 4 --kv-heads 2 --intermediate 80 \
  --vocab 211 --seed 9 >/dev/null 2>&1 || bad "make-target failed"
# 7 samples of 20..45 tokens, ids < 211, the first 3 tokens masked out
"$PY" - "$TMP" <<'PYEOF'
import json, random, sys
tmp = sys.argv[1]
r = random.Random(3)
seqs = []
with open(f"{tmp}/train.jsonl", "w") as f:
    for i in range(7):
        n = r.randint(20, 45)
        ids = [r.randrange(211) for _ in range(n)]
        seqs.append(ids)
        f.write(json.dumps({"input_ids": ids, "loss_mask": [0, 0, 0] + [1] * (n - 3)}) + "\n")
json.dump({"sequences": seqs}, open(f"{tmp}/seqs.json", "w"))
PYEOF
expect_ok convert "$T" convert-jsonl "$TMP/train.jsonl" "$TMP/train.h5" --vocab-size 211

args=(--mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/train.h5"
      --features.dir="$TMP/feat" --target.layer_ids=0,2 --teacher.topk=5 --features.shard_samples=3
      --teacher.max_tokens=100 --drafter.block_size=4)
expect_ok dump mpirun -np 2 "$R" "${args[@]}"
[ -f "$TMP/feat/features.json" ] && ok || bad "no features.json"
ls "$TMP"/feat/features-0000{0,1,2,3}-of-00004.h5 >/dev/null 2>&1 && ok || bad "shards missing: $(ls "$TMP/feat")"
# (7 samples at most 3 per shard: 3 shards rounded up to 4, a multiple of the 2 teachers, of 2, 2, 2, 1)
[ ! -e "$TMP/feat/features-00004-of-00004.h5" ] && ls "$TMP"/feat/features-*-of-00004.h5 | wc -l | grep -qx 4 && ok || bad "not 4 shards: $(ls "$TMP/feat")"

# The reference: teacher-dump on the same sequences, packed in one batch.
expect_ok teacher-dump "$T" teacher-dump "$TMP/target" "$TMP/seqs.json" "$TMP/ref.safetensors" --layers 0,2 --topk 5 --device cpu
if "$PY" - "$TMP" <<'PYEOF'
import json, os, struct, sys
import h5py, numpy as np
sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
from st_read import st_expect, st_load
tmp = sys.argv[1]
ref_t = st_load(f"{tmp}/ref.safetensors")
st = lambda name, dt: st_expect(ref_t, name, dt)
idx = json.load(open(f"{tmp}/feat/features.json"))
assert idx["target_layer_ids"] == [0, 2] and idx["topk"] == 5 and idx["hidden_size"] == 48 and idx["samples"] == 7, idx
feats, tops, vals, lses, toks = [], [], [], [], []
for shard in idx["shards"]:
    with h5py.File(f"{tmp}/feat/{shard}", "r") as f:
        assert f["features"].dtype == np.uint16 and f["features"].shape[1] == 96, f["features"]
        assert f["topk_idx"].dtype == np.int32 and f["topk_val"].dtype == np.float32 and f["lse"].dtype == np.float32
        assert list(f.attrs["target_layer_ids"]) == [0, 2] and f.attrs["feature_dtype"] in (b"bfloat16", "bfloat16")
        assert f["tokens"].shape[0] == f["features"].shape[0] == f["lse"].shape[0] == f["loss_mask"].shape[0]
        feats.append(f["features"][:]); tops.append(f["topk_idx"][:]); vals.append(f["topk_val"][:])
        lses.append(f["lse"][:]); toks.append(f["tokens"][:])
F = (np.concatenate(feats).astype(np.uint32) << 16).view(np.float32)   # bf16 bits -> fp32
ref_f = st("features", np.float32)
assert np.array_equal(np.concatenate(toks), st("tokens", np.int32)), "token order differs"
# bf16 storage: relative rounding 2^-8 of each value; packing differences are ~1e-6
err = np.abs(F - ref_f).max() / np.abs(ref_f).max()
assert err <= 2 ** -8, f"features differ by {err}"
for a, b, name in ((np.concatenate(vals), st("topk_val", np.float32), "topk_val"), (np.concatenate(lses), st("lse", np.float32), "lse")):
    e = np.abs(a - b).max() / np.abs(b).max()
    assert e <= 1e-5, f"{name} differs by {e}"
assert (np.concatenate(tops) == st("topk_idx", np.int32)).mean() > 0.99, "top-k ids differ"
assert idx.get("feature_convention") == "hidden_states[id+1]", idx.get("feature_convention")
# id 2 is the target's last layer (3 layers): HF hidden_states[3] is model.norm(h) = w * h / rms(h),
# so every row of that block divided by model.norm.weight has RMS 1 (bf16 storage: ~2^-8 per
# element, so 1e-2); the block of id 0, the raw residual stream, must not (the check can fail).
raw_m = open(f"{tmp}/target/model.safetensors", "rb").read()
nm = struct.unpack("<Q", raw_m[:8])[0]
e = json.loads(raw_m[8:8 + nm])["model.norm.weight"]
b, end = e["data_offsets"]
wb = raw_m[8 + nm + b:8 + nm + end]
w = {"F32": lambda: np.frombuffer(wb, np.float32), "F16": lambda: np.frombuffer(wb, np.float16).astype(np.float32),
     "BF16": lambda: (np.frombuffer(wb, np.uint16).astype(np.uint32) << 16).view(np.float32)}[e["dtype"]]()
rms = lambda blk: np.sqrt(np.mean((blk / w) ** 2, axis=1))
last, first = rms(F[:, 48:96]), rms(F[:, 0:48])
assert np.abs(last - 1).max() <= 1e-2, f"layer 2 (the last) is not after the final norm: row RMS of h/w in [{last.min()}, {last.max()}]"
assert np.abs(first - 1).max() > 0.1, f"layer 0 looks final-normed too: row RMS of h/w in [{first.min()}, {first.max()}]"
print(f"feature file matches teacher-dump; last layer post-norm: |RMS(h/w) - 1| <= {np.abs(last - 1).max():.2g} (layer 0: up to {np.abs(first - 1).max():.2g})")
PYEOF
then ok; else bad "feature file does not match teacher-dump"; fi

# Resume: a second run redoes nothing; a removed shard is redone alone.
before=$(stat -c %Y "$TMP/feat/features-00000-of-00004.h5")
sleep 1
rm "$TMP/feat/features-00002-of-00004.h5"
expect_ok resume mpirun -np 2 "$R" "${args[@]}"
grep -q "already done" "$TMP/err" && ok || bad "resume does not report finished shards: $(cat "$TMP/err")"
[ "$(stat -c %Y "$TMP/feat/features-00000-of-00004.h5")" = "$before" ] && ok || bad "a finished shard was rewritten"
[ -f "$TMP/feat/features-00002-of-00004.h5" ] && ok || bad "the removed shard was not redone"
ls "$TMP"/feat/*.tmp* >/dev/null 2>&1 && bad "temporary files left in features.dir" || ok

# A shard made with other settings is refused, naming it.
expect_fail_mpi other-settings "features-00000-of-00004.h5 was made with top-5, this run has top-6" \
  mpirun -np 2 "$R" "${args[@]}" --teacher.topk=6
# The index records the rule that chose its samples (data.min_loss_tokens), and training from the
# features under another rule is refused, naming the key: it would train on other samples than it says.
"$PY" -c "import json,sys; sys.exit(json.load(open(sys.argv[1])).get('min_loss_tokens') != 2)" "$TMP/feat/features.json" \
  && ok || bad "features.json does not record min_loss_tokens 2"
train=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/train.h5" --data.features="$TMP/feat"
       --target.layer_ids=0,2 --teacher.topk=5 --drafter.block_size=4 --train.max_anchors=8 --train.steps=1
       --data.max_tokens_per_batch=100 --data.heldout_samples=2 --train.eval_interval=100000000)
expect_fail_mpi min-loss-tokens "data.min_loss_tokens 20: data.features $TMP/feat was dumped with data.min_loss_tokens 2" \
  mpirun -np 1 "$R" "${train[@]}" --data.min_loss_tokens=20 --run.dir="$TMP/r-min"
[ ! -e "$TMP/r-min/metrics.jsonl" ] && ok || bad "a refused run wrote metrics.jsonl"
expect_ok train-same-rule mpirun -np 1 "$R" "${train[@]}" --run.dir="$TMP/r-same"
# Missing inputs are named.
expect_fail no-target "dump-features needs target.path" "$R" --mode dump-features --data.path="$TMP/train.h5" --features.dir="$TMP/f2"
finish
