#!/usr/bin/env bash
# test_preflight.sh: dflash_rank --preflight prints one table (check, rank, result, detail) on rank 0
# and exits 0 when the run would start; each problem a run would die of is a FAIL row and a non-zero
# exit: roles that do not fit the world, a missing target, an unreadable training set, a run.dir
# that cannot be written, a train.mem_budget below the student's plan. Teacher groups
# (world.teacher_group_size): each teacher rank's memory row is its stage's (layers, weights, work,
# NCCL buffers), a stage beyond teacher.mem_budget is a FAIL row, and teachers that are not a
# multiple of the group size a FAIL of the world row. The run's own claim and world checks (issue
# 49): a run.dir holding an earlier run without --run.resume, a run.dir locked by a live job, a
# teacher group spanning hosts (each rank its own host name: a UTS namespace, as root) are FAIL
# rows; a failing preflight exits 1 on rank 0 only (the others 0), so mpirun names rank 0's exit.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/target" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
base=(--preflight --mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.max_anchors=8 --data.max_tokens_per_batch=200 --data.heldout_samples=4
      --teacher.topk=6 --checkpoint.every=10 --run.dir="$TMP/run")

# row CHECK RESULT [DETAIL-REGEX]: the table in $TMP/out has a row of CHECK with RESULT.
row() {
  grep -qE "^$1 +[-0-9]+ +$2 +.*${3:-}" "$TMP/out"
}

# expect_preflight_fail NAME CHECK DETAIL-REGEX ARGS...: the job exits non-zero without crashing,
# the table has a FAIL row of CHECK whose detail matches, and the summary counts the problems.
expect_preflight_fail() {
  local name=$1 check=$2 detail=$3; shift 3
  mpirun -np 2 "$R" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq 0 ]; then bad "$name: exit 0, wanted a failure"; cat "$TMP/out" >&2; return; fi
  if grep -qiE "segmentation|core dumped|signal|AddressSanitizer|runtime error" "$TMP/err"; then
    bad "$name: a rank crashed:"; cat "$TMP/err" >&2; return
  fi
  if ! row "$check" FAIL "$detail"; then bad "$name: no FAIL row '$check ... $detail':"; cat "$TMP/out" "$TMP/err" >&2; return; fi
  if ! grep -qE "^preflight: [1-9][0-9]* problem" "$TMP/out"; then bad "$name: no 'preflight: N problem(s)' line"; return; fi
  ok
}

# --help lists it.
expect_ok help "$R" --help
grep -q -- "--preflight" "$TMP/out" && ok || bad "--help does not list --preflight"

# The ok case: 1 teacher + 1 student on the CPU.
expect_ok preflight-ok mpirun -np 2 "$R" "${base[@]}"
cp "$TMP/out" "$TMP/ok.out"
grep -qE "^check +rank +result +detail" "$TMP/out" && ok || bad "no table header: $(cat "$TMP/out")"
grep -q "^preflight: ok" "$TMP/out" && ok || bad "no 'preflight: ok' line: $(cat "$TMP/out")"
row world ok "1 teacher\(s\) \+ 1 student\(s\)" && ok || bad "no world row"
[ "$(grep -cE '^backend +[01] +ok ' "$TMP/out")" -eq 2 ] && ok || bad "wanted a backend row per rank: $(cat "$TMP/out")"
row memory ok "teacher: weights" && ok || bad "no teacher memory row"
row memory ok "student: drafter state" && ok || bad "no student memory row"
row target ok "LlamaForCausalLM, 2 layers" && ok || bad "no target row"
row data ok "24 usable sample" && ok || bad "no data row"
# Short replies are used (SPEC §7: a sample with one valid anchor is usable; data.min_loss_tokens
# brings back a minimum): 6 samples with 3-token replies (under 2 x block_size = 12) and 6 with 20
/usr/bin/python3 - "$TMP/short.jsonl" <<'PYEOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(12):
        n = 3 if i % 2 else 20
        f.write(json.dumps({"input_ids": [(7 * i + k) % 150 for k in range(4 + n)], "loss_mask": [0] * 4 + [1] * n}) + "\n")
PYEOF
"$T" convert-jsonl "$TMP/short.jsonl" "$TMP/short.h5" --vocab-size 150 >/dev/null 2>&1 || bad "convert short replies"
expect_ok "short replies" mpirun -np 2 "$R" "${base[@]}" --data.path="$TMP/short.h5"
row data ok "12 usable sample" && ok || bad "short replies: not every sample is usable: $(grep '^data' "$TMP/out")"
expect_ok "short replies, data.min_loss_tokens 12" mpirun -np 2 "$R" "${base[@]}" --data.path="$TMP/short.h5" --data.min_loss_tokens=12
row data ok "6 usable sample" && ok || bad "data.min_loss_tokens 12: wanted 6 usable samples: $(grep '^data' "$TMP/out")"
row run.dir ok "writable .*4 checkpoint" && ok || bad "no run.dir row with the checkpoint space"
row nccl skipped && ok || bad "nccl not skipped on the CPU"
row "peer access" skipped && ok || bad "peer access not skipped on the CPU"
grep -qE '^/dev/shm +0 +(ok|WARN) ' "$TMP/out" && ok || bad "no /dev/shm row"
grep -q FAIL "$TMP/out" && bad "FAIL in the ok case: $(cat "$TMP/out")" || ok
[ -e "$TMP/run" ] && bad "preflight left the run.dir it created" || ok
# Only rank 0 prints: one table.
[ "$(grep -c '^check ' "$TMP/out")" -eq 1 ] && ok || bad "more than one table"

# The problems, each one FAIL row.
expect_preflight_fail world-mismatch world "roles do not fit the world: 3 teacher\(s\) \+ 1 student\(s\) = 4 rank\(s\), but the job has 2" \
  "${base[@]}" --world.teachers=3
expect_preflight_fail missing-target target "$TMP/no-such-target" "${base[@]}" --target.path="$TMP/no-such-target"
echo "this is not HDF5" >"$TMP/bad.h5"
expect_preflight_fail unreadable-data data "bad.h5" "${base[@]}" --data.path="$TMP/bad.h5"
touch "$TMP/a-file"
expect_preflight_fail unwritable-run-dir run.dir "cannot create it: Not a directory" "${base[@]}" --run.dir="$TMP/a-file/run"
expect_preflight_fail mem-budget memory "memory budget .* is too small" "${base[@]}" --train.mem_budget=4KiB
# the other rows are still there: the table is complete whatever fails
row target ok && ok || bad "mem-budget: the target row is missing"

# The run's claim of run.dir (issue 49), through the mode's table: an earlier run without
# --run.resume; each rank's exit recorded: 1 on rank 0 only.
mkdir -p "$TMP/earlier" && echo '{"step": 1}' >"$TMP/earlier/metrics.jsonl"
mpirun -np 2 sh -c 'd=$1; shift; "$@" >"$d/out.$OMPI_COMM_WORLD_RANK" 2>&1; echo $? >"$d/rc.$OMPI_COMM_WORLD_RANK"' \
  sh "$TMP" "$R" "${base[@]}" --run.dir="$TMP/earlier" >/dev/null 2>&1
cp "$TMP/out.0" "$TMP/out" 2>/dev/null
row run.dir FAIL "run.dir $TMP/earlier holds an earlier run \(metrics.jsonl\)" && ok || bad "earlier run: no FAIL row: $(cat "$TMP/out")"
[ "$(cat "$TMP/rc.0" 2>/dev/null)" = 1 ] && [ "$(cat "$TMP/rc.1" 2>/dev/null)" = 0 ] && ok ||
  bad "a failing preflight: rank 0 exit $(cat "$TMP/rc.0" 2>/dev/null), rank 1 exit $(cat "$TMP/rc.1" 2>/dev/null); wanted 1 and 0"
expect_ok earlier-resumed mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/earlier" --run.resume=true
# run.dir locked by a live job (its lock line, held with fcntl as the run holds it)
/usr/bin/python3 - "$TMP/earlier/.lock" <<'PYEOF' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
os.write(fd, b"host test pid 1 started now\n")
time.sleep(30)
PYEOF
holder=$!
for _ in $(seq 50); do grep -q started "$TMP/earlier/.lock" 2>/dev/null && break; sleep 0.1; done
expect_preflight_fail locked run.dir "run.dir $TMP/earlier is in use by another job \(holder: host test pid 1" \
  "${base[@]}" --run.dir="$TMP/earlier" --run.resume=true
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# Teacher groups: 2 teacher ranks as one teacher of 2 stages (a layer each) + 1 student.
expect_ok preflight-groups mpirun -np 3 "$R" "${base[@]}" --world.teacher_group_size=2
row world ok "3 rank\(s\): 2 teacher\(s\) in 1 group\(s\) of 2 stage rank\(s\) \+ 1 student\(s\)" && ok || bad "groups: no world row: $(cat "$TMP/out")"
grep -qE '^memory +0 +ok +teacher stage 0/2, layers 0-0: weights .* \+ forward work .* \(200 tokens\) \+ NCCL buffers 0 B = ' "$TMP/out" &&
  grep -qE '^memory +1 +ok +teacher stage 1/2, layers 1-1: weights ' "$TMP/out" && ok || bad "groups: no stage memory rows: $(cat "$TMP/out")"
row memory ok "student: drafter state" && ok || bad "groups: no student memory row"
grep -q "^preflight: ok" "$TMP/out" && ok || bad "groups: not ok: $(cat "$TMP/out")"
cp "$TMP/out" "$TMP/groups.out"
# a stage beyond teacher.mem_budget: its row fails with the run's message
mpirun -np 3 "$R" "${base[@]}" --world.teacher_group_size=2 --teacher.mem_budget=8KiB >"$TMP/out" 2>"$TMP/err"
[ $? -ne 0 ] && grep -qE '^memory +0 +FAIL +teacher stage 0/2, layers 0-0: teacher stage 0 of 2 \(layers 0-0\) takes weights .*, more than teacher.mem_budget 8.00 KiB' "$TMP/out" &&
  grep -qE "^preflight: [1-9][0-9]* problem" "$TMP/out" && ok || bad "groups-budget: no stage FAIL row: $(cat "$TMP/out" "$TMP/err")"
# a group across hosts: the run's check at start (world_check_group_hosts), each rank its own host
# name in a UTS namespace (root; else skipped)
if unshare --uts true 2>/dev/null; then
  mpirun -np 3 unshare --uts sh -c 'hostname "h$OMPI_COMM_WORLD_RANK" && exec "$@"' sh "$R" "${base[@]}" \
    --world.teacher_group_size=2 >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ "$rc" -ne 0 ] && row world FAIL "teacher group 0 \(ranks 0-1\) spans hosts h0 \(rank 0\) and h1 \(rank 1\)" && ok ||
    bad "groups-hosts: exit $rc, no world FAIL row: $(cat "$TMP/out" "$TMP/err")"
else
  echo "SKIP: groups-hosts (unshare --uts needs root)"
fi
# 1 teacher rank is no group of 2
expect_preflight_fail groups-divide world "world.teacher_group_size = 2 does not divide the 1 teacher rank\(s\)" \
  "${base[@]}" --world.teacher_group_size=2

# Alone (no mpirun): one rank, a student without teachers: the world row says why it cannot train.
"$R" "${base[@]}" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && ok || bad "alone: exit $rc"
row world FAIL "no teacher rank" && ok || bad "alone: no world FAIL row: $(cat "$TMP/out")"

# On a machine with a GPU (and a CUDA build): the same job on CUDA. Peer access and NCCL are
# checked for real: with one GPU both ranks share it (peer access: the same GPU; NCCL not tried).
if "$R" --version | grep -q "^backends:.*cuda" && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  expect_ok preflight-cuda mpirun -np 2 "$R" "${base[@]}" --device cuda
  cp "$TMP/out" "$TMP/gpu.out"
  [ "$(grep -cE '^backend +[01] +ok .*cuda:' "$TMP/out")" -eq 2 ] && ok || bad "cuda: wanted 2 cuda backend rows: $(cat "$TMP/out")"
  [ "$(grep -cE '^memory +[01] +ok .*cuda:[0-9]+ .* free of ' "$TMP/out")" -eq 2 ] && ok || bad "cuda: memory rows"
  grep -qE '^peer access +1 +(ok|WARN) ' "$TMP/out" && ok || bad "cuda: no peer access row for the student"
  grep -qE '^nccl +[-0-9]+ +(ok|WARN) ' "$TMP/out" && ok || bad "cuda: the NCCL row is not ok/WARN"
  echo "--- on CUDA:"
  cat "$TMP/gpu.out"
fi

echo "--- the ok case's table:"
cat "$TMP/ok.out"
echo "--- teacher groups of 2:"
cat "$TMP/groups.out"
finish
