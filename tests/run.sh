#!/usr/bin/env bash
# tests/run.sh: install dependencies, build, and run every test.
#
#   1. build/        the normal build (CUDA when nvcc is found), warnings as errors, all tests
#   2. build-asan/   CPU only (-DDFLASH_CUDA=OFF, nvcc also taken off PATH: what a machine without the
#                    CUDA toolkit builds), AddressSanitizer + UBSan, all tests again
#   3. build-emu/    the CUDA kernels on the CPU emulator (-DDFLASH_CUDA_EMU=ON, tests/emu/README.md),
#                    warnings as errors, nvcc off PATH: only the tests that need a CUDA device
#                    (unit.test_*_cuda, gpu.test_*); skipped, in one line, without the CUDA headers
#
# GPU tests are skipped (ctest "Not Run", exit 77) in 1 and 2 when no GPU is present; 3 runs them on
# the emulator; tests/gpu/ has the check on a real GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

./scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

echo "== build (warnings as errors)"
cmake -S . -B build -DDFLASH_WERROR=ON >build.cmake.log 2>&1 || { cat build.cmake.log; exit 1; }
grep -E "CUDA backend" build.cmake.log || true
cmake --build build -j "$jobs"
echo "== tests (build/)"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900

echo "== build with AddressSanitizer + UBSan, CPU only, nvcc not on PATH"
nocuda_path=$(echo "$PATH" | tr ':' '\n' | grep -v -i cuda | paste -sd: -)
PATH="$nocuda_path" cmake -S . -B build-asan -DDFLASH_CUDA=OFF -DDFLASH_WERROR=ON -DDFLASH_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug >build-asan.cmake.log 2>&1 || { cat build-asan.cmake.log; exit 1; }
grep -E "CUDA backend" build-asan.cmake.log || true
PATH="$nocuda_path" cmake --build build-asan -j "$jobs"
# Open MPI's own start-up allocations are not ours: leak reports from its libraries are suppressed.
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
echo "== tests (build-asan/)"
PATH="$nocuda_path" ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900

echo "== build for the CUDA emulator (the CUDA kernels on the CPU), nvcc not on PATH"
mkdir -p build-emu # its configure log is build-emu/cmake.log
if PATH="$nocuda_path" cmake -S . -B build-emu -DDFLASH_CUDA=OFF -DDFLASH_CUDA_EMU=ON -DDFLASH_WERROR=ON \
  >build-emu/cmake.log 2>&1; then
  grep -E "CUDA backend" build-emu/cmake.log || true
  PATH="$nocuda_path" cmake --build build-emu -j "$jobs"
  echo "== tests needing a CUDA device, on the emulator (build-emu/)"
  PATH="$nocuda_path" ctest --test-dir build-emu --output-on-failure -j "$jobs" --timeout 1800 -R '^(unit\.test_.*_cuda|gpu\.test_.*)$'
elif tr -s ' \n' '  ' <build-emu/cmake.log | grep -q "needs the CUDA toolkit's headers"; then
  echo "== skipped: the CUDA emulator build needs the CUDA toolkit's headers (cuda_runtime.h, cublas_v2.h, nccl.h; set CUDA_HOME)"
else
  cat build-emu/cmake.log
  exit 1
fi
