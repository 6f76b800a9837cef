"""The actor worker that keeps real copies of past weights, for the paper's denominator (Table 9, Eq. 2).

verl's ``DetachActorWorker`` saves the actor's weights to CPU (``save_model_to_cpu``) and restores them for
decoupled PPO. Two things in verl 0.9.1 let that silently become the live weights, so that r == 1 and SAT
does nothing while every metric looks healthy:

- FSDP2's save (``fsdp2_sharded_save_to_cpu``) takes ``.detach().cpu()`` of each local shard, which is the same
  storage when the shard already lives on the CPU (parameter offload, or a CPU run): every kept version is then
  the live one. :class:`KeptWeightsWorker` copies any saved tensor that shares storage with a live parameter.
- restoring a key that was never saved is a no-op; here it raises.

:meth:`KeptWeightsWorker.weights_fingerprint` (sum and sum of squares of every local shard, in float64) lets
the trainer check that a restore really changed the weights (``lag/kept_weights_restored``).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.single_controller.base.decorator import Dispatch, register


def _local_tensors(module) -> Iterator[torch.Tensor]:
    """Every parameter's local data (an FSDP2 DTensor's shard), for a module or a list of Megatron chunks."""
    modules = module if isinstance(module, (list, tuple)) else [module]
    for chunk in modules:
        for param in chunk.parameters():
            yield getattr(param, "_local_tensor", param).detach()


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def copy_aliased(saved, live: set[int]):
    """``saved`` (nested dicts / lists / tuples of tensors) with every tensor whose storage is in ``live`` cloned."""
    if isinstance(saved, torch.Tensor):
        return saved.clone() if _storage(saved) in live else saved
    if isinstance(saved, dict):
        return {key: copy_aliased(value, live) for key, value in saved.items()}
    if isinstance(saved, (list, tuple)):
        return type(saved)(copy_aliased(value, live) for value in saved)
    return saved


class KeptWeightsWorker(DetachActorWorker):
    """``DetachActorWorker`` whose saved weights never alias the live ones and whose restore of a missing key raises."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_model_to_cpu(self, n):
        DetachActorWorker.save_model_to_cpu(self, n)
        live = {_storage(t) for t in _local_tensors(self.actor.engine.module)} - {0}
        self.cpu_saved_models[n] = copy_aliased(self.cpu_saved_models[n], live)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def restore_model_from_cpu(self, n):
        saved = getattr(self, "cpu_saved_models", {})
        if n not in saved:
            raise KeyError(f"no weights saved under {n!r} on this actor worker (saved: {sorted(saved, key=str)})")
        DetachActorWorker.restore_model_from_cpu(self, n)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def weights_fingerprint(self) -> tuple[float, float]:
        """(sum, sum of squares) of this rank's local parameter data, in float64."""
        total, squares = 0.0, 0.0
        for tensor in _local_tensors(self.actor.engine.module):
            t = tensor.to(torch.float64)
            total += float(t.sum())
            squares += float(t.square().sum())
        return total, squares
