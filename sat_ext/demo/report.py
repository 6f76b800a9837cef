"""The demo's outputs: the results table (CSV + markdown), the PNG plots and the text summary.

Every number comes from :class:`~sat_ext.demo.train.RunResult`\\ s; "reward" is the exact-match reward of
the trainer's own policy (float32, sampled at the run's temperature) on a fixed held-out set, "final" the
mean of its last three evaluations and "best" its maximum, each then averaged over seeds (spread: the
sample standard deviation over seeds, 0 with one seed).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np

from .methods import PAPER_LOGRATIO_VAR, PAPER_TABLE1, label, parse_method
from .train import RunResult

BASE_COLORS = {"vanilla": "#1f77b4", "gspo": "#ff7f0e", "dppo_tv": "#2ca02c", "sat": "#d62728", "sat_gspo": "#9467bd"}


def _color(key: str) -> str:
    return BASE_COLORS.get(parse_method(key).loss, "#7f7f7f")


def _is_sat(key: str) -> bool:
    return parse_method(key).is_sat


def _style(key: str) -> str:
    """Solid for SAT, dashed for the fixed clips; dotted for a method with R3 or TIS."""
    m = parse_method(key)
    return ":" if (m.r3 or m.tis or m.toy) else "-" if m.is_sat else "--"
TABLE_FIELDS = (
    "loss", "label", "mode", "lag", "seeds", "start_reward", "final_mean", "final_std", "best_mean", "best_std",
    "gain_mean", "lag_steps_mean", "lag_steps_max", "abs_log_ratio_mean", "abs_log_ratio_p99", "log_ratio_var",
    "d_pi", "d_pi_tail", "engine_mismatch", "clipfrac",
    "sat_gate_rate", "sat_radius_low", "sat_radius_high", "sat_newly_clipped", "dropped", "regenerated",
    "nonfinite_steps", "wall_s",
)


def _std(xs: list[float]) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


def _hmean(r: RunResult, key: str) -> float:
    vals = [h[key] for h in r.history if key in h and math.isfinite(h[key])]
    return float(np.mean(vals)) if vals else float("nan")


def _tail_mean(r: RunResult, key: str, frac: float = 0.25) -> float:
    """Mean of ``key`` over the last ``frac`` of the run's steps (the paper's trailing-25% d_pi)."""
    vals = [h[key] for h in r.history if key in h and math.isfinite(h[key])]
    tail = vals[-max(1, int(len(vals) * frac)):]
    return float(np.mean(tail)) if tail else float("nan")


def group_runs(results: Iterable[RunResult]) -> dict[tuple[str, int], list[RunResult]]:
    groups: dict[tuple[str, int], list[RunResult]] = defaultdict(list)
    for r in results:
        groups[(r.spec.loss, r.spec.lag)].append(r)
    return groups


def table_rows(results: list[RunResult], losses: list[str], lags: list[int]) -> list[dict]:
    """One row per (loss, lag) in the given order, with the seed mean and spread."""
    groups = group_runs(results)
    rows = []
    for loss in losses:
        for lag in lags:
            runs = [r for r in groups.get((loss, lag), []) if r.error is None]
            if not runs:
                continue
            finals, bests = [r.final for r in runs], [r.best for r in runs]
            starts = [r.evals[0][1] for r in runs]
            lag_max = max(max(r.lag_counts) for r in runs if r.lag_counts)
            n_lag = sum(sum(r.lag_counts.values()) for r in runs)
            lag_mean = sum(k * v for r in runs for k, v in r.lag_counts.items()) / max(n_lag, 1)
            sat = _is_sat(loss)
            rows.append({
                "loss": loss, "label": label(loss), "mode": runs[0].spec.mode, "lag": lag,
                "seeds": len(runs), "start_reward": float(np.mean(starts)),
                "final_mean": float(np.mean(finals)), "final_std": _std(finals),
                "best_mean": float(np.mean(bests)), "best_std": _std(bests),
                "gain_mean": float(np.mean(finals) - np.mean(starts)),
                "lag_steps_mean": lag_mean, "lag_steps_max": float(lag_max),
                "abs_log_ratio_mean": float(np.mean([_hmean(r, "abs_log_ratio/mean") for r in runs])),
                "abs_log_ratio_p99": float(np.mean([_hmean(r, "abs_log_ratio/p99") for r in runs])),
                "log_ratio_var": float(np.mean([_hmean(r, "log_ratio/var") for r in runs])),
                "d_pi": float(np.mean([_hmean(r, "mismatch/d_pi") for r in runs])),
                "d_pi_tail": float(np.mean([_tail_mean(r, "mismatch/d_pi") for r in runs])),
                "engine_mismatch": float(np.mean([_hmean(r, "mismatch/engine") for r in runs])),
                "clipfrac": float(np.mean([_hmean(r, "actor/pg_clipfrac") for r in runs])),
                "sat_gate_rate": float(np.mean([_hmean(r, "actor/sat/gate_rate") for r in runs])) if sat else float("nan"),
                "sat_radius_low": float(np.mean([_hmean(r, "actor/sat/radius_low_mean") for r in runs])) if sat else float("nan"),
                "sat_radius_high": float(np.mean([_hmean(r, "actor/sat/radius_high_mean") for r in runs])) if sat else float("nan"),
                "sat_newly_clipped": float(np.mean([_hmean(r, "actor/sat/newly_clipped_frac") for r in runs])) if sat else float("nan"),
                "dropped": float(np.mean([r.totals.get("dropped", 0.0) for r in runs])),
                "regenerated": float(np.mean([r.totals.get("regenerated", 0.0) for r in runs])),
                "nonfinite_steps": float(np.mean([r.totals.get("nonfinite_steps", 0.0) for r in runs])),
                "wall_s": float(np.mean([r.wall_s for r in runs])),
            })
    return rows


def _fmt(x: float, digits: int = 3) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.{digits}f}"


def write_tables(rows: list[dict], out: Path) -> tuple[Path, Path]:
    csv_path, md_path = out / "results.csv", out / "results.md"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    lags = sorted({r["lag"] for r in rows})
    losses = list(dict.fromkeys(r["loss"] for r in rows))
    by = {(r["loss"], r["lag"]): r for r in rows}
    seeds = max((r["seeds"] for r in rows), default=0)
    mode = rows[0]["mode"] if rows else "interval"
    lag_name = "interval k" if mode == "interval" else "max_lag L"
    lines = [f"Final eval reward (mean of the last 3 evaluations), mean ± std over {seeds} seed(s); "
             f"lag = {lag_name} ({mode} mode). Start (warm-start) reward: "
             + ", ".join(sorted({_fmt(r['start_reward']) for r in rows})) + ".", ""]
    lines.append("| loss | " + " | ".join(f"lag {k}" for k in lags) + " |")
    lines.append("|---|" + "---|" * len(lags))
    for loss in losses:
        cells = []
        for k in lags:
            r = by.get((loss, k))
            cells.append("—" if r is None else f"{_fmt(r['final_mean'])} ± {_fmt(r['final_std'])}")
        lines.append(f"| {label(loss)} | " + " | ".join(cells) + " |")
    lines += ["", "Per loss and lag: final and best reward (mean ± std over seeds), consumed lag in trainer steps "
              "(mean / max), staleness |log r| (mean / p99 per step, averaged), clip fraction, SAT gate rate and "
              "mean effective radii (lower / upper).", ""]
    lines.append("| loss | lag | seeds | final | best | lag mean / max | abs log r mean / p99 | clipfrac | "
                 "SAT gate | SAT radius lo / hi | dropped |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sat = _is_sat(r["loss"])
        lines.append(
            f"| {r['label']} | {r['lag']} | {r['seeds']} | {_fmt(r['final_mean'])} ± {_fmt(r['final_std'])} | "
            f"{_fmt(r['best_mean'])} ± {_fmt(r['best_std'])} | {r['lag_steps_mean']:.1f} / {r['lag_steps_max']:.0f} | "
            f"{_fmt(r['abs_log_ratio_mean'])} / {_fmt(r['abs_log_ratio_p99'])} | {_fmt(r['clipfrac'])} | "
            + (f"{_fmt(r['sat_gate_rate'])} | {r['sat_radius_low']:.3g} / {r['sat_radius_high']:.3g}" if sat else "— | —")
            + f" | {r['dropped']:.0f} |"
        )
    md_path.write_text("\n".join(lines) + "\n")
    return csv_path, md_path


# --------------------------------------------------------------------------- plots

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


def plot_reward_curves(results: list[RunResult], losses: list[str], lags: list[int], out: Path) -> Path:
    import matplotlib.pyplot as plt

    groups = group_runs(results)
    fig, axes = plt.subplots(1, len(lags), figsize=(4.2 * len(lags), 3.6), sharey=True, squeeze=False)
    for ax, lag in zip(axes[0], lags):
        start = None
        for loss in losses:
            runs = [r for r in groups.get((loss, lag), []) if r.error is None]
            if not runs:
                continue
            steps = np.array([s for s, _ in runs[0].evals])
            ys = np.array([[v for _, v in r.evals] for r in runs])
            mean = ys.mean(0)
            sat = _is_sat(loss)
            ax.plot(steps, mean, color=_color(loss), label=label(loss), lw=2.0 if sat else 1.4,
                    ls=_style(loss), marker="o" if sat else None, ms=2.5)
            if len(runs) > 1:
                ax.fill_between(steps, ys.min(0), ys.max(0), color=_color(loss), alpha=0.12)
            start = mean[0]
        if start is not None:
            ax.axhline(start, color="grey", ls=":", lw=1)
        mode = results[0].spec.mode
        ax.set_title(f"lag {lag} ({'sync every' if mode == 'interval' else 'max lag'} {lag})")
        ax.set_xlabel("trainer step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("eval reward (exact match)")
    axes[0][-1].legend(loc="lower right", fontsize=8)
    fig.suptitle("Reward of the trainer's policy by lag (mean over seeds, band = min..max; dotted = warm start)",
                 fontsize=10)
    fig.tight_layout()
    path = out / "reward_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_final_vs_lag(rows: list[dict], out: Path, results: list[RunResult] | None = None) -> Path:
    import matplotlib.pyplot as plt

    losses = list(dict.fromkeys(r["loss"] for r in rows))
    lags = sorted({r["lag"] for r in rows})
    paired = bool(results) and len(lags) > 1
    fig, axes = plt.subplots(1, 2 if paired else 1, figsize=(11 if paired else 5.6, 3.9), squeeze=False)
    ax = axes[0][0]
    offsets = np.linspace(-0.12, 0.12, max(len(losses), 1))
    for off, loss in zip(offsets, losses):
        rs = sorted((r for r in rows if r["loss"] == loss), key=lambda r: r["lag"])
        x = np.array([lags.index(r["lag"]) for r in rs]) + off
        ax.errorbar(x, [r["final_mean"] for r in rs], yerr=[r["final_std"] for r in rs], marker="o", capsize=3,
                    color=_color(loss), label=r_label(loss), ls=_style(loss))
    if rows:
        ax.axhline(float(np.mean([r["start_reward"] for r in rows])), color="grey", ls=":", lw=1, label="warm start")
    ax.set_xticks(range(len(lags)), [str(k) for k in lags])
    ax.set_xlabel("lag")
    ax.set_ylabel("final eval reward")
    ax.set_title("Final reward (mean ± std over seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if paired:
        ax = axes[0][1]
        for off, loss in zip(offsets, losses):
            xs, ms, ses = [], [], []
            for k in lags:
                d = _paired(results, (loss, k), (loss, lags[0]))
                if d is None:
                    continue
                xs.append(lags.index(k) + off)
                ms.append(d[0])
                ses.append(d[1] if math.isfinite(d[1]) else 0.0)
            ax.errorbar(xs, ms, yerr=ses, marker="o", capsize=3, color=_color(loss), label=r_label(loss),
                        ls=_style(loss))
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


def r_label(loss: str) -> str:
    return label(loss)


def plot_sat_diagnostics(results: list[RunResult], lags: list[int], out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    groups = group_runs(results)
    keys = list(dict.fromkeys(l for l, _ in groups))
    sat_losses = [l for l in keys if _is_sat(l) and any(groups.get((l, k)) for k in lags)]
    if not sat_losses:
        return None
    cmap = plt.get_cmap("viridis")
    panels = [("actor/sat/gate_rate", "gate rate"),
              ("radius_rel", "mean radius / nominal\n(solid upper, dashed lower)"),
              ("actor/sat/newly_clipped_frac", "newly clipped by SAT"),
              ("actor/sat/threshold_q", "gate threshold q")]
    fig, axes = plt.subplots(len(sat_losses), len(panels), figsize=(4.0 * len(panels), 3.0 * len(sat_losses)),
                             squeeze=False)
    for row, loss in zip(axes, sat_losses):
        for ax, (key, title) in zip(row, panels):
            for i, lag in enumerate(lags):
                runs = [r for r in groups.get((loss, lag), []) if r.error is None]
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
            ax.set_title(f"{r_label(loss)}: {title}", fontsize=9)
            ax.set_xlabel("trainer step", fontsize=8)
            ax.grid(alpha=0.3)
            if key == "actor/sat/threshold_q":
                ax.set_yscale("log")
                run0 = next((r for k in lags for r in groups.get((loss, k), [])), None)
                if run0 is not None:
                    eps = run0.spec.setting.eps_high
                    ax.axhline(eps, color="k", ls="--", lw=1)
                    ax.text(0.02, eps, f" nominal radius {eps:g}", transform=ax.get_yaxis_transform(),
                            va="bottom", fontsize=7)
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
        ax.set_title(f"lag {lag}: consumed sample lags" + (f"\n({dropped:.0f} dropped/regenerated)" if dropped else ""),
                     fontsize=9)
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
    fig.suptitle("Consumed lags (all runs) and the staleness they produce\n"
                 "log r = trainer log-prob - rollout log-prob of the sampled tokens", fontsize=10)
    fig.tight_layout()
    path = out / "lag_histogram.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- summary

def _sat_base(key: str) -> str:
    return parse_method(key).base().key


def _paired(results: list[RunResult], a: tuple[str, int], b: tuple[str, int]) -> tuple[float, float, int] | None:
    """Mean and standard error over seeds of final(a) - final(b), paired by seed (same warm start, prompts,
    sampling noise and eval draws), or None when no seed has both."""
    fa = {r.spec.seed: r.final for r in results if (r.spec.loss, r.spec.lag) == a and r.error is None}
    fb = {r.spec.seed: r.final for r in results if (r.spec.loss, r.spec.lag) == b and r.error is None}
    diffs = [fa[s] - fb[s] for s in sorted(set(fa) & set(fb))]
    if not diffs:
        return None
    se = float(np.std(diffs, ddof=1) / math.sqrt(len(diffs))) if len(diffs) > 1 else float("nan")
    return float(np.mean(diffs)), se, len(diffs)


def _verdict(diff: tuple[float, float, int], tol_floor: float) -> tuple[str, float]:
    mean, se, _n = diff
    tol = max(tol_floor, 2 * se) if math.isfinite(se) else max(tol_floor, 0.05)
    return ("above" if mean > tol else "below" if mean < -tol else "tie"), tol


def _gate_means(results: list[RunResult], loss: str, lag: int) -> dict[str, float]:
    keys = ("actor/sat/threshold_q", "actor/sat/newly_clipped_frac", "actor/sat/gate_rate")
    runs = [r for r in results if (r.spec.loss, r.spec.lag) == (loss, lag) and r.error is None]
    return {k.split("/")[-1]: float(np.mean([_hmean(r, k) for r in runs])) for k in keys} if runs else {}


def _cell(by: dict, key: str, lag: int, field: str, fmt: str) -> str:
    r = by.get((key, lag))
    return "—" if r is None or not math.isfinite(r[field]) else format(r[field], fmt)


def paper_lines(rows: list[dict], denominator: str) -> list[str]:
    """The paper's figures beside the demo's: the calibration (Table 1's d_pi and Table 8's log-ratio variance
    at lag 1 and 8) and Table 1's AIME24 column beside the demo's final reward, for every method that ran."""
    by = {(r["loss"], r["lag"]): r for r in rows}
    keys = [k for k in dict.fromkeys(r["loss"] for r in rows) if k in PAPER_TABLE1]
    lags = sorted({r["lag"] for r in rows})
    if not keys or not {1, 8} & set(lags):
        return []
    var_l1, var_l8 = PAPER_LOGRATIO_VAR[denominator]
    lines = ["Calibration against the paper (lag 1 and lag 8; the demo's d_pi = mean |log pi - log mu| over the "
             "trailing 25% of each run, the paper's = Table 1's last-epoch mean; log-ratio variance = variance of "
             f"the loss's log-ratio with the {denominator} denominator, Table 8 for GRPO):", "",
             "| method | paper d_pi lag 1 | demo d_pi lag 1 | paper d_pi lag 8 | demo d_pi lag 8 | "
             "paper AIME24 lag 1 / 8 | demo final reward lag 1 / 8 |", "|---|---|---|---|---|---|---|"]
    for k in keys:
        p = PAPER_TABLE1[k]
        lines.append(f"| {label(k)} | {p[2]:.4f} | {_cell(by, k, 1, 'd_pi_tail', '.4f')} | {p[3]:.4f} | "
                     f"{_cell(by, k, 8, 'd_pi_tail', '.4f')} | {p[0]:.2f} / {p[1]:.2f} | "
                     f"{_cell(by, k, 1, 'final_mean', '.3f')} / {_cell(by, k, 8, 'final_mean', '.3f')} |")
    if "vanilla" in keys:
        lines.append(f"| GRPO log-ratio variance (Table 8) | {var_l1:.1e} | {_cell(by, 'vanilla', 1, 'log_ratio_var', '.1e')}"
                     f" | {var_l8:.1e} | {_cell(by, 'vanilla', 8, 'log_ratio_var', '.1e')} | | |")
        lines.append(f"| GRPO engine mismatch at equal weights, mean abs(log pi^(l) - log mu) | — | "
                     f"{_cell(by, 'vanilla', 1, 'engine_mismatch', '.4f')} | — | "
                     f"{_cell(by, 'vanilla', 8, 'engine_mismatch', '.4f')} | | |")
    lines += ["", "AIME24 (30B model, pass@1 %) and the demo's exact-match reward are different scales: compare "
              "orderings, not values. The paper's cells are one seed each.", ""]
    return lines


def summarize(rows: list[dict], header: list[str], results: list[RunResult] | None = None,
              tol_floor: float = 0.03, eval_size: int = 256) -> str:
    """An honest reading of the table, with comparisons paired by seed.

    Every comparison is a difference of final rewards between two runs of the same seed (same warm start,
    prompt stream and sampling noise), averaged over seeds; it counts only when its mean exceeds
    ``tol`` = max(tol_floor, 2 standard errors of the paired difference), otherwise it is a tie.
    """
    results = results or []
    by = {(r["loss"], r["lag"]): r for r in rows}
    losses = list(dict.fromkeys(r["loss"] for r in rows))
    lags = sorted({r["lag"] for r in rows})
    lines = list(header)
    if not rows:
        return "\n".join(lines + ["No run finished."]) + "\n"
    seeds = max(r["seeds"] for r in rows)
    start = float(np.mean([r["start_reward"] for r in rows]))
    lo_lag = lags[0]
    if results:
        lines += paper_lines(rows, results[0].spec.denominator)
    lines.append(f"Reward = exact match of the trainer's own policy on {eval_size} held-out problems (sampled at "
                 f"temperature 1); final = mean of the last 3 evaluations; warm start {start:.3f} (mean over "
                 f"{seeds} seed(s)). Comparisons are paired by seed; a difference counts only above "
                 f"max({tol_floor}, 2 standard errors of the paired difference), otherwise it is a tie.")
    lines.append("")
    lines.append(f"Does reward rise at lag {lo_lag}? (final - warm start, same seed)")
    for loss in losses:
        runs = [r for r in results if (r.spec.loss, r.spec.lag) == (loss, lo_lag) and r.error is None]
        if not runs:
            continue
        gains = [r.final - r.evals[0][1] for r in runs]
        se = float(np.std(gains, ddof=1) / math.sqrt(len(gains))) if len(gains) > 1 else float("nan")
        word, _ = _verdict((float(np.mean(gains)), se, len(gains)), tol_floor)
        lines.append(f"- {label(loss)}: {np.mean(gains):+.3f}" + (f" ± {se:.3f}" if math.isfinite(se) else "")
                     + (" (rises)" if word == "above" else " (falls)" if word == "below" else " (no clear change)"))
    lines.append("")
    lines.append(f"Where each loss breaks as lag grows (final at lag k - final at lag {lo_lag}, same seed):")
    for loss in losses:
        if (loss, lo_lag) not in by:
            continue
        parts, broke = [], None
        for k in lags[1:]:
            d = _paired(results, (loss, k), (loss, lo_lag))
            if d is None:
                continue
            word, tol = _verdict(d, tol_floor)
            parts.append(f"lag {k} {d[0]:+.3f}" + (f" ± {d[1]:.3f}" if math.isfinite(d[1]) else ""))
            if word == "below" and broke is None:
                broke = k
        final_hi = by.get((loss, lags[-1]))
        collapse = final_hi is not None and final_hi["final_mean"] < start - tol_floor
        if broke is None:
            verdict = f"no lag tried is clearly worse than lag {lo_lag}"
        else:
            verdict = f"first clearly worse at lag {broke}"
        if collapse:
            verdict += f"; at lag {lags[-1]} it ends below its warm start (collapse)"
        lines.append(f"- {label(loss)}: " + (", ".join(parts) if parts else "(one lag only)")
                     + f"; {verdict}.")
    sat_losses = [l for l in losses if _is_sat(l)]
    baselines = [l for l in losses if not _is_sat(l)]
    lines.append("")
    if sat_losses and baselines:
        lines.append("Does SAT win? (SAT - baseline, same seed)")
        tally = {"above": 0, "tie": 0, "below": 0}
        for k in lags:
            cells = []
            for s in sat_losses:
                rivals = [_sat_base(s)] if _sat_base(s) in baselines else []
                best = max((b for b in baselines if (b, k) in by), key=lambda b: by[(b, k)]["final_mean"], default=None)
                if best is not None and best not in rivals:
                    rivals.append(best)
                for b in rivals:
                    d = _paired(results, (s, k), (b, k))
                    if d is None:
                        continue
                    word, tol = _verdict(d, tol_floor)
                    tally[word] += 1
                    tag = "its base" if b == _sat_base(s) else "best baseline"
                    cells.append(f"{label(s)} vs {label(b)} ({tag}) {d[0]:+.3f}"
                                 + (f" ± {d[1]:.3f}" if math.isfinite(d[1]) else "")
                                 + {"above": " WIN", "below": " LOSS", "tie": " tie"}[word])
            if cells:
                lines.append(f"- lag {k}: " + "; ".join(cells))
        lines.append(f"Overall: SAT wins {tally['above']}, ties {tally['tie']}, loses {tally['below']} of "
                     f"{sum(tally.values())} comparisons.")
    elif sat_losses:
        lines.append("Only SAT losses ran, so there is no comparison with a baseline.")
    if sat_losses:
        lines.append("")
        lines.append("Does SAT's gate engage? (per step averages) gate rate (share of tokens with |d| > q; at most "
                     "10%, ties make it lower), gate threshold q (the 90% quantile of |d|) against the nominal "
                     "radius, and the fraction of tokens SAT newly clipped (inside the nominal interval, outside "
                     "the contracted one):")
        for s in sat_losses:
            run0 = next((r for r in results if r.spec.loss == s), None)
            eps = run0.spec.setting.eps_high if run0 else float("nan")
            cells = []
            crossed = None
            for k in lags:
                g = _gate_means(results, s, k)
                if not g:
                    continue
                cells.append(f"lag {k}: gate {g['gate_rate']:.3f}, q {g['threshold_q']:.3f}, "
                             f"newly clipped {g['newly_clipped_frac']:.4f}")
                if crossed is None and g["threshold_q"] > eps:
                    crossed = k
            note = f" q stays below the nominal radius {eps:g} at every lag: the gate can act."
            if crossed is not None:
                note = (f" From lag {crossed} on q exceeds the nominal radius {eps:g}, so every gated token starts "
                        f"the update already outside the nominal interval: the contraction then mostly lands where "
                        f"the base loss clips anyway.")
            lines.append(f"- {label(s)}: " + "; ".join(cells) + "." + note)
    if len(lags) > 1:
        lines.append("")
        cells = []
        for k in lags:
            rk = [r for r in rows if r["lag"] == k]
            cells.append(f"lag {k}: sample lag {np.mean([r['lag_steps_mean'] for r in rk]):.1f} mean / "
                         f"{max(r['lag_steps_max'] for r in rk):.0f} max steps, |log r| mean "
                         f"{np.mean([r['abs_log_ratio_mean'] for r in rk]):.3f}, p99 "
                         f"{np.mean([r['abs_log_ratio_p99'] for r in rk]):.2f}")
        denominator = results[0].spec.ratio_denominator if results else "checkpoint"
        what = ("the policy-update lag alone (checkpoint denominator: the engine's mismatch is out of the ratio)"
                if denominator == "checkpoint" else "the policy-update lag plus the engine's mismatch (rollout "
                "denominator)")
        lines.append("Staleness consumed (all methods; log r = the losses' log-ratio, " + what + "): "
                     + "; ".join(cells) + ".")
    return "\n".join(lines) + "\n"
