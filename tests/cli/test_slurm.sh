#!/usr/bin/env bash
# test_slurm.sh: launch/slurm/dflash.sbatch under a real one-node SLURM on localhost. munged,
# slurmctld and slurmd are started here with their own key, socket, ports, config, state and logs
# under the test's directory (SLURM_CONF points the daemons and the clients at it). A tiny CPU run
# (1 teacher + 1 student) gets the preemption warning the way --signal=B:USR1@300 sends it (USR1
# to the batch shell only), checkpoints, is requeued by the script, resumes from that checkpoint
# and finishes: once with mpirun, once with srun --mpi=pmix (when SLURM has PMIx). A job whose
# launcher fails, one whose launcher runs nothing, and one cancelled with scancel are not requeued.
# The daemons and every process of theirs are stopped at exit, also on failure. About 55 s on 2
# cores.
# Needs root (slurmd runs the jobs); installs slurmctld, slurmd, slurm-client and munge with apt-get
# when they are missing (not on a machine run by systemd, where that would start them as services),
# and is skipped (77) when they cannot be had.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PATH=$PATH:/usr/sbin:/sbin
skip() { echo "test_slurm: SKIPPED: $*"; exit 77; } # the EXIT trap removes TMP (and stops the daemons)

# A SLURM job around the test (a CI runner) must not leak into ours.
for v in $(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|SQUEUE|SINFO|SCONTROL|SCANCEL)_'); do unset "$v"; done

# --- SLURM and munge: installed, or installed now, or skipped --------------------------------------
[ "$(id -u)" -eq 0 ] || skip "needs root (slurmd must run as root to start the jobs)"
have_slurm() { command -v slurmctld && command -v slurmd && command -v munged && command -v munge &&
               command -v sbatch && command -v scontrol && command -v sinfo; } >/dev/null 2>&1
# Under systemd the packages' scripts enable and start munge, slurmd and slurmctld as services of
# the machine: not something a test should do; there they are left to whoever runs the tests.
if ! have_slurm && [ -d /run/systemd/system ]; then
  skip "SLURM is not installed; on this systemd machine installing it starts its services, so do it by hand if wanted: apt-get install slurmctld slurmd slurm-client munge"
fi
if ! have_slurm && command -v apt-get >/dev/null; then
  echo "test_slurm: installing slurmctld slurmd slurm-client munge with apt-get"
  apt_install() {
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q --no-install-recommends \
      -o DPkg::Lock::Timeout=60 slurmctld slurmd slurm-client munge >>"$TMP/apt.log" 2>&1
  }
  apt_install || { DEBIAN_FRONTEND=noninteractive timeout 300 apt-get update -q >>"$TMP/apt.log" 2>&1 && apt_install; }
fi
if ! have_slurm; then
  why="slurmctld, slurmd, munged or sbatch is missing and could not be installed (apt-get install slurmctld slurmd slurm-client munge)"
  [ -s "$TMP/apt.log" ] && why="$why: $(tail -1 "$TMP/apt.log")"
  skip "$why"
fi

# --- cleanup at exit: jobs, daemons, and any process left with our SLURM_CONF ----------------------
conf=$TMP/slurm.conf
sl() { SLURM_CONF=$conf "$@"; } # a SLURM client (or daemon) of this test's cluster only
munged_pid='' ctld_pid='' slurmd_pid=''
stop_pid() { # stop_pid PID: TERM, up to 5 s, then KILL
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
cleanup() {
  if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2>/dev/null; then
    sl scancel --user=root >/dev/null 2>&1
    for _ in $(seq 1 100); do [ -z "$(sl squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  stop_pid "$slurmd_pid"
  stop_pid "$ctld_pid"
  stop_pid "$munged_pid"
  # Anything else started by our daemons (slurmstepd, a job's shell, mpirun, ranks) has our
  # SLURM_CONF in its environment (this shell does not export it).
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = "$$" ] && continue
    { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf" && kill -9 "$p" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

show_logs() { # after a failure: the daemons' logs and the jobs' output
  local f
  for f in "$TMP"/log/munged.log "$TMP"/log/slurmctld.log "$TMP"/log/slurmd.log; do
    [ -f "$f" ] && { echo "--- $f (end)" >&2; tail -15 "$f" >&2; }
  done
  for f in "$TMP"/job-*.out; do
    [ -f "$f" ] && { echo "--- $f" >&2; grep -v '^\[r[0-9]*\]   ' "$f" >&2; }
  done
}
fail_now() { # a set-up step failed: the rest cannot run
  bad "$*"
  show_logs
  finish
}

# --- munged: its own key, socket, pid, log and seed file -------------------------------------------
# munged wants every directory above its socket to be searchable by all.
chmod 711 "$TMP"
mkdir -p "$TMP/munge" "$TMP/log" "$TMP/state" "$TMP/spool" "$TMP/tmpfs" "$TMP/shm"
chmod 755 "$TMP/munge"
head -c 128 /dev/urandom >"$TMP/munge/munge.key"
chmod 600 "$TMP/munge/munge.key"
sock=$TMP/munge/munge.socket
munge_args=(-F --socket="$sock" --key-file="$TMP/munge/munge.key" --pid-file="$TMP/munge/munged.pid"
            --log-file="$TMP/log/munged.log" --seed-file="$TMP/munge/munged.seed")
start_munged() {
  munged "${munge_args[@]}" "$@" >>"$TMP/log/munged.out" 2>&1 &
  munged_pid=$!
  for _ in $(seq 1 50); do
    munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1 && return 0
    kill -0 "$munged_pid" 2>/dev/null || break
    sleep 0.1
  done
  stop_pid "$munged_pid"
  munged_pid=
  return 1
}
# --force: when a directory above $TMP is not searchable by all, munged runs anyway.
start_munged || start_munged --force || fail_now "munged did not start: $(tail -1 "$TMP/log/munged.out")"

# --- slurm.conf: one node (this machine, as slurmd -C sees it), free ports, everything under TMP ---
# Job ids start at a random number: under srun --mpi=pmix, names outside TMP derive from the job id
# (Open MPI's job id and with it its shared-memory segments; PMIx's directories), and another
# instance of this test running at the same time must not use the same ones. TmpFS (where PMIx makes
# spmix_appdir_UID_JOB.STEP) is under TMP too.
first_job=$((1000 + RANDOM * 30))
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 1 50); do
  port=$((20000 + RANDOM % 30000))
  port_free "$port" && port_free $((port + 1)) && break
done
host=$(hostname -s)
node=$(slurmd -C 2>/dev/null | head -1 | sed 's/ RealMemory=[0-9]*//')
case "$node" in "NodeName=$host "*) ;; *) fail_now "slurmd -C printed '$node', not NodeName=$host ..." ;; esac
cpus=$(echo "$node" | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
[ "${cpus:-0}" -ge 2 ] || skip "the jobs have 2 tasks; SLURM sees ${cpus:-no} CPUs here"
cat >"$conf" <<EOF
ClusterName=dflashtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
TmpFS=$TMP/tmpfs
FirstJobId=$first_job
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
PropagateResourceLimits=NONE
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=3600
KillWait=5
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

# --- slurmctld and slurmd, in the foreground of their own background jobs -----------------------------
# (not through sl: $! must be the daemon itself, not a subshell around it)
SLURM_CONF=$conf slurmctld -D -i >"$TMP/log/slurmctld.out" 2>&1 &
ctld_pid=$!
SLURM_CONF=$conf slurmd -D >"$TMP/log/slurmd.out" 2>&1 &
slurmd_pid=$!
state=
for _ in $(seq 1 1200); do # until the node is idle (a hang bound: at most 120 s on a busy machine)
  state=$(sl sinfo -h -n "$host" -o %t 2>/dev/null)
  [ "$state" = idle ] && break
  kill -0 "$ctld_pid" 2>/dev/null && kill -0 "$slurmd_pid" 2>/dev/null || break
  sleep 0.1
done
[ "$state" = idle ] || fail_now "the node is not idle after 120 s (sinfo: '$state')"
ok

# --- the job: a tiny CPU run (1 teacher + 1 student) ------------------------------------------------
"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
# The three ways to give arguments: a config file (first argument), DFLASH_ARGS, further arguments.
cat >"$TMP/run.json" <<EOF
{"run": {"mode": "train", "device": "cpu"},
 "target": {"path": "$TMP/target", "layer_ids": [0, 1]},
 "teacher": {"topk": 6},
 "drafter": {"block_size": 6},
 "data": {"path": "$TMP/data.h5", "max_tokens_per_batch": 200, "heldout_samples": 4},
 "train": {"max_anchors": 8, "log_interval": 5, "eval_interval": 100000000, "eval_batches": 1}}
EOF
steps=800
# 20 ms per batch from the teacher: about 16 s of training, time enough to signal it midway even
# when a busy machine is slow to deliver the signal (the job is signalled at step 40).
args="--train.steps=$steps --checkpoint.every=20 --checkpoint.keep=100"
submit() { # submit LAUNCHER RUN_DIR SBATCH-SCRIPT-ARGS...: prints the job id
  local launcher=$1 run_dir=$2; shift 2
  # Open MPI's shared-memory files under TMP too: a killed job's leftovers go with it
  OMPI_MCA_btl_vader_backing_directory=$TMP/shm \
  DFLASH_LAUNCHER=$launcher DFLASH_BIN=${bin:-$R} DFLASH_RUN_DIR=$run_dir DFLASH_ARGS=$args \
    sl sbatch --parsable --ntasks=2 --ntasks-per-node=2 --gres=none --chdir="$TMP" -o "$TMP/job-%j.out" \
    "$SRC/launch/slurm/dflash.sbatch" "$TMP/run.json" "$@" 2>"$TMP/sbatch.err"
}
wait_step() { # wait_step JOBID RUN_DIR STEP: until the job has logged STEP (a hang bound: at most 120 s)
  for _ in $(seq 1 600); do
    grep -qs "\"step\": $3," "$2/metrics.jsonl" && return 0
    case "$(job_field "$1" JobState)" in PENDING | RUNNING | CONFIGURING) ;; *) return 1 ;; esac
    sleep 0.2
  done
  return 1
}
job_field() { sl scontrol show job -o "$1" 2>/dev/null | grep -o " $2=[^ ]*" | cut -d= -f2-; }
wait_job_end() { # wait_job_end JOBID SECONDS: until it ends; a requeued job is let start early
  local st reason held=0
  for _ in $(seq 1 $(($2 * 5))); do
    st=$(job_field "$1" JobState)
    reason=$(job_field "$1" Reason)
    case "$st" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) break ;; esac
    # SLURM holds a requeued job back for 2 minutes (Reason=BeginTime); the test waits 3 s of it:
    # slurmd refuses a new start of the job within the second its previous start was killed ("Job
    # credential revoked", and the job fails), a race the 2 minutes are there to avoid.
    if [ "$st" = PENDING ] && [ "$reason" = BeginTime ]; then
      held=$((held + 1))
      [ "$held" -ge 15 ] && sl scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
    fi
    sleep 0.2
  done
  echo "$st"
}
end_job() { # end_job JOBID: cancel a job that is stuck, so that the next ones can run
  sl scancel "$1" >/dev/null 2>&1
  wait_job_end "$1" 15 >/dev/null
}

# --- preempted: USR1 to the batch shell -> checkpoint -> requeue -> resume -> finished -------------
preempt() { # preempt LAUNCHER
  local launcher=$1 run=$TMP/run-$1 job out state restarts step t=$SECONDS
  job=$(submit "$launcher" "$run" --test.slow_teacher=0 --test.slow_ms=20)
  [ -n "$job" ] || { bad "$launcher: sbatch failed: $(cat "$TMP/sbatch.err")"; return; }
  out=$TMP/job-$job.out
  wait_step "$job" "$run" 40 || { bad "$launcher: job $job did not reach step 40 ($(job_field "$job" JobState))"; end_job "$job"; return; }
  # What --signal=B:USR1@300 does 300 s before the time limit: USR1 to the batch shell only.
  sl scancel --batch --signal=USR1 "$job" || bad "$launcher: scancel --batch --signal=USR1 failed"
  state=$(wait_job_end "$job" 300)
  echo "$launcher: job $job $state after $((SECONDS - t)) s"
  [ "$state" = RUNNING ] || [ "$state" = PENDING ] && end_job "$job"
  [ "$state" = COMPLETED ] && ok || bad "$launcher: job $job ended $state, wanted COMPLETED"
  [ "$(job_field "$job" ExitCode)" = 0:0 ] && ok || bad "$launcher: job $job exit code $(job_field "$job" ExitCode)"
  restarts=$(job_field "$job" Restarts)
  [ "${restarts:-0}" -ge 1 ] && ok || bad "$launcher: job $job was not requeued (Restarts=$restarts)"
  grep -q "got SIGUSR1, passing it to the launcher" "$out" && ok || bad "$launcher: the batch shell did not pass USR1 on"
  step=$(sed -n 's/.*stopped by a signal after step \([0-9]*\) .*/\1/p' "$out" | head -1)
  [ -n "$step" ] && ok || bad "$launcher: no line saying the job stopped on the signal"
  if [ -n "$step" ]; then
    [ "$step" -lt "$steps" ] && ok || bad "$launcher: the signal came too late (step $step of $steps)"
    [ -f "$run/checkpoints/step-$(printf %08d "$step")/state.json" ] && ok || bad "$launcher: no checkpoint at step $step: $(ls "$run/checkpoints" | tr '\n' ' ')"
    grep -q "resuming from .*/checkpoints/step-0*$step\$" "$out" && ok || bad "$launcher: the requeued job did not resume from step $step"
  fi
  grep -q "requeueing job $job" "$out" && ok || bad "$launcher: the script did not requeue the job"
  grep -q "start 1 on" "$out" && ok || bad "$launcher: no second start of the job in $out (open-mode append)"
  tail -n 1 "$run/metrics.jsonl" | grep -q "\"summary\": true, \"finished\": true, \"steps\": $steps," && ok || bad "$launcher: metrics.jsonl does not end with a summary of $steps steps"
  grep '"step"' "$run/metrics.jsonl" | grep -v heldout | tail -1 | grep -q "^{\"step\": $steps," && ok || bad "$launcher: the last step logged is not $steps"
  [ -s "$run/drafter/model.safetensors" ] && ok || bad "$launcher: no exported drafter"
  grep -q "the run is finished" "$out" && ok || bad "$launcher: the script did not see the run finish"
}
t0=$SECONDS
preempt mpirun
# srun --mpi=pmix: when this SLURM has the PMIx plugin (Debian's has; Open MPI then talks PMIx to it)
if sl srun --mpi=list 2>&1 | grep -qw pmix; then
  preempt srun
else
  echo "test_slurm: srun --mpi=pmix not checked: this SLURM has no PMIx plugin"
fi

# --- a launcher that fails: the job fails with it, and is not requeued ------------------------------
job_bad=$(submit mpirun "$TMP/run-bad" --train.steps=-3)
if [ -n "$job_bad" ]; then
  state=$(wait_job_end "$job_bad" 120)
  [ "$state" = FAILED ] && ok || { bad "job $job_bad (bad argument) ended $state, wanted FAILED"; end_job "$job_bad"; }
  [ "$(job_field "$job_bad" Restarts)" = 0 ] && ok || bad "the failed job $job_bad was requeued"
  grep -q "requeueing" "$TMP/job-$job_bad.out" && bad "the script requeued a failed run" || ok
else
  bad "sbatch failed: $(cat "$TMP/sbatch.err")"
fi
# --- a launcher that exits 0 without running anything: not requeued (no loop of empty starts) ------
job_empty=$(bin=/bin/true submit mpirun "$TMP/run-empty")
if [ -n "$job_empty" ]; then
  state=$(wait_job_end "$job_empty" 120)
  [ "$state" = FAILED ] && ok || { bad "job $job_empty (nothing run) ended $state, wanted FAILED"; end_job "$job_empty"; }
  [ "$(job_field "$job_empty" Restarts)" = 0 ] && ok || bad "job $job_empty (nothing run) was requeued"
  grep -q "not requeued" "$TMP/job-$job_empty.out" && ok || bad "job $job_empty: no line saying why it was not requeued"
else
  bad "sbatch failed: $(cat "$TMP/sbatch.err")"
fi
# --- scancel (TERM to the job): passed on, and the cancelled job is not requeued --------------------
job_cancel=$(submit mpirun "$TMP/run-cancel" --test.slow_teacher=0 --test.slow_ms=20)
if [ -n "$job_cancel" ]; then
  wait_step "$job_cancel" "$TMP/run-cancel" 20 || bad "job $job_cancel did not reach step 20"
  sl scancel "$job_cancel" || bad "scancel $job_cancel failed"
  wait_job_end "$job_cancel" 120 >/dev/null
  sleep 1 # time for a requeue, were there one
  state=$(job_field "$job_cancel" JobState)
  [ "$state" = CANCELLED ] && ok || bad "the cancelled job $job_cancel is $state, wanted CANCELLED"
  [ "$(job_field "$job_cancel" Restarts)" = 0 ] && ok || bad "the cancelled job $job_cancel was requeued"
  grep -q "got SIGTERM, passing it to the launcher" "$TMP/job-$job_cancel.out" && ok || bad "the batch shell did not pass TERM on"
  grep -q "requeueing" "$TMP/job-$job_cancel.out" && bad "the script requeued a cancelled job" || ok
else
  bad "sbatch failed: $(cat "$TMP/sbatch.err")"
fi
echo "test_slurm: $((SECONDS - t0)) s of jobs"
[ "$failed" -eq 0 ] || show_logs
finish
