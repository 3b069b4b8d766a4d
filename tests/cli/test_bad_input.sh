#!/usr/bin/env bash
# test_bad_input.sh: bad input to a training job (dflash_rank, train mode) gives exactly one
# "error: ..." line naming the thing, a non-zero exit, no crash and nothing half-written:
#   configuration values of the wrong type or range, unknown keys and arguments (the cases
#   test_dflash_rank.sh does not cover); roles that do not fit the world; target directories that
#   are missing, have no weights, or a vocabulary smaller than the training set's; drafter.config
#   made for another target (and the matching case, which trains); training sets with out-of-range
#   ids or broken offsets (the rest trains, the log says what was skipped), with nothing usable,
#   not HDF5, without /tokens, or with offsets past /tokens.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PY=/usr/bin/python3 # Debian's, with python3-h5py and python3-numpy (no PyPI packages)
if ! $PY -c 'import h5py, numpy' 2>/dev/null; then
  echo "test_bad_input: $PY lacks h5py/numpy (scripts/install-deps.sh installs python3-h5py)" >&2
  exit 1
fi
command -v mpirun >/dev/null || { echo "test_bad_input: mpirun not found (scripts/install-deps.sh installs openmpi-bin)" >&2; exit 1; }

# expect_fail_job NAME PATTERN CMD...: a job under mpirun fails with one error line in all of
# stderr (whichever rank prints it; mpirun's own banner has none), which matches PATTERN, exits
# non-zero and below 128, and no rank crashed (expect_fail_mpi, plus the count of every error line).
expect_fail_job() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq 0 ]; then bad "$name: exit 0, wanted an error"; return; fi
  if [ "$rc" -ge 128 ]; then bad "$name: crashed (exit $rc)"; cat "$TMP/err" >&2; return; fi
  if grep -qiE "segmentation|core dumped|exited on signal" "$TMP/err"; then bad "$name: a rank crashed:"; cat "$TMP/err" >&2; return; fi
  local n m
  n=$(grep -c "error:" "$TMP/err")
  m=$(grep "error:" "$TMP/err" | grep -c -- "$pattern")
  if [ "$n" -ne 1 ] || [ "$m" -ne 1 ]; then
    bad "$name: wanted one error line matching '$pattern', got $n error line(s), $m matching:"; cat "$TMP/err" >&2; return
  fi
  ok
}
# no_leftovers NAME DIR: nothing temporary (*.tmp.*, .tmp-*) under DIR
no_leftovers() {
  local left
  left=$(find "$2" \( -name '*.tmp.*' -o -name '.tmp-*' -o -name '.old-*' \) 2>/dev/null)
  [ -z "$left" ] && ok || bad "$1: temporary files left behind: $left"
}

# ---------------------------------------------------------------- inputs
mk_target() { # mk_target DIR HIDDEN VOCAB
  "$T" make-target "$1" --arch llama --layers 2 --hidden "$2" --heads 4 --kv-heads 2 --vocab "$3" --seed 5 >/dev/null 2>&1 ||
    bad "make-target $1"
}
mk_target "$TMP/t32" 32 150
mk_target "$TMP/t48" 48 150
"$T" make-data "$TMP/data.h5" --target "$TMP/t32" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
# a training set (convert-jsonl) whose vocab_size, 300, is larger than the targets' 150
$PY - "$TMP/big_vocab.jsonl" <<'PYEOF'
import json, random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    for _ in range(24):
        f.write(json.dumps({"input_ids": [random.randrange(150) for _ in range(30)]}) + "\n")
PYEOF
"$T" convert-jsonl "$TMP/big_vocab.jsonl" "$TMP/big_vocab.h5" --vocab-size 300 >/dev/null 2>&1 || bad "convert-jsonl"
for kind in mixed all-bad-ids no-tokens offsets-out; do
  $PY "$SRC/tests/cli/make_bad_trainset.py" "$TMP/data.h5" "$TMP/$kind.h5" "$kind" 3 || bad "make_bad_trainset $kind"
done
echo "not an HDF5 file" >"$TMP/text.h5"
mkdir -p "$TMP/no_weights"
cp "$TMP/t32/config.json" "$TMP/no_weights/"

base=(--mode train --device cpu --target.layer_ids=0,1 --drafter.block_size=6 --train.steps=5 --train.max_anchors=8
      --train.log_interval=5 --train.eval_interval=1000 --train.eval_batches=1 --data.max_tokens_per_batch=200
      --data.heldout_samples=4 --teacher.topk=6)
good=(--target.path="$TMP/t32" --data.path="$TMP/data.h5")
job() { mpirun -np 2 "$R" "${base[@]}" "$@"; } # 1 teacher + 1 student

# ---------------------------------------------------------------- configuration (one process)
# (unknown key in a file, a string for an integer in a file, bad JSON, a missing file, a bad
# integer override, an unknown argument and a bad device are in test_dflash_rank.sh)
expect_fail override-unknown-key "unknown key 'run.sede'" "$R" "${base[@]}" "${good[@]}" --run.sede=5
expect_fail override-typo-section "did you mean 'train.lr'" "$R" "${base[@]}" "${good[@]}" --trian.lr=1e-3
echo '{"train": {"steps": -5}}' >"$TMP/c_neg.json"
expect_fail negative-in-file "'train.steps' = -5 is outside \[1," "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_neg.json"
expect_fail negative-override "'data.max_tokens_per_batch' = -200 is outside \[1," "$R" "${base[@]}" "${good[@]}" --data.max_tokens_per_batch=-200
expect_fail zero-override "'train.log_interval' = 0 is outside \[1," "$R" "${base[@]}" "${good[@]}" --train.log_interval=0
echo '{"train": {"steps": [5, 6]}}' >"$TMP/c_list.json"
expect_fail list-for-integer "'train.steps' wants an integer" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_list.json"
echo '{"train": {"steps": 2.5}}' >"$TMP/c_frac.json"
expect_fail fraction-for-integer "'train.steps' wants an integer" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_frac.json"
echo '{"train": {"lr": "fast"}}' >"$TMP/c_str.json"
expect_fail string-for-number "'train.lr' wants a number" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_str.json"
echo '{"target": {"layer_ids": 1}}' >"$TMP/c_scalar.json"
expect_fail scalar-for-list "'target.layer_ids' wants a list of integers" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_scalar.json"
echo '{"target": {"layer_ids": [0, "one"]}}' >"$TMP/c_listitem.json"
expect_fail string-in-list "'target.layer_ids' wants a list of integers" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_listitem.json"
expect_fail list-override-item "'target.layer_ids' wants integers separated by commas" "$R" "${base[@]}" "${good[@]}" --target.layer_ids=0,x
echo '{"run": {"resume": "yes"}}' >"$TMP/c_bool.json"
expect_fail string-for-bool "'run.resume' wants true or false" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_bool.json"
expect_fail bool-override "'run.resume' wants true or false" "$R" "${base[@]}" "${good[@]}" --run.resume=yes
echo '{"train": {"mem_budget": -1}}' >"$TMP/c_bytes.json"
expect_fail negative-size "'train.mem_budget' wants a size" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_bytes.json"
expect_fail size-override "'train.mem_budget' wants a size" "$R" "${base[@]}" "${good[@]}" --train.mem_budget=lots
expect_fail number-out-of-range "'train.ema' = 1.5 is outside \[0, 1\]" "$R" "${base[@]}" "${good[@]}" --train.ema=1.5
expect_fail choice "'loss.weighting' = \"flat\" is not one of decay|dpace" "$R" "${base[@]}" "${good[@]}" --loss.weighting=flat
echo '{"drafter": {"config": 5}}' >"$TMP/c_dc.json"
expect_fail drafter-config-type "'drafter.config' wants a string" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_dc.json"
echo '{"train": 5}' >"$TMP/c_section.json"
expect_fail section-not-object "'train'" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_section.json"
echo '[1, 2]' >"$TMP/c_array.json"
expect_fail config-not-object "must be a JSON object" "$R" "${base[@]}" "${good[@]}" --config "$TMP/c_array.json"
long=$(printf 'd%.0s' $(seq 1 600))
expect_fail string-too-long "'run.dir' is longer than" "$R" "${base[@]}" "${good[@]}" --run.dir="$TMP/$long"
expect_fail override-without-value "unknown argument '--train.steps'" "$R" "${base[@]}" "${good[@]}" --train.steps
expect_fail option-without-value "unknown argument '--device'" "$R" "${good[@]}" --mode train --device
expect_fail config-without-file "--config needs a file" "$R" "${base[@]}" "${good[@]}" --config
expect_fail stray-word "unknown argument 'train'" "$R" "${good[@]}" train
expect_fail train-no-data "train needs target.path" "$R" "${base[@]}" --target.path="$TMP/t32"

# ---------------------------------------------------------------- roles vs world size
# one process: a student alone, with nothing to produce batches
expect_fail single-process-train "no teacher ranks and no data.features" "$R" "${base[@]}" "${good[@]}" --run.dir="$TMP/r_single"
expect_fail_job roles-too-many "= 3 rank(s), but the job has 2" job "${good[@]}" --run.dir="$TMP/r_w1" --world.teachers=2
expect_fail_job students-exceed-world "3 student(s).*the job has 2" job "${good[@]}" --run.dir="$TMP/r_w2" --world.students=3
grep -q -- "-1 teacher" "$TMP/err" && bad "students-exceed-world: the message counts -1 teachers: $(grep error: "$TMP/err")" || ok
expect_fail_job students-only "no teacher ranks and no data.features" job "${good[@]}" --run.dir="$TMP/r_w3" --world.students=2 --train.batches_per_step=2
expect_fail_job batches-per-step "train.batches_per_step = 1 is not a multiple of the 2 student(s)" \
  mpirun -np 3 "$R" "${base[@]}" "${good[@]}" --run.dir="$TMP/r_w4" --world.students=2

# ---------------------------------------------------------------- target directories
expect_fail_job target-missing "$TMP/nowhere/config.json: No such file or directory" \
  job --target.path="$TMP/nowhere" --data.path="$TMP/data.h5" --run.dir="$TMP/r_t1"
expect_fail_job target-no-weights "no_weights: no model.safetensors or model.safetensors.index.json" \
  job --target.path="$TMP/no_weights" --data.path="$TMP/data.h5" --run.dir="$TMP/r_t2"
expect_fail_job target-vocab-smaller "big_vocab.h5 has vocab_size 300, larger than the target's 150" \
  job --target.path="$TMP/t32" --data.path="$TMP/big_vocab.h5" --run.dir="$TMP/r_t3"

# ---------------------------------------------------------------- drafter.config
# A 2-layer drafter trained on the hidden-32 target exports run.dir/drafter/config.json.
expect_ok drafter-export job "${good[@]}" --run.dir="$TMP/r_exp" --drafter.layers=2 --checkpoint.every=5
dcfg=$TMP/r_exp/drafter/config.json
[ -f "$dcfg" ] && ok || bad "no exported drafter config"
# ... which does not fit the hidden-48 target: one line naming the file, the key and both values
expect_fail_job drafter-config-hidden "drafter.config $dcfg: 'hidden_size' is 32 but the target's 'hidden_size' is 48" \
  job --target.path="$TMP/t48" --data.path="$TMP/data.h5" --run.dir="$TMP/r_d1" --drafter.config="$dcfg"
[ ! -e "$TMP/r_d1/drafter" ] && ok || bad "drafter-config-hidden: a drafter was exported"
# ... and fits the target it was made for: it trains, with the file's shape (2 layers); the
# drafter directory stands for its config.json
expect_ok drafter-config-match job "${good[@]}" --run.dir="$TMP/r_d2" --drafter.config="$TMP/r_exp/drafter"
grep -q "drafter shape from $dcfg: 2 layer(s)" "$TMP/err" && ok || bad "drafter-config-match: no line naming the drafter's shape: $(cat "$TMP/err")"
grep -q '"step": 5,' "$TMP/r_d2/metrics.jsonl" && ok || bad "drafter-config-match: did not reach step 5"
grep -q '"num_hidden_layers":[[:space:]]*2' "$TMP/r_d2/drafter/config.json" && ok || bad "drafter-config-match: exported drafter is not 2 layers"
# ... a vocabulary that differs, target layers other than the teachers', a missing file
sed 's/"vocab_size":[[:space:]]*150/"vocab_size": 160/' "$dcfg" >"$TMP/dc_vocab.json"
expect_fail_job drafter-config-vocab "'vocab_size' is 160 but the target's 'vocab_size' is 150" \
  job "${good[@]}" --run.dir="$TMP/r_d3" --drafter.config="$TMP/dc_vocab.json"
expect_fail_job drafter-config-layers "'target_layer_ids' is \[0,1\] but the teachers send layers \[1\]" \
  job "${good[@]}" --run.dir="$TMP/r_d4" --drafter.config="$dcfg" --target.layer_ids=1
expect_fail_job drafter-config-missing "drafter.config: $TMP/none.json: No such file" \
  job "${good[@]}" --run.dir="$TMP/r_d5" --drafter.config="$TMP/none.json"

# ---------------------------------------------------------------- checkpoints that do not load
cp -r "$TMP/r_exp" "$TMP/r_ck"
expect_fail_job resume-other-shape "run.resume: the checkpoint .*step-00000005 belongs to another run: drafter.layers 2 -> 3" \
  job "${good[@]}" --run.dir="$TMP/r_ck" --drafter.layers=3 --train.steps=10 --run.resume=true
truncate -s 1000 "$TMP/r_ck/checkpoints/step-00000005/optimizer.safetensors"
expect_fail_job resume-truncated-sum "run.resume: checkpoint step 5: .*optimizer.safetensors fails its checksum" \
  job "${good[@]}" --run.dir="$TMP/r_ck" --drafter.layers=2 --train.steps=10 --run.resume=true
# (the checksums matching the truncated file: the safetensors reader's own check is what it meets)
/usr/bin/python3 "$SRC/tests/cli/crc32c_reseal.py" checkpoint "$TMP/r_ck/checkpoints/step-00000005"
expect_fail_job resume-truncated "run.resume: checkpoint step 5: .*optimizer.safetensors: .*truncated" \
  job "${good[@]}" --run.dir="$TMP/r_ck" --drafter.layers=2 --train.steps=10 --run.resume=true

# ---------------------------------------------------------------- training sets
# 24 good samples + 3 with an id >= vocab_size, 3 with a negative id, 3 whose offsets decrease:
# the run trains on the good ones and the log says how many were skipped and why.
expect_ok data-some-bad job --target.path="$TMP/t32" --data.path="$TMP/mixed.h5" --run.dir="$TMP/r_s1"
grep -q "mixed.h5: 9 of 33 samples rejected (not used): 3 whose offsets do not increase, 6 with ids outside \[0, 150)" "$TMP/err" &&
  ok || bad "data-some-bad: no line saying which samples were skipped: $(grep -i warn "$TMP/err")"
grep -q '"step": 5,' "$TMP/r_s1/metrics.jsonl" && ok || bad "data-some-bad: did not reach step 5"
expect_fail_job data-nothing-usable "usable" job --target.path="$TMP/t32" --data.path="$TMP/all-bad-ids.h5" --run.dir="$TMP/r_s2"
grep -q "24 of 24 samples rejected (not used): 24 with ids outside \[0, 150); no sample is usable" "$TMP/err" &&
  ok || bad "data-nothing-usable: no line saying why: $(cat "$TMP/err")"
expect_fail_job data-not-hdf5 "text.h5: not an HDF5 file" job --target.path="$TMP/t32" --data.path="$TMP/text.h5" --run.dir="$TMP/r_s3"
expect_fail_job data-no-tokens "no-tokens.h5: missing dataset /tokens" job --target.path="$TMP/t32" --data.path="$TMP/no-tokens.h5" --run.dir="$TMP/r_s4"
expect_fail_job data-offsets-out "offsets-out.h5: dataset /offsets: offsets\[24\] = 725 is outside \[0, 720\]" \
  job --target.path="$TMP/t32" --data.path="$TMP/offsets-out.h5" --run.dir="$TMP/r_s5"
expect_fail_job data-missing "$TMP/absent.h5: cannot open" job --target.path="$TMP/t32" --data.path="$TMP/absent.h5" --run.dir="$TMP/r_s6"

# nothing half-written by any of the failed jobs
no_leftovers all "$TMP"
finish
