#!/usr/bin/env bash
# test_train_e2e.sh: the whole job under mpirun on the CPU, on a tiny self-distilled data set:
#   1 teacher + 1 student, 2 + 1, 2 + 2: the loss falls and held-out tau rises;
#   the same seed gives identical losses run to run;
#   a deliberately slowed teacher gives the same losses and serves fewer batches;
#   S = 1 and S = 2 with the same global batch agree to fp tolerance;
#   training from an offline feature file gives the live run's losses (bf16 features either way).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PY=/usr/bin/python3
"$T" make-target "$TMP/target" --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 256 --seed 11 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 64 --prompt-len 8 --gen-len 40 --seed 3 >/dev/null 2>&1 || bad "make-data"

base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=8 --drafter.layers=1 --train.steps=40 --train.lr=3e-3 --train.max_anchors=16
      --train.log_interval=10 --train.eval_interval=20 --train.eval_batches=4 --data.max_tokens_per_batch=256
      --data.heldout_samples=8 --teacher.topk=8)
run() { # run NAME NP [extra args]: a job, its metrics in $TMP/NAME/metrics.jsonl
  local name=$1 np=$2; shift 2
  mpirun -np "$np" "$R" "${base[@]}" --run.dir="$TMP/$name" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
}
losses() { grep -v heldout "$TMP/$1/metrics.jsonl" | grep '"step"' | $PY -c "import sys, json; print(' '.join('%.6f' % json.loads(l)['loss'] for l in sys.stdin))"; }
evals() { grep heldout "$TMP/$1/metrics.jsonl" | $PY -c "import sys, json; print(' '.join('%.4f' % json.loads(l)['tau_chain'] for l in sys.stdin))"; }

for cfg in "1t1s 2 --world.students=1" "2t1s 3 --world.students=1" "2t2s 4 --world.students=2 --train.batches_per_step=2"; do
  set -- $cfg
  name=$1 np=$2; shift 2
  if run "$name" "$np" "$@"; then ok; else bad "$name: job failed:"; tail -5 "$TMP/$name.err" >&2; continue; fi
  l=($(losses "$name")) e=($(evals "$name"))
  echo "$name: losses ${l[*]}; held-out tau ${e[*]}"
  $PY -c "import sys; l=[float(x) for x in sys.argv[1:]]; sys.exit(0 if l[-1] < l[0] else 1)" "${l[@]}" && ok || bad "$name: loss did not fall: ${l[*]}"
  $PY -c "import sys; e=[float(x) for x in sys.argv[1:]]; sys.exit(0 if e[-1] > e[0] else 1)" "${e[@]}" && ok || bad "$name: held-out tau did not rise: ${e[*]}"
  grep -q '"summary"' "$TMP/$name/metrics.jsonl" && ok || bad "$name: no summary line"
  [ -f "$TMP/$name/drafter/model.safetensors" ] && [ -f "$TMP/$name/drafter/config.json" ] && ok || bad "$name: no exported drafter"
done

# Run to run: identical losses.
run again 3 --world.students=1
[ "$(losses 2t1s)" = "$(losses again)" ] && ok || bad "two runs with the same seed differ: $(losses 2t1s) vs $(losses again)"

# A slowed teacher: same losses, and it served fewer batches.
run slow 3 --world.students=1 --test.slow_teacher=0 --test.slow_ms=150
[ "$(losses 2t1s)" = "$(losses slow)" ] && ok || bad "the slowed-teacher run has other losses"
served=$(grep -o "batches received per teacher: \[[0-9, ]*\]" "$TMP/slow.err" | grep -o "[0-9]*, [0-9]*")
echo "slowed teacher 0: batches per teacher [$served]"
$PY -c "import sys; a, b = map(int, sys.argv[1].split(',')); sys.exit(0 if a < b else 1)" "$served" && ok || bad "the slow teacher did not serve fewer batches: [$served]"

# S = 1 vs S = 2 with the same global batch (2 batches per step).
run s1 3 --world.students=1 --train.batches_per_step=2
run s2 4 --world.students=2 --train.batches_per_step=2
$PY - "$(losses s1)" "$(losses s2)" <<'PYEOF' && ok || bad "S=1 and S=2 differ: $(losses s1) vs $(losses s2)"
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
assert len(a) == len(b) and len(a) > 0
# fp32 sums in another order (the all-reduce), compounded over 40 Adam steps: 1e-3 relative
assert all(abs(x - y) <= 1e-3 * abs(x) for x, y in zip(a, b)), (a, b)
PYEOF

# --plan: each role's memory plan, no training; an infeasible student budget is refused with the
# budget that would work, before anything large is allocated.
expect_ok plan mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/plan" --plan
grep -q "teacher memory plan" "$TMP/out" && grep -q "student memory plan" "$TMP/out" && grep -q "^plan_total_bytes" "$TMP/out" && ok ||
  bad "--plan did not print both plans: $(cat "$TMP/out")"
[ ! -e "$TMP/plan/metrics.jsonl" ] && ok || bad "--plan trained"
expect_fail_mpi plan-budget "needs at least" mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/plan" --plan --train.mem_budget=64KiB

# Live vs offline: dump the features, train from them with students only.
mpirun -np 2 "$R" --mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" \
  --features.dir="$TMP/feat" --target.layer_ids=0,1 --teacher.topk=8 --drafter.block_size=8 --teacher.max_tokens=256 \
  >"$TMP/dump.out" 2>"$TMP/dump.err" && ok || { bad "dump-features failed"; tail -3 "$TMP/dump.err" >&2; }
run offline 1 --data.features="$TMP/feat"
$PY - "$(losses 2t1s)" "$(losses offline)" <<'PYEOF' && ok || bad "offline losses differ from live: $(losses 2t1s) vs $(losses offline)"
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
assert len(a) == len(b) and len(a) > 0
# the teacher packs batches differently when dumping (fp32 summation order) before the bf16 rounding
assert all(abs(x - y) <= 1e-3 * abs(x) for x, y in zip(a, b)), (a, b)
PYEOF
finish
