#!/usr/bin/env bash
# test_optim_muon.sh: train.optimizer = muon on the tiny job (1 teacher + 1 student, CPU):
#   - the loss falls (at lr 1e-2: on this 32-wide drafter Muon at AdamW's 3e-3 moves too little in
#     30 steps), and the losses are not AdamW's (Muon ran);
#   - the student's memory plan (the job's and --plan's) has a "Muon scratch" row counted in its
#     total, and an AdamW plan none;
#   - stopped at step 20 and resumed, the Muon run gives exactly the uninterrupted run's losses (its
#     momentum is the checkpointed m buffer);
#   - a resume with another optimizer is refused naming train.optimizer, also from a checkpoint
#     whose configuration predates the key (which resumes as the AdamW run it was); a bad value is
#     refused naming the key.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job
PY=/usr/bin/python3
base=(--mode train --device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.steps=30 --train.lr=1e-2 --train.max_anchors=12 --train.log_interval=5
      --train.eval_interval=1000 --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4
      --teacher.topk=6 --checkpoint.every=10 --checkpoint.keep=2)
losses() { grep '"step"' "$1" | grep -v heldout | $PY -c "import sys, json; print(' '.join('%d:%.7f' % (json.loads(l)['step'], json.loads(l)['loss']) for l in sys.stdin))"; }

expect_ok muon mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/muon" --train.optimizer=muon
grep -q "Muon scratch" "$TMP/err" && ok || bad "the Muon job's memory plan has no Muon scratch row"
expect_ok adamw mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/adamw"
grep -q "Muon scratch" "$TMP/err" && bad "the AdamW job's memory plan has a Muon scratch row" || ok
a=$(losses "$TMP/muon/metrics.jsonl") b=$(losses "$TMP/adamw/metrics.jsonl")
echo "muon:  $a"
echo "adamw: $b"
$PY - "$a" <<'PYEOF' && ok || bad "Muon: the loss did not fall: $a"
import sys
l = [float(x.split(":")[1]) for x in sys.argv[1].split()]
assert len(l) >= 6 and l[-1] < 0.9 * l[0], l
PYEOF
[ -n "$a" ] && [ "$a" != "$b" ] && ok || bad "Muon's losses are AdamW's"

# --plan: the row, and the total grown by it
expect_ok plan-muon "$R" "${base[@]}" --run.dir="$TMP/p" --plan --train.optimizer=muon
muon_row=$(sed -n 's/^  Muon scratch .*(\([0-9]*\) bytes)$/\1/p' "$TMP/out" | head -1)
t_muon=$(sed -n 's/^plan_total_bytes //p' "$TMP/out" | head -1)
expect_ok plan-adamw "$R" "${base[@]}" --run.dir="$TMP/p" --plan
t_adamw=$(sed -n 's/^plan_total_bytes //p' "$TMP/out" | head -1)
grep -q "Muon scratch" "$TMP/out" && bad "--plan of an AdamW run has a Muon scratch row" || ok
[ -n "$muon_row" ] && [ "$muon_row" -gt 0 ] && [ $((t_muon - t_adamw)) -eq "$muon_row" ] && ok ||
  bad "--plan: Muon scratch '$muon_row' bytes, totals $t_muon (muon) vs $t_adamw (adamw)"

# stopped and resumed: the uninterrupted losses
expect_ok muon-stopped mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut" --train.optimizer=muon --test.stop_at_step=20
expect_ok muon-resumed mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut" --train.optimizer=muon --run.resume=true
c=$(losses "$TMP/cut/metrics.jsonl")
[ "$a" = "$c" ] && ok || bad "the resumed Muon run's losses differ: $c"

# another optimizer on resume is refused, also from a checkpoint written before train.optimizer
# existed (its keys removed from state.json, the seal remade), which resumes as AdamW
expect_ok adamw-stopped mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut2" --test.stop_at_step=10
expect_fail_mpi resume-other "train.optimizer \"adamw\" -> \"muon\"" mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut2" --run.resume=true --train.optimizer=muon
st="$TMP/cut2/checkpoints/step-00000010/state.json"
sed -i '/^\t\t"optimizer":\t"adamw",$/d; /^\t\t"muon_momentum":\t0.95,$/d' "$st"
grep -q '"optimizer"\|"muon_momentum"' "$st" && bad "state.json still holds the optimizer keys" || ok
$PY "$SRC/tests/cli/crc32c_reseal.py" json "$st"
expect_fail_mpi resume-older-other "train.optimizer \"adamw\" -> \"muon\"" mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut2" --run.resume=true --train.optimizer=muon
expect_ok resume-older mpirun -np 2 "$R" "${base[@]}" --run.dir="$TMP/cut2" --run.resume=true
grep -q "resuming from" "$TMP/err" && ok || bad "the older checkpoint did not resume"
[ "$(losses "$TMP/cut2/metrics.jsonl")" = "$b" ] && ok || bad "the older checkpoint resumed to other losses: $(losses "$TMP/cut2/metrics.jsonl")"
expect_fail bad-value "train.optimizer" "$R" "${base[@]}" --run.dir="$TMP/bad" --train.optimizer=sgd
[ ! -e "$TMP/bad" ] && ok || bad "a refused configuration created run.dir"

finish
