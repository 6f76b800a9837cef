"""The stability frontier (``sat-ext demo --frontier``): where each method starts to collapse as staleness
pressure grows, lag x learning-rate multiple.

A cell is (method, lag, lr multiple) over seeds. Collapse is :data:`sat_ext.demo.stats.COLLAPSE` (docs/demo.md,
"Collapse"), decided per run from its own evaluations and losses; the stable lag of a method at one lr
multiple is the largest lag up to which no seed collapsed (:func:`sat_ext.demo.stats.stable_lag`); SAT is
compared with its base cell by cell, paired by seed, with the demo's rule (:func:`sat_ext.demo.stats.verdict`).

Files: ``frontier.csv`` (one row per cell), ``frontier.md`` (the stable-lag table, the collapse grid, the
paired verdicts), ``heatmaps.png`` (per method: colour = fraction of seeds collapsed, text = mean final
reward change), ``frontier_curves.png`` (mean reward curves per cell), ``summary.md``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .methods import Method
from .plan import Plan
from .spec import RunResult
from .stats import COLLAPSE, TOL_FLOOR, WORDS, Diff, collapse_onset, mean_se, paired, stable_lag, verdict
from .tables import collapsed, csv_row, hmean

FIELDS = (
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
    """The cells of a frontier sweep, by (method, lag, lr multiple)."""

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

    def sat_pairs(self) -> list[tuple[Method, Method]]:
        """(SAT method, its base) for every SAT method whose base ran."""
        return [(m, m.base()) for m in self.methods if m.is_sat and m.base() in self.methods]


def _stable_text(stable: int | None, lags: list[int]) -> str:
    if stable is None:
        return f"none (collapses at lag {lags[0]})"
    return f"≥ {stable}" if stable == lags[-1] else str(stable)


def stable_table(grid: Grid) -> list[str]:
    """Markdown: per method and lr multiple, the largest lag with no collapsed seed (at it and every smaller lag)."""
    lines = ["| method | " + " | ".join(f"lr x {m:g}" for m in grid.mults) + " |", "|---|" + "---|" * len(grid.mults)]
    for meth in grid.methods:
        lines.append(
            f"| {meth.label} | " + " | ".join(_stable_text(grid.stable(meth, m), grid.lags) for m in grid.mults) + " |"
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


def _moves(grid: Grid) -> list[str]:
    """Per SAT method and lr multiple: its stable lag against its base's."""
    out = []
    for s, b in grid.sat_pairs():
        parts, order = [], {None: -1, **{k: i for i, k in enumerate(grid.lags)}}
        for m in grid.mults:
            ss, sb = grid.stable(s, m), grid.stable(b, m)
            rel = "same" if ss == sb else "further" if order[ss] > order[sb] else "less far"
            parts.append(f"lr x {m:g}: {_stable_text(ss, grid.lags)} vs {_stable_text(sb, grid.lags)} ({rel})")
        out.append(f"- {s.label} against {b.label}: " + "; ".join(parts) + ".")
    return out


def summary_lines(grid: Grid, plan: Plan, reward_name: str) -> list[str]:
    spec = plan.specs[0]
    lines = [
        f"Reward = {reward_name} of the trainer's own policy on {spec.evaluation.size} held-out problems, "
        f"every {spec.evaluation.every} steps; final = mean of the last 3 evaluations. Collapsed (defined in "
        f"docs/demo.md before this sweep ran): {COLLAPSE.describe()}. Stable lag = the largest lag with no "
        f"collapsed seed at it or any smaller lag. Verdicts: SAT - its base, paired by seed, a WIN / LOSS only "
        f"beyond max({TOL_FLOOR}, 2 standard errors).",
        "",
        "## Stable lag",
        "",
    ]
    lines += stable_table(grid) + [""]
    top = grid.mults[-1]
    c = grid.get(Method("vanilla"), grid.lags[0], top)
    if c is not None:
        lines.append(
            f"At the top pressure (lr x {top:g}) GRPO collapses at lag {grid.lags[0]} in {len(c.reasons)} "
            f"of {len(c.runs)} seeds"
            + (
                ": the axis reaches where plain GRPO fails."
                if c.reasons
                else ": the axis does not reach where plain GRPO fails at lag 1."
            )
        )
        lines.append("")
    lines += ["## Does SAT move the frontier?", ""] + _moves(grid) + [""]
    verdict_lines, tally = sat_verdicts(grid)
    lines.append(
        f"Paired verdicts, SAT - its base over every cell: {tally['above']} WIN, {tally['tie']} tie, "
        f"{tally['below']} LOSS."
    )
    lines += ["", "## Paired verdicts", ""] + verdict_lines + ["## Collapse grid", ""] + collapse_grid(grid)
    return lines


def plot_heatmaps(grid: Grid, out: Path) -> Path:
    """One panel per method: lag (x) by lr multiple (y), colour = fraction of seeds collapsed, text = mean final
    reward change (final - warm start)."""
    import matplotlib.pyplot as plt

    n = len(grid.methods)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols + 1.0, 2.6 * rows + 0.6), squeeze=False)
    im = None
    for ax, meth in zip(axes.flat, grid.methods):
        frac = np.full((len(grid.mults), len(grid.lags)), np.nan)
        for i, m in enumerate(grid.mults):
            for j, k in enumerate(grid.lags):
                c = grid.get(meth, k, m)
                if c is None:
                    continue
                frac[i, j] = c.collapsed_frac
                ax.text(
                    j,
                    i,
                    f"{c.gain.mean:+.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if c.collapsed_frac > 0.5 else "black",
                )
        im = ax.imshow(frac, origin="lower", cmap="Reds", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(grid.lags)), [str(k) for k in grid.lags])
        ax.set_yticks(range(len(grid.mults)), [f"x{m:g}" for m in grid.mults])
        ax.set_xlabel("lag", fontsize=8)
        ax.set_ylabel("lr multiple", fontsize=8)
        ax.set_title(meth.label, fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="fraction of seeds collapsed")
    fig.suptitle("Stability frontier: colour = seeds collapsed, text = mean final reward - warm start", fontsize=10)
    path = out / "heatmaps.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_curves(grid: Grid, out: Path, reward_name: str) -> Path:
    """Mean evaluation reward over training per cell: lr multiple (rows) x lag (columns), one line per method."""
    import matplotlib.pyplot as plt

    from .plots import method_color, method_style

    fig, axes = plt.subplots(
        len(grid.mults),
        len(grid.lags),
        figsize=(2.8 * len(grid.lags), 2.2 * len(grid.mults)),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    for i, m in enumerate(reversed(grid.mults)):
        for j, k in enumerate(grid.lags):
            ax = axes[i][j]
            for meth in grid.methods:
                c = grid.get(meth, k, m)
                if c is None:
                    continue
                steps = [s for s, _ in c.runs[0].evals]
                ax.plot(
                    steps,
                    np.mean([[v for _, v in r.evals] for r in c.runs], axis=0),
                    color=method_color(meth),
                    ls=method_style(meth),
                    lw=1.2,
                    label=meth.label,
                )
            ax.set_title(f"lr x {m:g}, lag {k}", fontsize=8)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.supxlabel("trainer step", fontsize=9)
    fig.supylabel(f"eval reward ({reward_name})", fontsize=9)
    fig.tight_layout()
    path = out / "frontier_curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write(out: Path, plan: Plan, results: list[RunResult], header: list[str], reward_name: str) -> list[str]:
    """``frontier.csv``, ``frontier.md``, ``heatmaps.png``, ``frontier_curves.png`` and ``summary.md``; returns the
    file names."""
    grid = Grid(plan, results)
    rows = [
        c.row()
        for c in (grid.get(meth, k, m) for meth in grid.methods for m in grid.mults for k in grid.lags)
        if c is not None
    ]
    with (out / "frontier.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow(csv_row(row))
    body = summary_lines(grid, plan, reward_name) if rows else ["No run finished."]
    (out / "frontier.md").write_text(
        "\n".join(stable_table(grid) + [""] + collapse_grid(grid) + sat_verdicts(grid)[0]) + "\n"
    )
    (out / "summary.md").write_text("\n".join(header + body) + "\n")
    files = ["frontier.csv", "frontier.md", "summary.md"]
    if rows:
        files += [plot_heatmaps(grid, out).name, plot_curves(grid, out, reward_name).name]
    return files
