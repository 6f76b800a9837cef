"""The demo's results tables (CSV and markdown): a lag sweep's, one row per (method, lag) with the seed mean and
spread; a frontier's, one :class:`Cell` per (method, lag, learning-rate multiple).

Every number comes from :class:`~sat_ext.demo.spec.RunResult`\\ s; "reward" is the task's reward of the
trainer's own policy (float32, sampled at the run's temperature) on a fixed held-out set, "final" the mean of
its last three evaluations and "best" its maximum, each then averaged over seeds (spread: the sample standard
deviation over seeds, 0 with one seed). A frontier run collapses under :data:`sat_ext.demo.stats.COLLAPSE`
(docs/demo.md, "Collapse"); the stable lag of a method at one lr multiple is the largest lag up to which no seed
collapsed (:func:`sat_ext.demo.stats.stable_lag`); SAT is compared with its base cell by cell, paired by seed,
with the demo's rule (:func:`sat_ext.demo.stats.verdict`).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from .methods import Method
from .plan import Plan
from .spec import RunResult
from .stats import TOL_FLOOR, WORDS, Diff, collapse_onset, collapse_reason, mean_se, paired, stable_lag, verdict

TABLE_FIELDS = (
    "loss",
    "label",
    "mode",
    "lag",
    "seeds",
    "start_reward",
    "final_mean",
    "final_std",
    "best_mean",
    "best_std",
    "gain_mean",
    "lag_steps_mean",
    "lag_steps_max",
    "abs_log_ratio_mean",
    "abs_log_ratio_p99",
    "log_ratio_var",
    "d_pi",
    "d_pi_tail",
    "engine_mismatch",
    "clipfrac",
    "sat_gate_rate",
    "sat_radius_low",
    "sat_radius_high",
    "sat_newly_clipped",
    "dropped",
    "regenerated",
    "nonfinite_steps",
    "collapsed",
    "wall_s",
)
FRONTIER_FIELDS = (
    "loss",
    "label",
    "lag",
    "lr_mult",
    "lr",
    "seeds",
    "collapsed",
    "collapsed_frac",
    "reasons",
    "onset_median",
    "start_mean",
    "final_mean",
    "gain_mean",
    "gain_se",
    "best_mean",
    "d_pi",
    "abs_log_ratio_mean",
    "clipfrac",
    "sat_gate_rate",
    "wall_s",
)


def _std(xs: list[float]) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


def hmean(r: RunResult, key: str) -> float:
    """Mean of the per-step metric ``key`` over the run's steps (finite values only)."""
    vals = [h[key] for h in r.history if key in h and math.isfinite(h[key])]
    return float(np.mean(vals)) if vals else float("nan")


def tail_mean(r: RunResult, key: str, frac: float = 0.25) -> float:
    """Mean of ``key`` over the last ``frac`` of the run's steps (the paper's trailing-25% d_pi)."""
    vals = [h[key] for h in r.history if key in h and math.isfinite(h[key])]
    tail = vals[-max(1, int(len(vals) * frac)) :]
    return float(np.mean(tail)) if tail else float("nan")


def group_runs(results: Iterable[RunResult]) -> dict[tuple[Method, int], list[RunResult]]:
    """The finished runs by (method, lag)."""
    groups: dict[tuple[Method, int], list[RunResult]] = defaultdict(list)
    for r in results:
        if r.error is None:
            groups[(r.spec.method, r.spec.lag)].append(r)
    return groups


def finals_by_seed(results: Iterable[RunResult], method: Method, lag: int) -> dict[int, float]:
    """{seed: final reward} of the finished runs of (method, lag): the input of a paired comparison."""
    return {r.spec.seed: r.final for r in results if (r.spec.method, r.spec.lag) == (method, lag) and r.error is None}


def collapsed(r: RunResult) -> str | None:
    """Why the run collapsed under the demo's rule (:data:`sat_ext.demo.stats.COLLAPSE`), or None."""
    return collapse_reason(r.evals, r.totals.get("nonfinite_steps", 0.0))


def table_rows(results: list[RunResult], methods: Iterable[Method], lags: list[int]) -> list[dict]:
    """One row per (method, lag) in the given order, with the seed mean and spread; a row's ``method`` is the
    :class:`~sat_ext.demo.methods.Method` (written as the ``loss`` and ``label`` columns)."""
    groups = group_runs(results)
    rows = []
    for method in methods:
        for lag in lags:
            runs = groups.get((method, lag), [])
            if not runs:
                continue
            finals, bests = [r.final for r in runs], [r.best for r in runs]
            starts = [r.start for r in runs]
            lag_max = max(max(r.lag_counts) for r in runs if r.lag_counts)
            n_lag = sum(sum(r.lag_counts.values()) for r in runs)
            lag_mean = sum(k * v for r in runs for k, v in r.lag_counts.items()) / max(n_lag, 1)
            sat = method.is_sat
            rows.append(
                {
                    "method": method,
                    "mode": runs[0].spec.asynchrony.mode,
                    "lag": lag,
                    "seeds": len(runs),
                    "start_reward": float(np.mean(starts)),
                    "final_mean": float(np.mean(finals)),
                    "final_std": _std(finals),
                    "best_mean": float(np.mean(bests)),
                    "best_std": _std(bests),
                    "gain_mean": float(np.mean(finals) - np.mean(starts)),
                    "lag_steps_mean": lag_mean,
                    "lag_steps_max": float(lag_max),
                    "abs_log_ratio_mean": float(np.mean([hmean(r, "abs_log_ratio/mean") for r in runs])),
                    "abs_log_ratio_p99": float(np.mean([hmean(r, "abs_log_ratio/p99") for r in runs])),
                    "log_ratio_var": float(np.mean([hmean(r, "log_ratio/var") for r in runs])),
                    "d_pi": float(np.mean([hmean(r, "mismatch/d_pi") for r in runs])),
                    "d_pi_tail": float(np.mean([tail_mean(r, "mismatch/d_pi") for r in runs])),
                    "engine_mismatch": float(np.mean([hmean(r, "mismatch/engine") for r in runs])),
                    "clipfrac": float(np.mean([hmean(r, "actor/pg_clipfrac") for r in runs])),
                    "sat_gate_rate": float(np.mean([hmean(r, "actor/sat/gate_rate") for r in runs]))
                    if sat
                    else float("nan"),
                    "sat_radius_low": float(np.mean([hmean(r, "actor/sat/radius_low_mean") for r in runs]))
                    if sat
                    else float("nan"),
                    "sat_radius_high": float(np.mean([hmean(r, "actor/sat/radius_high_mean") for r in runs]))
                    if sat
                    else float("nan"),
                    "sat_newly_clipped": float(np.mean([hmean(r, "actor/sat/newly_clipped_frac") for r in runs]))
                    if sat
                    else float("nan"),
                    "dropped": float(np.mean([r.totals.get("dropped", 0.0) for r in runs])),
                    "regenerated": float(np.mean([r.totals.get("regenerated", 0.0) for r in runs])),
                    "nonfinite_steps": float(np.mean([r.totals.get("nonfinite_steps", 0.0) for r in runs])),
                    "collapsed": sum(collapsed(r) is not None for r in runs),
                    "wall_s": float(np.mean([r.wall_s for r in runs])),
                }
            )
    return rows


def fmt(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals, ``nan`` when it is not finite."""
    return "nan" if not math.isfinite(x) else f"{x:.{digits}f}"


def csv_row(row: dict) -> dict:
    """``row`` as a CSV line: its method as the ``loss`` key and ``label``, floats to 6 significant digits."""
    method = {"loss": row["method"].key, "label": row["method"].label}
    return method | {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items() if k != "method"}


def write_tables(rows: list[dict], out: Path) -> tuple[Path, Path]:
    """``results.csv`` (every field of every row) and ``results.md`` (the final-reward grid and a detail table)."""
    csv_path, md_path = out / "results.csv", out / "results.md"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow(csv_row(row))
    lags = sorted({r["lag"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["method"], r["lag"]): r for r in rows}
    seeds = max((r["seeds"] for r in rows), default=0)
    mode = rows[0]["mode"] if rows else "interval"
    lag_name = "interval k" if mode == "interval" else "max_lag L"
    lines = [
        f"Final eval reward (mean of the last 3 evaluations), mean ± std over {seeds} seed(s); "
        f"lag = {lag_name} ({mode} mode). Start (warm-start) reward: "
        + ", ".join(sorted({fmt(r["start_reward"]) for r in rows}))
        + ".",
        "",
    ]
    lines.append("| loss | " + " | ".join(f"lag {k}" for k in lags) + " |")
    lines.append("|---|" + "---|" * len(lags))
    for m in methods:
        cells = []
        for k in lags:
            r = by.get((m, k))
            cells.append("—" if r is None else f"{fmt(r['final_mean'])} ± {fmt(r['final_std'])}")
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per loss and lag: final and best reward (mean ± std over seeds), consumed lag in trainer steps "
        "(mean / max), staleness |log r| (mean / p99 per step, averaged), clip fraction, SAT gate rate and "
        "mean effective radii (lower / upper), dropped groups, collapsed seeds.",
        "",
    ]
    lines.append(
        "| loss | lag | seeds | final | best | lag mean / max | abs log r mean / p99 | clipfrac | "
        "SAT gate | SAT radius lo / hi | dropped | collapsed |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lines.append(
            f"| {r['method'].label} | {r['lag']} | {r['seeds']} | {fmt(r['final_mean'])} ± {fmt(r['final_std'])} | "
            f"{fmt(r['best_mean'])} ± {fmt(r['best_std'])} | {r['lag_steps_mean']:.1f} / {r['lag_steps_max']:.0f} | "
            f"{fmt(r['abs_log_ratio_mean'])} / {fmt(r['abs_log_ratio_p99'])} | {fmt(r['clipfrac'])} | "
            + (
                f"{fmt(r['sat_gate_rate'])} | {r['sat_radius_low']:.3g} / {r['sat_radius_high']:.3g}"
                if r["method"].is_sat
                else "— | —"
            )
            + f" | {r['dropped']:.0f} | {r['collapsed']} |"
        )
    md_path.write_text("\n".join(lines) + "\n")
    return csv_path, md_path


@dataclass
class Cell:
    """The runs of one (method, lag, lr multiple) and what the frontier reads from them."""

    method: Method
    lag: int
    lr_mult: float
    runs: list[RunResult] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [c for c in (collapsed(r) for r in self.runs) if c is not None]

    @property
    def collapsed_frac(self) -> float:
        return len(self.reasons) / len(self.runs) if self.runs else float("nan")

    @property
    def gain(self) -> Diff:
        return mean_se([r.final - r.start for r in self.runs])

    def finals(self) -> dict[int, float]:
        return {r.spec.seed: r.final for r in self.runs}

    def row(self) -> dict:
        onsets = [o for o in (collapse_onset(r.evals) for r in self.runs if collapsed(r)) if o is not None]
        g = self.gain
        return {
            "method": self.method,
            "lag": self.lag,
            "lr_mult": self.lr_mult,
            "lr": self.runs[0].spec.recipe.lr,
            "seeds": len(self.runs),
            "collapsed": len(self.reasons),
            "collapsed_frac": self.collapsed_frac,
            "reasons": ";".join(sorted(set(self.reasons))),
            "onset_median": float(np.median(onsets)) if onsets else float("nan"),
            "start_mean": float(np.mean([r.start for r in self.runs])),
            "final_mean": float(np.mean([r.final for r in self.runs])),
            "gain_mean": g.mean,
            "gain_se": g.se,
            "best_mean": float(np.mean([r.best for r in self.runs])),
            "d_pi": float(np.mean([hmean(r, "mismatch/d_pi") for r in self.runs])),
            "abs_log_ratio_mean": float(np.mean([hmean(r, "abs_log_ratio/mean") for r in self.runs])),
            "clipfrac": float(np.mean([hmean(r, "actor/pg_clipfrac") for r in self.runs])),
            "sat_gate_rate": float(np.mean([hmean(r, "actor/sat/gate_rate") for r in self.runs]))
            if self.method.is_sat
            else float("nan"),
            "wall_s": float(np.mean([r.wall_s for r in self.runs])),
        }


class Grid:
    """The cells of a frontier sweep (``sat-ext demo --frontier``), by (method, lag, lr multiple)."""

    def __init__(self, plan: Plan, results: list[RunResult]):
        self.methods, self.lags, self.mults = list(plan.methods), list(plan.lags), list(plan.lr_mults)
        by_lr = {plan.base_lr * m: m for m in self.mults}
        self.cells: dict[tuple[Method, int, float], Cell] = {}
        for r in results:
            m = by_lr[r.spec.recipe.lr]
            key = (r.spec.method, r.spec.lag, m)
            self.cells.setdefault(key, Cell(*key)).runs.append(r)

    def get(self, method: Method, lag: int, mult: float) -> Cell | None:
        return self.cells.get((method, lag, mult))

    def stable(self, method: Method, mult: float) -> int | None:
        """The stable lag of ``method`` at ``mult`` over the lags that finished."""
        return stable_lag({k: c.collapsed_frac for k in self.lags if (c := self.get(method, k, mult)) is not None})

    def ordered(self) -> list[Cell]:
        """The cells that ran, by method, then lr multiple, then lag."""
        cells = (self.get(meth, k, m) for meth in self.methods for m in self.mults for k in self.lags)
        return [c for c in cells if c is not None]

    def sat_pairs(self) -> list[tuple[Method, Method]]:
        """(SAT method, its base) for every SAT method whose base ran."""
        return [(m, m.base()) for m in self.methods if m.is_sat and m.base() in self.methods]


def stable_text(stable: int | None, lags: list[int]) -> str:
    if stable is None:
        return f"none (collapses at lag {lags[0]})"
    return f"≥ {stable}" if stable == lags[-1] else str(stable)


def stable_table(grid: Grid) -> list[str]:
    """Markdown: per method and lr multiple, the largest lag with no collapsed seed (at it and every smaller lag)."""
    lines = ["| method | " + " | ".join(f"lr x {m:g}" for m in grid.mults) + " |", "|---|" + "---|" * len(grid.mults)]
    for meth in grid.methods:
        lines.append(
            f"| {meth.label} | " + " | ".join(stable_text(grid.stable(meth, m), grid.lags) for m in grid.mults) + " |"
        )
    return lines


def _grid_head(title: str, lags: list[int]) -> list[str]:
    return [title, "", "| lr multiple | " + " | ".join(f"lag {k}" for k in lags) + " |", "|---|" + "---|" * len(lags)]


def collapse_grid(grid: Grid) -> list[str]:
    """Markdown: per method, lr multiple (rows) x lag (columns): collapsed seeds / seeds and mean final change."""
    lines = []
    for meth in grid.methods:
        lines += _grid_head(f"**{meth.label}** (collapsed seeds / seeds, mean final - warm start)", grid.lags)
        for m in grid.mults:
            cells = []
            for k in grid.lags:
                c = grid.get(meth, k, m)
                cells.append("—" if c is None else f"{len(c.reasons)}/{len(c.runs)}, {c.gain.mean:+.3f}")
            lines.append(f"| x {m:g} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def sat_verdicts(grid: Grid, tol_floor: float = TOL_FLOOR) -> tuple[list[str], dict[str, int]]:
    """Markdown: SAT - its base, final reward paired by seed, per lr multiple and lag, with WIN / tie / LOSS and
    the two cells' collapsed seeds; and the tally of verdicts."""
    lines, tally = [], {w: 0 for w in WORDS}
    for s, b in grid.sat_pairs():
        lines += _grid_head(
            f"**{s.label} - {b.label}** (final reward paired by seed; collapsed seeds SAT / base)", grid.lags
        )
        for m in grid.mults:
            cells = []
            for k in grid.lags:
                cs, cb = grid.get(s, k, m), grid.get(b, k, m)
                d = paired(cs.finals(), cb.finals()) if cs and cb else None
                if d is None:
                    cells.append("—")
                    continue
                word, _ = verdict(d, tol_floor)
                tally[word] += 1
                cells.append(f"{d.describe()} {WORDS[word]} ({len(cs.reasons)}/{len(cb.reasons)})")
            lines.append(f"| x {m:g} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines, tally


def write_frontier(grid: Grid, out: Path) -> list[str]:
    """``frontier.csv`` (one row per cell) and ``frontier.md`` (the stable-lag table, the collapse grid, the paired
    verdicts); returns the file names."""
    with (out / "frontier.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FRONTIER_FIELDS)
        w.writeheader()
        for c in grid.ordered():
            w.writerow(csv_row(c.row()))
    (out / "frontier.md").write_text(
        "\n".join(stable_table(grid) + [""] + collapse_grid(grid) + sat_verdicts(grid)[0]) + "\n"
    )
    return ["frontier.csv", "frontier.md"]
