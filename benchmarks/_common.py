"""Shared helpers of the benchmark scripts: environment record, timing, memory probes, result writers.

Every script writes ``<name>.csv`` (one row per measurement, the environment in ``#`` comment lines at the
top), ``<name>.md`` (the rendered table with the same environment block) and, where it has one, a PNG.
"""

from __future__ import annotations

import csv
import datetime as _dt
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------------------------------- env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        paths = ("sat_ext/core", "sat_ext/verl", "sat_ext/lag")
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", *paths], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        return out.stdout.strip() + (" + uncommitted changes in sat_ext/{core,verl,lag}" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return f"cuda: {p.name} ({p.total_memory / 2**30:.0f} GiB)"
    return f"cpu: {_cpu_model()}, {os.cpu_count()} logical cores"


def environment(device: torch.device, **extra: Any) -> dict[str, str]:
    """What every result file records about where and how it was produced."""
    try:
        import verl  # noqa: F401

        verl_version = getattr(sys.modules["verl"], "__version__", "?")
    except ImportError:
        verl_version = "not installed"
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device_description(device),
        "torch": torch.__version__,
        "torch_threads": str(torch.get_num_threads()),
        "verl": verl_version,
        "python": platform.python_version(),
        "host": f"{platform.system()} {platform.machine()}, {_mem_total_gib():.0f} GiB RAM",
        "sat_ext_commit": _git_commit(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    try:
        env["load_avg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    env.update({k: str(v) for k, v in extra.items()})
    return env


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """``python benchmarks/<script's name> <arguments>`` for a result file: ``argv`` when ``main(argv)`` was called
    from Python (a test), else the process's own arguments."""
    return " ".join(["python", f"benchmarks/{Path(script).name}", *(sys.argv[1:] if argv is None else argv)])


def _mem_total_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


# --------------------------------------------------------------------------------------------------- sizes


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def fmt_size(n: int) -> str:
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


# --------------------------------------------------------------------------------------------------- timing


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Wall seconds of one call of ``fn`` (the device synchronised before and after)."""
    return timed2(fn, device)[0]


def timed2(fn: Callable[[], Any], device: torch.device) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call of ``fn``.

    On a machine whose cores are shared with other jobs, the CPU time of a 1-thread run is the steadier
    figure: time spent preempted by another process is not counted (cache and memory-bandwidth contention
    still is).
    """
    sync(device)
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0, time.process_time() - c0


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# --------------------------------------------------------------------------------------------------- memory


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def rss_probe_available() -> bool:
    """Peak RSS can be re-armed only where /proc/self/clear_refs accepts "5" (reset VmHWM, Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _status_kib("VmHWM")
        return True
    except OSError:
        return False


def rss_peak_bytes(fn: Callable[[], Any]) -> int:
    """Process RSS high-water during ``fn`` minus the RSS just before it (VmHWM re-armed via clear_refs)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - base) * 1024


def torch_alloc_peak_bytes(fn: Callable[[], Any], marker: str | None = None) -> tuple[int, int | None]:
    """Peak of live bytes allocated by torch's CPU allocator during ``fn`` (0 = the live set when it starts).

    Read from the profiler's memory events (``profile_memory=True``: every c10 allocation and free with its
    size and time), which is what torch exposes on CPU in place of ``torch.cuda.max_memory_allocated``.
    With ``marker`` the second value is the peak up to the end of the first ``record_function(marker)``
    region (e.g. the forward pass inside a forward+backward call).
    """
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
        fn()
    events = prof.profiler.kineto_results.events()
    mem = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    cut = None
    if marker is not None:
        ends = [e.end_ns() for e in events if e.name() == marker]
        cut = min(ends) if ends else None
    cur = peak = 0
    peak_at_cut = None if marker is None else 0
    for t, b in mem:
        cur += b
        peak = max(peak, cur)
        if cut is not None and t <= cut:
            peak_at_cut = max(peak_at_cut, cur)
    return peak, peak_at_cut


# --------------------------------------------------------------------------------------------------- host syncs

# aten ops whose result the host must wait for: a value read back (item, bool(), int(), float()), or an output
# shape that depends on the data (nonzero and boolean indexing, masked_select, unique, bincount). On a GPU each
# is a blocking round-trip, and a data-dependent shape also rules out CUDA graphs.
SYNC_EVENTS = (
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::bincount",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
)
SYNC_METHODS = ("tolist", "numpy")  # device-to-host copies made from Python (no aten event on the CPU)


def host_syncs(fn: Callable[[], Any]) -> dict[str, int]:
    """The host-sync points of one call of ``fn`` by name: the profiler's :data:`SYNC_EVENTS`, nested ones
    included (the nonzero inside ``x[mask]``) but not one inside another (the item inside masked_select), plus
    the Tensor methods of :data:`SYNC_METHODS`."""
    from torch.overrides import TorchFunctionMode
    from torch.profiler import ProfilerActivity, profile

    copies: dict[str, int] = {}

    class Copies(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in SYNC_METHODS:
                copies[f"Tensor.{name}"] = copies.get(f"Tensor.{name}", 0) + 1
            return func(*args, **(kwargs or {}))

    with profile(activities=[ProfilerActivity.CPU]) as prof, Copies():
        fn()

    def inside_another(e) -> bool:
        parent = e.cpu_parent
        while parent is not None:
            if parent.name in SYNC_EVENTS:
                return True
            parent = parent.cpu_parent
        return False

    counts = dict(copies)
    for e in prof.events():
        if e.name in SYNC_EVENTS and not inside_another(e):
            counts[e.name] = counts.get(e.name, 0) + 1
    return counts


# --------------------------------------------------------------------------------------------------- output


def env_lines(env: dict[str, str]) -> list[str]:
    return [f"{k}: {v}" for k, v in env.items()]


def write_csv(path: Path, rows: list[dict[str, Any]], env: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with path.open("w", newline="") as f:
        for line in env_lines(env):
            f.write(f"# {line}\n")
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt_csv(r.get(k)) for k in cols})


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _fmt_csv(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else v


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(x) for x in r) + " |")
    return "\n".join(lines)


def write_md(path: Path, title: str, env: dict[str, str], sections: list[tuple[str, str]]) -> None:
    parts = [f"# {title}", "", "```", *env_lines(env), "```", ""]
    for heading, body in sections:
        parts += [f"## {heading}", "", body, ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))
