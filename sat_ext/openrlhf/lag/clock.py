"""The run's shared clock: policy version, interval schedule and producer idle time, one async Ray actor."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sat_ext.lag.schedule import last_claimable_step, may_claim


class LagClock:
    """State shared by the generator and the trainer actors (one asynchronous Ray actor per run).

    It holds the policy version (set by the trainer inside the vLLM lock, right after each broadcast), the
    interval schedule (which trainer step the generator may generate a batch for next, which are done), the
    generator's idle time, and the prompt groups sent back for regeneration. Waits happen inside the actor
    and return the seconds waited.
    """

    def __init__(self, mode: str, sync_every: int = 1, prefetch: int = 0):
        self.mode, self.sync_every, self.prefetch = mode, sync_every, prefetch
        self.version = 0
        self.started = False
        self.next_step = 1  # interval: the trainer step the next claimed batch is for
        self.done_upto = 0  # interval: every batch for steps <= this one has been generated
        self.closed = False
        self.producer_idle_s = 0.0
        self.requeued: list[Any] = []
        self._cond = None

    def _condition(self):
        import asyncio

        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()

    async def _wait(self, ready: Callable[[], bool]) -> float:
        start = time.monotonic()
        cond = self._condition()
        async with cond:
            await cond.wait_for(ready)
        return time.monotonic() - start

    async def start(self, steps_done: int) -> int:
        """The trainer starts (or resumes) after ``steps_done`` steps; returns the version."""
        self.version = steps_done // self.sync_every
        self.done_upto = steps_done
        self.next_step = steps_done + 1
        self.started = True
        await self._notify()
        return self.version

    async def current_version(self) -> int:
        """The version of the weights vLLM holds now (waits for the trainer's start)."""
        await self._wait(lambda: self.started)
        return self.version

    def _claimable(self) -> bool:
        if not self.started:
            return False
        if self.mode != "interval":
            return True
        return may_claim(self.next_step, self.version, self.sync_every, self.prefetch)

    async def claim(self) -> tuple[int, int]:
        """Interval mode: wait until the next batch's scheduled version exists; returns (step, version)."""
        self.producer_idle_s += await self._wait(self._claimable)
        step = self.next_step
        self.next_step += 1
        return step, self.version

    async def release(self, step: int) -> None:
        """The claimed batch for ``step`` produced nothing (prompts exhausted): hand the step out again."""
        if step == self.next_step - 1 and step > self.done_upto:
            self.next_step -= 1
        await self._notify()

    async def done(self, step: int) -> None:
        """The batch for ``step`` has been generated."""
        self.done_upto = max(self.done_upto, step)
        await self._notify()

    async def wait_sync_allowed(self) -> float:
        """Interval mode: wait until every batch scheduled on the current weights has been generated."""
        last = last_claimable_step(self.version, self.sync_every, self.prefetch)
        return await self._wait(lambda: self.closed or self.done_upto >= last)

    async def record_sync(self, version: int) -> None:
        """The trainer broadcast the weights of ``version`` to vLLM."""
        if version <= self.version:
            raise ValueError(f"policy version must increase: {self.version} -> {version}")
        self.version = version
        await self._notify()

    async def close(self) -> None:
        """The generator has finished (data exhausted or failed): no wait may block on it any more."""
        self.closed = True
        await self._notify()

    async def add_producer_idle(self, seconds: float) -> None:
        self.producer_idle_s += seconds

    async def pop_producer_idle(self) -> float:
        seconds, self.producer_idle_s = self.producer_idle_s, 0.0
        return seconds

    async def requeue(self, items: list[Any]) -> None:
        """Prompt groups to generate again (bounded mode, ``over_bound regenerate``)."""
        self.requeued.extend(items)

    async def take_requeued(self, limit: int) -> list[Any]:
        items, self.requeued = self.requeued[:limit], self.requeued[limit:]
        return items
