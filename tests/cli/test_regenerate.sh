#!/usr/bin/env bash
# test_regenerate.sh: `dflash_rank --mode regenerate` (src/teacher/regenerate.c).
#   1. transformers: for each tests/reference/data/regen_<name>.json (tests/reference/make_regen_fixture.py:
#      a dense Qwen3, the Qwen3.5 hybrid and a Qwen3-MoE, prompts of different lengths, two stop ids
#      hit mid-batch), rebuild the model with make-target, write eos_token_id e0 into its
#      generation_config.json, give e1 as regenerate.stop_ids, and regenerate with 2 slots and shards
#      of 4 prompts (continuous batching: slots refilled while others decode): every reply and
#      finish reason equals transformers' generate; prompt tokens have loss_mask 0, the reply 1 (the
#      stop token included, a reply cut at the limit has none); the attributes name the settings.
#      Also with 1 slot, with 2 ranks and with a teacher group of 2 ranks (the layers split over
#      two stages, regen_link.h): the files are byte-identical (cmp).
#   2. resume: a run SIGKILLed after its first finished shard, rerun, gives a file byte-identical to
#      an uninterrupted run (cmp); a part made with other settings is refused.
#   3. sampling: temperature/top-k/top-p with a seed is reproducible (cmp, also with 2 ranks, 2
#      teacher groups of 2 and other slot counts), another seed gives other replies, and the replies differ from greedy.
#   4. /heldout: the count given, sorted, distinct, its rule attribute; dump-features records it in
#      features.json and training from those features holds out the same samples; training holds out exactly
#      those samples (its log says so) and --mode eval evaluates exactly them.
#   5. bad inputs: missing prompts file, a bad JSON line, an id outside the vocabulary, a prompt
#      longer than the cache, a missing regenerate.out: one error line, exit non-zero, no output file.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
D=$SRC/tests/reference/data
PY=/usr/bin/python3
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }

# ---------------------------------------------------------------- 1. against transformers
cat >"$TMP/check.py" <<'PYEOF'
import json, sys
import h5py
fixture, out = sys.argv[1:3]
d = json.load(open(fixture))
f = h5py.File(out, "r")
tok, off, mask, fin = f["tokens"][:], f["offsets"][:], f["loss_mask"][:], f["finish_reason"][:]
assert len(off) == len(d["prompts"]) + 1, f"{len(off) - 1} samples, want {len(d['prompts'])}"
assert fin.tolist() == d["finish_reason"], f"finish_reason {fin.tolist()}, transformers {d['finish_reason']}"
for i, (p, r) in enumerate(zip(d["prompts"], d["replies"])):
    s = tok[off[i]:off[i + 1]].tolist()
    assert s[:len(p)] == p, f"sample {i}: the prompt changed"
    got = s[len(p):]
    if got != r:
        sys.exit(f"sample {i}: reply {got}, transformers {r}")
    assert mask[off[i]:off[i + 1]].tolist() == [0] * len(p) + [1] * len(r), f"sample {i}: loss_mask"
    stop = set(d["eos_token_id"])
    assert (r[-1] in stop) == (d["finish_reason"][i] == 0), f"sample {i}: the stop token and the finish reason disagree"
a = f.attrs
assert sorted(a["stop_ids"].tolist()) == sorted(d["eos_token_id"]), a["stop_ids"]
assert int(a["max_new_tokens"]) == d["max_new_tokens"] and float(a["temperature"]) == 0 and int(a["seed"]) == 0
assert int(a["vocab_size"]) > max(max(p) for p in d["prompts"])
print(f"{d['name']}: {len(d['prompts'])} replies equal transformers, finish reasons {fin.tolist()}")
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
  common=(--mode regenerate --device cpu --target.path="$TMP/$name" --regenerate.prompts="$TMP/$name.jsonl"
          --regenerate.max_new_tokens="$G" --regenerate.stop_ids="$e1" --regenerate.shard_prompts=4 --regenerate.heldout=2)
  expect_ok "$name regenerate" "$R" "${common[@]}" --regenerate.out="$TMP/$name.h5" --regenerate.max_seqs=2
  if $PY "$TMP/check.py" "$fx" "$TMP/$name.h5" >"$TMP/py.out" 2>&1; then ok; else bad "$name vs transformers:"; cat "$TMP/py.out" >&2; fi
  [ ! -e "$TMP/$name.h5.parts" ] && ok || bad "$name: the parts directory was left behind"
  expect_ok "$name 1 slot" "$R" "${common[@]}" --regenerate.out="$TMP/$name.s1.h5" --regenerate.max_seqs=1
  cmp -s "$TMP/$name.h5" "$TMP/$name.s1.h5" && ok || bad "$name: 1 slot and 2 slots give different files"
  expect_ok "$name 2 ranks" mpirun -np 2 "$R" "${common[@]}" --regenerate.out="$TMP/$name.r2.h5" --regenerate.max_seqs=2
  cmp -s "$TMP/$name.h5" "$TMP/$name.r2.h5" && ok || bad "$name: two ranks and one rank give different files"
  expect_ok "$name group of 2" mpirun -np 2 "$R" "${common[@]}" --regenerate.out="$TMP/$name.g2.h5" --regenerate.max_seqs=2 \
    --world.teacher_group_size=2
  cmp -s "$TMP/$name.h5" "$TMP/$name.g2.h5" && ok || bad "$name: a teacher group of 2 and one rank give different files"
done
[ "$n" -ge 3 ] && ok || bad "only $n regen_*.json fixtures in $D (want the dense, hybrid and MoE ones)"

# ---------------------------------------------------------------- 2. resume after SIGKILL
"$T" make-target "$TMP/big" --arch qwen3 --layers 4 --hidden 96 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 192 \
  --vocab 500 --seed 3 >/dev/null 2>&1 || bad "make-target big"
$PY - "$TMP/big.jsonl" <<'PYEOF'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(48):
        f.write(json.dumps({"input_ids": [r.randrange(500) for _ in range(r.randint(2, 30))]}) + "\n")
        if i == 5: f.write("\n")  # blank lines are skipped
PYEOF
big=(--mode regenerate --device cpu --target.path="$TMP/big" --regenerate.prompts="$TMP/big.jsonl"
     --regenerate.max_new_tokens=48 --regenerate.shard_prompts=2 --regenerate.max_seqs=2 --regenerate.stop_ids=5,6,7)
expect_ok "uninterrupted" "$R" "${big[@]}" --regenerate.out="$TMP/full.h5"
# (each shard slowed by 100 ms: the job is still running at the kill on any machine)
OMP_NUM_THREADS=1 "$R" "${big[@]}" --regenerate.out="$TMP/killed.h5" --test.slow_teacher=-2 --test.slow_ms=100 >"$TMP/k.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do # until its first shard is done (hang bound: 60 s)
  compgen -G "$TMP/killed.h5.parts/part-*.h5" >/dev/null && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ -e "$TMP/killed.h5" ]; then
  bad "resume: the run finished before it was killed (make the test's job bigger)"
else
  parts=$(compgen -G "$TMP/killed.h5.parts/part-*.h5" | wc -l)
  [ "$parts" -ge 1 ] && [ "$parts" -lt 24 ] && ok || bad "resume: $parts parts after the kill"
  expect_ok "resumed" "$R" "${big[@]}" --regenerate.out="$TMP/killed.h5"
  grep -q "done by an earlier run" "$TMP/err" && ok || bad "resume: no shard was reused: $(cat "$TMP/err")"
  cmp -s "$TMP/full.h5" "$TMP/killed.h5" && ok || bad "resume: the resumed file differs from the uninterrupted one"
fi
# a part made with other settings is refused: a set made with max_new_tokens 8 where shard 0's part goes
"$R" "${big[@]}" --regenerate.out="$TMP/q.h5" --regenerate.shard_prompts=24 --regenerate.max_new_tokens=8 >/dev/null 2>&1
mkdir -p "$TMP/q2.h5.parts" && cp "$TMP/q.h5" "$TMP/q2.h5.parts/part-00000-of-00002.h5"
expect_fail "other settings" "other settings" "$R" "${big[@]}" --regenerate.out="$TMP/q2.h5" --regenerate.shard_prompts=24
[ ! -e "$TMP/q2.h5" ] && ok || bad "other settings: an output was written"

# ---------------------------------------------------------------- 3. sampling
smp=("${big[@]}" --regenerate.temperature=0.8 --regenerate.top_k=50 --regenerate.top_p=0.9 --regenerate.max_new_tokens=16)
expect_ok "sample seed 1" "$R" "${smp[@]}" --regenerate.seed=1 --regenerate.out="$TMP/s1.h5"
expect_ok "sample seed 1, 3 slots" "$R" "${smp[@]}" --regenerate.seed=1 --regenerate.max_seqs=3 --regenerate.out="$TMP/s1b.h5"
expect_ok "sample seed 1, 2 ranks" mpirun -np 2 "$R" "${smp[@]}" --regenerate.seed=1 --regenerate.out="$TMP/s1c.h5"
expect_ok "sample seed 1, 2 groups of 2" mpirun -np 4 "$R" "${smp[@]}" --regenerate.seed=1 --world.teacher_group_size=2 \
  --regenerate.out="$TMP/s1d.h5"
expect_ok "sample seed 2" "$R" "${smp[@]}" --regenerate.seed=2 --regenerate.out="$TMP/s2.h5"
expect_ok "greedy 16" "$R" "${big[@]}" --regenerate.max_new_tokens=16 --regenerate.out="$TMP/g16.h5"
cmp -s "$TMP/s1.h5" "$TMP/s1b.h5" && ok || bad "sampling: 3 slots and 2 slots differ with the same seed"
cmp -s "$TMP/s1.h5" "$TMP/s1c.h5" && ok || bad "sampling: 2 ranks and 1 rank differ with the same seed"
cmp -s "$TMP/s1.h5" "$TMP/s1d.h5" && ok || bad "sampling: 2 teacher groups of 2 ranks and 1 rank differ with the same seed"
if $PY - "$TMP/s1.h5" "$TMP/s2.h5" "$TMP/g16.h5" <<'PYEOF'
import sys, h5py
a, b, g = (h5py.File(p, "r") for p in sys.argv[1:4])
assert a["tokens"][:].tolist() != b["tokens"][:].tolist(), "seeds 1 and 2 gave the same replies"
assert a["tokens"][:].tolist() != g["tokens"][:].tolist(), "sampling gave the greedy replies"
assert float(a.attrs["temperature"]) == 0.8 and int(a.attrs["top_k"]) == 50 and abs(float(a.attrs["top_p"]) - 0.9) < 1e-12
assert int(a.attrs["seed"]) == 1 and int(b.attrs["seed"]) == 2
PYEOF
then ok; else bad "sampling: seeds / attributes"; fi

# ---------------------------------------------------------------- 4. /heldout
if $PY - "$TMP/full.h5" <<'PYEOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
h = f["heldout"][:].tolist()
n = len(f["offsets"]) - 1
assert n == 48 and len(h) == 16 and h == sorted(set(h)) and 0 <= h[0] and h[-1] < n, (n, h)
assert b"seeded random 16 of 48" in f.attrs["heldout_rule"], f.attrs["heldout_rule"]
PYEOF
then ok; else bad "/heldout"; fi

# training and --mode eval use the set's /heldout: 4 of 24 regenerated samples
"$T" make-target "$TMP/tiny" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target tiny"
$PY -c 'import json, random; r = random.Random(2); [print(json.dumps({"input_ids": [r.randrange(150) for _ in range(6)]})) for _ in range(24)]' >"$TMP/p24.jsonl"
expect_ok "regenerate 24" "$R" --mode regenerate --device cpu --target.path="$TMP/tiny" --regenerate.prompts="$TMP/p24.jsonl" \
  --regenerate.out="$TMP/r24.h5" --regenerate.max_new_tokens=24 --regenerate.heldout=4
job=(--device cpu --target.path="$TMP/tiny" --target.layer_ids=0,1 --drafter.block_size=6 --teacher.topk=6
     --data.max_tokens_per_batch=200 --data.path="$TMP/r24.h5")
expect_ok "train on it" mpirun -np 2 "$R" --mode train "${job[@]}" --train.steps=2 --train.max_anchors=8 --run.dir="$TMP/run"
grep -q "24 usable samples (20 training, 4 held out: the set's /heldout)" "$TMP/err" && ok || bad "train: the held-out split is not the set's: $(grep 'data: set' "$TMP/err")"
expect_ok "eval on it" mpirun -np 2 "$R" --mode eval "${job[@]}" --eval.drafter="$TMP/run/drafter" --run.dir="$TMP/ev"
grep -q "24 usable samples, 4 held out (the set's /heldout)" "$TMP/err" && ok ||
  bad "eval: its data line is not the set's split: $(grep 'data: set' "$TMP/err")"
$PY -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["samples"] == 4 and d["tokens"] == 4 * 30, d' "$TMP/ev/eval.json" && ok || bad "eval: not the 4 held-out samples: $(cat "$TMP/ev/eval.json")"
# offline features carry the split: features.json's set records the same held-out samples, and a
# student-only run from them holds out exactly those (before: data.heldout_samples' last ones)
expect_ok "dump-features of it" mpirun -np 2 "$R" --mode dump-features "${job[@]}" --features.dir="$TMP/feat24" --run.dir="$TMP/dump24"
$PY - "$TMP/feat24/features.json" "$TMP/r24.h5" <<'PYEOF' && ok || bad "features.json: not the set's /heldout"
import json, sys, h5py
s = json.loads(open(sys.argv[1]).read())["sets"][0]
with h5py.File(sys.argv[2], "r") as f:
    want = f["heldout"][:].tolist()  # every sample is usable here: raw = usable indices
assert s["heldout"] == want, (s, want)
PYEOF
expect_ok "train from the features" mpirun -np 1 "$R" --mode train "${job[@]}" --data.features="$TMP/feat24" \
  --train.steps=2 --train.max_anchors=8 --run.dir="$TMP/run-f"
grep -q "24 usable samples (20 training, 4 held out: the set's /heldout)" "$TMP/err" && ok || bad "train from features: the held-out split is not the set's: $(grep 'data: set' "$TMP/err")"
cp -r "$TMP/feat24" "$TMP/feat24-bad"
sed -i 's/"heldout": \[[0-9]*/"heldout": [99/' "$TMP/feat24-bad/features.json"
/usr/bin/python3 "$SRC/tests/cli/crc32c_reseal.py" json "$TMP/feat24-bad/features.json"
expect_fail_mpi "held-out index out of range" '"heldout"\[0\] must be a sample index above the previous one and below the set' \
  mpirun -np 1 "$R" --mode train "${job[@]}" --data.features="$TMP/feat24-bad" --train.steps=2 --run.dir="$TMP/run-fb"

# ---------------------------------------------------------------- 5. bad inputs
bad_run() { "$R" --mode regenerate --device cpu --target.path="$TMP/big" --regenerate.out="$TMP/bad.h5" "$@"; }
expect_fail "missing prompts" "cannot open" bad_run --regenerate.prompts="$TMP/none.jsonl"
printf '{"input_ids": [1, 2]}\n{"input_ids": [1, 2\n' >"$TMP/badjson.jsonl"
expect_fail "bad JSON line" "line 2: invalid JSON" bad_run --regenerate.prompts="$TMP/badjson.jsonl"
printf '{"input_ids": [1, 2]}\n\n{"input_ids": [1, 500]}\n' >"$TMP/badid.jsonl"
expect_fail "id out of vocabulary" "line 3: input_ids\[1\] = 500 is not below the vocabulary size 500" bad_run --regenerate.prompts="$TMP/badid.jsonl"
printf '{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n' >"$TMP/long.jsonl"
expect_fail "prompt longer than the cache" "line 1: the prompt has 10 tokens, longer than the cache of 8" \
  bad_run --regenerate.prompts="$TMP/long.jsonl" --regenerate.max_len=8
expect_fail "no regenerate.out" "regenerate needs regenerate.out" \
  "$R" --mode regenerate --device cpu --target.path="$TMP/big" --regenerate.prompts="$TMP/long.jsonl"
[ ! -e "$TMP/bad.h5" ] && ok || bad "bad inputs: an output file was written"

finish
