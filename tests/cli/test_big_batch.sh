#!/usr/bin/env bash
# test_big_batch.sh: one training batch above 2 GiB crosses the MPI payload path intact (64-bit
# message sizes, src/common/comm/msg.h). A tiny target (2 layers, hidden 16, vocabulary 256) with
# top-256 logits makes a payload of about 2.1 KB per token: 4,200 samples of 250 random tokens
# packed into one batch of 1,050,000 tokens give a 2.19 GB message (an int count wraps at
# 2,147,483,647). transport.check_payloads seals each payload with a CRC-32C of its bytes that the
# student checks on arrival: the job must finish, every payload must match its seal, and the largest
# must be above 2^31 bytes; the step's loss must be finite. Peak memory about 7.5 GB (teacher 5,
# student 2.7), about a minute on two cores.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
# Skipped (77), saying why, where it cannot run as meant: the sanitizer build (several minutes
# there; its point is memory errors, which the smaller jobs exercise on the same code) and a
# machine with less than 10 GiB available.
if ldd "$R" 2>/dev/null | grep -q libasan; then echo "test_big_batch: skipped in the sanitizer build"; exit 77; fi
avail=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo)
if [ "${avail:-0}" -lt 10 ]; then echo "test_big_batch: skipped: ${avail} GiB of memory available, it needs 10"; exit 77; fi
PY=/usr/bin/python3
"$T" make-target "$TMP/target" --arch llama --layers 2 --hidden 16 --heads 2 --kv-heads 1 --head-dim 8 --intermediate 16 \
  --vocab 256 --seed 5 >/dev/null 2>&1 || bad "make-target"
$PY - "$TMP/data.jsonl" <<'PYEOF'
import random, sys
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for i in range(4201):  # 4,200 training samples and 1 held out
        f.write('{"input_ids": [' + ",".join(str(r.randrange(256)) for _ in range(250)) + "]}\n")
PYEOF
"$T" convert-jsonl "$TMP/data.jsonl" "$TMP/data.h5" --vocab-size 256 >/dev/null 2>&1 || bad "convert-jsonl"
rm -f "$TMP/data.jsonl"
expect_ok "a 2.19 GB batch" mpirun -np 2 "$R" --mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" \
  --target.layer_ids=1 --drafter.block_size=8 --drafter.layers=1 --train.steps=1 --train.max_anchors=16 \
  --data.max_tokens_per_batch=1050000 --teacher.max_tokens=1050000 --teacher.topk=256 --teacher.vocab_tile=32 \
  --data.heldout_samples=1 --data.bucket_size=4200 --transport.check_payloads=true --run.dir="$TMP/run"
line=$(grep -o "transport.check_payloads: [0-9]* payloads matched their teachers' CRC-32C (the largest [0-9]* bytes)" "$TMP/err")
echo "$line"
n=$(echo "$line" | sed -n 's/.*: \([0-9]*\) payloads.*/\1/p') big=$(echo "$line" | sed -n 's/.*the largest \([0-9]*\) bytes.*/\1/p')
[ "${n:-0}" -eq 3 ] && ok || bad "wanted 3 sealed payloads checked (held-out, training, held-out), got '${n}': $(tail -3 "$TMP/err")"
[ "${big:-0}" -gt 2147483647 ] && ok || bad "the largest payload (${big} bytes) is not above 2^31 - 1 bytes"
grep '"step"' "$TMP/run/metrics.jsonl" | grep -v heldout | $PY -c "import sys, json, math; l = [json.loads(x)['loss'] for x in sys.stdin]; sys.exit(0 if len(l) == 1 and math.isfinite(l[0]) else 1)" &&
  ok || bad "no finite loss for the step: $(grep '"step"' "$TMP/run/metrics.jsonl")"
finish
