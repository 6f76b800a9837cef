"""The demo's reading of a sweep (``summary.md``): every comparison paired by seed, decided by
:mod:`sat_ext.demo.stats`.

Sections: the calibration against the paper (:mod:`sat_ext.demo.paper`), whether reward rises at the
smallest lag, where each method first gets clearly worse as lag grows (and which seeds collapsed), SAT
against its base and the best baseline at each lag (WIN / tie / LOSS), whether SAT's gate engages, and the
staleness consumed. A frontier's (:func:`frontier_summary`): the stable lag of each method per lr multiple,
whether SAT moves it against its base, the paired verdicts and the collapse grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .methods import Method
from .paper import paper_lines
from .spec import Evaluation, RunResult
from .stats import ABOVE, BELOW, COLLAPSE, TOL_FLOOR, WORDS, Diff, mean_se, paired, verdict
from .tables import Grid, collapse_grid, finals_by_seed, group_runs, hmean, sat_verdicts, stable_table, stable_text


@dataclass
class _Sweep:
    """What every section reads: the table rows by (method, lag), the finished runs, the methods and lags."""

    rows: list[dict]
    results: list[RunResult]
    tol_floor: float

    def __post_init__(self) -> None:
        self.by = {(r["method"], r["lag"]): r for r in self.rows}
        self.methods: list[Method] = list(dict.fromkeys(r["method"] for r in self.rows))
        self.lags = sorted({r["lag"] for r in self.rows})
        self.groups = group_runs(self.results)

    def diff(self, a: tuple[Method, int], b: tuple[Method, int]) -> Diff | None:
        return paired(finals_by_seed(self.results, *a), finals_by_seed(self.results, *b))


def sat_rivals(sat: Method, baselines: list[Method], best: Method | None) -> list[tuple[Method, str]]:
    """The baselines a SAT method is compared with: (its base, "its base") when it ran, and the best baseline at
    that lag, (best, "best baseline"), when that is another method."""
    base = sat.base()
    rivals = [(base, "its base")] if base in baselines else []
    if best is not None and best != base:
        rivals.append((best, "best baseline"))
    return rivals


def _rise(sw: _Sweep) -> list[str]:
    lo = sw.lags[0]
    lines = [f"Does reward rise at lag {lo}? (final - warm start, same seed)"]
    for m in sw.methods:
        runs = sw.groups.get((m, lo), [])
        if not runs:
            continue
        gain = mean_se([r.final - r.start for r in runs])
        word, _ = verdict(gain, sw.tol_floor)
        lines.append(
            f"- {m.label}: {gain.describe()}"
            + (" (rises)" if word == ABOVE else " (falls)" if word == BELOW else " (no clear change)")
        )
    return lines


def _breaks(sw: _Sweep) -> list[str]:
    lo = sw.lags[0]
    lines = [
        f"Where each loss breaks as lag grows (final at lag k - final at lag {lo}, same seed; collapsed = "
        f"{COLLAPSE.describe()}):"
    ]
    for m in sw.methods:
        if (m, lo) not in sw.by:
            continue
        parts, broke = [], None
        for k in sw.lags[1:]:
            d = sw.diff((m, k), (m, lo))
            if d is None:
                continue
            parts.append(f"lag {k} {d.describe()}")
            if verdict(d, sw.tol_floor)[0] == BELOW and broke is None:
                broke = k
        text = (
            f"no lag tried is clearly worse than lag {lo}" if broke is None else f"first clearly worse at lag {broke}"
        )
        fell = [
            f"lag {k}: {sw.by[(m, k)]['collapsed']} of {sw.by[(m, k)]['seeds']}"
            for k in sw.lags
            if (m, k) in sw.by and sw.by[(m, k)]["collapsed"]
        ]
        text += "; collapsed seeds " + ", ".join(fell) if fell else "; no seed collapsed"
        lines.append(f"- {m.label}: " + (", ".join(parts) if parts else "(one lag only)") + f"; {text}.")
    return lines


def _sat_wins(sw: _Sweep) -> list[str]:
    sat_methods = [m for m in sw.methods if m.is_sat]
    baselines = [m for m in sw.methods if not m.is_sat]
    if not sat_methods:
        return []
    if not baselines:
        return ["Only SAT losses ran, so there is no comparison with a baseline."]
    lines = ["Does SAT win? (SAT - baseline, same seed)"]
    tally = {w: 0 for w in WORDS}
    for k in sw.lags:
        best = max((b for b in baselines if (b, k) in sw.by), key=lambda b: sw.by[(b, k)]["final_mean"], default=None)
        cells = []
        for s in sat_methods:
            for b, tag in sat_rivals(s, baselines, best):
                d = sw.diff((s, k), (b, k))
                if d is None:
                    continue
                word, _ = verdict(d, sw.tol_floor)
                tally[word] += 1
                cells.append(f"{s.label} vs {b.label} ({tag}) {d.describe()} {WORDS[word]}")
        if cells:
            lines.append(f"- lag {k}: " + "; ".join(cells))
    lines.append(
        f"Overall: SAT wins {tally['above']}, ties {tally['tie']}, loses {tally['below']} of "
        f"{sum(tally.values())} comparisons."
    )
    return lines


def _gate(sw: _Sweep) -> list[str]:
    sat_methods = [m for m in sw.methods if m.is_sat]
    if not sat_methods:
        return []
    lines = [
        "Does SAT's gate engage? (per step averages) gate rate (share of tokens with |d| > q; at most "
        "10%, ties make it lower), gate threshold q (the 90% quantile of |d|) against the nominal "
        "radius, and the fraction of tokens SAT newly clipped (inside the nominal interval, outside "
        "the contracted one):"
    ]
    keys = ("actor/sat/threshold_q", "actor/sat/newly_clipped_frac", "actor/sat/gate_rate")
    for s in sat_methods:
        run0 = next((r for k in sw.lags for r in sw.groups.get((s, k), [])), None)
        eps = run0.spec.setting.eps_high if run0 else float("nan")
        cells, crossed = [], None
        for k in sw.lags:
            runs = sw.groups.get((s, k), [])
            if not runs:
                continue
            g = {key.split("/")[-1]: float(np.mean([hmean(r, key) for r in runs])) for key in keys}
            cells.append(
                f"lag {k}: gate {g['gate_rate']:.3f}, q {g['threshold_q']:.3f}, "
                f"newly clipped {g['newly_clipped_frac']:.4f}"
            )
            if crossed is None and g["threshold_q"] > eps:
                crossed = k
        note = f" q stays below the nominal radius {eps:g} at every lag: the gate can act."
        if crossed is not None:
            note = (
                f" From lag {crossed} on q exceeds the nominal radius {eps:g}, so every gated token starts "
                f"the update already outside the nominal interval: the contraction then mostly lands where "
                f"the base loss clips anyway."
            )
        lines.append(f"- {s.label}: " + "; ".join(cells) + "." + note)
    return lines


def _staleness(sw: _Sweep) -> list[str]:
    if len(sw.lags) < 2:
        return []
    cells = []
    for k in sw.lags:
        rk = [r for r in sw.rows if r["lag"] == k]
        cells.append(
            f"lag {k}: sample lag {np.mean([r['lag_steps_mean'] for r in rk]):.1f} mean / "
            f"{max(r['lag_steps_max'] for r in rk):.0f} max steps, |log r| mean "
            f"{np.mean([r['abs_log_ratio_mean'] for r in rk]):.3f}, p99 "
            f"{np.mean([r['abs_log_ratio_p99'] for r in rk]):.2f}"
        )
    denominator = sw.results[0].spec.ratio_denominator if sw.results else "checkpoint"
    what = (
        "the policy-update lag alone (checkpoint denominator: the engine's mismatch is out of the ratio)"
        if denominator == "checkpoint"
        else "the policy-update lag plus the engine's mismatch (rollout denominator)"
    )
    return ["Staleness consumed (all methods; log r = the losses' log-ratio, " + what + "): " + "; ".join(cells) + "."]


def summarize(
    rows: list[dict],
    header: list[str],
    results: list[RunResult] | None = None,
    tol_floor: float = TOL_FLOOR,
    eval_size: int = 256,
    reward_name: str = "exact match",
) -> str:
    """An honest reading of the table, with comparisons paired by seed: a difference counts only above
    max(``tol_floor``, 2 standard errors of the paired difference), otherwise it is a tie."""
    lines = list(header)
    if not rows:
        return "\n".join(lines + ["No run finished."]) + "\n"
    sw = _Sweep(rows, [r for r in results or [] if r.error is None], tol_floor)
    seeds = max(r["seeds"] for r in rows)
    start = float(np.mean([r["start_reward"] for r in rows]))
    if sw.results:
        lines += paper_lines(rows, sw.results[0].spec.recipe.denominator)
    lines.append(
        f"Reward = {reward_name} of the trainer's own policy on {eval_size} held-out problems (sampled at "
        f"temperature 1); final = mean of the last 3 evaluations; warm start {start:.3f} (mean over "
        f"{seeds} seed(s)). Comparisons are paired by seed; a difference counts only above "
        f"max({tol_floor}, 2 standard errors of the paired difference), otherwise it is a tie."
    )
    for section in (_rise, _breaks, _sat_wins, _gate, _staleness):
        part = section(sw)
        if part:
            lines += [""] + part
    return "\n".join(lines) + "\n"


def _frontier_moves(grid: Grid) -> list[str]:
    """Per SAT method and lr multiple: its stable lag against its base's."""
    out = []
    for s, b in grid.sat_pairs():
        parts, order = [], {None: -1, **{k: i for i, k in enumerate(grid.lags)}}
        for m in grid.mults:
            ss, sb = grid.stable(s, m), grid.stable(b, m)
            rel = "same" if ss == sb else "further" if order[ss] > order[sb] else "less far"
            parts.append(f"lr x {m:g}: {stable_text(ss, grid.lags)} vs {stable_text(sb, grid.lags)} ({rel})")
        out.append(f"- {s.label} against {b.label}: " + "; ".join(parts) + ".")
    return out


def frontier_summary(grid: Grid, header: list[str], evaluation: Evaluation, reward_name: str) -> str:
    """A frontier's ``summary.md``: ``header``, the rules, the stable lags, whether SAT moves them, the paired
    verdicts and the collapse grid."""
    if not grid.cells:
        return "\n".join(header + ["No run finished."]) + "\n"
    lines = header + [
        f"Reward = {reward_name} of the trainer's own policy on {evaluation.size} held-out problems, "
        f"every {evaluation.every} steps; final = mean of the last 3 evaluations. Collapsed (defined in "
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
    lines += ["## Does SAT move the frontier?", ""] + _frontier_moves(grid) + [""]
    verdict_lines, tally = sat_verdicts(grid)
    lines.append(
        f"Paired verdicts, SAT - its base over every cell: {tally['above']} WIN, {tally['tie']} tie, "
        f"{tally['below']} LOSS."
    )
    lines += ["", "## Paired verdicts", ""] + verdict_lines + ["## Collapse grid", ""] + collapse_grid(grid)
    return "\n".join(lines) + "\n"
