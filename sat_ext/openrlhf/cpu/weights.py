"""Weights from the DeepSpeed actor to vLLM's CPU engines through one file (replaces OpenRLHF's NCCL broadcast).

``ActorPPOTrainer.broadcast_to_vllm`` sends every parameter over a PyNccl group built by
``_init_vllm_sync_group``; on a CPU there is no NCCL, and vLLM's RPC cannot carry the tensors either
(``cannot pickle memoryview``). Here every rank takes part in gathering each parameter (as OpenRLHF does, for
ZeRO-3), rank 0 writes the full state dict to ``sat_ext_weights_<id>.pt`` under ``/dev/shm``, each engine
reloads it (:meth:`sat_ext.openrlhf.cpu.vllm_engine` ``sat_ext_load_weights``), and rank 0 deletes it.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

FILE_PREFIX = "sat_ext_weights_"  # sat_ext.smoke.runner removes leftovers with this prefix


def _folder() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def write_weights(state: dict) -> Path:
    """``state`` saved to a new file (written under a temporary name, then renamed); returns its path."""
    import torch

    path = _folder() / f"{FILE_PREFIX}{uuid.uuid4().hex}.pt"
    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    partial.rename(path)
    return path


def broadcast_to_vllm(self) -> None:
    """``ActorPPOTrainer.broadcast_to_vllm`` on the CPU: the actor's full weights to every vLLM engine."""
    import deepspeed
    import ray
    import torch

    args = self.strategy.args
    if args.ds.tensor_parallel_size > 1:
        raise NotImplementedError("sat_ext's OpenRLHF CPU setup syncs weights without DeepSpeed tensor parallelism")
    rank0 = torch.distributed.get_rank() == 0
    state = {}
    for name, param in self.actor.model.module.named_parameters():
        with deepspeed.zero.GatheredParameters([param], enabled=args.ds.zero_stage == 3):
            if rank0:
                state[name] = param.data.detach().to("cpu", copy=True)
    if rank0:
        path = write_weights(state)
        try:
            ray.get([engine.sat_ext_load_weights.remote(str(path)) for engine in self.vllm_engines])
        finally:
            path.unlink(missing_ok=True)
        if args.vllm.enable_prefix_caching:
            ray.get([engine.reset_prefix_cache.remote() for engine in self.vllm_engines])
    torch.distributed.barrier()
