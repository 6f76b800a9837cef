"""The demo's plots (PNG, matplotlib): a lag sweep's reward curves, final reward against lag, SAT's diagnostics and
consumed lags, from lists of :class:`~sat_ext.demo.spec.RunResult`; a frontier's heatmaps and reward curves per
cell, from its :class:`~sat_ext.demo.tables.Grid`. Curves are means over seeds."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np

from .methods import Method
from .spec import RunResult
from .stats import paired
from .tables import Grid, finals_by_seed, group_runs

BASE_COLORS = {"vanilla": "#1f77b4", "gspo": "#ff7f0e", "dppo_tv": "#2ca02c", "sat": "#d62728", "sat_gspo": "#9467bd"}


def method_color(m: Method) -> str:
    """One colour per base loss."""
    return BASE_COLORS.get(m.loss, "#7f7f7f")


def method_style(m: Method) -> str:
    """Solid for SAT, dashed for the fixed clips; dotted for a method with R3 or TIS."""
    return ":" if (m.r3 or m.tis or m.toy) else "-" if m.is_sat else "--"


def _smooth(y: np.ndarray, w: int) -> np.ndarray:
    if w <= 1 or len(y) < w:
        return y
    kernel = np.ones(w) / w
    pad = np.concatenate([np.full(w // 2, y[0]), y, np.full(w - 1 - w // 2, y[-1])])
    return np.convolve(pad, kernel, mode="valid")


def _series(runs: list[RunResult], key: str) -> tuple[np.ndarray, np.ndarray]:
    steps = np.array([h["step"] for h in runs[0].history])
    ys = np.array([[h.get(key, np.nan) for h in r.history] for r in runs], dtype=float)
    return steps, np.nanmean(ys, axis=0)


def plot_reward_curves(
    results: list[RunResult], methods: Iterable[Method], lags: list[int], out: Path, reward_name: str = "exact match"
) -> Path:
    import matplotlib.pyplot as plt

    groups = group_runs(results)
    fig, axes = plt.subplots(1, len(lags), figsize=(4.2 * len(lags), 3.6), sharey=True, squeeze=False)
    for ax, lag in zip(axes[0], lags):
        start = None
        for m in methods:
            runs = groups.get((m, lag), [])
            if not runs:
                continue
            steps = np.array([s for s, _ in runs[0].evals])
            ys = np.array([[v for _, v in r.evals] for r in runs])
            mean = ys.mean(0)
            ax.plot(
                steps,
                mean,
                color=method_color(m),
                label=m.label,
                lw=2.0 if m.is_sat else 1.4,
                ls=method_style(m),
                marker="o" if m.is_sat else None,
                ms=2.5,
            )
            if len(runs) > 1:
                ax.fill_between(steps, ys.min(0), ys.max(0), color=method_color(m), alpha=0.12)
            start = mean[0]
        if start is not None:
            ax.axhline(start, color="grey", ls=":", lw=1)
        mode = results[0].spec.asynchrony.mode
        ax.set_title(f"lag {lag} ({'sync every' if mode == 'interval' else 'max lag'} {lag})")
        ax.set_xlabel("trainer step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"eval reward ({reward_name})")
    axes[0][-1].legend(loc="lower right", fontsize=8)
    fig.suptitle(
        "Reward of the trainer's policy by lag (mean over seeds, band = min..max; dotted = warm start)", fontsize=10
    )
    fig.tight_layout()
    path = out / "reward_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_final_vs_lag(rows: list[dict], out: Path, results: list[RunResult] | None = None) -> Path:
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"] for r in rows))
    lags = sorted({r["lag"] for r in rows})
    with_change = bool(results) and len(lags) > 1
    fig, axes = plt.subplots(1, 2 if with_change else 1, figsize=(11 if with_change else 5.6, 3.9), squeeze=False)
    ax = axes[0][0]
    offsets = np.linspace(-0.12, 0.12, max(len(methods), 1))
    for off, m in zip(offsets, methods):
        rs = sorted((r for r in rows if r["method"] == m), key=lambda r: r["lag"])
        x = np.array([lags.index(r["lag"]) for r in rs]) + off
        ax.errorbar(
            x,
            [r["final_mean"] for r in rs],
            yerr=[r["final_std"] for r in rs],
            marker="o",
            capsize=3,
            color=method_color(m),
            label=m.label,
            ls=method_style(m),
        )
    if rows:
        ax.axhline(float(np.mean([r["start_reward"] for r in rows])), color="grey", ls=":", lw=1, label="warm start")
    ax.set_xticks(range(len(lags)), [str(k) for k in lags])
    ax.set_xlabel("lag")
    ax.set_ylabel("final eval reward")
    ax.set_title("Final reward (mean ± std over seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if with_change:
        ax = axes[0][1]
        for off, m in zip(offsets, methods):
            xs, ms, ses = [], [], []
            for k in lags:
                d = paired(finals_by_seed(results, m, k), finals_by_seed(results, m, lags[0]))
                if d is None:
                    continue
                xs.append(lags.index(k) + off)
                ms.append(d.mean)
                ses.append(d.se if math.isfinite(d.se) else 0.0)
            ax.errorbar(
                xs,
                ms,
                yerr=ses,
                marker="o",
                capsize=3,
                color=method_color(m),
                label=m.label,
                ls=method_style(m),
            )
        ax.axhline(0.0, color="grey", lw=1)
        ax.set_xticks(range(len(lags)), [str(k) for k in lags])
        ax.set_xlabel("lag")
        ax.set_ylabel(f"final(lag) - final(lag {lags[0]})")
        ax.set_title(f"Change from lag {lags[0]}, paired by seed (mean ± s.e.)", fontsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "final_vs_lag.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sat_diagnostics(results: list[RunResult], lags: list[int], out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    groups = group_runs(results)
    ran = list(dict.fromkeys(m for m, _ in groups))
    sat_methods = [m for m in ran if m.is_sat and any(groups.get((m, k)) for k in lags)]
    if not sat_methods:
        return None
    cmap = plt.get_cmap("viridis")
    panels = [
        ("actor/sat/gate_rate", "gate rate"),
        ("radius_rel", "mean radius / nominal\n(solid upper, dashed lower)"),
        ("actor/sat/newly_clipped_frac", "newly clipped by SAT"),
        ("actor/sat/threshold_q", "gate threshold q"),
    ]
    fig, axes = plt.subplots(
        len(sat_methods), len(panels), figsize=(4.0 * len(panels), 3.0 * len(sat_methods)), squeeze=False
    )
    for row, m in zip(axes, sat_methods):
        for ax, (key, title) in zip(row, panels):
            for i, lag in enumerate(lags):
                runs = groups.get((m, lag), [])
                if not runs:
                    continue
                color = cmap(i / max(len(lags) - 1, 1))
                if key == "radius_rel":
                    s = runs[0].spec.setting
                    steps, hi = _series(runs, "actor/sat/radius_high_mean")
                    _, lo = _series(runs, "actor/sat/radius_low_mean")
                    ax.plot(steps, _smooth(hi / s.eps_high, 9), color=color, lw=1.4, label=f"lag {lag}")
                    ax.plot(steps, _smooth(lo / s.eps_low, 9), color=color, lw=1.0, ls="--")
                else:
                    steps, y = _series(runs, key)
                    ax.plot(steps, _smooth(y, 9), color=color, lw=1.4, label=f"lag {lag}")
            ax.set_title(f"{m.label}: {title}", fontsize=9)
            ax.set_xlabel("trainer step", fontsize=8)
            ax.grid(alpha=0.3)
            if key == "actor/sat/threshold_q":
                ax.set_yscale("log")
                run0 = next((r for k in lags for r in groups.get((m, k), [])), None)
                if run0 is not None:
                    eps = run0.spec.setting.eps_high
                    ax.axhline(eps, color="k", ls="--", lw=1)
                    ax.text(
                        0.02,
                        eps,
                        f" nominal radius {eps:g}",
                        transform=ax.get_yaxis_transform(),
                        va="bottom",
                        fontsize=7,
                    )
        row[0].legend(fontsize=7)
    fig.suptitle("SAT diagnostics (actor/sat/*, mean over seeds, 9-step moving average)", fontsize=10)
    fig.tight_layout()
    path = out / "sat_diagnostics.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_lag_histogram(results: list[RunResult], lags: list[int], out: Path) -> Path:
    import matplotlib.pyplot as plt

    groups = defaultdict(list)
    for r in results:
        if r.error is None:
            groups[r.spec.lag].append(r)
    fig, axes = plt.subplots(2, len(lags), figsize=(3.6 * len(lags), 5.6), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for j, lag in enumerate(lags):
        runs = groups.get(lag, [])
        counts: dict[int, int] = defaultdict(int)
        for r in runs:
            for k, v in r.lag_counts.items():
                counts[k] += v
        ax = axes[0][j]
        if counts:
            xs = np.arange(0, max(counts) + 1)
            total = sum(counts.values())
            ax.bar(xs, [counts.get(int(x), 0) / total for x in xs], color=cmap(j / max(len(lags) - 1, 1)))
            top = max(counts)
            ax.set_xticks(range(0, top + 1, max(1, int(math.ceil((top + 1) / 9)))))
            ax.set_xlim(-0.7, top + 0.7)
        dropped = sum(r.totals.get("dropped", 0.0) + r.totals.get("regenerated", 0.0) for r in runs)
        ax.set_title(
            f"lag {lag}: consumed sample lags" + (f"\n({dropped:.0f} dropped/regenerated)" if dropped else ""),
            fontsize=9,
        )
        ax.set_xlabel("lag (trainer steps)", fontsize=8)
        ax.set_ylabel("fraction of prompt groups", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        ax2 = axes[1][j]
        if runs:
            for key, ls in (("abs_log_ratio/mean", "-"), ("abs_log_ratio/p99", "--"), ("abs_log_ratio/max", ":")):
                steps, y = _series(runs, key)
                ax2.plot(steps, _smooth(y, 9), ls=ls, color="k", lw=1.1, label=key.split("/")[1])
        ax2.set_yscale("log")
        ax2.set_title(f"lag {lag}: staleness |log r| per step", fontsize=9)
        ax2.set_xlabel("trainer step", fontsize=8)
        ax2.grid(alpha=0.3)
        if j == 0:
            ax2.legend(fontsize=7)
    fig.suptitle(
        "Consumed lags (all runs) and the staleness they produce\n"
        "log r = trainer log-prob - rollout log-prob of the sampled tokens",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "lag_histogram.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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


def plot_frontier_curves(grid: Grid, out: Path, reward_name: str) -> Path:
    """Mean evaluation reward over training per cell: lr multiple (rows) x lag (columns), one line per method."""
    import matplotlib.pyplot as plt

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
