#!/usr/bin/env bash
# test_pinned_plan_cuda.sh: pinned host memory is allocated exactly as --plan plans it (issue 50), on
# the CUDA emulator (DFLASH_EMU_PINNED_REPORT=1: each process's peak of cudaHostAlloc'd bytes,
# tests/emu/README.md). Skipped (exit 77) off the emulator build. 1 teacher + 2 students, three
# emulated devices (NCCL between them through files), payloads over NCCL, gradients over MPI:
#   --plan's pinned_rank_bytes of the teacher and of a student equal, byte for byte, the peak each
#   rank of the job pinned (the teacher's payload ring, the students' payload buffers and gradient
#   ring); over NCCL the payload buffers hold no features (the plan's student bytes are below one
#   payload buffer with its features per buffer);
#   pinning refused (DFLASH_EMU_PINNED_BYTES: the students' payload buffers and half their gradient
#   ring): the job trains, each student warns exactly once (naming its gradient ring and the bytes,
#   and `ulimit -l`), the teacher not at all, and the gradient ring, pinned at smaller chunks, still
#   copies the whole gradient each step to pinned memory asynchronously (the copy log);
#   nothing pinned at all (8 KiB): the buffers are pageable, each rank warns exactly once, the
#   gradient ring's copies wait for the end of the backward (no bucket during it) and the job trains
#   the same weights as the pinned run;
#   --preflight's "pinned memory" row: ok with the host's total, WARN under `ulimit -l 16` (KiB).
# On the code before issue 50 the payload buffers held the features on the NCCL path too (the plan
# and the peaks differ), the plan printed only the gradient ring, and a refused ring was pageable
# and copied inside the backward.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3
need_emulator "DFLASH_EMU_PINNED_REPORT is the CUDA emulator's (tests/emu)"
gpu_job 32 32
STEPS=2
A=(--mode train --device cuda --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
   --drafter.block_size=8 --drafter.layers=1 --train.lr=3e-3 --train.max_anchors=16 --train.log_interval=1
   --train.eval_interval=100 --train.eval_batches=0 --data.max_tokens_per_batch=256 --data.heldout_samples=0
   --teacher.topk=8 --train.steps=$STEPS --world.students=2 --train.batches_per_step=2
   --transport.payload=nccl --transport.grad_allreduce=mpi)

expect_ok plan "$R" "${A[@]}" --world.teachers=1 --run.dir="$TMP/plan" --plan
tp=$(sed -n 's/^pinned_rank_bytes teacher 0 //p' "$TMP/out")
sp=$(sed -n 's/^pinned_rank_bytes student //p' "$TMP/out")
hp=$(sed -n 's/^pinned_host_bytes //p' "$TMP/out")
ring=$(sed -n 's/^  pinned host memory .*gradient ring \([0-9.]* [KMG]*i*B\))$/\1/p' "$TMP/out")
[ -n "$tp" ] && [ -n "$sp" ] && [ "$hp" = $((tp + 2 * sp)) ] && [ -n "$ring" ] && [ "$ring" != "0 B" ] && ok ||
  { bad "--plan: no per-rank and host pinned bytes (teacher '$tp', student '$sp', host '$hp', ring '$ring')"; cat "$TMP/out" >&2; }
grep -q "^  pinned host memory .*a payload ring of 5 buffers of .*features over NCCL" "$TMP/out" && ok ||
  bad "--plan: the teacher's pinned host memory line names no payload ring over NCCL"

export DFLASH_EMU_DEVICES=3 DFLASH_EMU_NCCL_DIR=$TMP DFLASH_EMU_PINNED_REPORT=1
# --preflight: the host's pinned total (the plan's) against `ulimit -l` and MemAvailable
expect_ok preflight mpirun -x DFLASH_EMU_DEVICES -x DFLASH_EMU_NCCL_DIR -np 3 "$R" "${A[@]}" --run.dir="$TMP/pf" --preflight
grep -qE "^pinned memory +0 +ok +.*: 3 rank\(s\) pin .*; \`ulimit -l\` .*; MemAvailable " "$TMP/out" && ok ||
  { bad "preflight: no pinned memory row"; cat "$TMP/out" >&2; }
(ulimit -l 16 && mpirun -x DFLASH_EMU_DEVICES -x DFLASH_EMU_NCCL_DIR -np 3 "$R" "${A[@]}" --run.dir="$TMP/pf" --preflight) \
  >"$TMP/out" 2>&1 && grep -qE "^pinned memory +0 +WARN .*\`ulimit -l\` 16.0 KiB a process.* is past \`ulimit -l\`" "$TMP/out" && ok ||
  { bad "preflight with ulimit -l 16: no WARN naming ulimit -l"; cat "$TMP/out" >&2; }
# peaks RUN: "rank peak" per process, from $TMP/err
peaks() { sed -n 's/.*cuda emulator: pinned host memory: rank \([0-9]*\) peak \([0-9]*\) bytes.*/\1 \2/p' "$TMP/err" | sort; }
expect_ok "train, payloads over NCCL" mpirun -x DFLASH_EMU_DEVICES -x DFLASH_EMU_NCCL_DIR -x DFLASH_EMU_PINNED_REPORT \
  -np 3 "$R" "${A[@]}" --run.dir="$TMP/pinned"
grep -q "features over NCCL" "$TMP/err" && ok || bad "the payloads did not go over NCCL"
got=$(peaks | tr '\n' ' ')
[ "$got" = "0 $tp 1 $sp 2 $sp " ] && ok || { bad "pinned peaks per rank '$got', the plan says '0 $tp 1 $sp 2 $sp'"; grep -i "pinned\|warn" "$TMP/err" >&2; }
grep -q "refused to pin" "$TMP/err" && bad "a warning with nothing refused" || ok

# Refused: the payload buffers and half the gradient ring fit (the ring is pinned smaller, still async)
gbytes=$(sed -n 's/^ *gradients (fp32) .*(\([0-9]*\) bytes)$/\1/p' "$TMP/err" | head -1)
export DFLASH_EMU_PINNED_BYTES=$((sp - (sp - tp) / 2)) DFLASH_EMU_COPY_LOG=$TMP/copies.log
expect_ok "train, the gradient ring refused" mpirun -x DFLASH_EMU_DEVICES -x DFLASH_EMU_NCCL_DIR -x DFLASH_EMU_PINNED_REPORT \
  -x DFLASH_EMU_PINNED_BYTES -x DFLASH_EMU_COPY_LOG -np 3 "$R" "${A[@]}" --run.dir="$TMP/smaller"
w1=$(grep -c "\[r1\] warning: the system refused to pin .* of student rank 1's gradient ring .*ulimit -l" "$TMP/err")
w2=$(grep -c "\[r2\] warning: the system refused to pin .* of student rank 2's gradient ring .*ulimit -l" "$TMP/err")
w0=$(grep -c "\[r0\] warning:.*refused to pin" "$TMP/err")
[ "$w1" = 1 ] && [ "$w2" = 1 ] && [ "$w0" = 0 ] && [ "$(grep -c 'refused to pin' "$TMP/err")" = 2 ] && ok ||
  { bad "warnings: student 1 $w1, student 2 $w2, teacher $w0 (1, 1, 0 expected):"; grep -i "warn\|pin" "$TMP/err" >&2; }
grep -q "a ring of 4 pinned chunks of .* instead, still asynchronous" "$TMP/err" && ok || bad "the warning does not say the ring stays asynchronous"
"$PY" - "$TMP/copies.log" "${gbytes:-0}" "$STEPS" <<'PY' && ok || bad "the shrunken gradient ring: not every gradient byte copied to pinned memory asynchronously (above)"
import sys
g, steps = int(sys.argv[2]), int(sys.argv[3])
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("copy ")]
fails = []
for rank in ("1", "2"):
    d2h = [r for r in rows if r[1] == rank and r[2] == "d2h" and r[4] == "pinned=1"]
    nd = sum(int(r[3]) for r in d2h)
    waited = [r for r in d2h if r[5] != "async=1"]
    print(f"student rank {rank}: {nd} bytes to pinned host memory in {len(d2h)} copies ({g} x {steps} steps), {len(waited)} waited for")
    if g == 0 or nd != g * steps: fails.append(f"rank {rank}: {nd} bytes to pinned memory, not {g * steps}")
    if waited: fails.append(f"rank {rank}: {len(waited)} gradient copies waited for at once")
for f in fails: print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY
unset DFLASH_EMU_COPY_LOG

# Nothing pinned: one warning per rank, the ring's copies after the backward, the same weights
export DFLASH_EMU_PINNED_BYTES=8192
expect_ok "train, nothing pinned" mpirun -x DFLASH_EMU_DEVICES -x DFLASH_EMU_NCCL_DIR -x DFLASH_EMU_PINNED_BYTES \
  -np 3 "$R" "${A[@]}" --run.dir="$TMP/pageable"
for r in 0 1 2; do
  [ "$(grep -c "\[r$r\] warning: the system refused to pin" "$TMP/err")" = 1 ] && ok ||
    { bad "rank $r: not exactly one warning:"; grep -i "warn\|pin" "$TMP/err" >&2; }
done
grep -q "through a ring of 4 pageable host chunks of .* copied after each step's backward" "$TMP/err" && ok ||
  bad "the pageable gradient ring: no line saying its copies wait for the backward's end"
grep -qE "gradients: 0 of [1-9][0-9]* bucket sums started during the backward" "$TMP/err" && ok ||
  { bad "the pageable gradient ring copied during the backward:"; grep "gradients:" "$TMP/err" >&2; }
cmp -s "$TMP/pinned/drafter/model.safetensors" "$TMP/pageable/drafter/model.safetensors" && ok ||
  bad "the drafter trained with nothing pinned differs from the pinned run's"
unset DFLASH_EMU_PINNED_BYTES DFLASH_EMU_DEVICES DFLASH_EMU_NCCL_DIR DFLASH_EMU_PINNED_REPORT
finish
