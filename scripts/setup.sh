#!/usr/bin/env bash
# Create .venv and install sat-ext with everything the tests and the demo need, CPU-only.
# CPU torch first (a bare `pip install torch` pulls several GB of CUDA wheels), then verl 0.9.1 on top,
# then OpenRLHF 0.11.2 without its CUDA-only dependencies (flash-attn, deepspeed, vllm).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==${SAT_EXT_TORCH_VERSION:-2.13.0}"
python -m pip install --quiet -e ".[verl,verl-async,test,demo]"
python -m pip install --quiet --no-deps "openrlhf==0.11.2"
python -c "import torch, verl, openrlhf, sat_ext; print('setup ok: torch', torch.__version__, '| verl', verl.__version__)"
