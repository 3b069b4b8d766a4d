#!/usr/bin/env bash
# test_faults.sh: a rank that dies (SIGKILL) or hangs (SIGSTOP, past --rank-timeout) ends the
# whole job with a non-zero exit, with a first error line that names the rank and the last
# checkpointed step; the checkpoints stay loadable (a resumed run continues from the
# newest). A rank of regenerate or transport-test stopped mid-run ends the job too. Also: one SIGINT
# stops like SIGTERM (checkpoint, exit 0), a second SIGINT aborts at once.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
# short enough for the hang cases to end soon, long enough that the start-up allowance (5 x) covers
# a sanitizer build on a loaded machine
timeout_s=15
base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=100000000
      --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6
      --checkpoint.every=10 --rank-timeout "$timeout_s")
job_n=0 # start_job's run folders: $TMP/run1, run2, ...


# start_job NP [STEP [ARGS...]]: a long run in the background (job=mpirun's pid); returns once
# step STEP (default 20) is logged
start_job() {
  local np=$1 at=${2:-20}
  shift; shift
  # a run folder per job: nothing an earlier job left (or a rank of it still winding down) can be
  # taken for this one's
  job_n=$((job_n + 1))
  RUN=$TMP/run$job_n
  mpirun -np "$np" "$R" "${base[@]}" --run.dir="$RUN" --train.steps=100000000 "$@" >"$TMP/job.out" 2>"$TMP/job.err" &
  job=$!
  for _ in $(seq 1 1200); do # at most 120 s (the machine may be busy with other tests)
    grep -q "\"step\": $at," "$RUN/metrics.jsonl" 2>/dev/null && return 0
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  bad "the job did not reach step 20"; cat "$TMP/job.err" >&2
  return 1
}

# fault NAME SIGNAL RANK LIMIT PATTERN: send SIGNAL to RANK of a 2-teacher + 1-student job; the
# job must end non-zero, its first error line matching PATTERN and naming the newest checkpoint's
# step, and the newest checkpoint loadable. LIMIT only catches a hang: several times the expected
# time, so that a loaded machine (CI, a parallel build, the sanitizer build) cannot fail the test.
fault() {
  local name=$1 sig=$2 victim=$3 limit=$4 pattern=$5
  start_job 3 || return
  local pid t0 rc el
  pid=$(rank_pid "$job" "$victim")
  [ -n "$pid" ] || { bad "$name: no pid for rank $victim"; kill -9 "$job"; wait "$job"; return; }
  t0=$(date +%s.%N)
  kill -"$sig" "$pid"
  wait "$job"
  rc=$?
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  [ "$rc" -ne 0 ] && ok || bad "$name: the job exited 0"
  # A rank may outlive its mpirun while it winds down (a stopped victim woken at the end finishes its
  # step and checkpoints); it holds run.dir's lock until it exits, so the resume below waits for it.
  run_dir_free "$RUN" 60 && ok || bad "$name: a rank of the job still holds $RUN 60 s after the job ended"
  awk -v e="$el" -v l="$limit" 'BEGIN { exit !(e < l) }' && ok || bad "$name: the job took $el s to end (limit $limit s)"
  local first step
  first=$(grep -m1 "error:" "$TMP/job.err")
  echo "$name: $first"
  echo "$first" | grep -q -- "$pattern" && ok || { bad "$name: first error line lacks '$pattern'"; cat "$TMP/job.err" >&2; }
  # the first error line names a checkpoint that was complete. A stopped rank that the job's end
  # wakes (mpirun sends SIGCONT before SIGTERM) trains on until the signal lands and checkpoints
  # again: it may add newer ones and prune the named one (checkpoint.keep). Then the newest is past
  # the named step, and the resume the line advises starts from the newest.
  local named
  named=$(echo "$first" | sed -n 's/.*last checkpoint: step \([0-9]*\) in.*/\1/p')
  step=$(ls "$RUN/checkpoints" | sed -n 's/^step-0*//p' | tail -1)
  [ -n "$named" ] && { [ -d "$RUN/checkpoints/step-$(printf %08d "$named")" ] || [ "${step:-0}" -gt "$named" ]; } && ok ||
    bad "$name: first error line does not name a checkpoint that exists or was superseded (${named:-none}; newest ${step:-none})"
  if grep -qiE "segmentation|core dumped" "$TMP/job.err"; then bad "$name: a rank crashed"; else ok; fi
  # one rank says it, not every rank that saw it; and a stopped victim that mpirun's SIGCONT wakes at
  # the end (before SIGTERM and SIGKILL) says nothing: it would blame a healthy rank (one that exited
  # while it was stopped, or a wait that outlasted the timeout meanwhile; watchdog.h)
  local lines
  lines=$(grep -E "^\[r[0-9]+\] error:" "$TMP/job.err" | grep -vc "^\[r$victim\]")
  [ "$lines" -eq 1 ] && ok || { bad "$name: $lines error lines, wanted one"; grep "error:" "$TMP/job.err" >&2; }
  if [ "$sig" = STOP ]; then
    grep -q "^\[r$victim\] error:" "$TMP/job.err" && { bad "$name: the stopped rank, woken, printed an error line:"; grep "^\[r$victim\] error:" "$TMP/job.err" >&2; } || ok
  fi
  # the newest checkpoint loads: a resumed run continues from it
  expect_ok "$name resume" mpirun -np 3 "$R" "${base[@]}" --run.dir="$RUN" --train.steps=$((step + 5)) --run.resume=true
  grep -q "resuming from .*step-0*$step" "$TMP/err" && ok || bad "$name: the resumed job did not start from step $step"
  # a write cut short by the fault leaves only a temporary directory, which the next write removes
  ls -a "$RUN/checkpoints" | grep -q tmp && bad "$name: a temporary checkpoint is left after the resumed run" || ok
}

# A death is seen at once (the peers on the same host watch each other's process: well under a
# second), so its bound is the timeout itself: a death noticed only by the timeout would take
# longer. A hang is seen after the timeout by the rank waiting on the hung one, and after 1.5 x the
# timeout by a teacher that waits for requests (its idle wait also depends on other ranks); their
# bound is 3 x the timeout + 10 s. A rank stopped (SIGSTOP) on the same host is also seen as stopped
# by any rank that waits, after the timeout: the line then names it as stopped, whichever rank
# reports it. What the test asserts is the exit, the line and the checkpoint.
hang_limit=$((timeout_s * 3 + 10))
fault "teacher SIGKILL" KILL 0 "$timeout_s" "teacher rank 0 (pid [0-9]* on [^)]*) died"
fault "student SIGKILL" KILL 2 "$timeout_s" "student rank 2 (pid [0-9]* on [^)]*) died"
fault "teacher hang" STOP 1 "$hang_limit" "teacher rank 1 (.*) \(sent nothing\|has been stopped (SIGSTOP)\) for [0-9]* s while this rank waited for .*(run.rank_timeout $timeout_s s)"
fault "student hang" STOP 2 "$hang_limit" "student rank 2 (.*) \(sent nothing\|has been stopped (SIGSTOP)\) for [0-9]* s while this rank waited for a request"

# Every wait of every mode is timed (watchdog.h): a rank of regenerate or transport-test stopped
# mid-run ends the job within the timeout, with a line naming it, and says nothing once woken
# (before: the others finished and waited in an untimed all-reduce or barrier for ever).
# stopped_mid NAME VICTIM PATTERN ARGS...: mpirun -np 3 ARGS; SIGSTOP to rank VICTIM once the job's
# output has PATTERN.
stopped_mid() {
  local name=$1 victim=$2 pattern=$3 pid="" rc
  shift 3
  mpirun -np 3 "$R" "$@" --rank-timeout 3 >"$TMP/m.out" 2>"$TMP/m.err" &
  job=$!
  for _ in $(seq 1 3000); do # at most 60 s
    grep -qs -- "$pattern" "$TMP/m.out" "$TMP/m.err" && { pid=$(rank_pid "$job" "$victim"); [ -n "$pid" ] && break; }
    kill -0 "$job" 2>/dev/null || break
    sleep 0.02
  done
  [ -n "$pid" ] || { bad "$name: rank $victim never seen mid-run"; kill -9 "$job" 2>/dev/null; wait "$job"; return; }
  kill -STOP "$pid"
  for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done # a hang bound: 30 s
  kill -0 "$job" 2>/dev/null && { bad "$name: the job still runs 30 s after rank $victim was stopped"; kill -9 "$pid" "$job"; }
  wait "$job"; rc=$?
  [ "$rc" -ne 0 ] && ok || bad "$name: exit 0 with rank $victim stopped"
  grep "error:" "$TMP/m.err" | grep -q "rank $victim (.*hung or unreachable" && ok || { bad "$name: no line naming rank $victim:"; cat "$TMP/m.err" >&2; }
  grep -q "^\[r$victim\] error:" "$TMP/m.err" && { bad "$name: the stopped rank, woken, printed an error line:"; grep "error:" "$TMP/m.err" >&2; } || ok
}
/usr/bin/python3 -c 'import json, random
r = random.Random(7)
for i in range(30): print(json.dumps({"input_ids": [r.randrange(150) for _ in range(r.randint(2, 12))]}))' >"$TMP/prompts.jsonl"
stopped_mid "regenerate, a rank stopped mid-run" 1 "regenerate (the job" --mode regenerate --device cpu --target.path="$TMP/target" \
  --regenerate.prompts="$TMP/prompts.jsonl" --regenerate.max_new_tokens=24 --regenerate.shard_prompts=2 \
  --regenerate.out="$TMP/regen.h5" --test.slow_teacher=-2 --test.slow_ms=100
stopped_mid "transport-test, a teacher stopped mid-run" 0 "GB/s" --mode transport-test --device cpu --world.students=2

# SIGINT to the student: once = stop with a checkpoint, exit 0; twice = abort at once (no new
# checkpoint). The teacher is slowed (0.2 s a batch) so that the second SIGINT lands while the
# student still finishes its step.
# (no hang is tested here: the default timeout, so a loaded machine cannot end these jobs early)
slow=(--test.slow_teacher=0 --test.slow_ms=200 --rank-timeout 600)
start_job 2 5 "${slow[@]}" && {
  kill -INT "$(rank_pid "$job" 1)"
  wait "$job"
  rc=$?
  [ "$rc" -eq 0 ] && ok || { bad "one SIGINT: exit $rc"; cat "$TMP/job.err" >&2; }
  grep -q "interrupt again to abort" "$TMP/job.err" && ok || bad "one SIGINT: no line saying a second one aborts"
  grep -q "stopped by SIGINT after step" "$TMP/job.err" && ok || bad "one SIGINT: no checkpoint line"
}
start_job 2 5 "${slow[@]}" && {
  pid=$(rank_pid "$job" 1)
  t0=$(date +%s.%N)
  kill -INT "$pid"; sleep 0.1; kill -INT "$pid"
  wait "$job"
  rc=$?
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  [ "$rc" -ne 0 ] && ok || bad "two SIGINTs: exit 0"
  # a hang bound only (the exit code tells the abort from the checkpointed stop): at once is well
  # under a second
  awk -v e="$el" 'BEGIN { exit !(e < 30) }' && ok || bad "two SIGINTs: took $el s"
  grep -q "error: interrupted twice: aborted at once" "$TMP/job.err" && ok || { bad "two SIGINTs: no abort line"; cat "$TMP/job.err" >&2; }
}
finish
