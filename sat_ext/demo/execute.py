"""The runs of a plan: warm starts (cached on disk) and RL runs in a process pool, with progress bars.

One pool holds both stages: a seed's RL runs start as soon as its warm start is in. Every run is
deterministic for its settings and seed on one machine, whatever ``jobs`` is (the warm start always runs
on one torch thread; an RL run on ``threads``). A failed run is reported with its traceback and kept out
of the tables, not fatal for the sweep.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import queue
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .isa import ISA_VARIABLES
from .plan import Plan
from .spec import RunResult, RunSpec, WarmStartSpec

WARM_FORMAT = 2  # bump when the warm start's code changes, so old cache files are not reused


@dataclass
class SweepRun:
    """What the runs of a plan gave: the finished and the failed runs (plan order), the warm starts' stats
    (seed order) and the timing."""

    results: list[RunResult]
    failed: list[RunResult]
    warm_stats: list[dict[str, float]]
    timing: dict[str, Any]


# --------------------------------------------------------------------------- worker side


class _Progress:
    """Where a job reports its steps: a multiprocessing queue in a pool worker, a callback in-process."""

    sink: Any = None

    @classmethod
    def report(cls, n: int) -> None:
        if cls.sink is not None:
            cls.sink.put(n)


class _Callback:
    def __init__(self, fn: Callable[[int], None]):
        self.put = fn


def _init_worker(progress_queue: Any, threads: int) -> None:
    _Progress.sink = progress_queue
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import warnings

    warnings.filterwarnings("ignore", message=".*requires_grad=True to a scalar.*")


def _warm_job(spec: WarmStartSpec, cache_path: str | None):
    import torch

    from .warm import warm_start

    if cache_path and os.path.exists(cache_path):
        blob = torch.load(cache_path, weights_only=False)
        return blob["state"], {**blob["stats"], "cached": 1.0}
    state, stats = warm_start(spec)
    if cache_path:
        tmp = f"{cache_path}.{os.getpid()}.tmp"
        torch.save({"state": state, "stats": stats, "spec": dataclasses.asdict(spec)}, tmp)
        os.replace(tmp, cache_path)
    return state, {**stats, "cached": 0.0}


def _run_job(spec: RunSpec, warm_state):
    from .train import run

    try:
        return run(spec, warm_state, progress=_Progress.report)
    except Exception as e:  # a failed run is reported in the summary, not fatal for the sweep
        import traceback

        return RunResult(spec, [], [], {}, {}, 0.0, error=f"{type(e).__name__}: {e}\n{traceback.format_exc()}")


# --------------------------------------------------------------------------- driver side


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/sat_ext/demo or ~/.cache/sat_ext/demo."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sat_ext" / "demo"


def float_environment() -> dict[str, str]:
    """What a warm start's floats depend on besides its settings: the torch / transformers versions, the
    CPU's vector instructions torch dispatches to (AVX2, AVX512, ...) on this machine's architecture, and the
    instruction-set caps that are set (:data:`sat_ext.demo.isa.ISA_VARIABLES`)."""
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "isa_variables": " ".join(f"{k}={os.environ[k]}" for k in ISA_VARIABLES if k in os.environ) or "none",
    }


def warm_key(spec: WarmStartSpec) -> str:
    """The cache key of a warm start: its settings, :data:`WARM_FORMAT` and :func:`float_environment`."""
    blob = json.dumps({"spec": dataclasses.asdict(spec), "format": WARM_FORMAT, **float_environment()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class _Runner:
    """Runs jobs in-process (jobs=1) or in a spawn process pool; jobs report steps to ``on_progress``.

    ``submit(tag, fn, *args)`` queues a job; ``done()`` returns the (tag, result) pairs finished since the
    last call (in-process: the job ran inside ``submit``); ``busy`` says whether any job is pending.
    """

    def __init__(self, jobs: int, threads: int, on_progress: Callable[[int], None]):
        self.threads = threads
        self.on_progress = on_progress
        self.pool = None
        self.queue = None
        self.pending: dict[Future, Any] = {}
        self.finished: list[tuple[Any, Any]] = []
        if jobs > 1:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            self.queue = ctx.Queue()
            self.pool = ProcessPoolExecutor(
                max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(self.queue, threads)
            )

    def submit(self, tag: Any, fn: Callable, *args: Any) -> None:
        if self.pool is not None:
            self.pending[self.pool.submit(fn, *args)] = tag
            return
        from .warm import torch_threads

        _Progress.sink = _Callback(self.on_progress)
        try:
            with torch_threads(self.threads):
                self.finished.append((tag, fn(*args)))
        finally:
            _Progress.sink = None

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.finished)

    def done(self) -> list[tuple[Any, Any]]:
        if self.pool is not None and self.pending:
            finished, _ = wait(set(self.pending), timeout=0.2, return_when=FIRST_COMPLETED)
            self._drain()
            for f in finished:
                self.finished.append((self.pending.pop(f), f.result()))
        out, self.finished = self.finished, []
        return out

    def _drain(self) -> None:
        while True:
            try:
                self.on_progress(self.queue.get_nowait())
            except queue.Empty:
                return

    def close(self) -> None:
        if self.pool is not None:
            self._drain()
            self.pool.shutdown(wait=True, cancel_futures=True)


def _bar(total: int, desc: str, disable: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=disable, dynamic_ncols=True, leave=True, file=sys.stderr)


def _say(message: str, bars: bool) -> None:
    if bars:
        from tqdm import tqdm

        tqdm.write(message)
    else:
        print(message, file=sys.stderr)


def execute(plan: Plan, jobs: int, threads: int, cache: Path | None, progress: bool = True) -> SweepRun:
    """Every warm start and run of ``plan`` on ``jobs`` workers of ``threads`` torch threads each; warm starts
    are read from / written to ``cache`` (None: always redone)."""
    from .engines import close_pool

    t_start = time.perf_counter()
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    specs = plan.specs
    warm_bar = _bar(len(plan.warm), "warm start (supervised)", not progress)
    rl_bar = _bar(len(specs) * plan.steps, "RL steps (all runs)", not progress)
    runner = _Runner(jobs, threads, on_progress=rl_bar.update)
    warm: list[Any] = [None] * len(plan.warm)
    results: list[Any] = [None] * len(specs)
    t_warm_done = t_start
    n_done = 0
    try:
        for s, ws in enumerate(plan.warm):
            runner.submit(("warm", s), _warm_job, ws, str(cache / f"warm-{warm_key(ws)}.pt") if cache else None)
        while runner.busy:
            for (what, i), res in runner.done():
                if what == "warm":
                    warm[i] = res
                    st = res[1]
                    warm_bar.update(1)
                    _say(
                        f"  seed {i}: warm start {int(st['sft_steps'])} steps, sampled reward "
                        f"{st['sampled_reward']:.3f}, greedy {st['greedy_reward']:.3f}"
                        + (" (cached)" if st.get("cached") else f" ({st['wall_s']:.0f}s)"),
                        progress,
                    )
                    t_warm_done = time.perf_counter()
                    for j, sp in enumerate(specs):
                        if sp.warm.seed == i:
                            runner.submit(("run", j), _run_job, sp, res[0])
                else:
                    results[i] = res
                    n_done += 1
                    rl_bar.set_postfix_str(f"runs {n_done}/{len(specs)}", refresh=False)
    finally:
        runner.close()
        close_pool()  # the in-process (jobs 1) runs' vLLM engine
        warm_bar.close()
        rl_bar.close()
    wall = time.perf_counter() - t_start
    warm_stats = [w[1] for w in warm]
    ok = [r for r in results if r.error is None]
    try:
        load = "%.1f/%.1f/%.1f" % os.getloadavg()
    except OSError:
        load = "n/a"
    timing = {
        "total_s": wall,
        "warm_start_s": t_warm_done - t_start,
        "rl_s": wall,
        "jobs": jobs,
        "threads": threads,
        "warm_cpu_s": sum(w.get("cpu_s", 0.0) for w in warm_stats if not w.get("cached")),
        "rl_cpu_s": sum(r.totals.get("cpu_s", 0.0) for r in ok),
        "load_avg": load,
    }
    return SweepRun(ok, [r for r in results if r.error is not None], warm_stats, timing)
