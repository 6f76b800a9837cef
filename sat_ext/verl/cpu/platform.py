"""verl's platform interface for a CPU-only machine: the device is ``"cpu"``, collectives use gloo.

verl 0.9.1 resolves its platform once per process (``verl.plugin.platform.get_platform``) from the
``VERL_PLATFORM`` variable or by probing; it has no CPU platform of its own. :class:`PlatformCPU` is
registered under the name ``cpu`` by :func:`sat_ext.verl.cpu.activate` only; probing never picks it.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform import PlatformBase


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


def _zero(*_args: Any, **_kwargs: Any) -> int:
    return 0


def _device_module() -> types.ModuleType:
    """``torch.cpu`` plus no-op versions of the ``torch.cuda`` calls verl makes (caches, memory stats, rng)."""
    module = types.ModuleType("sat_ext_cpu_device")
    for name in ("Event", "Stream", "current_stream", "stream", "synchronize", "is_available", "device_count"):
        setattr(module, name, getattr(torch.cpu, name))
    module.current_device = lambda: "cpu"  # an int would mean cuda:<int> to torch
    module.set_device = _noop
    for name in (
        "empty_cache",
        "ipc_collect",
        "reset_peak_memory_stats",
        "set_per_process_memory_fraction",
        "manual_seed",
        "manual_seed_all",
    ):
        setattr(module, name, _noop)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, _zero)
    module.mem_get_info = lambda *_a, **_k: (0, 0)
    module.get_rng_state = lambda *_a, **_k: torch.get_rng_state()
    module.set_rng_state = lambda state, *_a, **_k: torch.set_rng_state(state)
    module.get_device_name = lambda *_a, **_k: "cpu"
    module.is_initialized = lambda: True
    return module


class PlatformCPU(PlatformBase):
    """The host CPU as verl's accelerator: torch's CPU device, gloo collectives, no IPC, no profiler."""

    _module = _device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return self._module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: only VERL_PLATFORM=cpu selects it

    def current_device(self) -> str:  # type: ignore[override]  # verl passes it to torch as a device
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # logical GPU slots declared on the CPU node (ray_init.num_gpus) stand for devices

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {"VLLM_TARGET_DEVICE": "cpu"}

    def cudart(self) -> Any:
        return None
