#!/usr/bin/env bash
# test_small_faults.sh: issue 49's smaller things, each as the fault pass found it.
#   1. A run that finished without a checkpoint (checkpoint.every 0, as the quickstart's) resumed:
#      "already finished" in one line, exit 0, its metrics and drafter untouched (it trained again
#      from step 0); asked for more steps, one error line (it cannot go on without a checkpoint).
#   2. Out of memory: the error names the key to change (teacher.max_tokens, drafter.intermediate).
#   3. No error line ends in a source location ("[mode_train.c:91]"), unless DFLASH_ERROR_LOCATION=1.
#   4. Hexadecimal integers and numbers (--train.steps=0x10, a weight 0x1p-3) refused naming the key.
#   5. A TERM to launch/mpirun_stop.sh while the job starts (its first 0.2 s): exit 0 after a
#      graceful stop (it was exit 138, mpirun killed by the SIGUSR1 it had no handler for yet, or the
#      stop was lost).
#   6. No temporaries left after a successful end, fresh, resumed or with nothing to do: what killed
#      jobs left (drafter.tmp.PID, OUT.tmp.PID, OUT.parts/ with part-*.h5.tmp.PID,
#      features-*.h5.tmp.PID) is removed, and nothing *.tmp.* or *.parts remains.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
tiny_job
job=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
     --drafter.block_size=6 --train.max_anchors=8 --data.max_tokens_per_batch=200 --data.heldout_samples=4
     --teacher.topk=6 --train.steps=3 --train.eval_batches=1)
sums() { (cd "$1" && md5sum metrics.jsonl drafter/config.json drafter/model.safetensors 2>&1); }
# leftovers DIR...: the temporaries and parts directories under DIR (none: empty output)
leftovers() { find "$@" -name '*.tmp.*' -o -name '*.parts' -o -name '*.old.*' 2>/dev/null; }

# ---------------------------------------------------------------- 1. a finished run without checkpoints
expect_ok "fresh run" mpirun -np 2 "$R" "${job[@]}" --run.dir="$TMP/run"
[ ! -d "$TMP/run/checkpoints" ] && ok || bad "the run wrote checkpoints (checkpoint.every 0)"
before=$(sums "$TMP/run")
# what a job killed in its export leaves: drafter.tmp.PID (removed once the run is complete)
cp -r "$TMP/run/drafter" "$TMP/run/drafter.tmp.999999"
expect_ok "resume finished" mpirun -np 2 "$R" "${job[@]}" --run.dir="$TMP/run" --run.resume=true
grep -q "run.resume: already finished at step 3 .*nothing to do" "$TMP/err" && ok || { bad "resume finished: no 'already finished' line"; tail -3 "$TMP/err" >&2; }
grep -q '"step": 1,' "$TMP/err" && bad "resume finished: it trained again" || ok
[ "$(sums "$TMP/run")" = "$before" ] && ok || bad "resume finished: metrics.jsonl or the drafter rewritten"
[ -z "$(leftovers "$TMP/run")" ] && ok || bad "resume finished: left $(leftovers "$TMP/run")"
expect_fail_mpi "resume finished, more steps" "finished at step 3 without a checkpoint (checkpoint.every 0), so it cannot go on to train.steps 5" \
  mpirun -np 2 "$R" "${job[@]}" --run.dir="$TMP/run" --run.resume=true --train.steps=5
[ "$(sums "$TMP/run")" = "$before" ] && ok || bad "resume with more steps: metrics.jsonl or the drafter rewritten"
# 3. that error ends the job through fatal(): its line ends in no source location, unless asked
located() { grep "error:" "$TMP/err" | grep -qE '\[[A-Za-z0-9_]+\.(c|cu):[0-9]+\]$'; }
located && bad "an error line ends in a source location: $(grep error: "$TMP/err")" || ok
DFLASH_ERROR_LOCATION=1 mpirun -x DFLASH_ERROR_LOCATION -np 2 "$R" "${job[@]}" --run.dir="$TMP/run" --run.resume=true \
  --train.steps=5 >"$TMP/out" 2>"$TMP/err"
located && ok || bad "DFLASH_ERROR_LOCATION=1: no source location: $(grep error: "$TMP/err")"

# ---------------------------------------------------------------- 2, 3. out of memory names the key; no source location
asan=0
ldd "$R" 2>/dev/null | grep -q libasan && asan=1
# no_memory CMD...: CMD where a huge allocation fails: under ASan one past its 1 TiB limit returns
# NULL; otherwise an address-space limit (8 GiB) makes it fail whatever the overcommit setting
no_memory() {
  if [ "$asan" = 1 ]; then ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1" "$@"
  else (ulimit -v 8388608 && exec "$@"); fi
}
expect_fail "oom teacher.max_tokens" "teacher work.*out of host memory.*teacher.max_tokens = 1073741824 tokens: lower it" \
  no_memory "$R" --mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" \
  --target.layer_ids=0,1 --features.dir="$TMP/oom_feat" --teacher.max_tokens=1073741824
located && bad "oom: an error line ends in a source location" || ok
if [ "$asan" = 0 ]; then # (the drafter's 458 GiB is below ASan's limit)
  no_memory mpirun -np 2 "$R" "${job[@]}" --run.dir="$TMP/oom_run" --drafter.intermediate=10000000 --drafter.layers=64 \
    >"$TMP/out" 2>"$TMP/err" && bad "oom drafter: exit 0" || ok
  grep -q "arena 'drafter'.*out of host memory.*drafter.intermediate 10000000" "$TMP/err" && ok ||
    { bad "oom drafter: no line naming drafter.intermediate"; grep error "$TMP/err" >&2; }
  located && bad "oom drafter: the error line ends in a source location" || ok # (a student's fatal())
fi

# ---------------------------------------------------------------- 4. hexadecimal refused
expect_fail "hex integer" "key 'train.steps' wants an integer, got \"0x10\"" "$R" "${job[@]}" --train.steps=0x10
expect_fail "hex weight" "key 'loss.alpha' wants a number, got \"0x1p-3\"" "$R" "${job[@]}" --loss.alpha=0x1p-3
expect_fail "hex set weight" "the weight in \"a.h5:0x2\" is not a number" "$R" "${job[@]}" --data.path= --data.sets=a.h5:0x2
printf '{"train": {"steps": 0x10}}\n' >"$TMP/hex.json"
expect_fail "hex in a JSON config" "hex.json: not valid JSON" "$R" --config "$TMP/hex.json"

# ---------------------------------------------------------------- 5. TERM to mpirun_stop.sh as the job starts
for delay in 0.05 0.2; do
  bash "$SRC/launch/mpirun_stop.sh" -np 2 "$R" "${job[@]}" --train.steps=200 --run.dir="$TMP/stop$delay" >"$TMP/out" 2>"$TMP/err" &
  pid=$!
  sleep "$delay"
  kill -TERM "$pid"
  timeout 120 tail --pid="$pid" -f /dev/null
  wait "$pid"
  rc=$?
  [ "$rc" -eq 0 ] && ok || { bad "TERM after ${delay}s to mpirun_stop.sh: exit $rc"; tail -3 "$TMP/err" >&2; }
  grep -q "stopped by SIGUSR1 after step" "$TMP/err" && ok || { bad "TERM after ${delay}s: no graceful stop"; tail -3 "$TMP/err" >&2; }
done

# ---------------------------------------------------------------- 6. temporaries after success
$PY - "$TMP/p8.jsonl" <<'PYEOF'
import json, random, sys
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(8): f.write(json.dumps({"input_ids": [r.randrange(150) for _ in range(6)]}) + "\n")
PYEOF
regen=(--mode regenerate --device cpu --target.path="$TMP/target" --regenerate.prompts="$TMP/p8.jsonl"
       --regenerate.max_new_tokens=8 --regenerate.shard_prompts=4 --regenerate.heldout=2 --regenerate.out="$TMP/gen/set.h5")
# what killed jobs leave: a part being written, a merge being written (the size of the set)
mkdir -p "$TMP/gen/set.h5.parts" && : >"$TMP/gen/set.h5.parts/part-00001-of-00002.h5.tmp.999999" && : >"$TMP/gen/set.h5.tmp.999998"
expect_ok "regenerate (resumed)" "$R" "${regen[@]}"
[ -z "$(leftovers "$TMP/gen")" ] && ok || bad "regenerate: left $(leftovers "$TMP/gen")"
mkdir -p "$TMP/gen/set.h5.parts" && : >"$TMP/gen/set.h5.parts/part-00000-of-00002.h5.tmp.999997" && cp "$TMP/gen/set.h5" "$TMP/gen/set.h5.tmp.999996"
echo "not ours" >"$TMP/gen/set.h5.tmp.123" # a file of that name this project did not write stays
expect_ok "regenerate (nothing to do)" "$R" "${regen[@]}"
grep -q "nothing to do" "$TMP/err" && ok || bad "regenerate again: not 'nothing to do'"
[ "$(leftovers "$TMP/gen")" = "$TMP/gen/set.h5.tmp.123" ] && ok || bad "regenerate, nothing to do: left $(leftovers "$TMP/gen")"
dump=(--mode dump-features --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --teacher.topk=6 --features.dir="$TMP/feat")
mkdir -p "$TMP/feat" && : >"$TMP/feat/features-00000-of-00001.h5.tmp.999995"
expect_ok "dump-features" "$R" "${dump[@]}"
[ -z "$(leftovers "$TMP/feat")" ] && ok || bad "dump-features: left $(leftovers "$TMP/feat")"
finish
