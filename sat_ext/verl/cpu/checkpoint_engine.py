"""A verl checkpoint-engine backend for one machine without GPUs: weights pass through a shared-memory file.

verl's separate-async trainer broadcasts weights from the actor workers to the rollout replicas with a
checkpoint engine; its backends (NCCL, NIXL, Mooncake, ...) need GPUs. ``sat_ext_shm`` has actor rank 0 write
the full weights (``torch.save``) to a file under ``/dev/shm`` named for this broadcast, and every rollout
worker read it. Selected with ``actor_rollout_ref.rollout.checkpoint_engine.backend=sat_ext_shm`` and
``custom_backend_module=sat_ext.verl.cpu.checkpoint_engine`` (verl's own plugin keys). Single node only.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator, Iterable
from pathlib import Path

import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

from .config import BACKEND

TIMEOUT_S = 600.0


def _folder() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@CheckpointEngineRegistry.register(BACKEND)
class SharedFileCheckpointEngine(CheckpointEngine):
    """Actor rank 0 writes ``<folder>/sat_ext_weights_<id>.pt``; rollout workers wait for it and read it."""

    def __init__(self, bucket_size: int, is_master: bool = False, **_: object) -> None:
        self.is_master = is_master
        self.path: Path | None = None

    def prepare(self) -> dict:
        return {"path": str(_folder() / f"sat_ext_weights_{uuid.uuid4().hex}.pt")} if self.is_master else {}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        path = metadata[0]["path"]
        return {"path": [path] * actor_wg_world_size}, {"path": [path] * rollout_world_size}

    def init_process_group(self, path: str) -> None:
        self.path = Path(path)

    def finalize(self) -> None:
        if self.is_master and self.path is not None:
            self.path.unlink(missing_ok=True)
        self.path = None

    async def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None):
        # every actor rank walks the generator: producing each full tensor is collective over the actor group
        if not self.is_master:
            for _ in weights:
                pass
            return {}
        state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        partial = self.path.with_suffix(".partial")
        torch.save(state, partial)
        partial.rename(self.path)
        return {}

    async def receive_weights(self, global_steps: int | None = None) -> AsyncGenerator[tuple[str, torch.Tensor]]:
        deadline = time.monotonic() + TIMEOUT_S
        while not self.path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{BACKEND}: no weights at {self.path} after {TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.05)
        state = torch.load(self.path, weights_only=True)
        for name, tensor in state.items():
            yield name, tensor
