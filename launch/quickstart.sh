#!/usr/bin/env bash
# quickstart.sh: from a fresh machine to a first dflash_rank job on the built-in tiny example.
#
#   1. install the dependencies (Debian/Ubuntu packages; nothing when they are there)
#   2. build (CUDA backend too when nvcc is found)
#   3. convert examples/tiny/train.jsonl to an HDF5 training set and show what is in it
#   4. run the job with 3 ranks (2 teachers, 1 student) under mpirun
#
# Runs from any directory; writes under runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
echo "== build"
cmake -S . -B build >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"

echo "== data: examples/tiny/train.jsonl -> runs/quickstart/train.h5"
mkdir -p runs/quickstart
./build/dflash_tool convert-jsonl examples/tiny/train.jsonl runs/quickstart/train.h5 --vocab-size 2048 --tokenizer toy-2048
./build/dflash_tool inspect runs/quickstart/train.h5

echo "== job: mpirun -np 3 dflash_rank --config examples/tiny/check.json"
# Open MPI refuses to run as root and to put 3 ranks on fewer cores unless told; both are fine here.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpirun -np 3 --oversubscribe ./build/dflash_rank --config examples/tiny/check.json
