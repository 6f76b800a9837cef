"""OpenRLHF's vLLM Ray actor on the CPU: vLLM's workers get :class:`~.vllm_worker.CPUWorkerWrap`, and the actor
a method that has them reload the weights from a file (:mod:`.weights`)."""

from __future__ import annotations

import functools

WORKER_EXTENSION = "sat_ext.openrlhf.cpu.vllm_worker.CPUWorkerWrap"


@functools.cache
def cpu_rollout_actor(rollout_actor):
    """``ray.remote`` subclass of OpenRLHF's ``RolloutRayActor`` (the Ray actor class ``rollout_actor``)."""
    import ray

    class CPURolloutRayActor(rollout_actor.__ray_actor_class__):
        async def __init__(self, *args, **kwargs):
            kwargs["worker_extension_cls"] = WORKER_EXTENSION
            await super().__init__(*args, **kwargs)

        async def sat_ext_load_weights(self, path: str):
            """Every worker of this engine reloads the weights saved at ``path``."""
            return await self.llm.collective_rpc("sat_ext_load_weights", args=(path,))

    return ray.remote(CPURolloutRayActor)  # OpenRLHF's own decoration of RolloutRayActor
