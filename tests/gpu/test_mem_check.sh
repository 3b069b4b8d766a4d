#!/usr/bin/env bash
# test_mem_check.sh: `dflash_tool mem-check`, the student's memory plan against its measured use while
# the anchors per step grow 16 times under one budget (tests/gpu/check.sh's memory part runs it at
# the 8B-drafter size). Unlike the other tests here it also runs without a GPU: the CPU twin (arenas
# only, toy sizes, a few seconds) always; with a GPU, a small CUDA case whose device memory in use
# (cudaMemGetInfo) must stay within the budget + 256 MiB (allocation granularity, kernel code).
# In the CUDA emulator build (backends "cuda(emulated)", tests/emu/README.md) the CUDA case runs at
# the CPU case's toy size (a kernel there is 10^3-10^5 times slower than on a GPU) on an emulated
# device of 256 MiB (DFLASH_EMU_GPU_BYTES), whose memory in use is exactly what was cudaMalloc'd: the
# slack is 1 MiB there, and the timing step's default budget (90 % of the free memory) comes from it.
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
LIB="python3 $SRC/tests/gpu/check_lib.py"

# CPU: anchors 4 -> 64 under the plan of 4 anchors per chunk
expect_ok "mem-check cpu" "$T" mem-check --device cpu --preset tiny --anchors 4,16,64 --time-anchors 16 --repeat 1 --profile 1 --json "$TMP/cpu.json"
cat "$TMP/out"
grep -q "^timing: 16 anchors" "$TMP/out" && ok || bad "mem-check printed no timing line"
if $LIB mem "$TMP/cpu.json" "$TMP/cpu.num" 0 >"$TMP/mem.log" 2>&1; then ok; else bad "memory criteria (cpu):"; cat "$TMP/mem.log" >&2; fi
python3 - "$TMP/cpu.json" <<'EOF' && ok || bad "mem-check JSON: wrong anchors, chunks or peaks"
import json, sys
d = json.load(open(sys.argv[1]))
r = d["runs"]
assert [x["anchors"] for x in r] == [4, 16, 64], r
assert r[0]["chunk"] == 4 and all(x["chunk"] <= 16 for x in r), r        # the budget of 4 per chunk caps C
assert all(x["arena_peak"] <= d["budget"] and x["plan_total"] <= d["budget"] for x in r), r
assert all(x["arena_peak"] == x["plan_total"] for x in r), r                # the plan is the allocation
assert d["timing"]["anchors"] == 16 and len(d["timing"]["times_s"]) == 1 and d["timing"]["chunk"] == 16
assert not d["cuda"] and all(x["device_used"] == -1 for x in r)
EOF
# --profile 1: one more step with every op timed; the ops of a drafter step are there, once per layer
# and chunk where they should be, and their times add up to no more than the step
python3 - "$TMP/cpu.json" <<'EOF' && ok || bad "mem-check --profile: missing ops or times past the step"
import json, sys
p = json.load(open(sys.argv[1]))["timing"]["profile"]
ops = {o["name"]: o for o in p["ops"]}
for name in ("backend_gemm", "ops_dflash_attn_forward", "ops_dflash_attn_backward", "ops_rmsnorm", "ops_swiglu_backward"):
    assert name in ops and ops[name]["seconds"] > 0, (name, sorted(ops))
assert ops["ops_dflash_attn_forward"]["calls"] == 2 and ops["ops_dflash_attn_backward"]["calls"] == 2, ops  # 2 layers, 1 chunk
assert ops["backend_gemm"]["flops"] > 0 and all(o["flops"] == 0 for n, o in ops.items() if n != "backend_gemm")
assert 0 < sum(o["seconds"] for o in p["ops"]) <= p["step_s"] * 1.001, p
EOF
grep -q "^profile: one more step" "$TMP/out" && ok || bad "mem-check --profile printed no table"
# a budget below what one anchor needs: one error line naming the smallest budget that works
expect_fail tiny-budget "needs at least" "$T" mem-check --device cpu --preset tiny --mem-budget 64KiB --anchors 4 --time-anchors 0
expect_fail bad-list "anchors" "$T" mem-check --device cpu --preset tiny --anchors 4,x
expect_fail bad-preset "preset" "$T" mem-check --device cpu --preset 3b

# GPU: a small drafter, anchors 16 -> 256 under the plan of 16 per chunk
if ! "$BUILD/dflash_rank" --mode check --device cuda >/dev/null 2>&1; then
  echo "no usable CUDA device: the CUDA case is not run"
elif "$BUILD/dflash_rank" --version | grep -q "cuda(emulated)"; then
  # the CUDA emulator: the CPU case's sizes (anchors 4 -> 64) on an emulated device of 256 MiB
  echo "CUDA emulator build: the CUDA case at the CPU case's toy size, on an emulated device of 256 MiB"
  expect_ok "mem-check cuda (emulated)" env DFLASH_EMU_GPU_BYTES=$((256 << 20)) "$T" mem-check --device cuda \
    --preset tiny --anchors 4,16,64 --time-anchors 16 --repeat 1 --profile 1 --json "$TMP/gpu.json"
  cat "$TMP/out"
  grep -q "CUDA emulator" "$TMP/out" && ok || bad "mem-check cuda did not run on the emulated device"
  if $LIB mem "$TMP/gpu.json" "$TMP/gpu.num" $((1 << 20)) >"$TMP/mem.log" 2>&1; then ok; else bad "memory criteria (cuda, emulated):"; cat "$TMP/mem.log" >&2; fi
  python3 - "$TMP/gpu.json" <<'EOF' && ok || bad "mem-check JSON (cuda, emulated): wrong anchors, device memory or timing budget"
import json, sys
d = json.load(open(sys.argv[1]))
r, t = d["runs"], d["timing"]
assert d["cuda"] and d["device_total"] == 256 << 20, d
assert [x["anchors"] for x in r] == [4, 16, 64] and all(x["chunk"] <= 16 for x in r), r
assert all(0 < x["device_used"] <= x["plan_total"] for x in r), r        # the arenas live in device memory
# the timing step's default budget is 90 % of the free device memory, and its plan fits in it
assert t["anchors"] == 16 and t["budget"] < 256 << 20 and t["plan_total"] <= t["budget"], t
assert 0 < t["device_used"] <= t["plan_total"], t
# --profile on CUDA: event times per op, the fused loss's own kernels by name
ops = {o["name"]: o for o in t["profile"]["ops"]}
assert {"backend_gemm", "ops_dflash_attn_backward", "loss scan (top-K, argmax, tail)", "loss dlogits"} <= set(ops), sorted(ops)
assert all(o["seconds"] >= 0 for o in ops.values()) and sum(o["seconds"] for o in ops.values()) <= t["profile"]["step_s"] * 1.001
EOF
else
  expect_ok "mem-check cuda" "$T" mem-check --device cuda --preset tiny --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 \
    --intermediate 768 --vocab 32000 --block 16 --tokens 2048 --anchors 16,64,256 --time-anchors 256 --repeat 2 --json "$TMP/gpu.json"
  cat "$TMP/out"
  if $LIB mem "$TMP/gpu.json" "$TMP/gpu.num" $((256 << 20)) >"$TMP/mem.log" 2>&1; then ok; else bad "memory criteria (cuda):"; cat "$TMP/mem.log" >&2; fi
fi
finish
