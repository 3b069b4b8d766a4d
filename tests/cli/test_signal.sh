#!/usr/bin/env bash
# test_signal.sh: SIGUSR1 (SLURM's preemption warning; mpirun forwards it to every rank) makes the
# job finish its current step, write a checkpoint and exit 0 with a line saying how to resume;
# the resumed run continues from that checkpoint.
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
grep -q "stopped by a signal after step" "$TMP/sig.err" && ok || bad "no line saying the job stopped on the signal"
grep -q "resume with" "$TMP/sig.err" && ok || bad "no line saying how to resume"
step=$(ls "$TMP/run/checkpoints" 2>/dev/null | sed -n 's/^step-0*//p' | tail -1)
[ -n "$step" ] && ok || bad "no checkpoint after the signal"
ls -a "$TMP/run/checkpoints" | grep -q tmp && bad "a temporary checkpoint was left" || ok
if [ -n "$step" ]; then
  expect_ok resume mpirun -np 2 "$R" "${base[@]}" --train.steps=$((step + 10)) --run.resume=true
  grep -q "resuming from .*step-0*$step" "$TMP/err" && ok || bad "the resumed job did not start from step $step"
  grep -q "\"step\": $((step + 10))," "$TMP/run/metrics.jsonl" && ok || bad "the resumed job did not reach step $((step + 10))"
fi
finish
