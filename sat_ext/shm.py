"""Shared-memory segments under ``/dev/shm`` that engines leave behind, and their release.

vLLM's CPU engine keeps its ring buffers in ``/dev/shm/psm_*``; a process killed at shutdown never unlinks the
ones it made, and Python's resource tracker then warns at exit that they leaked. :func:`leftovers` finds those that
appeared since a snapshot and that no live process has open or mapped; :func:`release` unlinks them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SHM = Path("/dev/shm")


def names(prefixes: tuple[str, ...]) -> set[str]:
    """Names under /dev/shm that start with one of ``prefixes`` (empty where there is no /dev/shm)."""
    return {p.name for p in SHM.iterdir() if p.name.startswith(prefixes)} if SHM.is_dir() else set()


def in_use() -> set[str]:
    """Names under /dev/shm that some process has open or mapped (from /proc; empty where unreadable)."""
    used: set[str] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            used.update(
                line.rsplit("/dev/shm/", 1)[1].split()[0]
                for line in (proc / "maps").read_text().splitlines()
                if "/dev/shm/" in line
            )
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    used.add(target[len("/dev/shm/") :].split()[0])
        except OSError:
            continue
    return used


def leftovers(before: set[str], prefixes: tuple[str, ...]) -> set[str]:
    """Segments named with ``prefixes`` that are new since ``before`` and that no live process still uses (another
    job's engine may have made one meanwhile)."""
    return names(prefixes) - before - in_use()


def release(segments: Iterable[str]) -> None:
    """Unlink each segment through :mod:`multiprocessing.shared_memory`, which also drops its name from the resource
    tracker this process shares with the processes it started (attaching registers the name, unlinking removes it:
    the tracker keeps a set, so a name its dead creator registered goes too)."""
    from multiprocessing import shared_memory

    for name in segments:
        try:
            segment = shared_memory.SharedMemory(name=name)
        except (FileNotFoundError, ValueError):
            continue
        segment.close()
        segment.unlink()
