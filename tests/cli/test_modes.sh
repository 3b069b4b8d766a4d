#!/usr/bin/env bash
# test_modes.sh: the modes are one table (src/modes/mode.h) and the frame claims every mode's
# outputs (src/modes/mode_claim.h, docs/faults.md "Modes").
#   1. the registry and an unknown run.mode's error name the same modes; roles: for every mode (train live and from offline features, eval live and offline,
#      dump-features, regenerate, check, transport-test) under mpirun -np 2, the roles --plan prints,
#      the roles --preflight's world row prints and the roles the run logs ("N teacher(s), M
#      student(s)") are the same; --preflight of regenerate checks the prompts and regenerate.out
#      (its rows), not a training set or run.dir.
#   2. two regenerate jobs racing for one regenerate.out (the first stopped with SIGSTOP after its
#      first part while the second starts, 1 rank and 2): the second ends at once with one line
#      naming the output and the holder; the first completes and its file equals an unraced run's.
#   3. regenerate.out that is an ordinary training set, the prompts file, a copy of the prompts,
#      a file of the target or a directory: refused at start with one error line and exit != 0, the
#      file unchanged (checksums); a training set is replaced with --run.overwrite=true, never the
#      prompts (not a file this project wrote); an earlier regenerate output of other settings is
#      refused, and replaced with --run.overwrite=true.
#   4. dump-features: features.dir holding a file dump-features did not write is refused (by the
#      run and by --preflight's row), a second dump into a features.dir in use ends naming the
#      holder, and training whose run.dir is its data.features is refused.
#   5. a training job's keys (run.dir) are checked by its mode's prepare hook, not config_check;
#      no file outside src/modes compares a mode's name, and no --preflight flag (MODE_PF_) is left.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
PY=/usr/bin/python3

# roles FILE PATTERN: "T S" from the first line of FILE matching the extended regex PATTERN, which
# must hold "([0-9]+) teacher\(s\)" and "([0-9]+) student\(s\)" as its first two groups.
roles() { sed -nE "s/.*$2.*/\\1 \\2/p" "$1" | head -1; }
plan_re='^plan: ([0-9]+) teacher\(s\)[^+]* \+ ([0-9]+) student\(s\), mode'
pf_re='^world +- +[a-zA-Z]+ +[0-9]+ rank\(s\): ([0-9]+) teacher\(s\)[^+]* \+ ([0-9]+) student\(s\), mode'
run_re='[0-9]+ rank\(s\): ([0-9]+) teacher\(s\), ([0-9]+) student\(s\); mode'

# same_roles NAME WANT ARGS...: --plan, --preflight and the run itself (mpirun -np 2) assign the
# same roles, WANT ("T S").
same_roles() {
  local name=$1 want=$2; shift 2
  mpirun -np 2 "$R" "$@" --plan >"$TMP/plan.out" 2>"$TMP/plan.err"
  local p; p=$(roles "$TMP/plan.out" "$plan_re")
  mpirun -np 2 "$R" "$@" --preflight >"$TMP/pf.out" 2>"$TMP/pf.err"
  local f; f=$(roles "$TMP/pf.out" "$pf_re")
  mpirun -np 2 "$R" "$@" >"$TMP/run.out" 2>"$TMP/run.err" || { bad "$name: the run failed:"; cat "$TMP/run.err" >&2; }
  local r; r=$(roles "$TMP/run.err" "$run_re")
  if [ "$r" = "$want" ] && [ "$p" = "$want" ] && [ "$f" = "$want" ]; then ok
  else bad "$name: roles (teachers students): run '$r', --plan '$p', --preflight '$f'; want '$want'"
    cat "$TMP/plan.out" "$TMP/plan.err" "$TMP/pf.out" >&2
  fi
}

# ---------------------------------------------------------------- 1. one role rule for every mode
# the registry (--help lists it) and an unknown run.mode's error name the same modes
listed=$("$R" --help | sed -n '/^modes:/,/^$/p' | awk 'NF > 1 { print $1 }' | sort | tr '\n' ' ')
"$R" --mode no-such-mode >"$TMP/nomode.out" 2>&1 && bad "an unknown run.mode was taken"
known=$(grep -o 'known: [^)]*' "$TMP/nomode.out" | sed 's/^known: //; s/[,|]/ /g' | tr ' ' '\n' | grep . | sort | tr '\n' ' ')
[ -n "$listed" ] && [ "$listed" = "$known" ] && ok || bad "the registry's modes '$listed', the unknown mode's error '$known' ($(cat "$TMP/nomode.out"))"
job=(--device cpu --target.path="$TMP/target" --target.layer_ids=0,1 --drafter.block_size=6 --train.max_anchors=8
     --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --train.eval_interval=1000
     --transport.payload=mpi)
same_roles train "1 1" --mode train "${job[@]}" --data.path="$TMP/data.h5" --train.steps=2 --run.dir="$TMP/run"
same_roles dump-features "2 0" --mode dump-features "${job[@]}" --data.path="$TMP/data.h5" --features.dir="$TMP/feat"
same_roles train-offline "0 2" --mode train "${job[@]}" --data.features="$TMP/feat" --train.steps=2 \
  --train.batches_per_step=2 --run.dir="$TMP/run-off"
same_roles eval "1 1" --mode eval "${job[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run/drafter" --run.dir="$TMP/ev"
same_roles eval-offline "0 2" --mode eval "${job[@]}" --data.features="$TMP/feat" --eval.drafter="$TMP/run/drafter" \
  --run.dir="$TMP/ev-off"
$PY -c 'import json, random; r = random.Random(3); [print(json.dumps({"input_ids": [r.randrange(150) for _ in range(r.randint(2, 9))]})) for _ in range(12)]' \
  >"$TMP/prompts.jsonl"
regen=(--mode regenerate --device cpu --target.path="$TMP/target" --regenerate.prompts="$TMP/prompts.jsonl"
       --regenerate.max_new_tokens=6 --regenerate.shard_prompts=4 --regenerate.heldout=2)
same_roles regenerate "2 0" "${regen[@]}" --regenerate.out="$TMP/regen.h5"
# regenerate's preflight: its prompts and its output, no training set, no run.dir
grep -qE "^prompts +0 +ok .*12 prompt\(s\)" "$TMP/pf.out" && grep -qE "^output +0 +ok +regenerate.out" "$TMP/pf.out" &&
  ! grep -qE "^(data|run.dir) " "$TMP/pf.out" && ok || { bad "regenerate --preflight rows:"; cat "$TMP/pf.out" >&2; }
same_roles check "1 1" --mode check "${job[@]}" --data.path="$TMP/data.h5"
same_roles transport-test "1 1" --mode transport-test --device cpu

# ---------------------------------------------------------------- 2. two regenerate jobs, one output
"$T" make-target "$TMP/big" --arch qwen3 --layers 4 --hidden 96 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 192 \
  --vocab 500 --seed 3 >/dev/null 2>&1 || bad "make-target big"
$PY -c 'import json, random; r = random.Random(7); [print(json.dumps({"input_ids": [r.randrange(500) for _ in range(r.randint(2, 30))]})) for _ in range(48)]' \
  >"$TMP/big.jsonl"
big=(--mode regenerate --device cpu --target.path="$TMP/big" --regenerate.prompts="$TMP/big.jsonl"
     --regenerate.max_new_tokens=48 --regenerate.shard_prompts=2 --regenerate.max_seqs=2)
expect_ok "unraced" "$R" "${big[@]}" --regenerate.out="$TMP/alone.h5"
# (each shard slowed by 100 ms: the job is still running when it is held, on any machine)
OMP_NUM_THREADS=1 "$R" "${big[@]}" --regenerate.out="$TMP/raced.h5" --test.slow_teacher=-2 --test.slow_ms=100 >"$TMP/first.log" 2>&1 &
first=$!
for _ in $(seq 1 600); do # until the first job holds the output and has begun (hang bound: 60 s)
  compgen -G "$TMP/raced.h5.parts/part-*.h5" >/dev/null && break
  sleep 0.1
done
kill -STOP "$first" # held there while the second job tries: the race is certain, not a matter of timing
if [ -e "$TMP/raced.h5" ]; then
  bad "race: the first job finished before the second started (make the test's job bigger)"
else
  expect_fail "second job" "regenerate.out $TMP/raced.h5 is in use by another job (holder: host .* pid $first " \
    "$R" "${big[@]}" --regenerate.out="$TMP/raced.h5"
  expect_fail_mpi "second job, 2 ranks" "regenerate.out $TMP/raced.h5 is in use by another job" \
    mpirun -np 2 "$R" "${big[@]}" --regenerate.out="$TMP/raced.h5"
fi
kill -CONT "$first"
wait "$first" && ok || { bad "race: the first job failed:"; cat "$TMP/first.log" >&2; }
cmp -s "$TMP/alone.h5" "$TMP/raced.h5" && ok || bad "race: the first job's file differs from the unraced one"
[ ! -e "$TMP/raced.h5.lock" ] && [ ! -e "$TMP/raced.h5.parts" ] && ok || bad "race: the lock or the parts were left behind"

# ---------------------------------------------------------------- 3. what regenerate.out may replace
cp "$TMP/data.h5" "$TMP/set.h5"
cp "$TMP/prompts.jsonl" "$TMP/copy.jsonl"
mkdir -p "$TMP/adir"
sum() { md5sum "$@" | cut -d' ' -f1 | tr '\n' ' '; }
before=$(sum "$TMP/set.h5" "$TMP/prompts.jsonl" "$TMP/copy.jsonl" "$TMP/target/config.json")
expect_fail "out = a training set" "regenerate.out $TMP/set.h5 is a training set that regenerate did not make" \
  "$R" "${regen[@]}" --regenerate.out="$TMP/set.h5"
expect_fail "out = the prompts" "regenerate.out $TMP/prompts.jsonl is regenerate.prompts $TMP/prompts.jsonl, an input" \
  "$R" "${regen[@]}" --regenerate.out="$TMP/prompts.jsonl"
expect_fail "out = the prompts, another spelling" "is regenerate.prompts .*, an input" \
  "$R" "${regen[@]}" --regenerate.out="$TMP/adir/../prompts.jsonl"
expect_fail "out = the prompts, overwrite" "is regenerate.prompts .*, an input" \
  "$R" "${regen[@]}" --regenerate.out="$TMP/prompts.jsonl" --run.overwrite=true
expect_fail "out = a JSONL file, overwrite" "regenerate.out $TMP/copy.jsonl exists and is not a training set" \
  "$R" "${regen[@]}" --regenerate.out="$TMP/copy.jsonl" --run.overwrite=true
expect_fail "out = a file of the target" "is a file of target.path" \
  "$R" "${regen[@]}" --regenerate.out="$TMP/target/config.json" --run.overwrite=true
expect_fail "out = a directory" "regenerate.out $TMP/adir is a directory" "$R" "${regen[@]}" --regenerate.out="$TMP/adir"
grep -q "regenerate (prompts)" "$TMP/err" && bad "out = a directory: refused only after generating" || ok
[ "$(sum "$TMP/set.h5" "$TMP/prompts.jsonl" "$TMP/copy.jsonl" "$TMP/target/config.json")" = "$before" ] && ok ||
  bad "a refused regenerate.out changed a file"
[ -z "$(ls "$TMP/adir")" ] && [ ! -e "$TMP/adir.lock" ] && ok || bad "out = a directory: something was written"
# --run.overwrite=true replaces a training set (a file this project wrote) and an earlier output of other settings
expect_ok "overwrite a training set" "$R" "${regen[@]}" --regenerate.out="$TMP/set.h5" --run.overwrite=true
cmp -s "$TMP/set.h5" "$TMP/regen.h5" && ok || bad "overwrite: the replaced set is not the regenerated one"
expect_fail "other settings" "regenerate.out $TMP/regen.h5 exists, made with other settings (max_new_tokens" \
  "$R" "${regen[@]}" --regenerate.max_new_tokens=3 --regenerate.out="$TMP/regen.h5"
cmp -s "$TMP/set.h5" "$TMP/regen.h5" && ok || bad "other settings: the refused output changed"
expect_ok "other settings, overwrite" "$R" "${regen[@]}" --regenerate.max_new_tokens=3 --regenerate.out="$TMP/regen.h5" \
  --run.overwrite=true
$PY -c 'import h5py, sys; assert int(h5py.File(sys.argv[1], "r").attrs["max_new_tokens"]) == 3' "$TMP/regen.h5" && ok ||
  bad "other settings, overwrite: not replaced"
expect_ok "same settings again" "$R" "${regen[@]}" --regenerate.max_new_tokens=3 --regenerate.out="$TMP/regen.h5"

# ---------------------------------------------------------------- 4. dump-features' features.dir
dump=(--mode dump-features "${job[@]}" --data.path="$TMP/data.h5")
mkdir -p "$TMP/mixed" && echo keep >"$TMP/mixed/notes.txt"
expect_fail "features.dir with a foreign file" "features.dir $TMP/mixed holds notes.txt, which dump-features did not write" \
  "$R" "${dump[@]}" --features.dir="$TMP/mixed"
[ "$(cat "$TMP/mixed/notes.txt")" = keep ] && ok || bad "features.dir: the foreign file changed"
"$R" "${dump[@]}" --features.dir="$TMP/mixed" --preflight >"$TMP/out" 2>"$TMP/err" && bad "preflight of a mixed features.dir: exit 0" ||
  { grep -qE "^run.dir +0 +FAIL +features.dir .* holds notes.txt" "$TMP/out" && ok || { bad "preflight of a mixed features.dir:"; cat "$TMP/out" >&2; }; }
expect_fail "run.dir = the offline features" "run.dir $TMP/feat is data.features $TMP/feat, an input" \
  "$R" --mode train "${job[@]}" --data.features="$TMP/feat" --run.dir="$TMP/feat" --train.steps=1
/usr/bin/python3 - "$TMP/feat/.lock" <<'PYEOF' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
os.write(fd, b"host test pid 1 started now\n")
time.sleep(20)
PYEOF
holder=$!
sleep 1
expect_fail "features.dir in use" "features.dir $TMP/feat is in use by another job (holder: host test pid 1" \
  "$R" "${dump[@]}" --features.dir="$TMP/feat"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# ---------------------------------------------------------------- 5. what a mode asks is its table's
# A training job's keys are its prepare hook's (mode_train.c), not config_check's: train and eval
# refuse an empty run.dir (the run, --plan and --preflight alike, before MPI starts); dump-features,
# which writes no run.dir, does not ask for one.
expect_fail "train without run.dir" "run.dir is empty: a training job needs a run directory" \
  "$R" --mode train "${job[@]}" --data.path="$TMP/data.h5" --run.dir=
expect_fail "eval without run.dir, --preflight" "run.dir is empty: a training job needs a run directory" \
  "$R" --mode eval "${job[@]}" --data.path="$TMP/data.h5" --eval.drafter="$TMP/run/drafter" --run.dir= --preflight
"$R" "${dump[@]}" --features.dir="$TMP/feat-plan" --run.dir= --plan >"$TMP/out" 2>"$TMP/err" && ok ||
  bad "dump-features --plan without run.dir: $(cat "$TMP/err")"
# No mode's name is compared as a string outside src/modes (the floors below ask the table's
# properties, or what the mode's prepare set: cfg->eval_only), and --preflight's checks are the
# modes' entries (mode_def.preflight, src/modes/preflight_rows.h), not flags.
names='"(train|eval|check|dump-features|regenerate|transport-test)"'
hits=$(grep -rnE "strcmp\([^;]*mode[^;]*$names|strcmp\([^;]*$names[^;]*mode" "$SRC/src" | grep -v "^$SRC/src/modes/")
[ -z "$hits" ] && ok || bad "a mode's name compared outside src/modes: $hits"
hits=$(grep -rn 'MODE_PF_' "$SRC/src")
[ -z "$hits" ] && ok || bad "--preflight's per-mode flags are left: $hits"
finish
