"""The actor worker that keeps real copies of past weights, for the paper's denominator (Table 9, Eq. 2).

verl's ``DetachActorWorker`` saves the actor's weights to CPU (``save_model_to_cpu``) and restores them for
decoupled PPO. Two things in verl 0.9.1 let that silently become the live weights, so that r == 1 and SAT
does nothing while every metric looks healthy:

- FSDP2's save (``fsdp2_sharded_save_to_cpu``) takes ``.detach().cpu()`` of each local shard, which is the same
  storage when the shard already lives on the CPU (parameter offload, or a CPU run): every kept version is then
  the live one. :class:`KeptWeightsWorker` copies any saved tensor that shares storage with a live parameter.
- restoring a key that was never saved is a no-op; here it raises.

With ``spill_dir`` a saved version is written to local disk (one file per rank) and read back, memory-mapped,
at a restore: host memory for the kept weights drops to the structure around them, for one write per save
and one read per restore (examples/verl_aime_qwen3_30b/README.md, "Memory", sizes it).

:meth:`KeptWeightsWorker.weights_fingerprint` (sum and sum of squares of every local shard, in float64) lets
the trainer check that a restore really changed the weights (``lag/kept_weights_restored``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


class _Slot:
    """Where a spilled tensor was in the saved structure: its index in the file's tensor list."""

    def __init__(self, index: int):
        self.index = index


def split_tensors(saved, tensors: list[torch.Tensor]):
    """``saved`` with every tensor replaced by a :class:`_Slot` into ``tensors`` (appended to)."""
    if isinstance(saved, torch.Tensor):
        tensors.append(saved)
        return _Slot(len(tensors) - 1)
    if isinstance(saved, dict):
        return {key: split_tensors(value, tensors) for key, value in saved.items()}
    if isinstance(saved, (list, tuple)):
        return type(saved)(split_tensors(value, tensors) for value in saved)
    return saved


def join_tensors(skeleton, tensors: list[torch.Tensor]):
    """The inverse of :func:`split_tensors`."""
    if isinstance(skeleton, _Slot):
        return tensors[skeleton.index]
    if isinstance(skeleton, dict):
        return {key: join_tensors(value, tensors) for key, value in skeleton.items()}
    if isinstance(skeleton, (list, tuple)):
        return type(skeleton)(join_tensors(value, tensors) for value in skeleton)
    return skeleton


class KeptWeightsWorker(DetachActorWorker):
    """``DetachActorWorker`` whose saved weights never alias the live ones, whose restore of a missing key raises,
    and which can keep a saved version in a file on local disk instead of host memory (``spill_dir``)."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_model_to_cpu(self, n, spill_dir: str | None = None):
        """Save the current weights under ``n``; with ``spill_dir``, this rank's tensors go to
        ``<spill_dir>/<n>.rank<r>.pt`` and only the structure around them stays in memory."""
        DetachActorWorker.save_model_to_cpu(self, n)
        live = {_storage(t) for t in _local_tensors(self.actor.engine.module)} - {0}
        saved = copy_aliased(self.cpu_saved_models[n], live)
        if spill_dir:
            tensors: list[torch.Tensor] = []
            saved = split_tensors(saved, tensors)
            rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            path = Path(spill_dir) / f"{n}.rank{rank}.pt"
            torch.save([t.contiguous() for t in tensors], path)
            self._spilled_paths()[n] = path
        self.cpu_saved_models[n] = saved

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def restore_model_from_cpu(self, n):
        saved = getattr(self, "cpu_saved_models", {})
        if n not in saved:
            raise KeyError(f"no weights saved under {n!r} on this actor worker (saved: {sorted(saved, key=str)})")
        path = self._spilled_paths().get(n)
        if path is None:
            DetachActorWorker.restore_model_from_cpu(self, n)
            return
        skeleton = saved[n]
        saved[n] = join_tensors(skeleton, torch.load(path, weights_only=True, mmap=True))
        try:
            DetachActorWorker.restore_model_from_cpu(self, n)
        finally:
            saved[n] = skeleton

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def clear_cpu_model(self, n):
        DetachActorWorker.clear_cpu_model(self, n)
        path = self._spilled_paths().pop(n, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def _spilled_paths(self) -> dict:
        if not hasattr(self, "_spilled"):
            self._spilled: dict = {}
        return self._spilled

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def weights_fingerprint(self) -> tuple[float, float]:
        """(sum, sum of squares) of this rank's local parameter data, in float64."""
        total, squares = 0.0, 0.0
        for tensor in _local_tensors(self.actor.engine.module):
            t = tensor.to(torch.float64)
            total += float(t.sum())
            squares += float(t.square().sum())
        return total, squares
