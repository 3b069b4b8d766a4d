#!/usr/bin/env bash
# mpirun_stop.sh: mpirun with a graceful stop, for a terminal, `kill` or a batch script.
#
#   launch/mpirun_stop.sh -np 3 build/dflash_rank --config run.json [--key=value ...]
#
# SIGTERM, SIGINT (Ctrl-C), SIGUSR1 or SIGUSR2 sent to this script reach every rank as SIGUSR1,
# which mpirun forwards to all of them at once and kills nothing: each rank finishes its unit (a
# training step, then a checkpoint; a dump-features shard; a regenerate part), publishes it, says
# how to resume, and the job exits 0. mpirun runs in a session of its own, so a terminal's Ctrl-C
# reaches this script only: SIGTERM or SIGINT sent to mpirun itself is Open MPI's abort instead (the
# ranks get SIGTERM after odls_base_sigkill_timeout, SIGKILL that long later, and mpirun exits
# non-zero whatever they did; docs/faults.md, "Signals"). The exit status is mpirun's.
setsid mpirun "$@" &
pid=$!
stop() {
  echo "mpirun_stop.sh: got SIG$1: every rank finishes its step or shard and stops (SIGUSR1 to mpirun $pid)" >&2
  kill -USR1 "$pid" 2>/dev/null
}
trap 'stop TERM' TERM
trap 'stop INT' INT
trap 'stop USR1' USR1
trap 'stop USR2' USR2
# bash runs a trap only between commands: a trapped signal ends the wait early, and the loop waits again
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done
wait "$pid"
