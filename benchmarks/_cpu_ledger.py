"""Where the cores went during a run's steady state: each process's CPU time and run-queue wait, from Linux's
per-thread ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on a CPU, nanoseconds runnable but waiting for one).

A thread's run-queue wait is time it was ready to run while other threads held the cores it may use: for a process
pinned to one core, the time other work took from it. :class:`CpuLedger` samples every descendant of this process
(and this process) once per ``period`` and keeps two snapshots: the first taken once the run has logged
``start_steps`` steps, and the last taken before it logged ``end_steps`` (both counted by ``steps_done``), so the
window lies inside the steady state; :func:`window` turns the pair into seconds per label and :func:`core_busy` into
each core's busy share (from ``/proc/stat``, every process on the machine: run nothing else beside a measurement).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: (pid, tid) -> (label, cpu_ns, runqueue_wait_ns)
Threads = dict[tuple[int, int], tuple[str, int, int]]


@dataclass(frozen=True)
class Snapshot:
    """Every sampled thread's counters at wall time ``t`` (``time.monotonic``), with the run's logged ``steps``, and
    each core's (busy, total) jiffies from ``/proc/stat``."""

    t: float
    steps: int
    threads: Threads
    cores: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Spent:
    """One label's CPU seconds and run-queue wait seconds over a window."""

    cpu_s: float
    wait_s: float


def label_of(cmdline: list[str], name: str) -> str:
    """A short, stable name for a process: Ray's ``ray::Class`` (method dropped), else the executable's name and,
    for Python, its module or script."""
    text = " ".join(cmdline)
    if text.startswith("ray::"):
        return text.split()[0].split(".")[0]
    if name.startswith("python") or (cmdline and os.path.basename(cmdline[0]).startswith("python")):
        args = [a for a in cmdline[1:] if not a.startswith("-")]
        if "-m" in cmdline:
            return f"python -m {cmdline[cmdline.index('-m') + 1]}"
        return f"python {os.path.basename(args[0])}" if args else "python"
    return name or (os.path.basename(cmdline[0]) if cmdline else "?")


def thread_times(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (cpu_ns, runqueue_wait_ns) for each live thread of ``pid`` (empty if it has exited)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            cpu, wait, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(cpu), int(wait))
    return out


def core_jiffies(stat: str | None = None) -> dict[int, tuple[int, int]]:
    """core -> (busy, total) jiffies since boot, from ``/proc/stat`` (idle and iowait are not busy)."""
    text = Path("/proc/stat").read_text() if stat is None else stat
    out = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
        out[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    return out


def core_busy(a: Snapshot, b: Snapshot) -> dict[int, float]:
    """Each core's busy share of the time between ``a`` and ``b`` (0 to 1)."""
    out = {}
    for core, (busy1, total1) in b.cores.items():
        busy0, total0 = a.cores.get(core, (0, 0))
        out[core] = (busy1 - busy0) / (total1 - total0) if total1 > total0 else float("nan")
    return out


def snapshot(steps: int, me: str = "this script") -> Snapshot:
    """Counters of this process (labelled ``me``) and of all its descendants, now."""
    import psutil

    root = psutil.Process()
    threads: Threads = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            label = me if proc.pid == root.pid else label_of(proc.cmdline(), proc.name())
        except psutil.Error:
            continue
        for tid, (cpu, wait) in thread_times(proc.pid).items():
            threads[(proc.pid, tid)] = (label, cpu, wait)
    return Snapshot(time.monotonic(), steps, threads, core_jiffies())


def window(a: Snapshot, b: Snapshot) -> dict[str, Spent]:
    """Seconds of CPU and of run-queue wait per label between ``a`` and ``b``. A thread first seen in ``b`` counts
    from zero (it started inside the window); one gone by ``b`` is lost with whatever it spent after ``a``."""
    cpu: dict[str, float] = {}
    wait: dict[str, float] = {}
    for key, (label, c1, w1) in b.threads.items():
        _, c0, w0 = a.threads.get(key, (label, 0, 0))
        cpu[label] = cpu.get(label, 0.0) + (c1 - c0) / 1e9
        wait[label] = wait.get(label, 0.0) + (w1 - w0) / 1e9
    return {label: Spent(cpu[label], wait[label]) for label in cpu}


class CpuLedger(threading.Thread):
    """Samples :func:`snapshot` every ``period`` seconds while the run has logged between ``start_steps`` and
    ``end_steps`` steps; ``first`` and ``last`` are the window's two ends (None until sampled)."""

    def __init__(self, steps_done: Callable[[], int], start_steps: int, end_steps: int, period: float = 1.0):
        super().__init__(daemon=True)
        self.steps_done, self.start_steps, self.end_steps, self.period = steps_done, start_steps, end_steps, period
        self.stop = threading.Event()
        self.first: Snapshot | None = None
        self.last: Snapshot | None = None

    def run(self) -> None:
        while not self.stop.wait(self.period):
            steps = self.steps_done()
            if steps < self.start_steps:
                continue
            if steps >= self.end_steps:
                return
            snap = snapshot(steps)
            if self.first is None:
                self.first = snap
            else:
                self.last = snap

    def spent(self) -> tuple[float, dict[str, Spent], dict[int, float]]:
        """(the window's wall seconds, seconds per label, each core's busy share); (0, {}, {}) when the window has
        fewer than two samples."""
        if self.first is None or self.last is None:
            return 0.0, {}, {}
        return self.last.t - self.first.t, window(self.first, self.last), core_busy(self.first, self.last)
