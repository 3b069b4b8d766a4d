#!/usr/bin/env bash
# test_plan.sh: dflash_rank --plan plans every role of the configured world in one process, from the
# configuration and a target directory holding only config.json: no mpirun, no weights, no training
# set, no GPU; for the CPU (fp32) and for CUDA (bf16, the cuBLAS workspace, the NCCL ring) alike;
# under mpirun it prints the same once. The plan is the allocation: the one-process student plan
# equals the one a real job prints. A budget too small, roles that do not fit the world or no
# target are one error line and a non-zero exit; a mode that trains nothing plans its roles; training from the config-only
# directory is still refused with the loader's message. Teacher groups (world.teacher_group_size):
# one row per stage whose weights are the safetensors' bytes of its layers, a teacher too big for
# its budget names the group size that fits, a stage too big names itself, and the teachers must be
# a multiple of the group size; examples/qwen3.5-122b-a10b plans groups of 2 H200s that fit.
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
# two students summing over MPI on a GPU: the pinned host ring of the gradient all-reduce, outside the total
expect_ok tiny-cuda-grad-mpi "$R" "${tiny[@]}" --device cuda --world.students=2 --train.batches_per_step=2 --transport.grad_allreduce=mpi --plan
has tiny-cuda-grad-mpi "^  pinned host memory +[0-9.]+ [KMG]?i?B  \([0-9]+ bytes; host memory, not in the total"
expect_ok tiny-cuda-grad-nccl "$R" "${tiny[@]}" --device cuda --world.students=2 --train.batches_per_step=2 --transport.grad_allreduce=nccl --plan
has tiny-cuda-grad-nccl "^  pinned host memory .*gradient ring 0 B\)$"

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
# every mode plans (the modes' table): check allocates no model, so its plan is its roles
expect_ok plan-check "$R" "${tiny[@]}" --mode check --plan
has plan-check "^plan: 1 teacher\(s\) \+ 1 student\(s\), mode check"
has plan-check "no memory to plan"
expect_fail plan-transport "transport-test needs at least one teacher and one student rank" \
  "$R" "${tiny[@]}" --mode transport-test --world.teachers=0 --plan
expect_fail plan-no-target "--plan needs target.path" "$R" --device cpu --plan
expect_fail plan-no-config "$TMP/none/config.json: No such file or directory" "$R" --device cpu --target.path="$TMP/none" --plan
# training from the config-only directory: the loader's refusal, as before
expect_fail_mpi train-config-only "target: .*no model.safetensors or model.safetensors.index.json" \
  mpirun -np 2 "$R" "${job[@]}" --target.path="$TMP/tiny" --run.dir="$TMP/refused"

# ---------------------------------------------------------------- examples/qwen3.6-27b (config.json alone)
mkdir -p "$TMP/q36"
cp "$SRC/examples/qwen3.6-27b/config.json" "$TMP/q36/"
q=(--config "$SRC/examples/qwen3.6-27b/train.json" --target.path="$TMP/q36" --run.dir="$TMP/q36-run")
for budget in 95GiB 140GiB; do
  expect_ok "q36-cuda-$budget" "$R" "${q[@]}" --teacher.mem_budget=$budget --train.mem_budget=$budget --plan
  has q36-cuda "^plan: 6 teacher\(s\) \+ 2 student\(s\), mode train; planned for cuda \(run.device cuda; no device opened\)"
  has q36-cuda "Qwen3_5ForConditionalGeneration, 64 layers \(48 Gated DeltaNet \+ 16 gated attention\), hidden 5120, vocab 248320"
  has q36-cuda "drafter: 5 layer\(s\) \(4 sliding, window 2048\), 32/8 heads x 128, intermediate 17408, block 32, mask token 248070, target layers \[1, 16, 31, 46, 61\]"
  has q36-cuda "^teacher memory plan \(each of 6 teacher rank\(s\), cuda, bf16"
  has q36-cuda "^student memory plan \(each of 2 student rank\(s\), cuda, bf16"
  has q36-cuda "budget \(teacher.mem_budget\) .*\(fits\)"
  has q36-cuda "^plan: every role fits"
  # the loss's widest GEMM operand, its bf16 dlogits read with row stride 2 x tile: computed here
  # from the plan's rows and tile; at 2^31 elements or more the plan says the 64-bit cuBLAS calls
  read -r rows tile < <(sed -nE 's/^  anchors per chunk [0-9]+, loss mode .*, rows per loss chunk ([0-9]+), vocabulary tile ([0-9]+)$/\1 \2/p' "$TMP/out")
  span=$(( 2 * tile * (rows - 1) + tile ))
  if [ "$span" -ge $((1 << 31)) ]; then
    has q36-span "^  loss GEMM operands span up to $span elements \(2\^31 or more\): cuBLAS's 64-bit interface on CUDA$"
  else
    [ "$(count "loss GEMM operands span")" = 0 ] && ok || bad "q36-span: a 64-bit line for a span of $span elements"
  fi
done
[ "$span" -ge $((1 << 31)) ] && ok || bad "q36-span: the 140 GiB plan's loss spans $span elements, under 2^31"
# pinned host memory (issue 50): every role's per rank and the host's total; over NCCL the payload
# buffers hold no features: the 8-GPU host pins at most 16 GiB (over MPI the features make it ~32 GiB)
has q36-cuda "^  pinned host memory .*a payload ring of 5 buffers of .*, features over NCCL\)$"
has q36-cuda "^  pinned host memory .*payload buffers .* \+ gradient ring 0 B\)$"
has q36-cuda "^  host total .*6 teacher \+ 2 student rank\(s\) on one host\)$"
q36_host() { sed -n 's/^pinned_host_bytes //p' "$TMP/out"; }
[ -n "$(q36_host)" ] && [ "$(q36_host)" -le $((16 << 30)) ] && ok || bad "qwen3.6-27b over NCCL pins '$(q36_host)' bytes a host, over 16 GiB"
expect_ok q36-mpi "$R" "${q[@]}" --transport.payload=mpi --plan
[ "$(q36_host)" -gt $((16 << 30)) ] && ok || bad "qwen3.6-27b over MPI: the payload buffers hold no features ($(q36_host) bytes)"
expect_ok q36-cpu "$R" "${q[@]}" --device cpu --teacher.mem_budget=0 --train.mem_budget=0 --plan
has q36-cpu "planned for cpu \(run.device cpu; no device opened\)"
has q36-cpu "^teacher memory plan \(each of 6 teacher rank\(s\), cpu, fp32"
has q36-cpu "weights \(compute copy\) +0 B"
expect_fail q36-teacher-budget "the target's weights alone take .* GiB, more than teacher.mem_budget 1.00 GiB: Qwen3_5ForConditionalGeneration does not fit one device" \
  "$R" "${q[@]}" --teacher.mem_budget=1GiB --plan
# weights that fit, the batch's work not: the smaller batch the budget holds is named
expect_fail q36-work-budget "teacher.mem_budget 53.0 GiB holds teacher batches of [0-9]* tokens, less than the students' data.max_tokens_per_batch = 8192" \
  "$R" "${q[@]}" --teacher.mem_budget=53GiB --plan

# ---------------------------------------------------------------- examples/qwen3-coder-30b-a3b (MoE, config.json alone)
mkdir -p "$TMP/coder"
cp "$SRC/examples/qwen3-coder-30b-a3b/config.json" "$TMP/coder/"
c=(--config "$SRC/examples/qwen3-coder-30b-a3b/train.json" --target.path="$TMP/coder" --run.dir="$TMP/coder-run")
expect_ok coder "$R" "${c[@]}" --plan
has coder "^plan: 1 teacher\(s\) \+ 1 student\(s\), mode train; planned for cuda"
has coder "Qwen3MoeForCausalLM, 48 layers \(48 MoE MLPs: 128 experts x 768, top 8\), hidden 2048, vocab 151936"
has coder "target weights +5[0-9]\.[0-9] GiB"
has coder "^plan: every role fits"
has coder "^  pinned host memory .* \+ MoE counts 516 B\)$"
expect_fail coder-too-big "the target's weights alone take 5[0-9].[0-9] GiB, more than teacher.mem_budget 40.0 GiB: Qwen3MoeForCausalLM does not fit one device" \
  "$R" "${c[@]}" --teacher.mem_budget=40GiB --plan
# ---------------------------------------------------------------- teacher groups (world.teacher_group_size)
# A made Qwen3 whose embedding and lm_head outweigh several layers: the stages' weights, read from
# the plan's teacher_stage_bytes lines, against the same bytes computed here from the safetensors
# header (dflash_tool inspect): each tensor's bytes + 256 (its arena alignment) on the stage of its
# layer, the embedding on the first stage (and again on the last when tied), the final norm and
# lm_head on the last, inv_freq (head_dim / 2 floats + 256) on every stage; so the stages add up to
# the whole target's weights plus what each further stage holds again.
for tie in "" --tie; do
  gdir="$TMP/groups$tie"
  "$T" make-target "$gdir" --arch qwen3 --layers 6 --hidden 32 --heads 4 --kv-heads 2 --vocab 3000 --seed 3 $tie >/dev/null 2>&1 ||
    bad "make-target $gdir"
  "$T" inspect "$gdir/model.safetensors" >"$TMP/inspect$tie" || bad "inspect $gdir"
  g=(--config "$SRC/examples/tiny/train.json" --target.path="$gdir" --target.layer_ids=0,1 --run.dir="$TMP/g-run" --device cuda)
  for G in 2 3; do
    expect_ok "groups$tie-G$G" "$R" "${g[@]}" --world.teachers=$((2 * G)) --world.teacher_group_size=$G --plan
    has "groups$tie-G$G" "^plan: $((2 * G)) teacher\(s\) in 2 group\(s\) of $G \+ 1 student\(s\)"
    has "groups$tie-G$G" "^teacher memory plan \(2 group\(s\) of $G stage rank\(s\) = $((2 * G)) teacher rank\(s\), cuda, bf16"
    has "groups$tie-G$G" "^  split by weight bytes: largest stage [0-9]+ .*, smallest stage [0-9]+ .*x; the whole target"
    [ "$(count '^  [0-9]+ +\[[0-9]+, [0-9]+\) ')" = "$G" ] && [ "$(count '^teacher_stage_bytes ')" = "$G" ] && ok ||
      { bad "groups$tie-G$G: wanted $G stage rows"; cat "$TMP/out" >&2; }
    if /usr/bin/python3 - "$TMP/inspect$tie" "$TMP/out" "$G" "${tie:+1}" <<'PYEOF'; then ok; else bad "groups$tie-G$G: the stages' weights (above)"; fi
import re, sys
inspect, out, G, tied = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3]), sys.argv[4] == "1"
L, ALIGN, inv = 6, 256, 8 // 2 * 4 + 256     # 6 layers; inv_freq: head_dim / 2 floats
tensors = [(n, int(b)) for n, b in re.findall(r"^  (\S+)\s+BF16\s+\[[^\]]*\]\s+(\d+) bytes$", inspect, re.M)]
assert len(tensors) == 2 + 11 * L + (0 if tied else 1), len(tensors)
def stage_bytes(l0, l1):
    b = inv
    for name, n in tensors:
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m: keep = l0 <= int(m.group(1)) < l1
        elif name == "model.embed_tokens.weight": keep = l0 == 0 or (tied and l1 == L)
        else: keep = l1 == L                     # model.norm.weight, lm_head.weight
        b += n + ALIGN if keep else 0
    return b
rows = [tuple(map(int, r)) for r in re.findall(r"^teacher_stage_bytes (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$", out, re.M)]
assert [r[0] for r in rows] == list(range(G)) and rows[0][1] == 0 and rows[-1][2] == L, rows
for s, l0, l1, weights, work, ring, reserve, total in rows:
    assert l1 > l0 and (s == 0 or l0 == rows[s - 1][2]), rows
    assert weights == stage_bytes(l0, l1), (s, l0, l1, weights, stage_bytes(l0, l1))
    assert total == weights + work + ring + reserve, rows
    # the GPU reserve (cuda): 1 GiB context + 32 MiB cuBLAS + 688 MiB per NCCL communicator: the one
    # over all ranks, each neighbour stage, and on the last stage one per student (1 here)
    comms = 1 + (s > 0) + (s < G - 1) + (s == G - 1)
    assert reserve == (1 << 30) + (32 << 20) + comms * (688 << 20), (s, reserve, comms)
whole = stage_bytes(0, L)
embed = sum(n + ALIGN for name, n in tensors if name == "model.embed_tokens.weight")
extra = (G - 1) * inv + (embed if tied else 0)
assert sum(r[3] for r in rows) == whole + extra, (sum(r[3] for r in rows), whole, extra)
print("G=%d%s: stages %s, weights %s = the whole %d + %d" % (G, " tied" if tied else "", [(r[1], r[2]) for r in rows],
      [r[3] for r in rows], whole, extra))
PYEOF
  done
done
# over MPI (no NCCL buffers): the smallest budget of the two stages, in bytes
expect_ok groups-mpi "$R" "${g[@]}" --world.teachers=2 --world.teacher_group_size=2 --transport.payload=mpi --plan
has groups-mpi "^  (0|1) +\[[0-9]+, [0-9]+\) .* 0 B .*\(no budget\)$"
fit2=$(awk '/^teacher_stage_bytes /{ if ($9 > m) m = $9 } END { print m }' "$TMP/out")
gm=("${g[@]}" --world.teachers=2 --transport.payload=mpi)
expect_ok groups-fit "$R" "${gm[@]}" --world.teacher_group_size=2 --teacher.mem_budget="$fit2" --plan
[ "$(count '^  [01] +\[.* fits$')" = 2 ] && ok || { bad "groups-fit: wanted 2 rows that fit"; cat "$TMP/out" >&2; }
has groups-fit "budget \(teacher.mem_budget\) .*\(fits\)"
# one teacher that does not fit names the group size whose largest stage does
expect_fail groups-advice "holds teacher batches of [0-9]* tokens, less than the students' data.max_tokens_per_batch = 1024 (weights alone take .*); set world.teacher_group_size to 2 (its largest stage then takes .* of .*)" \
  "$R" "${gm[@]}" --teacher.mem_budget="$fit2" --plan
# a stage that does not fit: the stage, its layers and bytes, and the group size that does fit
expect_fail groups-stage-budget "teacher stage [01] of 2 (layers [0-9]*-[0-9]*) takes weights .* + forward work .* (1024 tokens) + NCCL buffers 0 B + GPU reserve .* = .*, more than teacher.mem_budget .*; set world.teacher_group_size to [3-6] " \
  "$R" "${gm[@]}" --world.teacher_group_size=2 --teacher.mem_budget=$((fit2 - 1)) --plan
has groups-stage-budget "^  [01] +\[.* too small$"
expect_fail groups-none "no teacher group fits it either" "$R" "${gm[@]}" --teacher.mem_budget=64KiB --plan
# the world: the teachers a multiple of G, G at most the layers
expect_fail groups-divide "world.teacher_group_size = 2 does not divide the 3 teacher rank(s)" \
  "$R" "${g[@]}" --world.teachers=3 --world.teacher_group_size=2 --plan
expect_fail_mpi groups-divide-mpirun "world.teacher_group_size = 2 does not divide the 3 teacher rank(s)" \
  mpirun -np 4 "$R" "${g[@]}" --world.teacher_group_size=2 --plan
expect_fail groups-too-many "world.teacher_group_size = 7: a teacher group splits the target's 6 layers" \
  "$R" "${g[@]}" --world.teachers=7 --world.teacher_group_size=7 --plan

# ---------------------------------------------------------------- every example's budgets fit its card
# Each example README names its card ("card: NAME, N MiB ..."): every budget of its train.json is at
# most that capacity, and the plans (each role's allocations + its GPU reserve) fit it.
for ex in qwen3.6-27b qwen3-coder-30b-a3b qwen3.5-122b-a10b gpt-oss-120b deepseek-v3; do
  mib=$(sed -n 's/.*card: [^,]*, \([0-9,]*\) MiB.*/\1/p' "$SRC/examples/$ex/README.md" | head -1 | tr -d ,)
  [ -n "$mib" ] && ok || { bad "$ex: its README names no card capacity ('card: NAME, N MiB')"; continue; }
  cap=$((mib * 1048576))
  mkdir -p "$TMP/card-$ex"
  cp "$SRC/examples/$ex/config.json" "$TMP/card-$ex/"
  expect_ok "card-$ex" "$R" --config "$SRC/examples/$ex/train.json" --target.path="$TMP/card-$ex" --run.dir="$TMP/card-$ex-run" --plan
  /usr/bin/python3 - "$SRC/examples/$ex/train.json" "$TMP/out" "$cap" <<'PYEOF' && ok || bad "$ex: a budget or a plan is larger than its card (above)"
import json, re, sys
cfg, out, cap = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), int(sys.argv[3])
units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
def size(v):
    if isinstance(v, (int, float)): return int(v)
    m = re.fullmatch(r"([0-9.]+)\s*(KiB|MiB|GiB|TiB)?", v.strip())
    return int(float(m.group(1)) * units.get(m.group(2), 1))
budgets = {k: size(cfg[sec]["mem_budget"]) for k, sec in (("teacher", "teacher"), ("student", "train"))}
teacher = [int(x) for x in re.findall(r"^teacher_total_bytes (\d+)$", out, re.M)]
teacher += [int(r[-1]) for r in re.findall(r"^teacher_stage_bytes((?: \d+){8})$", out, re.M) for r in [r.split()]]
student = int(re.search(r"^plan_total_bytes (\d+)$", out, re.M).group(1)) + int(re.search(r"^student_reserve_bytes (\d+)$", out, re.M).group(1))
assert teacher, "no teacher plan"
print("%s: card %d bytes; budgets %s; teacher plans + reserve %s; student plan + reserve %d" % (sys.argv[1], cap, budgets, teacher, student))
assert all(b <= cap for b in budgets.values()), budgets
assert max(teacher) <= budgets["teacher"] <= cap and student <= budgets["student"] <= cap
PYEOF
done

# ---------------------------------------------------------------- examples/qwen3.5-122b-a10b (groups of 2, config.json alone)
mkdir -p "$TMP/q122"
cp "$SRC/examples/qwen3.5-122b-a10b/config.json" "$TMP/q122/"
q122=(--config "$SRC/examples/qwen3.5-122b-a10b/train.json" --target.path="$TMP/q122" --run.dir="$TMP/q122-run")
expect_ok q122 "$R" "${q122[@]}" --plan
has q122 "^plan: 6 teacher\(s\) in 3 group\(s\) of 2 \+ 2 student\(s\), mode train; planned for cuda"
has q122 "Qwen3_5MoeForConditionalGeneration, 48 layers \(36 Gated DeltaNet \+ 12 gated attention\) \(48 MoE MLPs: 256 experts x 1024, top 8 \+ a shared expert\), hidden 3072, vocab 248320"
has q122 "^  0 +\[0, 24\) +11[0-9] GiB .* fits$"
has q122 "^  1 +\[24, 48\) +11[0-9] GiB .* fits$"
has q122 "the whole target 22[0-9] GiB"
has q122 "^plan: every role fits"
# one H200 per teacher: refused, naming the group size that fits
expect_fail q122-one "the target's weights alone take 22[0-9] GiB, more than teacher.mem_budget 136 GiB: Qwen3_5MoeForConditionalGeneration does not fit one device; set world.teacher_group_size to 2" \
  "$R" "${q122[@]}" --world.teacher_group_size=1 --plan
finish
