"""Every OpenRLHF / DeepSpeed / vLLM / torch internal the CPU setup changes or relies on, in one place, checked
against the pinned versions.

:data:`PATCHES` are replaced in their module when ``trigger`` (by default the module itself) is first
imported; each entry names the symbol, what fails on a CPU without it, and the replacement. :data:`RELIED_ON`
are the private attributes the replacements and the subclasses call. :func:`check_versions` runs when the
setup activates; each patch checks that its symbol exists before it replaces it, and :func:`check_symbols`
checks all of them at once (the tests): an OpenRLHF bump must fail here, naming the symbol, not halfway
through a run. The mechanism (:class:`~sat_ext.pinned.Patch`, :func:`~sat_ext.pinned.apply_patch`, the member
check) is :mod:`sat_ext.pinned`'s, shared with the verl CPU setup; this module keeps only its entries.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from types import ModuleType
from typing import Any, Callable

from sat_ext.pinned import OPENRLHF_CPU_PINS, Patch, Private, apply_patch, check_pinned, check_private, resolve

_TRAINER_SIDE = "openrlhf.utils.distributed_util"  # imported by every process that builds DeepSpeed models
WHAT, WHERE = "sat_ext's OpenRLHF CPU setup", "sat_ext/openrlhf/cpu/upstream.py"


def _named(name: str, fn: Callable) -> Callable:
    fn.__name__ = fn.__qualname__ = name  # one function object per torch.cuda name (torch._dynamo checks)
    return fn


def _current_device(_original: Callable) -> Callable:
    return _named("current_device", lambda: "cpu")


def _set_device(_original: Callable) -> Callable:
    return _named("set_device", lambda device: None)


def _synchronize(_original: Callable) -> Callable:
    return _named("synchronize", lambda device=None: None)


def _mesh_on_cpu(original: Callable) -> Callable:
    @functools.wraps(original)
    def init_device_mesh(device_type: str, *args, **kwargs):
        return original("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    return init_device_mesh


def _torch_adam(original: Callable) -> Callable:
    @functools.wraps(original)
    def get_ds_train_config(self, *args, **kwargs):
        config = original(self, *args, **kwargs)
        optimizer = config.get("optimizer")
        if optimizer is not None and optimizer.get("type") == "AdamW":
            optimizer["params"]["torch_adam"] = True
        return config

    return get_ds_train_config


@contextlib.contextmanager
def _cuda_index(index: int):
    import torch

    current = torch.cuda.current_device
    torch.cuda.current_device = lambda: index
    try:
        yield
    finally:
        torch.cuda.current_device = current


def _buffer_on_cpu(original: Callable) -> Callable:
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        import torch

        with _cuda_index(0):  # the original spells its device f"cuda:{current_device()}"
            original(self, *args, **kwargs)
        self.target_device = torch.device("cpu")

    return __init__


def _no_sync_group(original: Callable) -> Callable:
    @functools.wraps(original)
    def _init_vllm_sync_group(self, backend: str) -> None:
        return None  # weights reach vLLM through a file (sat_ext.openrlhf.cpu.weights)

    return _init_vllm_sync_group


def _file_broadcast(_original: Callable) -> Callable:
    from .weights import broadcast_to_vllm

    return broadcast_to_vllm


def _cpu_rollout_actor(original: Any) -> Any:
    from .vllm_engine import cpu_rollout_actor

    return cpu_rollout_actor(original)


def _sdpa_actor(original: Callable) -> Callable:
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if "flash_attention" in str(kwargs.get("attn_implementation", "flash_attention_2")):
            kwargs["attn_implementation"] = "sdpa"
        return original(self, *args, **kwargs)

    return __init__


PATCHES = (
    Patch(
        "torch.cuda",
        "current_device",
        'OpenRLHF moves tensors to torch.cuda.current_device() (x18; CPU torch raises "not compiled with CUDA"): '
        '"cpu" keeps them on the host',
        _current_device,
        _TRAINER_SIDE,
    ),
    Patch(
        "torch.cuda",
        "set_device",
        "DeepspeedStrategy.setup_distributed calls it with LOCAL_RANK (AttributeError on CPU torch): a no-op",
        _set_device,
        _TRAINER_SIDE,
    ),
    Patch(
        "torch.cuda",
        "synchronize",
        "torch_dist_barrier_and_cuda_sync after every barrier (x7; raises on CPU torch): a no-op",
        _synchronize,
        _TRAINER_SIDE,
    ),
    Patch(
        "openrlhf.utils.deepspeed.deepspeed",
        "init_device_mesh",
        'DeepspeedStrategy.setup_distributed builds its mesh on "cuda": built on "cpu"',
        _mesh_on_cpu,
    ),
    Patch(
        "openrlhf.utils.deepspeed.deepspeed",
        "DeepspeedStrategy.get_ds_train_config",
        "DeepSpeed builds FusedAdam (a CUDA op) for the AdamW config: torch_adam selects torch's AdamW",
        _torch_adam,
    ),
    Patch(
        "openrlhf.trainer.ppo_utils.replay_buffer",
        "NaiveReplayBuffer.__init__",
        'its target device is f"cuda:{current_device()}" ("cuda:cpu" is invalid): the host',
        _buffer_on_cpu,
    ),
    Patch(
        "openrlhf.trainer.ray.ppo_actor",
        "ActorPPOTrainer._init_vllm_sync_group",
        "rank 0 builds a PyNccl group with the vLLM engines (NCCL): no group, the weights go through a file",
        _no_sync_group,
    ),
    Patch(
        "openrlhf.trainer.ray.ppo_actor",
        "ActorPPOTrainer.broadcast_to_vllm",
        "broadcasts each tensor over that NCCL group (tensors cannot pass vLLM's RPC either: memoryview is not "
        "picklable): rank 0 writes the state dict to one file and each engine reloads it",
        _file_broadcast,
    ),
    Patch(
        "openrlhf.models.actor",
        "Actor.__init__",
        "flash-attn has no CPU build (transformers refuses flash_attention_2), and with --ds.packing_samples "
        "OpenRLHF's CLI turns any other --ds.attn_implementation back into flash_attention_2: the policy and "
        "reference models get sdpa, which masks packed sequences from their restarting position ids (OpenRLHF "
        "runs them without a KV cache)",
        _sdpa_actor,
    ),
    Patch(
        "openrlhf.trainer.ray.vllm_engine",
        "RolloutRayActor",
        "its engines load OpenRLHF's WorkerWrap, which receives weights over NCCL: a subclass with vLLM's CPU "
        "reload path (sat_ext.openrlhf.cpu.vllm_engine)",
        _cpu_rollout_actor,
    ),
)

#: private attributes the replacements and subclasses use
RELIED_ON = (
    Private(
        "openrlhf.trainer.ray.ppo_actor",
        "ActorPPOTrainer.__init__",
        "sets actor, strategy, vllm_engines, used by the file broadcast",
    ),
    Private(
        "openrlhf.trainer.ray.vllm_engine",
        "RolloutRayActor.__init__",
        "takes vLLM's engine kwargs, worker_extension_cls among them; sets .llm (vLLM's AsyncLLMEngine)",
    ),
    Private("openrlhf.trainer.ray.vllm_worker_wrap", "WorkerWrap", "the worker extension CPUWorkerWrap subclasses"),
    Private(
        "vllm.v1.worker.gpu_model_runner",
        "GPUModelRunner.reload_weights",
        "the vLLM CPU worker's reload path (the CPU runner subclasses it)",
    ),
)


def check_versions() -> None:
    """Raise naming the package whose installed version is not the pinned one."""
    check_pinned(OPENRLHF_CPU_PINS, WHAT, WHERE)


def apply(patch: Patch, module: ModuleType) -> None:
    """Replace ``patch``'s symbol in ``module`` (once)."""
    apply_patch(patch, module, WHAT, OPENRLHF_CPU_PINS)


def check_symbols() -> list[str]:
    """Import every module of :data:`PATCHES` and :data:`RELIED_ON` and check each symbol; returns them."""
    for patch in PATCHES:
        resolve(importlib.import_module(patch.module), patch.attribute, WHAT, OPENRLHF_CPU_PINS)
    return [f"{p.module}.{p.attribute}" for p in PATCHES] + check_private(OPENRLHF_CPU_PINS, RELIED_ON, WHAT, WHERE)
