#!/usr/bin/env bash
# test_plan.sh: dflash_rank --plan plans every role of the configured world in one process, from the
# configuration and a target directory holding only config.json: no mpirun, no weights, no training
# set, no GPU; for the CPU (fp32) and for CUDA (bf16, the cuBLAS workspace, the NCCL ring) alike;
# under mpirun it prints the same once. The plan is the allocation: the one-process student plan
# equals the one a real job prints. A budget too small, roles that do not fit the world, a mode that
# trains nothing or no target are one error line and a non-zero exit; training from the config-only
# directory is still refused with the loader's message.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job

# has NAME PATTERN: $TMP/out matches the extended regex PATTERN.
has() { grep -qE -- "$2" "$TMP/out" && ok || { bad "$1: no '$2' in:"; cat "$TMP/out" >&2; }; }
# count PATTERN: lines of $TMP/out matching it.
count() { grep -cE -- "$1" "$TMP/out"; }

# ---------------------------------------------------------------- the tiny example, config.json only
mkdir -p "$TMP/tiny"
cp "$TMP/target/config.json" "$TMP/tiny/"
tiny=(--config "$SRC/examples/tiny/train.json" --target.path="$TMP/tiny" --target.layer_ids=0,1 --run.dir="$TMP/run")
expect_ok tiny-cpu "$R" "${tiny[@]}" --device cpu --plan
has tiny-cpu "^plan: 1 teacher\(s\) \+ 1 student\(s\), mode train; planned for cpu \(run.device cpu; no device opened\)"
has tiny-cpu "world.teachers = -1 .*planned with 1 teacher"
has tiny-cpu "^teacher memory plan \(each teacher rank, cpu, fp32"
has tiny-cpu "^student memory plan \(each of 1 student rank\(s\), cpu, fp32"
has tiny-cpu "^plan_total_bytes [0-9]+$"
has tiny-cpu "^  estimated step time [0-9.e+-]+ s \([0-9]+ anchors\)$"
has tiny-cpu "^  runner-up: (anchors per chunk [0-9]+, loss mode .*: [0-9.e+-]+ s|none)"
has tiny-cpu "^plan: every role fits"
[ ! -e "$TMP/run" ] && ok || bad "--plan created run.dir"
expect_ok tiny-cuda "$R" "${tiny[@]}" --device cuda --world.teachers=2 --plan
has tiny-cuda "^plan: 2 teacher\(s\) \+ 1 student\(s\), mode train; planned for cuda \(run.device cuda; no device opened\)"
has tiny-cuda "^teacher memory plan \(each of 2 teacher rank\(s\), cuda, bf16, planned: no device opened\)"
has tiny-cuda "library workspaces +32.0 MiB"
has tiny-cuda "NCCL receive ring +[1-9]"
expect_ok tiny-cuda-mpi "$R" "${tiny[@]}" --device cuda --transport.payload=mpi --plan
has tiny-cuda-mpi "NCCL receive ring +0 B"

# under mpirun: the same plan, printed once, for the launcher's world (2 ranks: 1 teacher + 1 student)
expect_ok tiny-mpirun mpirun -np 2 "$R" "${tiny[@]}" --device cpu --plan
[ "$(count '^teacher memory plan')" = 1 ] && [ "$(count '^student memory plan')" = 1 ] && ok ||
  { bad "mpirun --plan did not print each plan once"; cat "$TMP/out" >&2; }
has tiny-mpirun "^plan: 1 teacher\(s\) \+ 1 student\(s\)"
grep -q "world.teachers = -1" "$TMP/out" && bad "mpirun --plan: the world size is known" || ok
expect_fail_mpi tiny-mpirun-roles "roles do not fit the world: 6 teacher(s) + 1 student(s) = 7 rank(s), but the job has 2" \
  mpirun -np 2 "$R" "${tiny[@]}" --device cpu --world.teachers=6 --plan

# the plan is the allocation: a real job's student plan (its stderr) equals the one-process plan
job=(--device cpu --target.path="$TMP/target" --data.path="$TMP/data.h5" --target.layer_ids=0,1 --drafter.block_size=6
     --train.max_anchors=8 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --train.steps=1
     --train.eval_interval=1000 --transport.payload=mpi)
expect_ok plan-of-job "$R" "${job[@]}" --world.teachers=1 --run.dir="$TMP/plan-run" --plan
planned=$(sed -n 's/^plan_total_bytes //p' "$TMP/out")
expect_ok real-job mpirun -np 2 "$R" "${job[@]}" --run.dir="$TMP/job-run"
used=$(sed -n 's/.*plan_total_bytes //p' "$TMP/err" | head -1)
[ -n "$planned" ] && [ "$planned" = "$used" ] && ok || bad "--plan says $planned bytes, the job planned '$used'"

# errors: one line, non-zero (the patterns of expect_fail are basic regular expressions)
expect_fail tiny-student-budget "train.mem_budget: memory budget 64.0 KiB is too small .* needs at least" \
  "$R" "${tiny[@]}" --device cpu --train.mem_budget=64KiB --plan
has tiny-student-budget "^student memory plan .*"
has tiny-student-budget "does not fit \(the error below\)"
expect_fail tiny-both-budgets "the target.s weights alone take .*, more than teacher.mem_budget 20.0 KiB.*; and train.mem_budget: .*needs at least" \
  "$R" "${tiny[@]}" --device cpu --train.mem_budget=64KiB --teacher.mem_budget=20KiB --plan
has tiny-both-budgets "budget \(teacher.mem_budget\) .*\(too small\)"
expect_fail plan-mode "--plan plans a training job (run.mode train or eval), not run.mode check" \
  "$R" "${tiny[@]}" --mode check --plan
expect_fail plan-no-target "--plan needs target.path" "$R" --device cpu --plan
expect_fail plan-no-config "$TMP/none/config.json: No such file or directory" "$R" --device cpu --target.path="$TMP/none" --plan
# training from the config-only directory: the loader's refusal, as before
expect_fail_mpi train-config-only "target: .*no model.safetensors or model.safetensors.index.json" \
  mpirun -np 2 "$R" "${job[@]}" --target.path="$TMP/tiny" --run.dir="$TMP/refused"

# ---------------------------------------------------------------- examples/qwen3.6-27b (config.json alone)
mkdir -p "$TMP/q36"
cp "$SRC/examples/qwen3.6-27b/config.json" "$TMP/q36/"
q=(--config "$SRC/examples/qwen3.6-27b/train.json" --target.path="$TMP/q36" --run.dir="$TMP/q36-run")
for budget in 96GiB 141GiB; do
  expect_ok "q36-cuda-$budget" "$R" "${q[@]}" --teacher.mem_budget=$budget --train.mem_budget=$budget --plan
  has q36-cuda "^plan: 6 teacher\(s\) \+ 2 student\(s\), mode train; planned for cuda \(run.device cuda; no device opened\)"
  has q36-cuda "Qwen3_5ForConditionalGeneration, 64 layers \(48 Gated DeltaNet \+ 16 gated attention\), hidden 5120, vocab 248320"
  has q36-cuda "drafter: 5 layer\(s\) \(4 sliding, window 2048\), 32/8 heads x 128, intermediate 17408, block 32, mask token 248070, target layers \[1, 16, 31, 46, 61\]"
  has q36-cuda "^teacher memory plan \(each of 6 teacher rank\(s\), cuda, bf16"
  has q36-cuda "^student memory plan \(each of 2 student rank\(s\), cuda, bf16"
  has q36-cuda "budget \(teacher.mem_budget\) .*\(fits\)"
  has q36-cuda "^plan: every role fits"
done
expect_ok q36-cpu "$R" "${q[@]}" --device cpu --teacher.mem_budget=0 --train.mem_budget=0 --plan
has q36-cpu "planned for cpu \(run.device cpu; no device opened\)"
has q36-cpu "^teacher memory plan \(each of 6 teacher rank\(s\), cpu, fp32"
has q36-cpu "weights \(compute copy\) +0 B"
expect_fail q36-teacher-budget "the target's weights alone take .* GiB, more than teacher.mem_budget 1.00 GiB: Qwen3_5ForConditionalGeneration does not fit one device" \
  "$R" "${q[@]}" --teacher.mem_budget=1GiB --plan
# weights that fit, the batch's work not: the smaller batch the budget holds is named
expect_fail q36-work-budget "teacher.mem_budget 51.0 GiB holds teacher batches of [0-9]* tokens, less than the students' data.max_tokens_per_batch = 8192" \
  "$R" "${q[@]}" --teacher.mem_budget=51GiB --plan

# ---------------------------------------------------------------- examples/qwen3-coder-30b-a3b (MoE, config.json alone)
mkdir -p "$TMP/coder"
cp "$SRC/examples/qwen3-coder-30b-a3b/config.json" "$TMP/coder/"
c=(--config "$SRC/examples/qwen3-coder-30b-a3b/train.json" --target.path="$TMP/coder" --run.dir="$TMP/coder-run")
expect_ok coder "$R" "${c[@]}" --plan
has coder "^plan: 1 teacher\(s\) \+ 1 student\(s\), mode train; planned for cuda"
has coder "Qwen3MoeForCausalLM, 48 layers \(48 MoE MLPs: 128 experts x 768, top 8\), hidden 2048, vocab 151936"
has coder "target weights +5[0-9]\.[0-9] GiB"
has coder "^plan: every role fits"
expect_fail coder-too-big "the target's weights alone take 5[0-9].[0-9] GiB, more than teacher.mem_budget 40.0 GiB: Qwen3MoeForCausalLM does not fit one device" \
  "$R" "${c[@]}" --teacher.mem_budget=40GiB --plan
finish
