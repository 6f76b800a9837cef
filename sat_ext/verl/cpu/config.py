"""The verl settings the CPU setup needs (all public verl keys), each with why, and as Hydra overrides."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import ENV_FLAG

#: verl checkpoint-engine backend of :mod:`sat_ext.verl.cpu.checkpoint_engine` (named here so that building the
#: overrides imports neither verl's checkpoint engines nor vLLM)
BACKEND = "sat_ext_shm"
CHECKPOINT_MODULE = "sat_ext.verl.cpu.checkpoint_engine"
WORKER_EXTENSION = "sat_ext.verl.cpu.vllm_worker.CPUWorkerExtension"

#: logical GPU slots Ray declares on the CPU node: verl counts "GPU" resources before it places workers
RAY_GPU_SLOTS = 2


class Setting(NamedTuple):
    """A verl key the CPU setup sets, the value, whether verl's schema lacks it (a ``+`` override), and why."""

    key: str
    value: Any
    new: bool
    why: str


def cpu_settings(separate_rollout: bool) -> list[Setting]:
    """What runs verl's trainer, FSDP actor and vLLM rollout on the CPU (``separate_rollout``: the rollout has its
    own pool and receives weights through the checkpoint engine, as in the lag modes)."""
    out = [
        Setting("trainer.device", "cpu", False, "no GPU: verl's CPU platform (sat_ext.verl.cpu)"),
        Setting("ray_kwargs.ray_init.num_gpus", RAY_GPU_SLOTS, True, "logical GPU slots: verl places workers on them"),
        Setting(
            "transfer_queue.backend.SimpleStorage.num_data_storage_units",
            1,
            False,
            "TransferQueue's controller and each storage unit hold one Ray CPU; 8 units would not all be placed",
        ),
        Setting("actor_rollout_ref.model.use_remove_padding", False, False, "flash-attn's varlen path (no CPU build)"),
        Setting(
            "actor_rollout_ref.model.override_config.attn_implementation", "sdpa", True, "flash-attn: no CPU build"
        ),
        Setting(
            "actor_rollout_ref.actor.fsdp_config.use_torch_compile", False, False, "no inductor compile on the CPU"
        ),
        Setting("actor_rollout_ref.rollout.enforce_eager", True, False, "no CUDA graphs on the CPU"),
        Setting("actor_rollout_ref.rollout.enable_sleep_mode", False, True, "vLLM's CPU build has no sleep mode"),
        Setting("actor_rollout_ref.rollout.free_cache_engine", False, False, "vLLM's CPU build has no sleep mode"),
        Setting(
            "actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls",
            WORKER_EXTENSION,
            True,
            "weight loading that works on vLLM's CPU kernels (sat_ext.verl.cpu.vllm_worker)",
        ),
        Setting(
            "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module",
            CHECKPOINT_MODULE,
            False,
            "registers the shared-memory weight transport",
        ),
    ]
    if separate_rollout:
        out.append(
            Setting(
                "actor_rollout_ref.rollout.checkpoint_engine.backend",
                BACKEND,
                False,
                "weights to the rollout through a shared-memory file (NCCL needs GPUs)",
            )
        )
    return out


def cpu_overrides(separate_rollout: bool) -> list[str]:
    """:func:`cpu_settings` as Hydra overrides."""
    return [
        f"{'+' if s.new else ''}{s.key}={str(s.value).lower() if isinstance(s.value, bool) else s.value}"
        for s in cpu_settings(separate_rollout)
    ]


def cpu_environment() -> dict[str, str]:
    """Environment variables for the launching process (its Ray workers and vLLM processes inherit them)."""
    return {ENV_FLAG: "1"}
