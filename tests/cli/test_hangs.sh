#!/usr/bin/env bash
# test_hangs.sh: a rank stopped (SIGSTOP) at any moment, in every mode, ends the job within the rank
# timeout (docs/faults.md, "Dead and hung ranks"): the watchdog runs from before MPI starts to after
# it ends. Each case stops one rank at the very start (the moment its process exists: before or
# inside MPI_Init) or in the middle, and checks that the job ends non-zero with one line saying a
# rank is hung, and that the ranks left waiting sleep rather than spin (CPU well under one core).
# The bounds only catch a hang: several times the expected time, for a loaded machine.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
timeout_s=4
limit=$((timeout_s * 5 * 3 + 30)) # the start-up allows 5 x the timeout
common=(--device cpu --target.path="$TMP/target" --rank-timeout "$timeout_s")
train=(--mode train "${common[@]}" --data.path="$TMP/data.h5" --target.layer_ids=0,1 --drafter.block_size=6
       --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=100000000 --train.eval_batches=1
       --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6)
dump=(--mode dump-features "${common[@]}" --data.path="$TMP/data.h5" --target.layer_ids=0,1 --teacher.topk=6 --drafter.block_size=6
      --features.shard_samples=2 --data.max_tokens_per_batch=200)
n=0

# cpu_ticks PID: utime + stime of the process (all its threads), in clock ticks
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# hang NAME NP VICTIM WHEN ARGS...: run ARGS under mpirun -np NP; stop rank VICTIM at WHEN (start:
# as soon as its process exists; a pattern: once the job's stderr has it); the job must end non-zero
# within the limit with one "hung or unreachable" line, and a waiting rank must not spin.
hang() {
  local name=$1 np=$2 victim=$3 when=$4
  shift 4
  n=$((n + 1))
  mpirun -np "$np" "$R" "$@" --run.dir="$TMP/run$n" --features.dir="$TMP/feat$n" >"$TMP/h.out" 2>"$TMP/h.err" &
  local job=$! pid="" t0 rc el
  for _ in $(seq 1 6000); do # at most 60 s
    if [ "$when" = start ] || grep -q -- "$when" "$TMP/h.err"; then
      pid=$(rank_pid "$job" "$victim")
      [ -n "$pid" ] && break
    fi
    kill -0 "$job" 2>/dev/null || break
    sleep 0.01
  done
  [ -n "$pid" ] || { bad "$name: rank $victim never seen"; kill -9 "$job" 2>/dev/null; wait "$job"; cat "$TMP/h.err" >&2; return; }
  kill -STOP "$pid"
  t0=$(date +%s)
  # the others wait on the stopped rank: they sleep (a spinning rank takes a whole core)
  sleep 2
  local others=() p before after
  for p in $(pgrep -P "$job"); do [ "$p" != "$pid" ] && others+=("$p"); done
  before=0; for p in "${others[@]}"; do before=$((before + $(cpu_ticks "$p"))); done
  sleep 2
  after=0; for p in "${others[@]}"; do after=$((after + $(cpu_ticks "$p"))); done
  if kill -0 "$job" 2>/dev/null; then # still waiting: under a quarter of a core each over the 2 s
    local used=$((after - before)) max=$(( ${#others[@]} * 2 * $(getconf CLK_TCK) / 4 ))
    [ "$used" -le "$max" ] && ok || bad "$name: the waiting ranks used $used ticks in 2 s (at most $max): a busy wait"
  fi
  for _ in $(seq 1 $((limit * 10))); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$job" 2>/dev/null; then
    bad "$name: the job still runs $limit s after rank $victim was stopped (a hang)"
    kill -9 "$pid" 2>/dev/null; kill -9 "$job"; wait "$job"; return
  fi
  wait "$job"; rc=$?
  el=$(( $(date +%s) - t0 ))
  [ "$rc" -ne 0 ] && ok || bad "$name: exit 0 with rank $victim stopped"
  grep -q "hung or unreachable" "$TMP/h.err" && ok || { bad "$name: no line naming a hung rank (after $el s):"; cat "$TMP/h.err" >&2; }
  # the stopped rank is named (a stopped peer on the host is seen as such, in every phase: watchdog.c)
  grep "hung or unreachable" "$TMP/h.err" | grep -q "rank $victim (" && ok || { bad "$name: the line does not name rank $victim:"; cat "$TMP/h.err" >&2; }
  kill -9 "$pid" 2>/dev/null
  true
}

hang "train, a student stopped at start" 2 1 start "${train[@]}" --train.steps=50
hang "train, a teacher stopped at start" 2 0 start "${train[@]}" --train.steps=50
hang "dump-features, a rank stopped at start" 2 1 start "${dump[@]}"
# (every shard slowed by 500 ms, 2 s for each rank's 4: the dump must still be running when the rank is
# stopped, on any machine)
hang "dump-features, a rank stopped while dumping" 3 2 "rank(s)" "${dump[@]}" --test.slow_teacher=-2 --test.slow_ms=500
# (rank 0 slowed by 1.5 s a shard, 9 s for its 6: rank 1 is stopped once its shards are written, seconds
# before rank 0 begins to wait for it; rank 0 must still name it, whichever of the wait's timeout and the
# stop's own count comes first: watchdog.c names a stopped rank in both)
hang "dump-features, a rank stopped before the others wait for it" 2 1 "r1\] dump-features: .* shard(s) of .* on this rank" \
  "${dump[@]}" --test.slow_teacher=0 --test.slow_ms=1500
hang "check, a rank stopped at start" 2 1 start --mode check "${common[@]}" --data.path="$TMP/data.h5"
finish
