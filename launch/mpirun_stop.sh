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
#
# A signal that comes while the job starts (mpirun not yet forwarding, a rank not yet listening) is
# held and passed on once mpirun and its ranks on this host catch SIGUSR1 (at most 10 s for the
# ranks: those on other hosts cannot be seen from here), so an early stop neither kills mpirun (which
# SIGUSR1 would end before it installs its handler) nor is lost.
pending="" asked=0 pid=""
stop() {
  echo "mpirun_stop.sh: got SIG$1: every rank finishes its step or shard and stops (SIGUSR1 to mpirun${pid:+ $pid})" >&2
  pending=$1 asked=$SECONDS
}
# the traps first: a signal from the first instant on is a graceful stop
trap 'stop TERM' TERM
trap 'stop INT' INT
trap 'stop USR1' USR1
trap 'stop USR2' USR2
# catches_usr1 PID: the process has a handler for SIGUSR1 (bit 10 of SigCgt in /proc/PID/status)
catches_usr1() {
  local mask
  mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null)
  [ -n "$mask" ] && (( (16#$mask >> 9) & 1 ))
}
# ready: mpirun forwards SIGUSR1, and its ranks on this host (its children) catch it
ready() {
  catches_usr1 "$pid" || return 1
  [ $((SECONDS - asked)) -ge 10 ] && return 0
  local kid n=0
  for kid in $(pgrep -P "$pid" 2>/dev/null); do
    catches_usr1 "$kid" || return 1
    n=$((n + 1))
  done
  [ "$n" -gt 0 ]
}
# a host lost off the network ends the job within about 30 s (mpi_keepalive.sh)
ka="$(dirname "$0")/mpi_keepalive.sh"
[ -f "$ka" ] && source "$ka"
setsid mpirun "$@" &
pid=$!
# bash runs a trap only between commands: a trapped signal ends the wait early, and the loop waits
# again; a held stop is passed on as soon as the job can take it
while kill -0 "$pid" 2>/dev/null; do
  if [ -n "$pending" ] && ready; then
    pending=""
    kill -USR1 "$pid" 2>/dev/null
  elif [ -n "$pending" ]; then
    sleep 0.05
  else
    wait "$pid"
  fi
done
wait "$pid"
