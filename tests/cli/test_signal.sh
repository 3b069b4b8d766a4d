#!/usr/bin/env bash
# test_signal.sh: a signal stops every mode at the end of its unit, publishes what is complete and
# exits 0 with a line saying how to resume (src/common/core/stop.h, docs/faults.md "Signals"):
#   1. training: SIGUSR1 to mpirun (SLURM's preemption warning; mpirun forwards it to every rank):
#      the step finishes, a checkpoint, exit 0; the resumed run continues from that checkpoint.
#   2. training: SIGTERM to launch/mpirun_stop.sh (what kill, a terminal or a batch script sends):
#      exit 0 with a checkpoint written; and SIGTERM to the ranks themselves (SLURM's scancel).
#   3. checkpoint.every_minutes: a checkpoint by wall time before the last step; --mode eval stopped
#      by SIGUSR1 exits 0 without eval.json.
#   4. dump-features and regenerate: SIGUSR1 to mpirun and SIGTERM to mpirun_stop.sh: exit 0, the
#      "stopped by" line, no index / merged set yet; the resumed job completes an output equal to an
#      uninterrupted run's.
#   A stop heard by one rank alone reaches the whole job (src/common/comm/stop_relay.h): SIGTERM to
#   the teacher alone and SIGUSR2 to one student of two (training), SIGTERM to the teacher of an
#   evaluation, SIGTERM to one rank of dump-features and of regenerate (the other stops at its next
#   unit rather than running on through its shards).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=100000000
      --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --run.dir="$TMP/run")
mpirun -np 2 "$R" "${base[@]}" --train.steps=100000000 >"$TMP/sig.out" 2>"$TMP/sig.err" &
job=$!
reached=0
for _ in $(seq 1 1200); do # until training has logged step 10 (a hang bound: at most 120 s on a busy machine)
  grep -qs '"step": 10,' "$TMP/run/metrics.jsonl" && { reached=1; break; }
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
[ "$reached" = 1 ] && ok || { bad "the job did not reach step 10"; tail -5 "$TMP/sig.err" >&2; }
kill -USR1 "$job"
wait "$job"
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "the signalled job exited $rc"; tail -5 "$TMP/sig.err" >&2; }
grep -q "stopped by SIGUSR1 after step" "$TMP/sig.err" && ok || bad "no line saying the job stopped on the signal"
grep -q "resume with" "$TMP/sig.err" && ok || bad "no line saying how to resume"
step=$(ls "$TMP/run/checkpoints" 2>/dev/null | sed -n 's/^step-0*//p' | tail -1)
[ -n "$step" ] && ok || bad "no checkpoint after the signal"
ls -a "$TMP/run/checkpoints" | grep -q tmp && bad "a temporary checkpoint was left" || ok
if [ -n "$step" ]; then
  expect_ok resume mpirun -np 2 "$R" "${base[@]}" --train.steps=$((step + 10)) --run.resume=true
  grep -q "resuming from .*step-0*$step" "$TMP/err" && ok || bad "the resumed job did not start from step $step"
  grep -q "\"step\": $((step + 10))," "$TMP/run/metrics.jsonl" && ok || bad "the resumed job did not reach step $((step + 10))"
fi

# wait_for PATTERN FILE JOB: until FILE has PATTERN (a hang bound: 120 s); 1 when the job ended first
wait_for() {
  for _ in $(seq 1 1200); do
    grep -qs -- "$1" "$2" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# newest_step DIR: the newest checkpoint's step in DIR/checkpoints ("" when none)
newest_step() { ls "$1/checkpoints" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1; }

# ---- 2. SIGTERM to launch/mpirun_stop.sh, and to the ranks themselves
STOP=$SRC/launch/mpirun_stop.sh
"$STOP" -np 2 "$R" "${base[@]}" --train.steps=100000000 --run.dir="$TMP/run2" >"$TMP/t.out" 2>"$TMP/t.err" &
job=$!
wait_for '"step": 10,' "$TMP/run2/metrics.jsonl" "$job" && ok || bad "mpirun_stop.sh: the job did not reach step 10"
kill -TERM "$job"
wait "$job"; rc=$?
[ "$rc" -eq 0 ] && ok || { bad "SIGTERM to mpirun_stop.sh: exit $rc"; tail -5 "$TMP/t.err" >&2; }
grep -q "stopped by SIGUSR1 after step" "$TMP/t.err" && ok || bad "SIGTERM to mpirun_stop.sh: no line saying the job stopped"
[ -n "$(newest_step "$TMP/run2")" ] && ok || bad "SIGTERM to mpirun_stop.sh: no checkpoint"

mpirun -np 2 "$R" "${base[@]}" --train.steps=100000000 --run.dir="$TMP/run3" >"$TMP/t.out" 2>"$TMP/t.err" &
job=$!
wait_for '"step": 10,' "$TMP/run3/metrics.jsonl" "$job" && ok || bad "ranks: the job did not reach step 10"
for r in 0 1; do kill -TERM "$(rank_pid "$job" "$r")"; done
wait "$job"; rc=$?
[ "$rc" -eq 0 ] && ok || { bad "SIGTERM to the ranks: exit $rc"; tail -5 "$TMP/t.err" >&2; }
grep -q "stopped by SIGTERM after step" "$TMP/t.err" && ok || bad "SIGTERM to the ranks: no line saying the job stopped"
[ -n "$(newest_step "$TMP/run3")" ] && ok || bad "SIGTERM to the ranks: no checkpoint"

# ---- a stop heard by one rank of either role reaches the whole job (src/common/comm/stop_relay.h):
# SIGTERM to the teacher alone (a node of teachers drained), then SIGUSR2 to one student of two: the
# students checkpoint after their step and stop, exit 0 (before: a teacher ignored it and the job ran on)
one_rank() { # one_rank NAME RANK SIGNAL RUN ARGS...: a long training job, SIGNAL to RANK alone at step 10
  local name=$1 victim=$2 sig=$3 run=$4 rc
  shift 4
  mpirun -np 3 "$R" "${base[@]}" --train.steps=100000000 --run.dir="$run" "$@" >"$TMP/o.out" 2>"$TMP/o.err" &
  job=$!
  wait_for '"step": 10,' "$run/metrics.jsonl" "$job" || bad "$name: the job did not reach step 10"
  kill -"$sig" "$(rank_pid "$job" "$victim")"
  for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done # a hang bound: 60 s
  kill -0 "$job" 2>/dev/null && { bad "$name: the job ran on after the signal"; kill -9 "$job"; }
  wait "$job"; rc=$?
  [ "$rc" -eq 0 ] && ok || { bad "$name: exit $rc"; tail -5 "$TMP/o.err" >&2; }
  grep -q "stopped by SIG$sig after step .* with a checkpoint" "$TMP/o.err" && ok || { bad "$name: no line saying the job stopped"; tail -5 "$TMP/o.err" >&2; }
  [ -n "$(newest_step "$run")" ] && ok || bad "$name: no checkpoint"
}
one_rank "SIGTERM to the teacher alone" 0 TERM "$TMP/run5"
one_rank "SIGUSR2 to one student of two" 2 USR2 "$TMP/run6" --world.students=2 --train.batches_per_step=2

# ---- 3. checkpoint.every_minutes (0.005: 0.3 s): a checkpoint by wall time before the last step
# (every teacher batch slowed by 1 ms, so that 3000 steps take at least 3 s on any machine)
expect_ok every_minutes mpirun -np 2 "$R" "${base[@]}" --train.steps=3000 --checkpoint.every_minutes=0.005 \
  --checkpoint.keep=1000 --run.dir="$TMP/run4" --test.slow_teacher=-2 --test.slow_ms=1
n=$(ls "$TMP/run4/checkpoints" 2>/dev/null | grep -c '^step-')
[ "$n" -ge 2 ] && ok || bad "checkpoint.every_minutes: $n checkpoint(s), wanted one by wall time and the last"
[ "$(newest_step "$TMP/run4")" = 3000 ] && ok || bad "checkpoint.every_minutes: no checkpoint at the last step"

# ---- eval: SIGUSR1 mid-evaluation (the teacher slowed to 0.5 s a batch): exit 0, no eval.json
ev=(--mode eval --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --data.max_tokens_per_batch=60
    --teacher.topk=6 --eval.drafter="$TMP/run4/drafter" --test.slow_teacher=0 --test.slow_ms=500)
mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/ev" >"$TMP/e.out" 2>"$TMP/e.err" &
job=$!
wait_for "eval: drafter" "$TMP/e.err" "$job" || bad "eval: the job never loaded its drafter"
sleep 0.5
kill -USR1 "$job"
wait "$job"; rc=$?
[ "$rc" -eq 0 ] && ok || { bad "eval, SIGUSR1: exit $rc"; tail -5 "$TMP/e.err" >&2; }
grep -q "eval: stopped by SIGUSR1 before the evaluation was complete: nothing written" "$TMP/e.err" && ok ||
  { bad "eval, SIGUSR1: no line saying it stopped"; tail -5 "$TMP/e.err" >&2; }
[ ! -e "$TMP/ev/eval.json" ] && ok || bad "eval, SIGUSR1: eval.json written by a stopped evaluation"
# the same with SIGTERM to the teacher rank alone: it tells the student (before: the evaluation ran to its end)
mpirun -np 2 "$R" "${ev[@]}" --run.dir="$TMP/ev2" >"$TMP/e.out" 2>"$TMP/e.err" &
job=$!
wait_for "eval: drafter" "$TMP/e.err" "$job" || bad "eval: the job never loaded its drafter"
sleep 0.5
kill -TERM "$(rank_pid "$job" 0)"
wait "$job"; rc=$?
[ "$rc" -eq 0 ] && ok || { bad "eval, SIGTERM to the teacher: exit $rc"; tail -5 "$TMP/e.err" >&2; }
grep -q "eval: stopped by SIGTERM before the evaluation was complete: nothing written" "$TMP/e.err" && ok ||
  { bad "eval, SIGTERM to the teacher: no line saying it stopped"; tail -5 "$TMP/e.err" >&2; }
[ ! -e "$TMP/ev2/eval.json" ] && ok || bad "eval, SIGTERM to the teacher: eval.json written by a stopped evaluation"

# ---- 4. dump-features and regenerate
"$T" make-data "$TMP/data200.h5" --target "$TMP/target" --samples 200 --prompt-len 6 --gen-len 24 --seed 3 >/dev/null 2>&1 || bad "make-data 200"
dump=(--mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/data200.h5" --target.layer_ids=0,1
      --teacher.topk=6 --drafter.block_size=6 --features.shard_samples=2 --data.max_tokens_per_batch=200)
PY=/usr/bin/python3
expect_ok "dump uninterrupted" mpirun -np 2 "$R" "${dump[@]}" --features.dir="$TMP/feat_full"
# stopped_job NAME HOW DONE_GLOB OUT ARGS...: runs ARGS under mpirun (HOW usr1: SIGUSR1 to mpirun;
# term: under mpirun_stop.sh, SIGTERM to it) and signals it once DONE_GLOB matches a file; the job
# must exit 0 with a "stopped by" line and leave no OUT; then the same command completes it.
# Every rank is slowed (test.slow_teacher=-2: 40 ms a batch or a shard), so that the signal lands
# before the last unit on any machine: a fast one finished an unslowed regenerate before it arrived.
stopped_job() {
  local name=$1 how=$2 glob=$3 out=$4 job rc
  shift 4
  set -- "$@" --test.slow_teacher=-2 --test.slow_ms=40
  if [ "$how" = term ]; then "$STOP" -np 2 "$@" >"$TMP/s.out" 2>"$TMP/s.err" &
  else mpirun -np 2 "$@" >"$TMP/s.out" 2>"$TMP/s.err" & fi
  job=$!
  for _ in $(seq 1 1200); do compgen -G "$glob" >/dev/null && break; kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
  case $how in
  usr1) kill -USR1 "$job" ;;
  term) kill -TERM "$job" ;;
  rank1) kill -TERM "$(rank_pid "$job" 1)" ;; # one rank alone: it tells the other (stop_relay.h)
  esac
  wait "$job"; rc=$?
  [ "$rc" -eq 0 ] && ok || { bad "$name: exit $rc after the signal"; tail -5 "$TMP/s.err" >&2; }
  grep -q "stopped by SIG.*resume with the same command" "$TMP/s.err" && ok || { bad "$name: no line saying it stopped"; tail -5 "$TMP/s.err" >&2; }
  [ ! -e "$out" ] && ok || bad "$name: $out written although the job was stopped (make the job bigger?)"
  # every rank stopped at its unit: the other rank did not go on through its shards (the parts or
  # shards on disk: far fewer than half of the job's)
  if [ "$how" = rank1 ]; then
    local n
    n=$(compgen -G "$glob" | wc -l)
    [ "$n" -lt "$half" ] && ok || bad "$name: $n units written after the signal to one rank (the other rank ran on)"
    return # (the resume is the other cases')
  fi
  expect_ok "$name: resumed" mpirun -np 2 "$@"
}
stopped_job "dump, SIGUSR1 to mpirun" usr1 "$TMP/feat_a/features-*.h5" "$TMP/feat_a/features.json" "$R" "${dump[@]}" --features.dir="$TMP/feat_a"
"$PY" "$SRC/tests/cli/features_equal.py" "$TMP/feat_full" "$TMP/feat_a" >/dev/null && ok || bad "dump, SIGUSR1: the resumed features differ"
stopped_job "dump, SIGTERM to mpirun_stop.sh" term "$TMP/feat_b/features-*.h5" "$TMP/feat_b/features.json" "$R" "${dump[@]}" --features.dir="$TMP/feat_b"
"$PY" "$SRC/tests/cli/features_equal.py" "$TMP/feat_full" "$TMP/feat_b" >/dev/null && ok || bad "dump, SIGTERM: the resumed features differ"
half=50 # of the 100 shards
stopped_job "dump, SIGTERM to rank 1 alone" rank1 "$TMP/feat_c/features-*.h5" "$TMP/feat_c/features.json" "$R" "${dump[@]}" --features.dir="$TMP/feat_c"

stopped_job "dump, a teacher group of 2, SIGUSR1" usr1 "$TMP/feat_g/features-*.h5" "$TMP/feat_g/features.json" "$R" "${dump[@]}" \
  --world.teacher_group_size=2 --features.dir="$TMP/feat_g"
"$PY" "$SRC/tests/cli/features_equal.py" "$TMP/feat_full" "$TMP/feat_g" >/dev/null && ok || bad "dump, teacher group: the resumed features differ"

"$PY" - "$TMP/prompts.jsonl" <<'PYEOF'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(80):
        f.write(json.dumps({"input_ids": [r.randrange(150) for _ in range(r.randint(2, 12))]}) + "\n")
PYEOF
regen=(--mode regenerate --device cpu --target.path="$TMP/target" --regenerate.prompts="$TMP/prompts.jsonl"
       --regenerate.max_new_tokens=24 --regenerate.shard_prompts=2 --regenerate.max_seqs=2)
expect_ok "regenerate uninterrupted" mpirun -np 2 "$R" "${regen[@]}" --regenerate.out="$TMP/full.h5"
stopped_job "regenerate, SIGUSR1 to mpirun" usr1 "$TMP/ra.h5.parts/part-*.h5" "$TMP/ra.h5" "$R" "${regen[@]}" --regenerate.out="$TMP/ra.h5"
cmp -s "$TMP/full.h5" "$TMP/ra.h5" && ok || bad "regenerate, SIGUSR1: the resumed set differs from the uninterrupted one"
stopped_job "regenerate, SIGTERM to mpirun_stop.sh" term "$TMP/rb.h5.parts/part-*.h5" "$TMP/rb.h5" "$R" "${regen[@]}" --regenerate.out="$TMP/rb.h5"
cmp -s "$TMP/full.h5" "$TMP/rb.h5" && ok || bad "regenerate, SIGTERM: the resumed set differs from the uninterrupted one"
half=20 # of the 40 shards
stopped_job "regenerate, SIGTERM to rank 1 alone" rank1 "$TMP/rc.h5.parts/part-*.h5" "$TMP/rc.h5" "$R" "${regen[@]}" --regenerate.out="$TMP/rc.h5"
finish
