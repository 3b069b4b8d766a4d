#!/usr/bin/env bash
# venv.sh WORKDIR: the peer's Python environment, WORKDIR/peers-venv, pinned: speculators 0.9.0 (vLLM's
# training library; PyPI) with the newest torch and transformers its pins allow (torch <= 2.14.1,
# transformers <= 5.19.0), safetensors and h5py (the peer's inputs), and the z-lab dflash package
# (--no-deps; tools/spec_decode.py decodes both drafters with it). Skipped when the environment imports.
#
# torch comes from PyPI (the PyTorch index is not reachable from this machine): the CUDA build, with
# its CUDA libraries, which also runs on a CPU; speculators pulls torchvision and torchaudio, which
# nothing here imports. About 3 minutes and 6.0 GB on a fresh machine (measured 2026-12-07).
# PIP_ARGS: extra pip install arguments (e.g. --no-cache-dir).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
mkdir -p "$1"
W=$(cd "$1" && pwd)
V=$W/peers-venv
PIP_ARGS=${PIP_ARGS:-}
ok() { "$V/bin/python" -c "import torch, transformers, safetensors, h5py, datasets, speculators, hs_connectors, dflash.model
import importlib.metadata as m; assert m.version('speculators') == '0.9.0', m.version('speculators')" 2>/dev/null; }
ok && exit 0
t0=$SECONDS
echo "== $(date +%H:%M:%S) peers venv: speculators 0.9.0, torch 2.14.1, transformers 5.19.0 -> $V (about 3 minutes, 6 GB)"
command -v python3 >/dev/null && python3 -m venv --help >/dev/null 2>&1 || apt-get install -y -q python3-venv >/dev/null
[ -x "$V/bin/python" ] || python3 -m venv "$V"
# shellcheck disable=SC2086
"$V/bin/pip" install -q --disable-pip-version-check $PIP_ARGS speculators==0.9.0 torch==2.14.1 transformers==5.19.0 \
  safetensors h5py
# shellcheck disable=SC2086
"$V/bin/pip" install -q --disable-pip-version-check $PIP_ARGS --no-deps dflash==0.1.0
ok || { echo "error: venv.sh: $V does not import torch/transformers/speculators 0.9.0/dflash after installing them" >&2; exit 1; }
echo "== $(date +%H:%M:%S) peers venv: ready in $(( SECONDS - t0 )) s, $(du -sh "$V" | cut -f1)"
