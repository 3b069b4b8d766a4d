#!/usr/bin/env bash
# test_hosts.sh: several hosts for real (docs/distributed.md, "Several hosts"). Three network
# namespaces are three hosts: each its own network stack (a veth on a private bridge, 10.249.7.x,
# traffic only between them) and, through `unshare --uts`, its own host name (h0, h1, h2), so Open
# MPI sees three nodes: it starts a daemon on h1 and h2 through an rsh agent (ip netns exec instead
# of ssh) and the ranks talk TCP across the bridge. mpirun runs on h0; one rank a host.
#   1. training across the hosts, stopped at step 10 and resumed across them: the drafter is
#      byte-identical to one host's uninterrupted run, and so are the step-10 checkpoint's weights
#      and optimizer state (one thread a rank on both);
#   2. regenerate across the hosts: the set is byte-identical to one host's;
#   3. a host whose view of an output directory is not rank 0's (a file system of its own mounted
#      there): the job refuses at start in one line naming the host and the directory;
#   4. a host cut off the network mid-run (its link down): the job ends, non-zero, within a bound
#      (Open MPI's daemon keepalive, as the launch scripts set it, shorter than run.rank_timeout).
# Needs root and `ip netns` (CI runs as root); otherwise it is skipped in one line (exit 77).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "several hosts need root (network namespaces)"
command -v ip >/dev/null && command -v unshare >/dev/null || skip "several hosts need ip (iproute2) and unshare"
P=dfh$$ # the namespaces' and interfaces' prefix (an interface name has at most 15 characters)
ip netns add "${P}t" 2>/dev/null && ip netns exec "${P}t" unshare --uts true 2>/dev/null &&
  ip netns del "${P}t" || { ip netns del "${P}t" 2>/dev/null; skip "ip netns or unshare --uts does not work here"; }

cleanup() {
  local i
  for i in 0 1 2; do # whatever still runs on a host (a cut-off host's daemon), then the hosts
    kill -9 $(ip netns pids "$P$i" 2>/dev/null) 2>/dev/null
    ip netns del "$P$i" 2>/dev/null
  done
  ip netns del "${P}br" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
ip netns add "${P}br" && ip -n "${P}br" link add br0 type bridge && ip -n "${P}br" link set br0 up || skip "cannot make a bridge"
for i in 0 1 2; do
  ip netns add "$P$i" && ip -n "$P$i" link set lo up &&
    ip link add "${P}v$i" type veth peer name "${P}p$i" &&
    ip link set "${P}v$i" netns "$P$i" && ip link set "${P}p$i" netns "${P}br" &&
    ip -n "$P$i" link set "${P}v$i" name eth0 && ip -n "$P$i" addr add "10.249.7.$((i + 1))/24" dev eth0 &&
    ip -n "$P$i" link set eth0 up && ip -n "${P}br" link set "${P}p$i" master br0 &&
    ip -n "${P}br" link set "${P}p$i" up || skip "cannot make host $i (veth pairs)"
done
# The rsh agent: `agent HOST COMMAND...` runs COMMAND (a shell line) on HOST's namespace under its
# host name. DFH_PRIVATE=DIR (in mpirun's environment): h2 mounts a file system of its own on DIR.
cat >"$TMP/agent" <<EOF
#!/bin/sh
host=\$1; shift
i=\$((\${host##*.} - 1))
if [ "\$i" = 2 ] && [ -n "\${DFH_PRIVATE:-}" ]; then
  exec ip netns exec $P\$i unshare --uts --mount sh -c "mount -t tmpfs none \$DFH_PRIVATE && hostname h\$i && \$*"
fi
exec ip netns exec $P\$i unshare --uts sh -c "hostname h\$i && \$*"
EOF
chmod +x "$TMP/agent"
printf '10.249.7.1 slots=1\n10.249.7.2 slots=1\n10.249.7.3 slots=1\n' >"$TMP/hostfile"
# hosts ARGS...: mpirun -np 3 across the hosts (on h0), the MPI traffic on the bridge only; the
# daemons' keepalive as launch/mpi_keepalive.sh sets it, scaled down to this test's rank timeout
hosts() {
  ip netns exec "${P}0" unshare --uts sh -c 'hostname h0 && exec "$@"' sh \
    env OMPI_MCA_oob_tcp_keepalive_time=1 OMPI_MCA_oob_tcp_keepalive_intvl=1 OMPI_MCA_oob_tcp_keepalive_probes=3 \
    mpirun --hostfile "$TMP/hostfile" -np 3 --mca plm_rsh_agent "$TMP/agent" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.249.7.0/24 --mca oob_tcp_if_include 10.249.7.0/24 "$@"
}
tiny_job
# (the names on stdout alone: under load mpirun's rsh launcher may warn on stderr "setpgid(...) failed
# in parent with errno=Permission denied", its benign race with a child that has already exec'd)
hosts hostname >"$TMP/names" 2>"$TMP/names.err" && [ "$(sort "$TMP/names" | tr '\n' ' ')" = "h0 h1 h2 " ] && ok ||
  { bad "the three hosts do not run a job:"; cat "$TMP/names" "$TMP/names.err" >&2; finish; }

# ---- 1. training and its resume across the hosts (the student, rank 2, on h2)
train=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
       --drafter.block_size=6 --train.max_anchors=8 --train.log_interval=5 --train.eval_interval=10 --train.eval_batches=1
       --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --checkpoint.every=10 --train.steps=20
       --run.threads=1) # (one thread a rank everywhere: the sums in the same order)
expect_ok "train, one host" mpirun -np 3 "$R" "${train[@]}" --run.dir="$TMP/one"
expect_ok "train across the hosts, stopped at step 10" hosts "$R" "${train[@]}" --run.dir="$TMP/many" --test.stop_at_step=10
expect_ok "train across the hosts, resumed" hosts "$R" "${train[@]}" --run.dir="$TMP/many" --run.resume=true
grep -q "resuming from .*step-0*10" "$TMP/err" && ok || bad "the resume across the hosts did not start from step 10"
diff -r "$TMP/one/drafter" "$TMP/many/drafter" >/dev/null && ok || bad "the drafter trained across the hosts differs from one host's"
for f in model optimizer; do # (its state.json records the run's own config: run.dir, test.stop_at_step)
  cmp -s "$TMP/one/checkpoints/step-00000010/$f.safetensors" "$TMP/many/checkpoints/step-00000010/$f.safetensors" && ok ||
    bad "the step-10 checkpoint's $f.safetensors written across the hosts differs from one host's"
done

# ---- 2. regenerate across the hosts
/usr/bin/python3 -c 'import json, random
r = random.Random(7)
for i in range(24): print(json.dumps({"input_ids": [r.randrange(150) for _ in range(r.randint(2, 12))]}))' >"$TMP/prompts.jsonl"
regen=(--mode regenerate --device cpu --target.path="$TMP/target" --regenerate.prompts="$TMP/prompts.jsonl"
       --regenerate.max_new_tokens=16 --regenerate.shard_prompts=2 --regenerate.max_seqs=2 --run.threads=1)
expect_ok "regenerate, one host" mpirun -np 3 "$R" "${regen[@]}" --regenerate.out="$TMP/one.h5"
expect_ok "regenerate across the hosts" hosts "$R" "${regen[@]}" --regenerate.out="$TMP/many.h5"
cmp -s "$TMP/one.h5" "$TMP/many.h5" && ok || bad "the set regenerated across the hosts differs from one host's"

# ---- 3. an output directory that h2 sees as another (a node-local one of the same name): refused at
# start, before any rank writes, in one line naming the key, h2 and the directory
mkdir -p "$TMP/private"
export DFH_PRIVATE=$TMP/private # (the agent's environment is mpirun's)
expect_fail_mpi "a directory h2 does not share" \
  "error: run.dir: rank 2 (on h2) does not see the file rank 0 (on h0) wrote in $TMP/private" \
  hosts "$R" "${train[@]}" --run.dir="$TMP/private/run"
unset DFH_PRIVATE
[ "$(grep -c "error:" "$TMP/err")" -eq 1 ] && ok || { bad "the refusal is not one line:"; cat "$TMP/err" >&2; }
[ ! -e "$TMP/private/run" ] && [ -z "$(ls -A "$TMP/private")" ] && ok || bad "the refused job left files in $TMP/private"

# ---- 4. h2 cut off the network mid-run (training, the student there): the job ends, non-zero, within
# the bound (the daemons' keepalive: about 4 s; the teachers' wait: 1.5 x the rank timeout of 4 s;
# a hang bound of 30 s), with a line saying a host or rank 2 is lost
hosts "$R" "${train[@]}" --train.steps=100000000 --checkpoint.every=0 --run.dir="$TMP/cut" --rank-timeout 4 \
  >"$TMP/cut.out" 2>"$TMP/cut.err" &
job=$!
for _ in $(seq 1 600); do grep -qs '"step": 10,' "$TMP/cut/metrics.jsonl" && break; kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
grep -qs '"step": 10,' "$TMP/cut/metrics.jsonl" && ok || bad "the job across the hosts did not reach step 10"
ip -n "${P}2" link set eth0 down
t0=$(date +%s)
for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then
  bad "the job still runs 30 s after h2 was cut off the network"
  kill -9 $(ip netns pids "${P}0") 2>/dev/null
fi
wait "$job"; rc=$?
echo "a host cut off: the job ended after $(($(date +%s) - t0)) s with status $rc"
[ "$rc" -ne 0 ] && ok || bad "the job exited 0 with a host cut off"
grep -qE "lost communication with a remote daemon|rank 2 \(on h2\) .*hung or unreachable" "$TMP/cut.err" && ok ||
  { bad "no line saying h2 or rank 2 is lost:"; cat "$TMP/cut.err" >&2; }
finish
