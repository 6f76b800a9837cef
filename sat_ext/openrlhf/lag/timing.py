"""Wrappers that time OpenRLHF's blocking calls (queue, vLLM lock) and count an iterator's items."""

from __future__ import annotations

import time
from collections.abc import Callable


class _TimedQueue:
    """A ``ray.util.queue.Queue`` whose blocking ``get`` reports the seconds it waited to ``on_wait``."""

    def __init__(self, queue, on_wait: Callable[[float], None]):
        self._queue, self._on_wait = queue, on_wait

    def get(self, *args, **kwargs):
        start = time.monotonic()
        try:
            return self._queue.get(*args, **kwargs)
        finally:
            self._on_wait(time.monotonic() - start)

    def __getattr__(self, name):
        return getattr(self._queue, name)


class _TimedRemoteMethod:
    def __init__(self, method, on_wait: Callable[[float], None]):
        self._method, self._on_wait = method, on_wait

    def remote(self, *args, **kwargs):
        import ray

        start = time.monotonic()
        ref = self._method.remote(*args, **kwargs)
        ray.wait([ref])
        self._on_wait(time.monotonic() - start)
        return ref


class _TimedLock:
    """OpenRLHF's ``VLLMLock`` handle whose ``acquire`` waits (and reports the wait) before returning its ref."""

    def __init__(self, lock, on_wait: Callable[[float], None]):
        self._lock = lock
        self.acquire = _TimedRemoteMethod(lock.acquire, on_wait)
        self.release = lock.release


class _Counted:
    """Iterates ``items``, counting how many were taken."""

    def __init__(self, items):
        self._it, self.taken = iter(items), 0

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self._it)
        self.taken += 1
        return item
