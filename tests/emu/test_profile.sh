#!/usr/bin/env bash
# tests/emu/test_profile.sh: the CUDA emulator's device profiles (DFLASH_EMU_PROFILE, tests/emu/README.md
# "Device profiles"); registered only in the emulator build (tests/CMakeLists.txt, gpu.test_emu_profile).
#   - an unknown profile stops the program in one line naming the variable and the value, exit 2;
#   - each profile names itself in the device's name (dflash_rank --mode check --device cuda);
#   - the kernels see the profile's shared memory: a tile shape that fits sm_90's 227 KiB but not
#     sm_120's 99 KiB (attention 64x64 at head_dim 128: 110 KiB) runs as sm_90 and is refused as sm_120,
#     and the shapes sm_120 picks itself agree with the scalar kernels.
source "$(dirname "$0")/../cli/lib.sh"

"$R" --version | grep -q "cuda(emulated)" || { echo "SKIP: not the CUDA emulator build"; exit 77; }

# an unknown profile: one line, exit 2 (not a crash)
DFLASH_EMU_PROFILE=sm_75 "$R" --mode check --device cuda >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 2 ] && [ "$(grep -c DFLASH_EMU_PROFILE "$TMP/err")" -eq 1 ] &&
  grep -q "^cuda emulator: DFLASH_EMU_PROFILE=sm_75: unknown device profile" "$TMP/err"; then ok; else
  bad "unknown profile: exit $rc (2 expected), stderr: $(cat "$TMP/err")"
fi

for p in sm_80 sm_90 sm_120; do
  if DFLASH_EMU_PROFILE=$p "$R" --mode check --device cuda >"$TMP/out" 2>&1 &&
    grep -q "CUDA emulator (CPU) as $p " "$TMP/out"; then ok; else bad "profile $p: $(tail -3 "$TMP/out")"; fi
done
# the default is sm_90
if env -u DFLASH_EMU_PROFILE "$R" --mode check --device cuda 2>&1 | grep -q "CUDA emulator (CPU) as sm_90 "; then ok; else
  bad "the default profile is not sm_90"
fi

# the attention's forced 64x64 tiles at head_dim 128 (110 KiB of shared memory)
attn=("$BUILD/bench/bench_attn" --device cuda --tokens 16 --anchors 1 --block 16 --heads 2 --kv-heads 1
      --head-dim 128 --repeat 1 --paths tiled-64x64)
if DFLASH_EMU_PROFILE=sm_90 "${attn[@]}" >"$TMP/out" 2>&1; then ok; else bad "64x64 tiles at hd 128 as sm_90: $(tail -3 "$TMP/out")"; fi
DFLASH_EMU_PROFILE=sm_120 "${attn[@]}" >"$TMP/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && grep -q "more than the device's 101376" "$TMP/out"; then ok; else
  bad "64x64 tiles at hd 128 as sm_120: exit $rc, $(tail -3 "$TMP/out")"
fi

# sm_120's own tile shapes against the scalar kernels (bench_attn prints how far the outputs differ):
# head_dim 128 takes 64x32 (forward) and 32x32 (dQ, dK/dV), head_dim 256 32x32 and 32x16 (sm_90:
# 64x64, 64x32, 64x32 and 32x32, 32x32, 32x16); bf16 outputs within 1e-2
for hd in 128 256; do
  DFLASH_EMU_PROFILE=sm_120 "$BUILD/bench/bench_attn" --device cuda --tokens 40 --anchors 2 --block 16 --heads 4 \
    --kv-heads 2 --head-dim "$hd" --repeat 1 --paths scalar,tiled >"$TMP/out" 2>&1
  rc=$?
  diffs=$(sed -n 's/.*outputs differ by \([0-9.e+-]*\) (out), \([0-9.e+-]*\) (dq).*/\1 \2/p' "$TMP/out")
  if [ "$rc" -eq 0 ] && [ -n "$diffs" ] && awk -v d="$diffs" 'BEGIN { split(d, x, " "); exit !(x[1] <= 1e-2 && x[2] <= 1e-2) }'; then
    ok
  else
    bad "sm_120 tiles at hd $hd vs the scalar kernels: exit $rc, differences '$diffs': $(tail -3 "$TMP/out")"
  fi
done
finish
