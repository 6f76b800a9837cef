"""The lag trainer's rollout client: verl's abort-and-resume client, resubmitting at once after a weight sync.

verl's ``FullyAsyncLLMServerClient.generate`` resubmits a request that a weight sync aborted (prompt plus the tokens
made so far) after a fixed 1 s sleep (verl/workers/rollout/llm_server.py:342-345). A sync takes a fraction of a
second here, so every abort cost the rollout about a second: the bound that held verl's bounded-lag modes near
sync speed (docs/lag.md, "What lag buys"). verl's server parks a request that arrives while a sync holds its
submission gate closed, and admits it when the sync ends (``_park_until_admitted``, vllm_async_server.py:1023-1044),
so a resubmission at once waits exactly as long as the sync and no longer. A server taken out of rotation instead
returns requests aborted at once; so the n-th abort of one request waits :func:`backoff` (n), doubling from
0.05 s up to verl's 1 s, and never spins. (The client's other 1 s wait, for an empty load balancer, is only
reached by an ``only_hybrid`` client, which the lag trainer does not make.)
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

from verl.workers.rollout import llm_server
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

from sat_ext.pinned import VERL_PINS, Patch, apply_patch

VERL_RETRY_SLEEP_S = 1.0  # verl's sleep before a resubmission (llm_server.py:345)
FIRST_BACKOFF_S = 0.05
CLIENT_ENV = "SAT_EXT_VERL_CLIENT"
"""A measurement switch: set to ``verl`` (``benchmarks/bench_async.py --verl-client verl``), the lag trainer hands
the rollout verl's own client, with its 1 s sleep, to measure what that sleep costs."""

_aborts: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("sat_ext_aborts", default=None)


def backoff(aborts_before: int) -> float:
    """Seconds to wait before resubmitting a request aborted ``aborts_before`` times already: 0, then 0.05 s doubling
    up to verl's 1 s."""
    return 0.0 if aborts_before == 0 else min(VERL_RETRY_SLEEP_S, FIRST_BACKOFF_S * 2 ** (aborts_before - 1))


class _BackoffAsyncio:
    """``asyncio`` as ``llm_server`` sees it: inside :meth:`ResubmittingClient.generate`, verl's 1 s retry sleep
    lasts :func:`backoff` instead; every other use (and every other client) is asyncio's own."""

    def __init__(self, real: Any):
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        aborts = _aborts.get()
        if aborts is not None and delay == VERL_RETRY_SLEEP_S:
            delay, aborts[0] = backoff(aborts[0]), aborts[0] + 1
        return await self._real.sleep(delay, result)


RETRY_SLEEP = Patch(
    "verl.workers.rollout.llm_server",
    "asyncio",
    "verl's client sleeps 1 s before resubmitting a request a weight sync aborted; ResubmittingClient backs off "
    "from 0 instead (its requests only)",
    _BackoffAsyncio,
)


class ResubmittingClient(FullyAsyncLLMServerClient):
    """verl's ``FullyAsyncLLMServerClient`` (abort, then resume with the tokens made so far), waiting :func:`backoff`
    instead of 1 s before each resubmission (module doc)."""

    async def generate(self, *args: Any, **kwargs: Any):
        apply_patch(RETRY_SLEEP, llm_server, "sat_ext's verl rollout client", VERL_PINS)  # once per process
        token = _aborts.set([0])  # this request's aborts so far
        try:
            return await super().generate(*args, **kwargs)
        finally:
            _aborts.reset(token)


def client_class() -> type[FullyAsyncLLMServerClient]:
    """:class:`ResubmittingClient`, or verl's own client where :data:`CLIENT_ENV` is ``verl``."""
    return FullyAsyncLLMServerClient if os.environ.get(CLIENT_ENV) == "verl" else ResubmittingClient
