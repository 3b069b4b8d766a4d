#!/usr/bin/env bash
# shellcheck disable=SC2054 # commas inside option values (--anchors 32,64,...) are meant
# tests/gpu/check.sh: the whole GPU check of issue 7 in one command, from the repository root:
#
#   OUT=/some/dir bash tests/gpu/check.sh        (OUT defaults to ./gpu-results)
#   DFLASH_CHECK_CPU=1 bash tests/gpu/check.sh   the same flow on the CPU (CUDA build off): what a
#                                                machine without a GPU can exercise; GPU-only parts SKIP
#   DFLASH_CHECK_EMU=1 bash tests/gpu/check.sh   the GPU flow on the CUDA emulator (tests/emu: the
#                                                kernels on the CPU), exactly one emulated GPU, the
#                                                model-scale shapes scaled down: every part as on the
#                                                device, the same summary and files (a dry run);
#                                                DFLASH_CHECK_EMU_PROFILE=sm_80|sm_90|sm_120 (default
#                                                sm_90) picks the emulated card (tests/emu/README.md)
#
# On a bare CUDA machine (nvcc, cuBLAS, NCCL; no Open MPI, HDF5, cJSON, OpenBLAS, no network) it
# unpacks .gpu-deps/debs (scripts/fetch-gpu-deps.sh, run beforehand on a machine with a network),
# sources scripts/gpu-env.sh, builds with -DDFLASH_CUDA=ON for the GPU present, then runs the parts,
# each under a time limit, each one PASS/FAIL/SKIP line:
#   deps        the bundled libraries unpacked and on the paths
#   build       configure + build (CMAKE_CUDA_ARCHITECTURES from nvidia-smi's compute capability)
#   ops         (1) ctest: unit.test_*_cuda (every forward op, the fused loss, the GEMMs and, from
#               tests/unit/test_ops_grad_cuda.c, every training op: CUDA against the CPU) and gpu.*
#   reference   (2) teacher-dump / step-dump on the committed fixtures vs their references (compare)
#   e2e         (3) mpirun -np 2: 1 teacher + 1 student sharing the GPU, MPI payloads; loss must fall
#   transport   (6) transport-test (payload and all-reduce tables) and --preflight with 2 ranks (NCCL
#               declining on one GPU is expected)
#   grads       (8) 1 teacher + 2 students, 12 steps: the step time with the gradients summed over MPI,
#               and over NCCL when each student has a GPU of its own (2 GPUs or more), with equal losses
#   groups      (9) a teacher group of 2 stages (world.teacher_group_size=2) on the one GPU against one
#               teacher rank: equal losses over 24 steps
#   memory      (4) dflash_tool mem-check: anchors 1 -> 16 x under one budget, plan vs measured
#   vllm        (10) a Python with vLLM given (DFLASH_CHECK_VLLM_PYTHON; else SKIP): vLLM serves a toy drafter
#               of ours (DFlash2 on a GPU, DFlash on a CPU) by tools/vllm_check.py: lossless 64/64, its
#               acceptance beside --mode eval's tau_decode on the same 64 sequences
#   bench       (5) bench_attn (the attention: tensor-core tiles vs scalar kernels), bench/gpu_student.py
#                   (PyTorch full / chunked+checkpoint / ours) and bench_loss
# Everything goes to $OUT: check.log (all output), summary.json (one object per part: name, status,
# seconds, numbers; rewritten after every part and on exit, so it survives a failure or a kill),
# bench_attn_*.json, bench_gpu_student.json, mem_check.json, e2e_metrics.jsonl. Exit 0 only when no part
# FAILed and every part ran ("complete": true); a part left no time is not run and FAILs, and a check with
# a part not run exits non-zero with "complete": false and "not_run" naming them. Each part's limit is
# its share of the time left (PARTS below), so the limits fit the whole check's.
# Environment: DFLASH_CHECK_LIMIT (seconds for the whole check, default 540), CUDA_ARCH (default:
# from nvidia-smi), DFLASH_CHECK_BUILD (build folder, default build-gpu or build-gpucheck-cpu),
# DFLASH_CHECK_JOBS (default nproc), DFLASH_CHECK_MIN_PART (the least share a part is run with,
# default 20 s), DFLASH_CHECK_RESERVE (seconds kept for the summary, default 10). docs/gpu-check.md
# says what each PASS means; tests/cli/test_gpu_check_rules.sh tests these rules on fake parts.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
# Open MPI refuses root without these (the lent machine and containers run as root), and a part may
# start more ranks than cores: set here for every part, the emulator dry run with this machine's
# libraries included (scripts/gpu-env.sh sets them too when it provides the libraries)
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
SELF=$ROOT/tests/gpu/check.sh
LIB="python3 $ROOT/tests/gpu/check_lib.py"

# ------------------------------------------------------------------ the parts (run as `check.sh --part NAME`)
# Each part runs in its own process under `timeout` (its limit in PART_LIMIT); exit 0 = PASS, 77 = SKIP
# (with the reason in its note: no GPU, a Python package missing), else FAIL. It writes its numbers
# with `num KEY VALUE` and a one-line note with `note TEXT`.
num() { $LIB put "$WORK/$PART.num" "$1" "$2"; }
note() { echo "$*" | tr '\n\t' '  ' | sed 's/ *$//' >"$WORK/$PART.note"; }
gpu_mode() { [ "$DEV" = cuda ]; }
emu_mode() { [ "${EMU:-0}" = 1 ]; } # DFLASH_CHECK_EMU=1: the GPU flow on the CUDA emulator

# wheel_dir HEADER LIBPREFIX: a folder of python3's nvidia.* packages with include/HEADER and lib/LIBPREFIX*
wheel_dir() {
  python3 - "$1" "$2" <<'EOF' 2>/dev/null
import importlib, os, sys
hdr, lib = sys.argv[1], sys.argv[2]
for name in ("nvidia.nccl", "nvidia.cublas", "nvidia.cu13", "nvidia.cu12"):
    try:
        m = importlib.import_module(name)
    except Exception:
        continue
    for p in m.__path__:
        if os.path.exists(os.path.join(p, "include", hdr)) and os.path.isdir(os.path.join(p, "lib")):
            if any(f.startswith(lib) for f in os.listdir(os.path.join(p, "lib"))):
                print(p)
                sys.exit(0)
EOF
}

part_build() {
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
  echo "cmake: $(cmake --version | head -1); cc: $(cc --version | head -1)"
  local args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
  # shellcheck disable=SC2206
  args+=($DFLASH_GPU_CMAKE_ARGS)
  if emu_mode; then # nvcc is off PATH (the driver): the emulator build needs only the CUDA headers
    args+=(-DDFLASH_CUDA=OFF -DDFLASH_CUDA_EMU=ON)
    num cuda_arch "emulated $DFLASH_EMU_PROFILE"
  elif gpu_mode; then
    local arch=${CUDA_ARCH:-}
    if [ -z "$arch" ]; then # compute capability 8.0 -> 80, 9.0 -> 90, 12.0 -> 120
      arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
      [ -n "$arch" ] || arch=90
    fi
    arch=${arch#sm_}
    arch=${arch//./}
    if nvcc --list-gpu-arch >/dev/null 2>&1 && ! nvcc --list-gpu-arch | grep -qx "compute_$arch"; then
      note "nvcc ($(nvcc --version | tail -1)) cannot build for sm_$arch (sm_120 needs CUDA 12.8 or later)"
      return 1
    fi
    args+=(-DDFLASH_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch")
    num cuda_arch "$arch"
    # NCCL and cuBLAS: the toolkit's (or /usr/include), else the pip wheels' of python3 (nvidia-nccl-cu13,
    # nvidia-cublas / nvidia/cu13): CMake then gets their header folder and libraries by full path
    local inc found=""
    for inc in /usr/include /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include; do
      [ -f "$inc/nccl.h" ] && found=$inc && break
    done
    if [ -z "$found" ]; then
      local nccl
      nccl=$(wheel_dir nccl.h libnccl.so)
      if [ -n "$nccl" ]; then
        echo "NCCL from the python wheel: $nccl"
        args+=("-DNCCL_INCLUDE_DIR=$nccl/include" "-DNCCL_LIBRARY=$(ls "$nccl"/lib/libnccl.so* | head -1)")
        num nccl "wheel: $nccl"
      else
        echo "no nccl.h (toolkit, /usr/include, python wheels): the configure will stop"
      fi
    fi
    if [ ! -f /usr/local/cuda/include/cublas_v2.h ] && [ ! -f /usr/include/cublas_v2.h ]; then
      local cb
      cb=$(wheel_dir cublas_v2.h libcublas.so)
      if [ -n "$cb" ]; then
        echo "cuBLAS from the python wheel: $cb"
        args+=("-DCUDA_cublas_LIBRARY=$(ls "$cb"/lib/libcublas.so* | head -1)"
               "-DCUDA_cublasLt_LIBRARY=$(ls "$cb"/lib/libcublasLt.so* | head -1)"
               "-DCMAKE_C_FLAGS=-I$cb/include" "-DCMAKE_CUDA_FLAGS=-I$cb/include")
        num cublas "wheel: $cb"
      fi
    fi
  else
    args+=(-DDFLASH_CUDA=OFF)
  fi
  local t0=$SECONDS
  echo "cmake -S . -B $BUILD ${args[*]}"
  cmake -S . -B "$BUILD" "${args[@]}" >"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log"; note "configure failed"; return 1; }
  grep -E "CUDA backend|Found MPI_C|Found HDF5|OpenBLAS /|Found libcjson|Found openblas|NCCL" "$WORK/cmake.log"
  num configure_s $((SECONDS - t0))
  t0=$SECONDS
  cmake --build "$BUILD" -j "$JOBS" >"$WORK/build.log" 2>&1 || { tail -60 "$WORK/build.log"; note "build failed"; return 1; }
  grep -ciE "warning" "$WORK/build.log" | xargs -I{} echo "build: {} warning line(s)"
  num build_s $((SECONDS - t0))
  "$BUILD/dflash_rank" --version || { note "dflash_rank does not start"; return 1; }
  num version "$("$BUILD/dflash_rank" --version)"
  local missing
  missing=$(ldd "$BUILD/dflash_rank" | grep -c "not found")
  ldd "$BUILD/dflash_rank" | grep -E "mpi|hdf5|cjson|openblas|cudart|cublas|nccl|not found" | sed 's/^\s*/  /'
  [ "$missing" -eq 0 ] || { note "$missing libraries not found (ldd)"; return 1; }
  if gpu_mode; then
    "$BUILD/dflash_rank" --version | grep -q cuda || { note "built without the CUDA backend"; return 1; }
    "$BUILD/dflash_rank" --mode check --device cuda >"$WORK/devcheck.log" 2>&1 ||
      { cat "$WORK/devcheck.log"; note "dflash_rank --mode check --device cuda fails: no usable GPU?"; return 1; }
  fi
  note "$("$BUILD/dflash_rank" --version)"
}

# need_py MODULE... : exit 77 (SKIP) with the reason when python3 cannot import one of them
need_py() {
  local m
  for m in "$@"; do
    python3 -c "import $m" 2>/dev/null || { note "python3 ($(command -v python3)) has no $m: not run"; echo "SKIP: python3 has no $m"; exit 77; }
  done
}

# The ops part's tests that cannot apply to the check's machine (one GPU, or the one emulated GPU),
# excluded by name the same on the emulator as on a GPU: "name<TAB>reason" lines. Every test that is
# not excluded must pass: a ctest skip is a failure on the emulator and on a GPU alike.
ops_excluded() {
  printf '%s	%s
'     gpu.test_e2e_cuda "this check's own e2e and transport parts run it"     gpu.test_nccl_cuda "needs two GPUs, one per rank (the check plans for one; the grads part runs NCCL when there are two)"     gpu.test_groups_cuda "needs three GPUs, one per rank (the groups part runs a teacher group on the one GPU)"     gpu.test_payload_pinned_cuda "reads the CUDA emulator's copy log (DFLASH_EMU_COPY_LOG): exits 77 on a GPU; ./tests/run.sh's emulator build runs it"     gpu.test_pinned_plan_cuda "reads the CUDA emulator's pinned-memory report (DFLASH_EMU_PINNED_REPORT): exits 77 on a GPU; ./tests/run.sh's emulator build runs it"     gpu.test_nccl_setup_cuda "needs two GPUs, one per rank (stops a rank during NCCL set-up; ./tests/run.sh runs it on two emulated devices)"     gpu.test_emu_profile "tests the CUDA emulator's device profiles: exits 77 on a GPU"
  /usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null ||
    printf '%s	%s
' gpu.test_regenerate_cuda "/usr/bin/python3 lacks h5py/numpy, which it compares through (Debian's python3-h5py, scripts/install-deps.sh)"
}

part_ops() {
  local excl names="" n=0 line
  excl=$(ops_excluded)
  while IFS=$'\t' read -r line _; do names="$names${names:+|}$line"; n=$((n + 1)); done <<<"$excl"
  echo "excluded by name (the same on the emulator and on a GPU):"
  sed 's/^/  /; s/\t/: /' <<<"$excl"
  num excluded "$(python3 -c 'import json,sys; print(json.dumps(dict(l.split("\t", 1) for l in sys.stdin.read().splitlines() if l)))' <<<"$excl")"
  # each test's ctest timeout inside the part's limit (PART_LIMIT, set by the driver), so a hung test
  # is reported by name before the part itself is killed
  local per=$((${PART_LIMIT:-240} - 15))
  [ "$per" -ge 5 ] || per=5
  num per_test_timeout_s "$per"
  ctest --test-dir "$BUILD" -R '(^unit\..*_cuda$)|(^gpu\.)' -E "^(${names//./\\.})\$" -V --timeout "$per" >"$WORK/ctest.log" 2>&1
  local rc=$?
  grep -E "^[0-9]+: .*(ok|FAIL)\s*$|Test +#|tests passed|SKIP" "$WORK/ctest.log"
  local res passed failed skipped
  res=$($LIB ctest "$WORK/ctest.log" "$WORK/$PART.num")
  read -r passed failed skipped <<<"$res"
  num passed "$passed"; num failed "$failed"; num skipped "$skipped"
  note "$passed passed, $failed failed, $skipped skipped (ctest -R '_cuda\$|^gpu\.'); $n excluded by name (numbers.excluded says why)"
  if [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then grep -B2 -A20 -E "FAIL|Failed|Error" "$WORK/ctest.log" | tail -80; return 1; fi
  if ! gpu_mode; then note "$passed passed, $skipped skipped: the CUDA tests need a GPU"; return 77; fi
  [ "$skipped" -eq 0 ] || { note "$skipped test(s) skipped (ctest), which the check counts as failures on a GPU and on the emulator alike: exclude a test that cannot apply by name, with its reason (ops_excluded)"; return 1; }
  [ "$passed" -gt 0 ] || { note "no test ran"; return 1; }
  return 0
}

part_reference() {
  local T=$BUILD/dflash_tool D=$ROOT/tests/reference/data tol_t tol_l tol_g bad=0 n=0
  if gpu_mode; then tol_t=3e-2 tol_l=2e-2 tol_g=5e-2; else tol_t=1e-4 tol_l=1e-5 tol_g=1e-4; fi
  num tolerances "{\"teacher\": $tol_t, \"loss\": $tol_l, \"grads\": $tol_g}"
  local args name res tol_f
  for args in "$D"/teacher_*.args; do
    name=$(basename "$args" .args)
    unset make_target layer_ids topk tokens reference cuda_tol
    # shellcheck disable=SC1090
    source "$args"
    # on the GPU each fixture's own tolerance (twice transformers' bf16 deviation there, .args cuda_tol)
    tol_f=$tol_t
    if gpu_mode && [ -n "${cuda_tol:-}" ]; then tol_f=$cuda_tol; fi
    # shellcheck disable=SC2086,SC2154
    "$T" make-target "$WORK/$name" $make_target >/dev/null 2>&1 || { echo "FAIL $name: make-target"; bad=$((bad + 1)); continue; }
    # shellcheck disable=SC2154
    if ! "$T" teacher-dump "$WORK/$name" "$D/$tokens" "$WORK/$name.safetensors" --layers "$layer_ids" --topk "$topk" --device "$DEV" >"$WORK/td.log" 2>&1; then
      cat "$WORK/td.log"; echo "FAIL $name: teacher-dump"; bad=$((bad + 1)); continue
    fi
    # shellcheck disable=SC2154
    "$T" compare "$D/$reference" "$WORK/$name.safetensors" --tol "$tol_f" --only features,topk_idx,topk_val,lse,logits_last >"$WORK/cmp.log" 2>&1
    local rc=$?
    res=$($LIB compare "$WORK/cmp.log")
    echo "$name (teacher-dump --device $DEV): max rel err $(echo "$res" | cut -d' ' -f1), tol $tol_f: $([ $rc -eq 0 ] && echo ok || echo FAIL)"
    [ $rc -eq 0 ] || { cat "$WORK/cmp.log"; bad=$((bad + 1)); }
    num "$name" "{\"max_rel_err\": $(echo "$res" | cut -d' ' -f1), \"tol\": $tol_f, \"ok\": $([ $rc -eq 0 ] && echo true || echo false)}"
    n=$((n + 1))
  done
  local in
  for in in "$D"/student_*.in.safetensors; do
    name=$(basename "$in" .in.safetensors)
    if ! "$T" step-dump "$in" "$D/$name.config.json" "$WORK/$name.out.safetensors" --device "$DEV" >"$WORK/sd.log" 2>&1; then
      cat "$WORK/sd.log"; echo "FAIL $name: step-dump"; bad=$((bad + 1)); continue
    fi
    "$T" compare "$D/$name.out.safetensors" "$WORK/$name.out.safetensors" --tol "$tol_l" --only loss,ce,kl,cap >"$WORK/c1.log" 2>&1
    local r1=$?
    "$T" compare "$D/$name.out.safetensors" "$WORK/$name.out.safetensors" --tol "$tol_g" >"$WORK/c2.log" 2>&1
    local r2=$?
    local e1 e2
    e1=$($LIB compare "$WORK/c1.log" | cut -d' ' -f1)
    e2=$($LIB compare "$WORK/c2.log" | cut -d' ' -f1)
    echo "$name (step-dump --device $DEV): loss terms max rel err $e1 (tol $tol_l), all tensors $e2 (tol $tol_g): $([ $r1 -eq 0 ] && [ $r2 -eq 0 ] && echo ok || echo FAIL)"
    [ $r1 -eq 0 ] || { cat "$WORK/c1.log"; bad=$((bad + 1)); }
    [ $r2 -eq 0 ] || { grep -E "FAIL|compare:" "$WORK/c2.log"; bad=$((bad + 1)); }
    num "$name" "{\"loss_max_rel_err\": $e1, \"loss_tol\": $tol_l, \"grad_max_rel_err\": $e2, \"grad_tol\": $tol_g, \"ok\": $([ $r1 -eq 0 ] && [ $r2 -eq 0 ] && echo true || echo false)}"
    n=$((n + 1))
  done
  num fixtures "$n"
  note "$n fixtures, $bad failure(s), --device $DEV"
  [ "$bad" -eq 0 ] && [ "$n" -ge 8 ]
}

make_toy() { # make_toy DIR: a small Qwen3 target and self-distilled data (CPU, seconds)
  local T=$BUILD/dflash_tool
  [ -f "$1/data.h5" ] && return 0
  mkdir -p "$1"
  "$T" make-target "$1/target" --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 256 --seed 11 >/dev/null 2>&1 &&
    "$T" make-data "$1/data.h5" --target "$1/target" --samples 64 --prompt-len 8 --gen-len 40 --seed 3 >/dev/null 2>&1
}
TOY_ARGS=(--target.layer_ids=0,1 --drafter.block_size=8 --drafter.layers=1 --train.lr=3e-3 --train.max_anchors=16
          --train.log_interval=8 --train.eval_interval=24 --train.eval_batches=4 --data.max_tokens_per_batch=256
          --data.heldout_samples=8 --teacher.topk=8)

part_e2e() {
  make_toy "$WORK/toy" || { note "make-target/make-data failed"; return 1; }
  local R=$BUILD/dflash_rank steps=48
  # transport.payload auto: two ranks on one GPU must take the MPI host path (NCCL needs a GPU per rank)
  echo "mpirun -np 2 dflash_rank --mode train --device $DEV --train.steps=$steps (1 teacher + 1 student, payloads auto)"
  mpirun -np 2 "$R" --mode train --device "$DEV" --transport.payload=auto --target.path="$WORK/toy/target" \
    --data.path="$WORK/toy/data.h5" "${TOY_ARGS[@]}" --train.steps=$steps --run.dir="$WORK/e2e" >"$WORK/e2e.out" 2>"$WORK/e2e.err"
  local rc=$?
  grep -E "payloads:|summary|error|peak memory" "$WORK/e2e.err" | head -20
  num exit_code "$rc"
  local payload
  payload=$(grep -h -m1 "payloads:" "$WORK/e2e.err" | sed 's/^\[r[0-9]*\] //')
  num payloads "$payload"
  [ -f "$WORK/e2e/metrics.jsonl" ] && cp "$WORK/e2e/metrics.jsonl" "$OUT/e2e_metrics.jsonl"
  [ "$rc" -eq 0 ] || { tail -30 "$WORK/e2e.err"; note "the job exited $rc"; return 1; }
  case $payload in *"over MPI"*) ;; *) note "payloads not over MPI with two ranks on one device: $payload"; return 1 ;; esac
  local msg
  msg=$($LIB losses "$WORK/e2e/metrics.jsonl" "$WORK/$PART.num")
  local lrc=$?
  echo "$msg"
  note "$msg"
  [ -f "$WORK/e2e/drafter/model.safetensors" ] || { note "no exported drafter"; return 1; }
  return $lrc
}

part_transport() {
  local R=$BUILD/dflash_rank bad=0
  mpirun -np 2 "$R" --mode transport-test --device "$DEV" >"$WORK/tt.out" 2>"$WORK/tt.err"
  local rc=$?
  cat "$WORK/tt.out"
  grep -E "error|NCCL" "$WORK/tt.err" | head -5
  local nccl
  nccl=$(grep -h "NCCL path" "$WORK/tt.out" "$WORK/tt.err" | head -1)
  num transport_nccl "$nccl"
  # the MPI payload table's rows only; then the largest size of each all-reduce table
  num transport_mpi_gbps_max "$(awk '/^[A-Za-z]/ {t = ($0 ~ /^MPI, host memory/)} t && $1 ~ /^[0-9]+$/ && NF >= 5 {if ($4 > m) m = $4} END {print m + 0}' "$WORK/tt.out")"
  local p
  for p in MPI NCCL; do
    num "allreduce_$p" "$(awk -v p="$p all-reduce" '/^[A-Za-z]/ {t = index($0, p) == 1} t && $1 ~ /^[0-9]+$/ && NF == 6 {last = $0}
      END {if (!last) {print "not run"; exit} split(last, f); printf "{\"bytes\": %s, \"time_us\": %s, \"algbw_gbps\": %s, \"busbw_gbps\": %s, \"wrong\": %s}\n", f[1], f[3], f[4], f[5], f[6]}' "$WORK/tt.out")"
  done
  if [ "$rc" -ne 0 ] || ! grep -q "all payloads intact (0 wrong elements)" "$WORK/tt.out"; then
    echo "FAIL: transport-test (exit $rc)"; tail -20 "$WORK/tt.err"; bad=1
  fi
  make_toy "$WORK/toy" || { note "make-target/make-data failed"; return 1; }
  mpirun -np 2 "$R" --preflight --mode train --device "$DEV" --target.path="$WORK/toy/target" --data.path="$WORK/toy/data.h5" \
    "${TOY_ARGS[@]}" --run.dir="$WORK/preflight-run" >"$WORK/pf.out" 2>"$WORK/pf.err"
  local prc=$?
  cat "$WORK/pf.out"
  num preflight_exit "$prc"
  num preflight_last "$(tail -1 "$WORK/pf.out")"
  num preflight_nccl "$(grep -E '^nccl ' "$WORK/pf.out" | head -2 | tr -s ' ' | paste -sd';' -)"
  num preflight_memory "$(grep -E '^memory ' "$WORK/pf.out" | tr -s ' ' | paste -sd';' -)"
  if [ "$prc" -ne 0 ]; then echo "FAIL: --preflight exit $prc"; tail -20 "$WORK/pf.err"; bad=1; fi
  note "transport: ${nccl:-no NCCL line}; preflight: $(tail -1 "$WORK/pf.out")"
  [ "$bad" -eq 0 ]
}

# A target whose drafter's gradient is large enough (hidden 512, 2 drafter layers: about 40 MiB of
# fp32) for the way the students sum it to show in the step time; the toy on the CPU.
make_wide() {
  local T=$BUILD/dflash_tool
  [ -f "$1/data.h5" ] && return 0
  mkdir -p "$1"
  "$T" make-target "$1/target" --arch qwen3 --layers 2 --hidden 512 --heads 8 --kv-heads 4 --vocab 2048 --seed 13 >/dev/null 2>&1 &&
    "$T" make-data "$1/data.h5" --target "$1/target" --samples 48 --prompt-len 8 --gen-len 40 --seed 4 >/dev/null 2>&1
}

# grads_step_ms METRICS: the median step time over steps 3.. (block tokens / block tokens per second,
# less the share teacher_wait_frac spent waiting for the teacher) and the losses, as JSON
grads_step_ms() {
  python3 - "$1" <<'EOF'
import json, statistics, sys
rows = [d for d in map(json.loads, open(sys.argv[1])) if "block_tokens_per_s" in d and d.get("step", 0) >= 3]
step = [8 * d["anchors"] / d["block_tokens_per_s"] * (1 - d["teacher_wait_frac"]) for d in rows]
print(json.dumps({"step_ms": round(1e3 * statistics.median(step), 2), "losses": [d["loss"] for d in rows]}))
EOF
}

part_grads() {
  # 1 teacher + 2 students, 12 steps: the gradients over MPI (host memory), then over NCCL (buckets
  # overlapping the backward) when each student has a GPU of its own; step times, and equal losses
  local R=$BUILD/dflash_rank dir=$WORK/toy gpus=0 g bad=0 res line=""
  if gpu_mode && "$R" --version | grep -q "cuda(emulated)"; then # the CUDA emulator (tests/emu): the toy
    gpus=${DFLASH_EMU_DEVICES:-1}
    make_toy "$dir" || { note "make-target/make-data failed"; return 1; }
  elif gpu_mode; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    dir=$WORK/wide
    make_wide "$dir" || { note "make-target/make-data (hidden 512) failed"; return 1; }
  else
    make_toy "$dir" || { note "make-target/make-data failed"; return 1; }
  fi
  local args=(--mode train --device "$DEV" --target.path="$dir/target" --data.path="$dir/data.h5" --target.layer_ids=0,1
              --drafter.block_size=8 --drafter.layers=2 --train.max_anchors=32 --train.log_interval=1
              --train.eval_interval=1000 --train.eval_batches=1 --data.max_tokens_per_batch=256 --data.heldout_samples=8
              --teacher.topk=8 --train.steps=12 --world.students=2 --train.batches_per_step=2 --transport.payload=mpi)
  for g in mpi nccl; do
    # a rank takes GPU local rank mod GPUs: the students (local ranks 1, 2) have GPUs of their own from 2 GPUs on
    if [ "$g" = nccl ] && [ "$gpus" -lt 2 ]; then
      num grads_nccl "not run: $gpus GPU(s); NCCL needs each student on a GPU of its own"
      line="$line; nccl not run ($gpus GPU)"
      continue
    fi
    echo "mpirun -np 3 dflash_rank --world.students=2 --transport.grad_allreduce=$g --device $DEV (12 steps)"
    mpirun -np 3 "$R" "${args[@]}" --transport.grad_allreduce=$g --run.dir="$WORK/grads-$g" >"$WORK/grads-$g.out" 2>"$WORK/grads-$g.err"
    local rc=$?
    grep -E "gradients:|error" "$WORK/grads-$g.err" | head -5
    [ "$rc" -eq 0 ] || { tail -20 "$WORK/grads-$g.err"; echo "FAIL: grad_allreduce $g: exit $rc"; bad=1; continue; }
    grep -q "gradients: summed over $([ $g = nccl ] && echo NCCL || echo MPI)" "$WORK/grads-$g.err" ||
      { echo "FAIL: grad_allreduce $g: the log names another path"; bad=1; }
    res=$(grads_step_ms "$WORK/grads-$g/metrics.jsonl") || { echo "FAIL: grad_allreduce $g: no step times"; bad=1; continue; }
    echo "grad_allreduce $g: $res"
    num "grads_$g" "$res"
    line="$line; $g $(echo "$res" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_ms"])') ms/step"
  done
  if [ -f "$WORK/grads-nccl/metrics.jsonl" ] && [ -f "$WORK/grads-mpi/metrics.jsonl" ]; then
    # two students: each element of the sum is one fp32 addition, the same whichever path makes it
    cmp -s <(grep -o '"loss": [^,]*' "$WORK/grads-nccl/metrics.jsonl") <(grep -o '"loss": [^,]*' "$WORK/grads-mpi/metrics.jsonl") ||
      { echo "FAIL: the losses with NCCL gradients differ from MPI's"; bad=1; }
  fi
  note "2 students, $DEV${line}"
  [ "$bad" -eq 0 ]
}

# groups: a teacher group of 2 stages (world.teacher_group_size=2) against one teacher rank, on the
# one GPU (the ranks share it, so the stages' activations and the payloads go over MPI): the same
# 24 steps must log the same losses, the batches being the same numbers.
part_groups() {
  make_toy "$WORK/toy" || { note "make-target/make-data failed"; return 1; }
  local R=$BUILD/dflash_rank g rc
  for g in 1 2; do
    echo "mpirun -np $((g + 1)) dflash_rank --mode train --device $DEV --world.teacher_group_size=$g (1 teacher of $g rank(s) + 1 student)"
    mpirun -np $((g + 1)) "$R" --mode train --device "$DEV" --world.teacher_group_size=$g --target.path="$WORK/toy/target" \
      --data.path="$WORK/toy/data.h5" "${TOY_ARGS[@]}" --train.steps=24 --run.dir="$WORK/groups-$g" >"$WORK/groups-$g.out" 2>"$WORK/groups-$g.err"
    rc=$?
    grep -E "teacher groups|summary|error" "$WORK/groups-$g.err" | head -5
    [ "$rc" -eq 0 ] || { tail -20 "$WORK/groups-$g.err"; note "the job with groups of $g exited $rc"; return 1; }
  done
  local msg
  msg=$(python3 - "$WORK/groups-1/metrics.jsonl" "$WORK/groups-2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([(d["step"], d.get("split"), d["loss"]) for d in map(json.loads, open(p)) if "loss" in d] for p in sys.argv[1:])
print("group of 2 == 1 rank over %d logged losses" % len(a) if len(a) >= 3 and a == b else "losses differ: %s vs %s" % (a, b))
sys.exit(0 if len(a) >= 3 and a == b else 1)
PY
)
  local lrc=$?
  echo "$msg"
  note "$msg"
  return $lrc
}

part_memory() {
  local T=$BUILD/dflash_tool args slack
  if emu_mode; then # the toy size on an emulated device of 256 MiB, whose memory in use is exact
    args=(--device cuda --preset tiny --anchors 4,16,64 --time-anchors 16 --repeat 1 --profile 1)
    slack=$((1 << 20))
    export DFLASH_EMU_GPU_BYTES=$((256 << 20))
  elif gpu_mode; then
    args=(--device cuda --preset 8b --anchors 32,64,128,256,512 --time-anchors 512 --repeat 3 --profile 1)
    slack=$((256 << 20))
  else
    args=(--device cpu --preset tiny --anchors 4,8,16,32,64 --time-anchors 64 --repeat 3)
    slack=0
  fi
  echo "dflash_tool mem-check ${args[*]}"
  "$T" mem-check "${args[@]}" --json "$WORK/mem.json" || { note "mem-check failed"; return 1; }
  cp "$WORK/mem.json" "$OUT/mem_check.json"
  num slack "$slack"
  local out
  out=$($LIB mem "$WORK/mem.json" "$WORK/$PART.num" "$slack")
  local rc=$?
  echo "$out"
  note "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["runs"]; m=lambda b: "%.3f GiB" % (b / 2**30) if b >= 2**30 else "%.2f MiB" % (b / 2**20); print("anchors %d..%d: budget %s, plan max %s, arena peak max %s, device in use max %s" % (r[0]["anchors"], r[-1]["anchors"], m(d["budget"]), m(max(x["plan_total"] for x in r)), m(max(x["arena_peak"] for x in r)), m(max(x["device_used"] for x in r)) if d["cuda"] else "- (CPU)"))' "$WORK/mem.json")"
  return $rc
}

# vllm (10): a real engine serves a drafter of ours on a toy pair. Needs a Python with vllm and h5py
# (DFLASH_CHECK_VLLM_PYTHON, default python3): the lent machine has neither a network nor room in `carry`
# for vLLM's 6 GB, so there it SKIPs; on a GPU it serves DFlash2 (vLLM's GPU runner), on a CPU DFlash
part_vllm() {
  local py=${DFLASH_CHECK_VLLM_PYTHON:-python3} kind=dflash2 R=$BUILD/dflash_rank T=$BUILD/dflash_tool V=$WORK/vtoy
  emu_mode && { note "the emulator has no GPU for vLLM"; return 77; }
  local m
  for m in vllm h5py; do
    "$py" -c "import $m" 2>/dev/null ||
      { note "$py has no $m: not run (set DFLASH_CHECK_VLLM_PYTHON; docs/gpu-check.md)"; return 77; }
  done
  gpu_mode || kind=dflash # vLLM's CPU (V1) runner refuses DFlash2's candidate head
  mkdir -p "$V"
  # head_dim 64: vLLM's CPU attention has no kernel for the usual toys' 16
  "$T" make-target "$V/target" --arch qwen3 --layers 2 --hidden 128 --heads 2 --kv-heads 1 --vocab 256 --seed 11 >/dev/null &&
    "$T" make-data "$V/data.h5" --target "$V/target" --samples 64 --prompt-len 8 --gen-len 40 --seed 3 >/dev/null ||
    { note "make-target/make-data failed"; return 1; }
  echo "mpirun -np 2 dflash_rank --mode train --device $DEV --drafter.kind=$kind --train.steps=96, then --mode eval"
  mpirun -np 2 "$R" --mode train --device "$DEV" --target.path="$V/target" --data.path="$V/data.h5" "${TOY_ARGS[@]}" \
    --drafter.kind=$kind --train.steps=96 --run.dir="$V/run" >"$WORK/vllm-train.log" 2>&1 &&
    mpirun -np 2 "$R" --mode eval --device "$DEV" --target.path="$V/target" --data.path="$V/data.h5" \
      --eval.drafter="$V/run/drafter" --run.dir="$V/eval" >"$WORK/vllm-eval.log" 2>&1 ||
    { tail -5 "$WORK/vllm-train.log" "$WORK/vllm-eval.log"; note "training or --mode eval of the toy drafter failed"; return 1; }
  # every sample: the set has no /heldout, so --mode eval walks them all
  "$py" "$ROOT/tools/vllm_check.py" --target "$V/target" --drafter "$V/run/drafter" --data "$V/data.h5" --pick all \
    --eval-json "$V/eval/eval.json" --work "$V/vllm" 2>&1 | tee "$WORK/vllm.out"
  local rc=${PIPESTATUS[0]} line
  line=$(grep -h '^vllm: ' "$WORK/vllm.out")
  num kind "$kind"
  num vllm "${line#vllm: }"
  num tau_decode "$(grep -o '"tau_decode": [0-9.]*' "$V/eval/eval.json" | cut -d' ' -f2)"
  note "$kind drafter: ${line:-no summary line}"
  [ "$rc" -eq 0 ]
}

part_bench() {
  local bad=0 args t0=$SECONDS
  # the DFlash attention alone, tensor-core tiles against the scalar kernels (CPU: the tiny preset)
  if [ -x "$BUILD/bench/bench_attn" ]; then
    local presets=(tiny) p paths
    gpu_mode && ! emu_mode && presets=(8b 27b)
    for p in "${presets[@]}"; do
      # every tile shape that fits an H200 (data for the shape preference; 64x64's dq needs 246 KiB at head_dim 256)
      paths=cpu
      gpu_mode && paths=tiled,scalar,tiled-64x32,tiled-32x32,tiled-32x16,tiled-16x32
      gpu_mode && [ "$p" = 8b ] && paths=$paths,tiled-64x64
      emu_mode && paths=tiled,scalar
      echo "bench_attn --preset $p --paths $paths"
      timeout 60 "$BUILD/bench/bench_attn" --device "$DEV" --preset "$p" --paths "$paths" --repeat 3 --json "$OUT/bench_attn_$p.json" ||
        { echo "FAIL: bench_attn --preset $p"; bad=1; }
      [ -f "$OUT/bench_attn_$p.json" ] && num "attn_$p" "$(cat "$OUT/bench_attn_$p.json")"
    done
  fi
  if gpu_mode && ! emu_mode; then
    args=(--device cuda --sizes 8b,27b --repeat 3 --time-left "$((${PART_LIMIT:-300} - 15 - (SECONDS - t0)))")
    [ -f "$WORK/mem.json" ] && args+=(--ours-json "8b=$WORK/mem.json")
  else # the CPU and the emulator: toy sizes, PyTorch on the CPU (it checks the script, not a benchmark)
    args=(--tiny --repeat 2)
  fi
  local student="bench/gpu_student.py" nopy=""
  if ! python3 -c 'import torch' 2>/dev/null; then # the GPU machine may have no PyTorch either
    nopy="bench/gpu_student.py not run: python3 ($(command -v python3)) has no torch"
    echo "$nopy"
    num gpu_student "not run: python3 has no torch"
    student="not bench/gpu_student.py (no torch)"
  else
    echo "python3 bench/gpu_student.py ${args[*]}"
    PYTHONUNBUFFERED=1 python3 "$ROOT/bench/gpu_student.py" "${args[@]}" --dflash-tool "$BUILD/dflash_tool" \
      --json "$OUT/bench_gpu_student.json" || { echo "FAIL: bench/gpu_student.py"; bad=1; }
  fi
  if [ -f "$OUT/bench_gpu_student.json" ]; then
    num gpu_student "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"gemm_tflops": d.get("gemm_tflops"), "rows": [{k: m.get(k) for k in ("size", "method", "status", "median_s", "block_tokens_per_s", "peak_gib", "mfu")} for s in d["sizes"] for m in s["methods"]]}))' "$OUT/bench_gpu_student.json")"
  fi
  # bench_loss has no --device: it times the CPU loss (a small case, as a smoke run of the program)
  if [ -x "$BUILD/bench/bench_loss" ]; then
    local bl
    bl=$("$BUILD/bench/bench_loss" --method rows --n 480 --vocab 32000 --hidden 256 --repeat 2) && echo "bench_loss (CPU, it has no --device): $bl" &&
      num bench_loss_cpu "$bl" || { echo "FAIL: bench_loss"; bad=1; }
  fi
  note "bench_attn + $student + bench_loss (CPU only)"
  [ "$bad" -eq 0 ] || return 1
  # the Python package missing: SKIP with the reason (bench_attn and bench_loss ran and passed)
  [ -z "$nopy" ] || { note "$nopy (bench_attn and bench_loss ran and passed)"; return 77; }
}

# The self-test's fake parts (DFLASH_CHECK_SELFTEST=1; tests/cli/test_gpu_check_rules.sh): the check's
# own rules on parts that pass, fail, sleep past their limit, skip, or lack a Python package
part_st_pass() { num answer 42; note "a fake part that passes"; }
part_st_fail() { note "a fake part that fails"; return 3; }
part_st_sleep() { sleep 60; }
part_st_skip() { note "a fake part that skips"; return 77; }
part_st_skip_bare() { return 77; }
part_st_nopy() { need_py json dflash_no_such_module; }

if [ "${1:-}" = "--part" ]; then
  PART=$2
  shift 2
  "part_$PART" "$@"
  exit $?
fi

# ------------------------------------------------------------------ the driver
CPU_MODE=${DFLASH_CHECK_CPU:-0}
[ "${1:-}" = "--cpu" ] && CPU_MODE=1
EMU=${DFLASH_CHECK_EMU:-0}
[ "$CPU_MODE" = 1 ] && EMU=0
if [ "$CPU_MODE" = 1 ]; then DEV=cpu; else DEV=cuda; fi
OUT=${OUT:-$ROOT/gpu-results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# the emulator runs a kernel 10^3-10^5 times slower than a GPU: every limit x SLOW
SLOW=1
if [ "$EMU" = 1 ]; then
  SLOW=${DFLASH_CHECK_EMU_SLOW:-12}
  # the emulated card (tests/emu/README.md, "Device profiles"), for every part
  case ${DFLASH_CHECK_EMU_PROFILE:=sm_90} in
    sm_80|sm_90|sm_120) export DFLASH_EMU_PROFILE=$DFLASH_CHECK_EMU_PROFILE ;;
    *) echo "check: DFLASH_CHECK_EMU_PROFILE=$DFLASH_CHECK_EMU_PROFILE: unknown device profile (sm_80, sm_90 or sm_120)" >&2; exit 2 ;;
  esac
  # exactly one emulated GPU, as the lent machine has; nvcc off PATH (the emulator build wants none)
  export DFLASH_EMU_DEVICES=1
  PATH=$(echo "$PATH" | tr ':' '\n' | grep -v -i cuda | paste -sd: -)
  export PATH
fi
LIMIT_TOTAL=${DFLASH_CHECK_LIMIT:-$((540 * SLOW))}
JOBS=${DFLASH_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
if [ "$EMU" = 1 ]; then BUILD=${DFLASH_CHECK_BUILD:-$ROOT/build-gpucheck-emu}
elif [ "$DEV" = cuda ]; then BUILD=${DFLASH_CHECK_BUILD:-$ROOT/build-gpu}; else BUILD=${DFLASH_CHECK_BUILD:-$ROOT/build-gpucheck-cpu}; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dflash_gpucheck_XXXXXX")
export ROOT SELF LIB OUT WORK BUILD DEV JOBS EMU
rm -f "$OUT/check.log" "$OUT/summary.json" "$OUT/bench_gpu_student.json" "$OUT/mem_check.json" "$OUT/e2e_metrics.jsonl" \
  "$OUT"/bench_attn_*.json
exec > >(tee -a "$OUT/check.log") 2>&1
TEE_PID=$!
START=$SECONDS
: >"$WORK/parts.tsv"

meta() { $LIB put "$WORK/meta.num" "$1" "$2"; }
# summary [final]: $OUT/summary.json from what has run ("complete": false until the end)
summary() { $LIB summary "$WORK" "$OUT" "${1:-}" || echo "check: could not write $OUT/summary.json"; }
# PARTS: "name:weight:cap" of every part after deps, in order. A part's limit is its weight's share of
# the time left for it and the parts after it (less RESERVE for the summary), at most cap x SLOW: the
# limits always fit inside LIMIT_TOTAL, and time a part does not use goes to the parts after it. The
# weights are the seconds each part is expected to need on the GPU machine at the default limit
# (the build first, the benchmark last and the most elastic: it drops its 27B size when short);
# a part whose share is under MIN_PART is not run, a FAIL. (The self-test: DFLASH_CHECK_SELFTEST=1
# with DFLASH_CHECK_SELFTEST_PARTS, fake parts as "name:weight", cap = weight.)
PARTS=(build:150:300 ops:100:200 reference:30:90 e2e:40:150 transport:30:90 grads:40:120 groups:30:90 memory:40:150
       vllm:20:240 bench:180:300)
[ "${DFLASH_CHECK_SELFTEST:-0}" = 1 ] && read -r -a PARTS <<<"${DFLASH_CHECK_SELFTEST_PARTS:?DFLASH_CHECK_SELFTEST_PARTS unset}"
N_PARTS=$((${#PARTS[@]} + 1)) # and deps
RESERVE=${DFLASH_CHECK_RESERVE:-10}
MIN_PART=${DFLASH_CHECK_MIN_PART:-20} # a share under this is no time to run a part: not run, FAIL
# complete: every part ran (none left out for lack of time, none after a failed build, none interrupted)
complete() { [ "$(wc -l <"$WORK/parts.tsv")" -ge "$N_PARTS" ] && ! awk -F'\t' '$6 == "0" {f = 1} END {exit !f}' "$WORK/parts.tsv"; }
finish() {
  local rc=$?
  trap '' PIPE # the tee may be gone (a signal to the whole process group): finish anyway
  if complete; then summary final; else summary; fi
  echo
  echo "== summary ($((SECONDS - START)) s, $OUT/summary.json$([ "$EMU" = 1 ] && echo ", emulated as $DFLASH_EMU_PROFILE"))"
  awk -F'\t' '{printf "%-5s %-10s %5.0f s  %s\n", $2, $1, $3, $5}' "$WORK/parts.tsv"
  if [ "$(wc -l <"$WORK/parts.tsv")" -lt "$N_PARTS" ]; then
    echo "check: interrupted after $(wc -l <"$WORK/parts.tsv") of $N_PARTS parts: incomplete"
    [ "$rc" -ne 0 ] || rc=1
  elif ! complete; then
    echo "check: incomplete: not run: $(awk -F'\t' '$6 == "0" {printf "%s%s", s, $1; s = ", "}' "$WORK/parts.tsv")"
    [ "$rc" -ne 0 ] || rc=1
  fi
  rm -rf "$WORK"
  exec >&- 2>&-
  wait "$TEE_PID" 2>/dev/null
  exit $rc
}
trap finish EXIT
PART_PID=
trap 'echo "check: interrupted"; [ -n "$PART_PID" ] && kill -TERM "$PART_PID" 2>/dev/null; exit 130' INT TERM

meta check "dflash_rank GPU check (issue 7): tests/gpu/check.sh"
meta mode "$DEV$([ "$EMU" = 1 ] && echo " (CUDA emulator, 1 emulated GPU as $DFLASH_EMU_PROFILE: a dry run)")"
meta date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
# (a copy of the tree without .git, as the device machine's: "unknown" unless DFLASH_COMMIT says it)
if [ -n "${DFLASH_COMMIT:-}" ]; then
  head=$DFLASH_COMMIT
elif head=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null); then
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || head="$head (with local changes)"
else
  head=unknown
fi
meta commit "${DFLASH_COMMIT:-$head}"
meta host "$(uname -srm); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2); $(nproc) cores"
# device_profile: the card the kernels chose their tiles for: the emulator's profile, or sm_ and the
# GPU's compute capability
if [ "$EMU" = 1 ]; then
  meta gpu "CUDA emulator (tests/emu): 1 emulated device on the CPU as $DFLASH_EMU_PROFILE"
  meta device_profile "$DFLASH_EMU_PROFILE"
elif [ "$DEV" = cuda ]; then
  meta gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -1)"
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  meta device_profile "${cap:+sm_$cap}${cap:-unknown (no nvidia-smi)}"
fi
meta nvcc "$(nvcc --version 2>/dev/null | tail -1 || echo none)"
echo "== dflash_rank GPU check: mode $DEV$([ "$EMU" = 1 ] && echo " (emulated as $DFLASH_EMU_PROFILE)"), build $BUILD, results $OUT, limit $LIMIT_TOTAL s"

failed_build=0
# run_part NAME WEIGHT CAP LATER: the part under `timeout`, its limit its WEIGHT's share of the time
# left for it and the parts after it (LATER: their weights' sum), at most CAP x SLOW; one
# PASS/FAIL/SKIP line, summary rewritten. parts.tsv: name status seconds limit note ran (1/0)
run_part() {
  local name=$1 weight=$2 cap=$3 later=$4 status note t0 rc left share limit ran=1
  left=$((LIMIT_TOTAL - RESERVE - (SECONDS - START)))
  share=$((left > 0 ? left * weight / (weight + later) : 0))
  limit=$share
  [ "$limit" -le $((cap * SLOW)) ] || limit=$((cap * SLOW))
  rm -f "$WORK/$name.note"
  t0=$SECONDS
  if [ "$failed_build" = 1 ] && [ "$name" != build ]; then
    status=SKIP note="not run: no build (deps or build did not pass)" ran=0 limit=0
  elif [ "$share" -lt "$MIN_PART" ]; then
    status=FAIL note="not run: no time left (a share of $share s of the $left s left; DFLASH_CHECK_LIMIT $LIMIT_TOTAL)" ran=0 limit=0
  else
    echo
    echo "== $name (limit $limit s)"
    # in the background and waited for, so that a TERM/INT reaches the trap at once
    PART=$name PART_LIMIT=$limit timeout -k 10 "$limit" bash "$SELF" --part "$name" &
    PART_PID=$!
    wait "$PART_PID"
    rc=$?
    PART_PID=
    note=$(cat "$WORK/$name.note" 2>/dev/null)
    case $rc in
      0) status=PASS ;;
      77) status=SKIP; [ -n "$note" ] || note="needs a GPU" ;;
      124|137) status=FAIL note="timed out after $limit s${note:+; $note}" ;;
      *) status=FAIL ;;
    esac
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - t0))" "$limit" "$note" "$ran" >>"$WORK/parts.tsv"
  printf '%-5s %s (%d s)%s\n' "$status" "$name" "$((SECONDS - t0))" "${note:+: $note}"
  summary
}

# run_parts: every part of PARTS in order, each with the weights of the parts after it
run_parts() {
  local i later name weight cap f
  for ((i = 0; i < ${#PARTS[@]}; i++)); do
    later=0
    for f in "${PARTS[@]:i+1}"; do f=${f#*:}; later=$((later + ${f%%:*})); done
    IFS=: read -r name weight cap <<<"${PARTS[i]}"
    run_part "$name" "$weight" "${cap:-$weight}" "$later"
    [ "$name" != build ] || grep -q "^build	PASS" "$WORK/parts.tsv" || failed_build=1
  done
}

if [ "${DFLASH_CHECK_SELFTEST:-0}" = 1 ]; then # the fake parts only: no deps, no build; the clock
  START=$SECONDS # starts with them, so that their shares do not depend on this machine's load
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' deps PASS 0 0 "self-test: no deps" 1 >>"$WORK/parts.tsv"
  run_parts
  ! grep -q "	FAIL	" "$WORK/parts.tsv"
  exit
fi

# deps: in this process, since the environment must reach every part
t0=$SECONDS
dep_note=""
dep_status=PASS
if [ -f "$ROOT/.gpu-deps/debs/PACKAGES" ]; then
  if ! "$ROOT/scripts/fetch-gpu-deps.sh" --unpack-only; then dep_status=FAIL dep_note="unpacking .gpu-deps/debs failed"; fi
elif [ "$EMU" = 1 ]; then
  dep_note="emulator dry run: this machine's own libraries (no .gpu-deps/debs)"
elif [ "$DEV" = cpu ] && command -v apt-get >/dev/null; then
  "$ROOT/scripts/fetch-gpu-deps.sh" || { dep_status=FAIL dep_note="scripts/fetch-gpu-deps.sh failed"; }
else
  dep_status=FAIL dep_note=".gpu-deps/debs missing: run scripts/fetch-gpu-deps.sh on a machine with a network and carry .gpu-deps/debs"
fi
if [ "$dep_status" = PASS ] && [ -f "$ROOT/.gpu-deps/debs/PACKAGES" -o "$EMU" != 1 ]; then
  # shellcheck disable=SC1091
  if source "$ROOT/scripts/gpu-env.sh" >"$WORK/env.log" 2>&1; then
    cat "$WORK/env.log"
    dep_note=$(tail -1 "$WORK/env.log")
    $LIB put "$WORK/deps.num" packages "$(wc -l <"$ROOT/.gpu-deps/debs/PACKAGES")"
    $LIB put "$WORK/deps.num" mpirun "$(command -v mpirun)"
  else
    cat "$WORK/env.log"; dep_status=FAIL dep_note="scripts/gpu-env.sh failed"
  fi
fi
export DFLASH_GPU_CMAKE_ARGS=${DFLASH_GPU_CMAKE_ARGS:-}
printf '%s\t%s\t%s\t%s\t%s\t%s\n' deps "$dep_status" "$((SECONDS - t0))" 0 "$dep_note" 1 >>"$WORK/parts.tsv"
printf '%-5s %s (%d s)%s\n' "$dep_status" deps "$((SECONDS - t0))" "${dep_note:+: $dep_note}"
summary
[ "$dep_status" = PASS ] || failed_build=1

run_parts
! grep -q "	FAIL	" "$WORK/parts.tsv"
