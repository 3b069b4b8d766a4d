#!/usr/bin/env bash
# test_config_errors.sh: configurations and targets that say what is wrong, nothing silent: a key
# given twice, a NUL in a string or in the file, train.steps and data.bucket_size out of range, a
# newline in a key (still one line), train.ema = 1, an unknown drafter.kind, data.max_tokens_per_batch above
# teacher.max_tokens in train mode, teacher.mem_budget enforced in train mode (--plan and the job),
# and a target with tie_word_embeddings true whose files also hold lm_head.weight (one warning).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
command -v mpirun >/dev/null || { echo "test_config_errors: mpirun not found (scripts/install-deps.sh installs openmpi-bin)" >&2; exit 1; }

"$T" make-target "$TMP/t" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/t" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
base=(--mode train --device cpu --target.path="$TMP/t" --data.path="$TMP/data.h5" --target.layer_ids=0,1
      --drafter.block_size=6 --train.steps=3 --train.max_anchors=8 --train.eval_interval=1000 --train.eval_batches=1
      --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --run.dir="$TMP/run")

# ---------------------------------------------------------------- the configuration file
printf '{"train": {"lr": 0.003, "lr": 5}}' >"$TMP/dup.json"
expect_fail duplicate-key "dup.json: key 'train.lr' is given twice" "$R" --config "$TMP/dup.json" --print-config
printf '{"train": {"lr": 0.003}, "train": {"steps": 4}}' >"$TMP/dup_section.json"
expect_fail duplicate-section "key 'train' is given twice" "$R" --config "$TMP/dup_section.json" --print-config
printf '{"data": {"path": "a\\u0000b"}}' >"$TMP/nul.json"
expect_fail nul-in-string "nul.json: key 'data.path' holds a NUL character" "$R" --config "$TMP/nul.json" --print-config
printf '{"run": {"seed": 5}}\0{"run": {"seed": 6}}' >"$TMP/nul_byte.json"
expect_fail nul-byte "nul_byte.json: a NUL byte at offset 20" "$R" --config "$TMP/nul_byte.json" --print-config
printf '{"ru\\nn": {"seed": 1}}' >"$TMP/newline.json"
expect_fail newline-in-key "unknown key 'ru\\\\nn.seed'" "$R" --config "$TMP/newline.json" --print-config
printf '{"train": {"steps": 1e12}}' >"$TMP/steps.json"
expect_fail steps-in-file "steps.json: key 'train.steps' = 1e+12 is outside \[1, 1000000000\]" "$R" --config "$TMP/steps.json" --print-config

# ---------------------------------------------------------------- overrides and keys together
expect_fail bucket-size-zero "key 'data.bucket_size' = 0 is outside \[1, " "$R" "${base[@]}" --data.bucket_size=0
expect_fail steps-override "key 'train.steps' = 1e+12 is outside \[1, 1000000000\]" "$R" "${base[@]}" --train.steps=1e12
expect_fail checkpoint-every "key 'checkpoint.every' = -1 is outside" "$R" "${base[@]}" --checkpoint.every=-1
expect_fail size-too-large "key 'train.mem_budget' = .* is outside \[0, 1e+18\]" "$R" "${base[@]}" --train.mem_budget=2000000T
expect_fail ema-one "train.ema = 1 never moves the averaged weights" "$R" "${base[@]}" --train.ema=1
expect_fail drafter-kind "drafter.kind: \"dflash3\" is not a drafter kind (known: dflash, dflash2)" "$R" "${base[@]}" --drafter.kind=dflash3 --plan
expect_fail teacher-max-tokens "data.max_tokens_per_batch = 200 is more than teacher.max_tokens = 100" \
  "$R" "${base[@]}" --teacher.max_tokens=100
"$R" "${base[@]}" --train.steps=1e3 --print-config >"$TMP/out" 2>&1 && grep -q '"steps":.*1000,' "$TMP/out" && ok ||
  bad "train.steps=1e3 is not 1000: $(grep steps "$TMP/out")"

# ---------------------------------------------------------------- teacher.mem_budget in train mode
mpirun -np 2 "$R" "${base[@]}" --plan --teacher.mem_budget=1GiB >"$TMP/out" 2>"$TMP/err" &&
  grep -q "budget (teacher.mem_budget) .*(fits)" "$TMP/out" && ok || { bad "plan with a budget that fits"; cat "$TMP/out" "$TMP/err" >&2; }
expect_fail_mpi plan-budget "the target's weights alone take .*, more than teacher.mem_budget 20.0 KiB: LlamaForCausalLM does not fit one device" \
  mpirun -np 2 "$R" "${base[@]}" --plan --teacher.mem_budget=20KiB
grep -q "budget (teacher.mem_budget) .*(too small)" "$TMP/out" && ok || { bad "plan: no budget line"; cat "$TMP/out" >&2; }
expect_fail_mpi train-budget "the target's weights alone take .*, more than teacher.mem_budget 20.0 KiB" \
  mpirun -np 2 "$R" "${base[@]}" --teacher.mem_budget=20KiB
# two teachers find it: one line, not two (a run.dir of its own: the refused job above began a run in
# $TMP/run, which the frame's claim would refuse first)
rm -rf "$TMP/run"
expect_fail_mpi train-budget-2t "more than teacher.mem_budget 20.0 KiB" \
  mpirun -np 3 "$R" "${base[@]}" --teacher.mem_budget=20KiB --world.students=1
[ ! -d "$TMP/run/drafter" ] && ok || bad "a job refused for its teacher budget exported a drafter"

# ---------------------------------------------------------------- a tied target that also has lm_head.weight
cp -r "$TMP/t" "$TMP/tied"
sed -i 's/"tie_word_embeddings":[[:space:]]*false/"tie_word_embeddings": true/' "$TMP/tied/config.json"
grep -q '"tie_word_embeddings": true' "$TMP/tied/config.json" && ok || bad "could not set tie_word_embeddings"
mpirun -np 2 "$R" --mode dump-features --device cpu --target.path="$TMP/tied" --data.path="$TMP/data.h5" \
  --features.dir="$TMP/feat" --target.layer_ids=0,1 --teacher.topk=6 --drafter.block_size=6 --teacher.max_tokens=200 \
  >"$TMP/out" 2>"$TMP/err" && ok || { bad "dump-features from the tied target"; cat "$TMP/err" >&2; }
n=$(grep -c "tie_word_embeddings true and the safetensors files also hold lm_head.weight: the output head is the embedding" "$TMP/err")
[ "$n" -eq 1 ] && ok || { bad "tie warning printed $n times, wanted once"; cat "$TMP/err" >&2; }
mpirun -np 2 "$R" --mode dump-features --device cpu --target.path="$TMP/t" --data.path="$TMP/data.h5" \
  --features.dir="$TMP/feat2" --target.layer_ids=0,1 --teacher.topk=6 --drafter.block_size=6 --teacher.max_tokens=200 \
  >"$TMP/out" 2>"$TMP/err" && ! grep -q "tie_word_embeddings" "$TMP/err" && ok || bad "the untied target warned: $(cat "$TMP/err")"
finish
