#!/usr/bin/env bash
# test_regenerate_lifecycle.sh: `dflash_rank --mode regenerate` and the training-set writer as safe
# as training (issue 38, classes 1, 2, 3, 9 and 10):
#   1. a full disk (a small tmpfs, as root): convert-jsonl, make-data, a dump-features shard, a
#      regenerate part and the regenerate merge each end with exit non-zero (no signal), one error line naming the file and
#      "No space left on device", no temporary file and no file under its final name; the parts
#      already written are complete, and copied to a disk with space they resume to the file an
#      uninterrupted run makes (cmp).
#   2. identity by content: parts made for a prompts file since rewritten in place (same path and
#      line count) or by another model at the same target.path are refused naming both values, a
#      part whose sample is longer than the settings allow is refused by the merge (no overflow);
#      an existing regenerate.out made with these settings is "nothing to do" (untouched), one made
#      with other settings, a file regenerate did not make, or the prompts file itself (even with
#      run.overwrite) is refused (untouched); the tokenizer attribute is the same for T and ./T.
#      The prompts rewritten in place while the job runs (lines of the same lengths, after shard 0's
#      part is written) are refused when shard 1 starts, naming the file and the line (each prompt's
#      bytes are checked against the index's CRC32C), with no part of shard 1 and no set written; a
#      NUL byte inside a prompts line is refused naming the file and line, by the run and by
#      --preflight's prompts row.
#   3. edge checks: a held-out rule that takes every prompt, regenerate.max_len past the target's
#      max_position_embeddings, reply buffers past the machine's memory, generation_config.json's
#      eos_token_id 1.5 or 1e20, and a regenerate.out that is a directory are each refused in one
#      line naming the key (and the directory before anything is generated); an eos_token_id given
#      twice counts with its last value, as transformers reads it; regenerate.shard_prompts 1e12 and
#      max_new_tokens 2^30 on a 64-position target run (buffers sized by what the prompts can need).
#   4. load balance: with 2 ranks and rank 1 slowed (test.slow_teacher), rank 0 takes the shards
#      rank 1 cannot (dynamic claims), and the set equals the 1-rank set byte for byte.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy"; exit 1; }
MNT=$TMP/small_disk
trap 'umount -l "$MNT" 2>/dev/null; rm -rf "$TMP"' EXIT

"$T" make-target "$TMP/tgt" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --max-positions 64 \
  --seed 5 >/dev/null 2>&1 || bad "make-target"
$PY - "$TMP/p16.jsonl" "$TMP/big.jsonl" <<'PYEOF'
import json, random, sys
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(16): f.write(json.dumps({"input_ids": [r.randrange(150) for _ in range(6)]}) + "\n")
with open(sys.argv[2], "w") as f:
    for _ in range(3000): f.write(json.dumps({"input_ids": [r.randrange(150) for _ in range(40)]}) + "\n")
PYEOF
regen=(--mode regenerate --device cpu --target.path="$TMP/tgt" --regenerate.prompts="$TMP/p16.jsonl"
       --regenerate.max_new_tokens=16 --regenerate.shard_prompts=4 --regenerate.heldout=2)
expect_ok "reference" "$R" "${regen[@]}" --regenerate.out="$TMP/ref.h5"

# ---------------------------------------------------------------- 1. a full disk
# full_disk NAME KB: a fresh tmpfs of KB KiB at $MNT (0 when mounted)
full_disk() { umount -l "$MNT" 2>/dev/null; mkdir -p "$MNT" && mount -t tmpfs -o size="$2"k tmpfs "$MNT" 2>"$TMP/mount.err"; }
# refused_on_full NAME FILE: the last command (its rc in $rc, stderr in $TMP/full.err) failed as it must
refused_on_full() {
  [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && ok || bad "$1: exit $rc (want a failure without a signal): $(tail -3 "$TMP/full.err")"
  local n
  n=$(grep -c "error:" "$TMP/full.err")
  [ "$n" -eq 1 ] && ok || bad "$1: $n error lines, want one: $(grep -v '^threads' "$TMP/full.err" | head -5)"
  grep "error:" "$TMP/full.err" | grep -q "$2.*No space left on device" && ok || bad "$1: the error does not name $2 and the reason: $(grep error: "$TMP/full.err")"
  grep -qiE "HDF5:|HDF5-DIAG|segmentation|sanitizer" "$TMP/full.err" && bad "$1: $(grep -iE "HDF5:|HDF5-DIAG|segmentation|sanitizer" "$TMP/full.err" | head -2)" || ok
  local left
  left=$(find "$MNT" -name '*.tmp.*')
  [ -z "$left" ] && ok || bad "$1: temporary files left: $left"
}
if full_disk probe 64; then
  for kb in 400 1000; do # 400: /tokens does not fit; 1000: /tokens fits, /offsets does not
    full_disk convert $kb
    "$T" convert-jsonl "$TMP/big.jsonl" "$MNT/c.h5" >/dev/null 2>"$TMP/full.err"; rc=$?
    refused_on_full "convert-jsonl on $kb KiB" "$MNT/c.h5"
    [ ! -e "$MNT/c.h5" ] && ok || bad "convert-jsonl on $kb KiB: $MNT/c.h5 exists"
  done
  full_disk make-data 400
  "$T" make-data "$MNT/m.h5" --target "$TMP/tgt" --samples 300 --prompt-len 6 --gen-len 40 --seed 2 >/dev/null 2>"$TMP/full.err"; rc=$?
  refused_on_full "make-data" "$MNT/m.h5"
  [ ! -e "$MNT/m.h5" ] && ok || bad "make-data: $MNT/m.h5 exists"
  # dump-features: the same writer, with the teacher datasets of its own (featfile.c)
  "$T" make-data "$TMP/d24.h5" --target "$TMP/tgt" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data d24"
  for kb in 200 800; do
    full_disk dump $kb
    "$R" --mode dump-features --device cpu --target.path="$TMP/tgt" --target.layer_ids=0,1 --drafter.block_size=2 \
      --data.path="$TMP/d24.h5" --teacher.topk=4 --features.dir="$MNT/feat" --run.dir="$TMP/dump$kb" >/dev/null 2>"$TMP/full.err"; rc=$?
    refused_on_full "dump-features on $kb KiB" "$MNT/feat/features-00000-of-00001.h5"
    [ ! -e "$MNT/feat/features-00000-of-00001.h5" ] && ok || bad "dump-features on $kb KiB: the shard exists"
  done

  # a part's size on a tmpfs (whole pages): the set without /heldout holds the same datasets
  expect_ok "part-sized set" "$R" "${regen[@]}" --regenerate.heldout=0 --regenerate.shard_prompts=16 --regenerate.out="$TMP/one.h5"
  part_k=$(( ($(stat -c %s "$TMP/one.h5") + 4095) / 4096 * 4 ))
  # part: room for one part and a half; merge: room for the 4 parts and half of the set
  for what in part merge; do
    if [ $what = part ]; then size=$(( part_k * 3 / 2 + 64 )); else size=$(( part_k * 9 / 2 + 64 )); fi
    full_disk $what $size
    "$R" "${regen[@]}" --regenerate.out="$MNT/r.h5" >/dev/null 2>"$TMP/full.err"; rc=$?
    if [ $what = part ]; then want="$MNT/r.h5.parts/part-"; else want="$MNT/r.h5"; fi
    refused_on_full "regenerate ($what fails)" "$want"
    [ ! -e "$MNT/r.h5" ] && ok || bad "regenerate ($what fails): the set exists"
    n=0
    for p in "$MNT"/r.h5.parts/part-*.h5; do
      [ -e "$p" ] || continue
      n=$((n + 1))
      $PY -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r"); assert len(f["offsets"]) == 5 and len(f["tokens"]) == f["offsets"][-1], dict(f)' "$p" 2>/dev/null &&
        ok || bad "regenerate ($what fails): $p is incomplete"
    done
    if [ $what = part ]; then [ "$n" -ge 1 ] && [ "$n" -lt 4 ] && ok || bad "part: $n parts"; else [ "$n" -eq 4 ] && ok || bad "merge: $n parts"; fi
    rm -rf "$TMP/resume.h5.parts" && cp -r "$MNT/r.h5.parts" "$TMP/resume.h5.parts"
    rm -rf "$TMP/resume.h5.parts"/claims-*
    expect_ok "resume after the full disk ($what)" "$R" "${regen[@]}" --regenerate.out="$TMP/resume.h5"
    cmp -s "$TMP/ref.h5" "$TMP/resume.h5" && ok || bad "resume after the full disk ($what): the set differs from the uninterrupted one"
    rm -f "$TMP/resume.h5"
  done
  umount -l "$MNT"
else
  echo "cannot mount a tmpfs ($(cat "$TMP/mount.err")): the full-disk checks are skipped"
fi

# ---------------------------------------------------------------- 2. identity by content
one=("${regen[@]}" --regenerate.shard_prompts=16) # one shard: a finished set is its part (same settings)
expect_ok "one-shard set" "$R" "${one[@]}" --regenerate.out="$TMP/s.h5"
# the prompts rewritten in place: same path, same line count, other ids
cp "$TMP/p16.jsonl" "$TMP/p16.orig"
mkdir -p "$TMP/q.h5.parts" && cp "$TMP/s.h5" "$TMP/q.h5.parts/part-00000-of-00001.h5"
sed -i '1s/\[[0-9]*/[7/' "$TMP/p16.jsonl"
expect_fail "prompts rewritten" "part-00000-of-00001.h5 was made with other settings.*prompts_crc32c [0-9a-f]* there, [0-9a-f]* here" \
  "$R" "${one[@]}" --regenerate.out="$TMP/q.h5"
[ ! -e "$TMP/q.h5" ] && ok || bad "prompts rewritten: a set was written"
cp "$TMP/p16.orig" "$TMP/p16.jsonl"
# another model at the same target.path (same config, other weights)
mv "$TMP/tgt" "$TMP/tgt.orig"
"$T" make-target "$TMP/tgt" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --max-positions 64 \
  --seed 6 >/dev/null 2>&1 || bad "make-target seed 6"
expect_fail "another model" "other settings.*target_weights [0-9a-f]* there, [0-9a-f]* here" "$R" "${one[@]}" --regenerate.out="$TMP/q.h5"
rm -rf "$TMP/tgt" && mv "$TMP/tgt.orig" "$TMP/tgt"
rm -rf "$TMP/q.h5.parts"
# a part with these settings but a sample longer than they allow (another job's, written over this
# one's): refused by the merge before it is read (it would overflow buffers sized for these settings)
mkdir -p "$TMP/q.h5.parts"
$PY - "$TMP/s.h5" "$TMP/q.h5.parts/part-00000-of-00001.h5" <<'PYEOF' || bad "the long part"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    off = f["offsets"][:]
    tok = np.concatenate([f["tokens"][:off[1]], np.ones(500, np.int32), f["tokens"][off[1]:]])
    msk = np.concatenate([f["loss_mask"][:off[1]], np.ones(500, np.uint8), f["loss_mask"][off[1]:]])
    off = np.concatenate([off[:1], off[1:] + 500])
    for k, v in (("tokens", tok), ("loss_mask", msk), ("offsets", off), ("finish_reason", f["finish_reason"][:])):
        g.create_dataset(k, data=v, chunks=True, maxshape=(None,))
    for k, v in f.attrs.items(): g.attrs[k] = v
PYEOF
expect_fail "a part with too long a sample" "part-00000-of-00001.h5: sample 0 has 522 tokens, more than a prompt and its reply can" \
  "$R" "${one[@]}" --regenerate.out="$TMP/q.h5"
[ ! -e "$TMP/q.h5" ] && ok || bad "the long part: a set was written"
rm -rf "$TMP/q.h5.parts"
# the prompts rewritten in place during the job (same line lengths): shard 0 decoded from the old
# file, shard 1 refused when it starts (the job sleeps after shard 0's part: the file changes then)
"$R" "${regen[@]}" --regenerate.shard_prompts=8 --test.slow_teacher=0 --test.slow_ms=2000 --regenerate.out="$TMP/mix.h5" \
  >/dev/null 2>"$TMP/mix.err" &
mix=$!
for _ in $(seq 200); do [ -e "$TMP/mix.h5.parts/part-00000-of-00002.h5" ] && break; sleep 0.05; done
sed '9,16y/34/43/' "$TMP/p16.orig" >"$TMP/p16.new" # lines 9..16 (shard 1): other ids, the same bytes per line
cat "$TMP/p16.new" >"$TMP/p16.jsonl" # in place (the job's open file sees it)
cmp -s "$TMP/p16.jsonl" "$TMP/p16.orig" && bad "prompts rewritten while running: the rewrite changed nothing"
wait $mix; rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && ok || bad "prompts rewritten while running: exit $rc, want a failure: $(tail -3 "$TMP/mix.err")"
[ "$(grep -c "error:" "$TMP/mix.err")" -eq 1 ] &&
  grep "error:" "$TMP/mix.err" | grep -q "regenerate.prompts $TMP/p16.jsonl line 9: changed since the job indexed it" && ok ||
  bad "prompts rewritten while running: want one error naming the prompts and line 9: $(grep -v '^threads' "$TMP/mix.err" | tail -3)"
[ ! -e "$TMP/mix.h5" ] && [ ! -e "$TMP/mix.h5.parts/part-00001-of-00002.h5" ] && [ -z "$(find "$TMP" -name 'mix.h5*.tmp*')" ] && ok ||
  bad "prompts rewritten while running: something of the mixed set was written: $(ls "$TMP/mix.h5.parts" 2>&1)"
cat "$TMP/p16.orig" >"$TMP/p16.jsonl"
rm -rf "$TMP/mix.h5.parts"
# a NUL byte inside a prompts line (after its object: JSON text would end there) is refused
{ head -1 "$TMP/p16.jsonl"; head -2 "$TMP/p16.jsonl" | tail -1 | tr -d '\n'; printf '\0 \n'; tail -n +3 "$TMP/p16.jsonl"; } >"$TMP/nul.jsonl"
expect_fail "a NUL in a prompt" "regenerate.prompts $TMP/nul.jsonl line 2: a NUL byte at column" \
  "$R" "${one[@]}" --regenerate.prompts="$TMP/nul.jsonl" --regenerate.out="$TMP/nul.h5"
[ ! -e "$TMP/nul.h5" ] && ok || bad "a NUL in a prompt: a set was written"
"$R" --preflight "${one[@]}" --regenerate.prompts="$TMP/nul.jsonl" --regenerate.out="$TMP/nul.h5" >"$TMP/pf.out" 2>&1
grep -qE "^prompts +0 +FAIL .*nul.jsonl line 2: a NUL byte at column" "$TMP/pf.out" && ok ||
  bad "a NUL in a prompt: --preflight's prompts row: $(grep -E "^(prompts|preflight)" "$TMP/pf.out")"
# an existing set: with these settings nothing to do; with others refused; either way untouched
cp "$TMP/s.h5" "$TMP/s.copy"
expect_ok "done already" "$R" "${one[@]}" --regenerate.out="$TMP/s.h5"
grep -q "already made with these settings: nothing to do" "$TMP/err" && ok || bad "done already: $(cat "$TMP/err")"
expect_fail "other settings" "regenerate.out $TMP/s.h5 exists, made with other settings .max_new_tokens 16 there, 8 here" \
  "$R" "${one[@]}" --regenerate.out="$TMP/s.h5" --regenerate.max_new_tokens=8
cp "$TMP/big.jsonl" "$TMP/notaset.h5"
expect_fail "a foreign file" "regenerate.out $TMP/notaset.h5 exists and is not a training set" \
  "$R" "${one[@]}" --regenerate.out="$TMP/notaset.h5"
expect_fail "the prompts file" "regenerate.out $TMP/p16.jsonl is regenerate.prompts" \
  "$R" "${one[@]}" --regenerate.out="$TMP/p16.jsonl" --run.overwrite=true
cmp -s "$TMP/s.h5" "$TMP/s.copy" && cmp -s "$TMP/big.jsonl" "$TMP/notaset.h5" && cmp -s "$TMP/p16.jsonl" "$TMP/p16.orig" && ok ||
  bad "an existing file was changed"
# the tokenizer attribute does not depend on how the target's path is written
(cd "$TMP" && "$R" "${one[@]}" --target.path=./tgt --regenerate.out="$TMP/dot.h5" >/dev/null 2>&1) || bad "regenerate with ./tgt"
$PY -c 'import sys, h5py; a, b = (h5py.File(p, "r").attrs["tokenizer"] for p in sys.argv[1:]); assert a == b, (a, b)' \
  "$TMP/s.h5" "$TMP/dot.h5" && ok || bad "the tokenizer attribute differs for tgt and ./tgt"
$PY -c 'import sys, h5py; a = h5py.File(sys.argv[1], "r").attrs; assert all(k in a for k in ("target_weights_crc32c", "prompts_crc32c", "prompts_bytes", "target_config_crc32c")), list(a)' \
  "$TMP/s.h5" && ok || bad "the set lacks its identity attributes"

# ---------------------------------------------------------------- 3. edge checks
head -4 "$TMP/p16.jsonl" >"$TMP/p4.jsonl"
expect_fail "held-out takes every prompt" "regenerate.heldout 16 holds out all 4 prompts.*set regenerate.heldout below 4" \
  "$R" "${regen[@]}" --regenerate.prompts="$TMP/p4.jsonl" --regenerate.heldout=16 --regenerate.out="$TMP/e1.h5"
expect_fail "max_len past the positions" "regenerate.max_len 100 is past the target's max_position_embeddings 64" \
  "$R" "${regen[@]}" --regenerate.max_len=100 --regenerate.out="$TMP/e2.h5"
"$T" make-target "$TMP/long" --arch llama --layers 1 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --max-positions 1073741824 \
  --seed 5 >/dev/null 2>&1 || bad "make-target long"
expect_fail "replies past memory" "regenerate.shard_prompts 1000000 x regenerate.max_new_tokens 1073741824: .*lower regenerate.shard_prompts" \
  "$R" "${regen[@]}" --target.path="$TMP/long" --regenerate.prompts="$TMP/big.jsonl" --regenerate.shard_prompts=1000000 \
  --regenerate.max_new_tokens=1073741824 --regenerate.out="$TMP/e3.h5"
# max_new_tokens far past what the cache allows is no allocation of that size: buffers by need
expect_ok "max_new_tokens past the cache" "$R" "${regen[@]}" --regenerate.shard_prompts=1000000000000 \
  --regenerate.max_new_tokens=1073741824 --regenerate.out="$TMP/e7.h5"
cp -r "$TMP/tgt" "$TMP/gc"
printf '{"eos_token_id": 1.5}' >"$TMP/gc/generation_config.json"
expect_fail "eos 1.5" "gc/generation_config.json: eos_token_id holds a number with a fraction" \
  "$R" "${regen[@]}" --target.path="$TMP/gc" --regenerate.out="$TMP/e4.h5"
printf '{"eos_token_id": [3, 1e20]}' >"$TMP/gc/generation_config.json"
expect_fail "eos 1e20" "gc/generation_config.json: eos_token_id 1e.20 is outside the target vocabulary .0, 150" \
  "$R" "${regen[@]}" --target.path="$TMP/gc" --regenerate.out="$TMP/e5.h5"
printf '{"eos_token_id": 3, "eos_token_id": 7}' >"$TMP/gc/generation_config.json"
expect_ok "eos given twice" "$R" "${regen[@]}" --target.path="$TMP/gc" --regenerate.out="$TMP/e6.h5"
$PY -c 'import sys, h5py; s = h5py.File(sys.argv[1], "r").attrs["stop_ids"].tolist(); assert s == [7], s' "$TMP/e6.h5" &&
  ok || bad "eos_token_id given twice: not the last value"
mkdir -p "$TMP/outdir"
expect_fail "regenerate.out a directory" "regenerate.out $TMP/outdir is a directory" "$R" "${regen[@]}" --regenerate.out="$TMP/outdir"
grep -q "prompts of the job" "$TMP/err" && bad "regenerate.out a directory: replies were generated first" || ok
[ -z "$(ls -A "$TMP/outdir")" ] && ok || bad "regenerate.out a directory: it was written into"
for e in 1 2 3 4 5; do [ ! -e "$TMP/e$e.h5" ] && ok || bad "edge check $e: a set was written"; done

# ---------------------------------------------------------------- 4. load balance
bal=("${regen[@]}" --regenerate.shard_prompts=2) # 8 shards
expect_ok "1 rank" "$R" "${bal[@]}" --regenerate.out="$TMP/b1.h5"
expect_ok "2 ranks, rank 1 slow" mpirun -np 2 "$R" "${bal[@]}" --regenerate.out="$TMP/b2.h5" --test.slow_teacher=1 --test.slow_ms=4000
cmp -s "$TMP/b1.h5" "$TMP/b2.h5" && ok || bad "2 ranks with a slow one and 1 rank give different sets"
s0=$(grep "^\[r0\]" "$TMP/err" | sed -n 's/.*prompts in \([0-9]*\) shard(s) by this rank.*/\1/p' | tail -1)
s1=$(grep "^\[r1\]" "$TMP/err" | sed -n 's/.*prompts in \([0-9]*\) shard(s) by this rank.*/\1/p' | tail -1)
echo "shards decoded: rank 0 ${s0:-?}, rank 1 (slow) ${s1:-?}"
[ -n "$s0" ] && [ -n "$s1" ] && [ $((s0 + s1)) -eq 8 ] && [ "$s1" -le 2 ] && ok ||
  bad "load balance: rank 0 ${s0:-?} shards, the slow rank 1 ${s1:-?} (want at most 2 of 8): $(grep 'shard(s) by this rank' "$TMP/err")"

finish
