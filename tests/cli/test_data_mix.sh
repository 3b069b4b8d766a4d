#!/usr/bin/env bash
# test_data_mix.sh: several training sets mixed by weight (data.sets), end to end under mpirun
# (1 teacher + 1 student, tiny):
#   two sets made with make-data (different seeds) train with weights 2 and 0.5: the log shows each
#   set's draws per epoch, the metrics show the run trained;
#   the same mix from a config file (JSON form) gives the same losses as the command-line form;
#   data.sets with one set of weight 1 gives exactly the losses of data.path with that set;
#   live vs offline (dump-features of the mix, then data.features) give the same losses, with the
#   weights from the configuration or from the feature index;
#   errors, one line each: a weight of 0 or below, data.path and data.sets together, a missing set
#   file, sets of different vocab_size, a feature directory of another number of sets.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PY=/usr/bin/python3
"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/a.h5" --target "$TMP/target" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data a"
"$T" make-data "$TMP/b.h5" --target "$TMP/target" --samples 16 --prompt-len 6 --gen-len 24 --seed 9 >/dev/null 2>&1 || bad "make-data b"

base=(--mode train --device cpu --target.path="$TMP/target" --target.layer_ids=0,1 --drafter.block_size=6
      --train.steps=30 --train.lr=3e-3 --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=15
      --train.eval_batches=2 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6)
mix=--data.sets="$TMP/a.h5:2,$TMP/b.h5:0.5"
run() { # run NAME NP [extra args]: a job, its metrics in $TMP/NAME/metrics.jsonl
  local name=$1 np=$2; shift 2
  mpirun -np "$np" "$R" "${base[@]}" --run.dir="$TMP/$name" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" ||
    { bad "$name: job failed:"; tail -5 "$TMP/$name.err" >&2; }
}
losses() { grep -v heldout "$TMP/$1/metrics.jsonl" 2>/dev/null | grep '"step"' | $PY -c "import sys, json; print(' '.join('%.6f' % json.loads(l)['loss'] for l in sys.stdin))"; }
close() { # close A B: the same number of losses, equal to 1e-3 relative (bf16 features packed otherwise)
  $PY - "$(losses "$1")" "$(losses "$2")" <<'PYEOF'
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
assert len(a) == len(b) and len(a) > 0, (a, b)
assert all(abs(x - y) <= 1e-3 * abs(x) for x, y in zip(a, b)), (a, b)
PYEOF
}

# The mix: 24 and 16 samples, 4 held out in proportion (2.4 -> 2, 1.6 -> 2): 22 x 2 = 44 and
# round(14 x 0.5) = 7 training samples per epoch.
run mix 2 "$mix"
l=($(losses mix))
echo "mix: losses ${l[*]}"
[ "${#l[@]}" -eq 6 ] && ok || bad "mix: ${#l[@]} training lines in metrics.jsonl, expected 6"
$PY -c "import sys; l=[float(x) for x in sys.argv[1:]]; sys.exit(0 if l and l[-1] < l[0] else 1)" "${l[@]}" && ok || bad "mix: loss did not fall: ${l[*]}"
grep -q '"summary"' "$TMP/mix/metrics.jsonl" 2>/dev/null && ok || bad "mix: no summary line"
grep -q "data: set 0 .*a.h5: 24 usable samples (22 training, 2 held out: its last ones, data.heldout_samples), weight 2: 44 per epoch" "$TMP/mix.err" && ok ||
  bad "mix: no log line for set 0: $(grep 'data:' "$TMP/mix.err")"
grep -q "data: set 1 .*b.h5: 16 usable samples (14 training, 2 held out: its last ones, data.heldout_samples), weight 0.5: 7 per epoch" "$TMP/mix.err" && ok ||
  bad "mix: no log line for set 1: $(grep 'data:' "$TMP/mix.err")"
$PY -c "import json, sys; s = json.load(open(sys.argv[1]))['data']['sets']; sys.exit(0 if [x['weight'] for x in s] == [2, 0.5] else 1)" \
  "$TMP/mix/config.json" && ok || bad "mix: the effective config.json lacks data.sets"

# The same mix from a config file: the same losses, exactly.
printf '{"data": {"sets": [{"path": "%s", "weight": 2}, {"path": "%s", "weight": 0.5}]}}\n' "$TMP/a.h5" "$TMP/b.h5" >"$TMP/mix.json"
run mixfile 2 --config "$TMP/mix.json"
[ -n "$(losses mix)" ] && [ "$(losses mix)" = "$(losses mixfile)" ] && ok || bad "the mix from a config file differs: $(losses mix) vs $(losses mixfile)"

# Other weights train on other batches: other losses.
run mix11 2 --data.sets="$TMP/a.h5:1,$TMP/b.h5:1"
[ "$(losses mix)" != "$(losses mix11)" ] && ok || bad "weights 1,1 give the losses of weights 2,0.5"

# One set of weight 1 = data.path with that set: exactly the same losses.
run single_path 2 --data.path="$TMP/a.h5"
run single_sets 2 --data.sets="$TMP/a.h5"
[ -n "$(losses single_path)" ] && [ "$(losses single_path)" = "$(losses single_sets)" ] && ok ||
  bad "data.sets with one set differs from data.path: $(losses single_path) vs $(losses single_sets)"

# Live vs offline on the mix: dump the features of the mix, train from them.
mpirun -np 2 "$R" --mode dump-features --device cpu --target.path="$TMP/target" "$mix" --features.dir="$TMP/feat" \
  --target.layer_ids=0,1 --teacher.topk=6 --drafter.block_size=6 --teacher.max_tokens=200 --features.shard_samples=16 \
  >"$TMP/dump.out" 2>"$TMP/dump.err" && ok || { bad "dump-features of the mix failed"; tail -3 "$TMP/dump.err" >&2; }
$PY - "$TMP/feat/features.json" <<'PYEOF' && ok || bad "features.json does not record the two sets"
import json, sys
idx = json.load(open(sys.argv[1]))
assert idx["samples"] == 40, idx["samples"]
assert [(s["path"].split("/")[-1], s["samples"], s["weight"]) for s in idx["sets"]] == [("a.h5", 24, 2), ("b.h5", 16, 0.5)], idx["sets"]
PYEOF
run offline 1 "$mix" --data.features="$TMP/feat"
close mix offline && ok || bad "offline losses on the mix differ from live: $(losses mix) vs $(losses offline)"
run offline_idx 1 --data.features="$TMP/feat" # weights from the index
[ -n "$(losses offline)" ] && [ "$(losses offline)" = "$(losses offline_idx)" ] && ok ||
  bad "offline with the index's weights differs from offline with data.sets: $(losses offline) vs $(losses offline_idx)"

# Errors: one line each.
expect_fail weight-zero "set 1 (.*b.h5) has weight 0; a weight must be a finite number > 0" \
  "$R" "${base[@]}" --data.sets="$TMP/a.h5:1,$TMP/b.h5:0"
expect_fail weight-negative "has weight -0.5" "$R" "${base[@]}" --data.sets="$TMP/a.h5:-0.5,$TMP/b.h5"
printf '{"data": {"sets": [{"path": "%s", "weight": 0}]}}\n' "$TMP/a.h5" >"$TMP/zero.json"
expect_fail weight-zero-file "zero.json: key 'data.sets': set 0 (.*a.h5) has weight 0" "$R" --config "$TMP/zero.json"
expect_fail both-keys "data.path and data.sets are both set" "$R" "${base[@]}" --data.path="$TMP/a.h5" "$mix"
expect_fail_mpi missing-set "error: training set .*nope.h5: cannot open" \
  mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/err" --data.sets="$TMP/a.h5,$TMP/nope.h5"
"$T" make-target "$TMP/target2" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 140 --seed 6 >/dev/null 2>&1 || bad "make-target 2"
"$T" make-data "$TMP/c.h5" --target "$TMP/target2" --samples 8 --prompt-len 6 --gen-len 24 --seed 4 >/dev/null 2>&1 || bad "make-data c"
expect_fail_mpi vocab "error: training sets .*a.h5 and .*c.h5 have different vocab_size (150 and 140)" \
  mpirun -np 1 "$R" --mode dump-features --device cpu --target.path="$TMP/target" --data.sets="$TMP/a.h5,$TMP/c.h5" \
  --features.dir="$TMP/feat2" --target.layer_ids=0,1 --teacher.topk=6 --drafter.block_size=6 --teacher.max_tokens=200
expect_fail_mpi features-sets "error: .*was dumped from 2 training set(s), the configuration names 1 (data.path)" \
  mpirun -np 1 "$R" "${base[@]}" --run.dir="$TMP/err" --data.path="$TMP/a.h5" --data.features="$TMP/feat"
# a weight whose epoch would not fit in memory: one line naming data.sets, before any allocation
expect_fail_mpi huge-weight "error: data.sets: an epoch would draw" timeout 300 mpirun -np 2 "$R" "${base[@]}" \
  --data.sets="$TMP/a.h5:1e9,$TMP/b.h5:1" --train.steps=5 --run.dir="$TMP/huge"
finish
