#!/usr/bin/env bash
# install-deps.sh: install what dflash_rank needs to build and test, from Debian/Ubuntu packages.
# Idempotent: when everything is there it prints one line and changes nothing.
# The CUDA toolkit (nvcc, cuBLAS, NCCL) is optional and not installed here: the CPU backend builds
# without it, and CMake turns the CUDA backend on when nvcc is found.
set -euo pipefail

packages=(
  build-essential cmake pkg-config     # compiler, build
  libopenmpi-dev openmpi-bin           # MPI (ranks, host transport)
  libhdf5-dev                          # training sets and feature files
  libcjson-dev                         # configs, HF config.json, safetensors headers
  libopenblas-openmp-dev               # CPU GEMM (the OpenMP build: one thread pool with our loops)
  python3 python3-numpy python3-h5py   # test drivers read files back with h5py (no PyPI needed)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all dependencies present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
