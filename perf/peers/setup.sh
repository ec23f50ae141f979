#!/usr/bin/env bash
# Installs the PyTorch peers' Python environment into build/peers-venv (the
# only step of the peers comparison that downloads anything: PyPI's torch,
# numpy, safetensors and matplotlib). Run once:
#   perf/peers/setup.sh [venv-dir]
# PyPI's Linux torch wheel brings its CUDA libraries along (a few GB); the
# peers run it on the CPU only.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${1:-build/peers-venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
nice -n 19 "$venv/bin/pip" install --quiet torch numpy safetensors matplotlib
"$venv/bin/python" -c 'import torch, numpy, safetensors, matplotlib; print("torch", torch.__version__, "numpy", numpy.__version__)'
