#!/usr/bin/env bash
# test_teacher_groups.sh: a teacher as a group of G ranks (world.teacher_group_size), each a pipeline
# stage over the target's layers (docs/distributed.md), on the CPU:
#   - dump-features with groups of 2 and 3 gives the features, top-k and LSE of the single-rank
#     teacher on the same batches, for a dense target with tied embeddings, the Qwen3.5 hybrid
#     wrapper and a Qwen3-MoE target; two groups of 2 split the shards between them;
#   - training with a group of 2, a group of 3 and two groups of 2 gives the losses of the run without
#     groups (two single-rank teachers);
#   - a killed stage ends the job within the rank timeout, the first error line naming it;
#   - a group size that does not divide the teacher ranks, or exceeds the target's layers, is one
#     error line.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }

# Targets of 5 layers with sizes no fixture uses: head_dim apart from hidden/heads, odd vocabularies.
"$T" make-target "$TMP/dense" --arch qwen3 --layers 5 --hidden 40 --heads 4 --kv-heads 1 --head-dim 12 \
  --intermediate 72 --vocab 203 --tie --seed 21 >/dev/null 2>&1 || bad "make-target dense"
"$T" make-target "$TMP/hybrid" --arch qwen3_5_vl --layers 5 --hidden 32 --heads 4 --kv-heads 2 --head-dim 8 \
  --intermediate 56 --vocab 197 --lin-k-heads 2 --lin-v-heads 4 --lin-k-dim 8 --lin-v-dim 12 --conv-kernel 3 \
  --full-interval 2 --seed 22 >/dev/null 2>&1 || bad "make-target hybrid"
"$T" make-target "$TMP/moe" --arch qwen3_moe --layers 5 --hidden 32 --heads 4 --kv-heads 2 --vocab 199 \
  --experts 5 --experts-per-tok 3 --moe-intermediate 20 --intermediate 48 --mlp-only 1 --seed 23 >/dev/null 2>&1 ||
  bad "make-target moe"
# 11 samples of 12..40 tokens (ids below the smallest vocabulary)
"$PY" - "$TMP" <<'PYEOF'
import json, random, sys
r = random.Random(5)
with open(f"{sys.argv[1]}/seqs.jsonl", "w") as f:
    for i in range(11):
        n = r.randint(12, 40)
        f.write(json.dumps({"input_ids": [r.randrange(197) for _ in range(n)], "loss_mask": [0, 0] + [1] * (n - 2)}) + "\n")
PYEOF
expect_ok convert "$T" convert-jsonl "$TMP/seqs.jsonl" "$TMP/seqs.h5" --vocab-size 197

# compare A B: every dataset of every shard of feature directory B equals A's: tokens, masks and top-k
# ids exactly; LSE and top-k values to 1e-5 of their scale, features to one bf16 step of theirs (the
# stages run the same kernels on the same numbers; what may differ is the thread count per rank,
# which can change a GEMM's rounding in the last fp32 bit and so flip a bf16 rounding).
# compare A B: feature directory B equals A (tests/cli/features_equal.py says to what tolerance)
compare() { "$PY" "$SRC/tests/cli/features_equal.py" "$1" "$2"; }

dump_args=(--mode dump-features --device cpu --data.path="$TMP/seqs.h5" --target.layer_ids=0,2,4 --teacher.topk=6
           --features.shard_samples=3 --teacher.max_tokens=90 --drafter.block_size=4)
for t in dense hybrid moe; do
  expect_ok "dump $t G=1" mpirun -np 1 "$R" "${dump_args[@]}" --target.path="$TMP/$t" --features.dir="$TMP/f-$t-1"
  for g in 2 3; do
    expect_ok "dump $t G=$g" mpirun -np "$g" "$R" "${dump_args[@]}" --target.path="$TMP/$t" --features.dir="$TMP/f-$t-$g" \
      --world.teacher_group_size="$g"
    # the split is stated: one line naming every stage's layers
    grep -q "teacher groups of $g rank(s), the target's layers by weight bytes: stage 0 layers 0-" "$TMP/err" && ok ||
      bad "dump $t G=$g: no line stating the stages"
    out=$(compare "$TMP/f-$t-1" "$TMP/f-$t-$g" 2>&1) && ok || bad "dump $t G=$g differs from the single-rank teacher: $out"
  done
done
# two groups of 2: the shards split between the groups (each last stage writes its own)
expect_ok "dump 2 groups" mpirun -np 4 "$R" "${dump_args[@]}" --target.path="$TMP/hybrid" --features.dir="$TMP/f-2x2" \
  --world.teacher_group_size=2
grep -q "^\[r1\] dump-features: 2 shard(s) of 4" "$TMP/err" && grep -q "^\[r3\] dump-features: 2 shard(s) of 4" "$TMP/err" && ok ||
  bad "2 groups of 2: the last stages did not write 2 shards each: $(grep 'shard(s)' "$TMP/err")"
out=$(compare "$TMP/f-hybrid-1" "$TMP/f-2x2" 2>&1) && ok || bad "2 groups of 2 differ from the single-rank teacher: $out"

# Training: the losses of two single-rank teachers, of one group of 2 and 3 stages, and of two groups of 2.
"$T" make-data "$TMP/data.h5" --target "$TMP/dense" --samples 40 --prompt-len 8 --gen-len 36 --seed 3 >/dev/null 2>&1 ||
  bad "make-data"
train=(--mode train --device cpu --target.path="$TMP/dense" --data.path="$TMP/data.h5" --target.layer_ids=1,3
       --drafter.block_size=6 --drafter.layers=1 --train.steps=12 --train.lr=3e-3 --train.max_anchors=12
       --train.log_interval=3 --train.eval_interval=6 --train.eval_batches=2 --data.max_tokens_per_batch=200
       --data.heldout_samples=6 --teacher.topk=6)
losses() { "$PY" -c "import sys, json; print(' '.join('%.9g' % json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"loss\"' in l))" "$1/metrics.jsonl"; }
expect_ok "train 2 teachers" mpirun -np 3 "$R" "${train[@]}" --run.dir="$TMP/r-1"
want=$(losses "$TMP/r-1")
[ -n "$want" ] && ok || bad "no losses in the run without groups"
for spec in "2 3 g2" "3 4 g3" "2 5 g2x2"; do
  set -- $spec
  expect_ok "train $3" mpirun -np "$2" "$R" "${train[@]}" --run.dir="$TMP/r-$3" --world.teacher_group_size="$1"
  have=$(losses "$TMP/r-$3")
  # the payloads are the same numbers (a batch is named by its index, whichever teacher computes
  # it), so the losses agree to the printed digits up to the bf16 features' rounding (above)
  "$PY" - "$want" "$have" <<'PYEOF' && ok || bad "train $3: losses [$have] differ from [$want]"
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
sys.exit(not (len(a) == len(b) > 0 and all(abs(x - y) <= 1e-4 * max(1, abs(x)) for x, y in zip(a, b))))
PYEOF
done
# every rank's memory peak is in the summary (a group's ranks show its largest stage)
grep -q "peak memory rank 3 (teacher)" "$TMP/err" && ok || bad "train g2x2: no peak memory line for teacher rank 3"
# --mode eval of the drafter the run exported: a group of 2 evaluates as two single-rank teachers do
ev=(--mode eval --device cpu --target.path="$TMP/dense" --data.path="$TMP/data.h5" --eval.drafter="$TMP/r-1/drafter"
    --data.max_tokens_per_batch=200 --teacher.topk=6)
expect_ok "eval 2 teachers" mpirun -np 3 "$R" "${ev[@]}" --run.dir="$TMP/e-1"
expect_ok "eval group of 2" mpirun -np 3 "$R" "${ev[@]}" --run.dir="$TMP/e-2" --world.teacher_group_size=2
"$PY" - "$TMP/e-1/eval.json" "$TMP/e-2/eval.json" <<'PYEOF' && ok || bad "eval with a group of 2 differs: $(cat "$TMP/e-2/eval.json")"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["samples"] == b["samples"] > 0 and a["tau_decode_tokens"] == b["tau_decode_tokens"], (a, b)
assert a["tau_decode_steps"] == b["tau_decode_steps"] and abs(a["loss"] - b["loss"]) <= 1e-4 * max(1, abs(a["loss"])), (a, b)
PYEOF

# A killed stage: rank 1 (the last stage of the group, which sends the payloads) and rank 0 (the
# first, which takes the requests) in turn; the job ends within the timeout, naming the rank.
timeout_s=15
for victim in 1 0; do
  mpirun -np 3 "$R" "${train[@]}" --run.dir="$TMP/r-kill$victim" --train.steps=100000000 --train.eval_interval=100000000 \
    --world.teacher_group_size=2 --rank-timeout "$timeout_s" >"$TMP/kill.out" 2>"$TMP/kill.err" &
  job=$!
  for _ in $(seq 1 1200); do
    grep -q '"step": 6,' "$TMP/r-kill$victim/metrics.jsonl" 2>/dev/null && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  pid=$(rank_pid "$job" "$victim")
  if [ -z "$pid" ]; then
    bad "kill stage $victim: no pid for rank $victim (did the job start? $(tail -3 "$TMP/kill.err"))"
    kill -9 "$job" 2>/dev/null
    wait "$job"
    continue
  fi
  t0=$(date +%s.%N)
  kill -KILL "$pid"
  wait "$job"
  rc=$?
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  [ "$rc" -ne 0 ] && ok || bad "kill stage $victim: the job exited 0"
  awk -v e="$el" -v l="$timeout_s" 'BEGIN { exit !(e < l) }' && ok || bad "kill stage $victim: the job took $el s to end (limit $timeout_s s)"
  first=$(grep -m1 "error:" "$TMP/kill.err")
  echo "kill stage $victim: $first"
  echo "$first" | grep -q "teacher rank $victim (pid [0-9]* on [^)]*) died" && ok ||
    { bad "kill stage $victim: first error line does not name rank $victim"; cat "$TMP/kill.err" >&2; }
  run_dir_free "$TMP/r-kill$victim" 60 || bad "kill stage $victim: a rank still holds the run directory"
done

# Bad group sizes: one line each, before any rank starts working.
expect_fail_mpi "G not dividing" "world.teacher_group_size = 2 does not divide the 3 teacher rank" \
  mpirun -np 4 "$R" "${train[@]}" --run.dir="$TMP/r-bad" --world.teacher_group_size=2
expect_fail_mpi "G over layers" "world.teacher_group_size = 6: .* 5 layers" \
  mpirun -np 7 "$R" "${train[@]}" --run.dir="$TMP/r-bad" --world.teacher_group_size=6

finish
