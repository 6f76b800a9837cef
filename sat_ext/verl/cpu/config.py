"""The verl settings the CPU setup needs, as Hydra overrides (all public verl keys)."""

from __future__ import annotations

from . import ENV_FLAG

#: verl checkpoint-engine backend of :mod:`sat_ext.verl.cpu.checkpoint_engine` (named here so that building the
#: overrides imports neither verl's checkpoint engines nor vLLM)
BACKEND = "sat_ext_shm"
CHECKPOINT_MODULE = "sat_ext.verl.cpu.checkpoint_engine"
WORKER_EXTENSION = "sat_ext.verl.cpu.vllm_worker.CPUWorkerExtension"

#: logical GPU slots Ray declares on the CPU node: verl counts "GPU" resources before it places workers
RAY_GPU_SLOTS = 2


def cpu_overrides(separate_rollout: bool) -> list[str]:
    """Overrides that run verl's trainer, FSDP actor and vLLM rollout on the CPU (``separate_rollout``: the
    rollout has its own pool and receives weights through the checkpoint engine, as in the lag modes)."""
    out = [
        "trainer.device=cpu",
        f"+ray_kwargs.ray_init.num_gpus={RAY_GPU_SLOTS}",
        # TransferQueue's controller and each storage unit hold one Ray CPU; 8 units would not all be placed
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "actor_rollout_ref.model.use_remove_padding=false",  # flash-attn's varlen path
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.rollout.enforce_eager=true",
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",  # vLLM's CPU build has no sleep mode
        "actor_rollout_ref.rollout.free_cache_engine=false",
        f"+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls={WORKER_EXTENSION}",
        f"actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module={CHECKPOINT_MODULE}",
    ]
    if separate_rollout:
        out.append(f"actor_rollout_ref.rollout.checkpoint_engine.backend={BACKEND}")
    return out


def cpu_environment() -> dict[str, str]:
    """Environment variables for the launching process (its Ray workers and vLLM processes inherit them)."""
    return {ENV_FLAG: "1"}
