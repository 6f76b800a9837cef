"""The pre-registered rules of the miniature's E1 and E2, as pure functions (issue 36).

Each rule is written in ``benchmarks/preregistered/miniature_e1_e2.md``, added in commit 9918233
(:data:`PREREG_COMMIT`) before any run it judges; this module implements that text and nothing else, and a
rule changed later is a new pre-registration. Readings of what the text leaves open are stated in the
docstrings ("Reading:").

Floats: the text's boundaries are decimals (0.10, 0.05, 0.01), which a binary float cannot hold, so where a rule
compares a *computed difference* with such a boundary (the fall, the recovery, the equivalence margin) two numbers
within :data:`TOL` count as equal; evaluations are multiples of 1/256 (rolling means of 1/768), so no measured
value lies within TOL of a boundary without lying on it. Comparisons of a measured value with a fixed threshold
(q < 0.12, q >= 0.18, newly clipped >= 1%) are exact.

Run data are plain sequences: ``evals`` = [(step, reward), ...] with the step-0 evaluation first (the demo's
``RunResult.evals``), per-step values as [(step, value), ...].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

PREREG_FILE = "benchmarks/preregistered/miniature_e1_e2.md"
PREREG_COMMIT = "9918233"
CITE = f"`{PREREG_FILE}` (commit {PREREG_COMMIT})"

EVAL_EVERY = 25  # "every 25 trainer steps, and at step 0"
EVAL_SIZE = 256  # "on at least 256 held-out problems"
WINDOW = 3  # the rolling mean: the last 3 evaluations
FALL = 0.10  # the collapse's fall below the best rolling mean so far
RECOVERY = 0.05  # ... and never back above best - 0.05
AFTER_FALL = 2  # a run that ends before two evaluations after the fall counts as not collapsed
ACTIVE_Q = 0.12  # SAT-active: median q < 0.12 ...
ACTIVE_CLIP = 0.01  # ... and newly clipped >= 1%
INERT_Q = 0.18  # SAT-inert: median q >= 0.18
CLIP_STEPS = 50  # newly clipped from the SAT runs' first 50 steps
MARGIN = 0.01  # the equivalence margin +-0.01
LEVEL = 0.95  # the paired intervals' level
ONE_EVAL = 25  # E1 refutation: "within one evaluation (25 steps)"
CLIP_WINDOW = 100  # E1 refutation: "newly clipped >= 1% in the 100 steps before the base's onset"
SUPPORT_SEEDS = 5  # E1 stage 2: 5 seeds
TOL = 1e-9

ACTIVE, INERT, BORDERLINE, UNCLASSIFIED = "SAT-active", "SAT-inert", "borderline", "unclassified"
BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = "SAT better", "SAT worse", "equivalent", "inconclusive"
INERT_WORDS = "identical by construction"


# ----------------------------------------------------------------------------------------------- collapse


def rolling_means(evals: Sequence[tuple[int, float]], window: int = WINDOW) -> list[tuple[int, float]]:
    """(step, mean of the evaluations at step - 50, step - 25, step): the rolling mean of the last ``window``
    evaluations, from the ``window``-th evaluation on. Reading: with fewer than 3 evaluations there is no
    rolling mean (the first one is at step 50, over steps 0, 25, 50)."""
    return [
        (int(evals[i][0]), float(np.mean([r for _, r in evals[i - window + 1 : i + 1]])))
        for i in range(window - 1, len(evals))
    ]


@dataclass(frozen=True)
class Collapse:
    """One run under the collapse rule: whether it collapsed, why (``"non-finite loss"`` / ``"reward fall"``),
    the onset (a trainer step), and for a reward fall the best rolling mean it fell from."""

    collapsed: bool
    reason: str | None = None
    onset: int | None = None
    best: float | None = None
    note: str = ""

    def describe(self) -> str:
        if not self.collapsed:
            return "no" + (f" ({self.note})" if self.note else "")
        return f"yes, {self.reason} from step {self.onset}"


def _gap(best: float, r: float) -> float:
    """best - r, +inf for a non-finite r (a non-finite evaluation is below anything)."""
    return best - r if math.isfinite(r) else math.inf


def collapse(evals: Sequence[tuple[int, float]], losses: Iterable[tuple[int, float]] = ()) -> Collapse:
    """The pre-registered collapse rule ("Collapse (per run)").

    A run collapses if its loss is non-finite on any step (onset: the first such step), or if its rolling mean
    falls at least 0.10 below the run's best rolling mean so far and never comes back above (best - 0.05) for
    the rest of the run; the onset is the first evaluation of that fall (the first whose rolling mean is at
    least 0.10 below the best so far, on the fall that does not recover). A run that ends before two
    evaluations after the fall counts as not collapsed.

    Readings: "at least 0.10 below" includes a fall of exactly 0.10; "above (best - 0.05)" is strict, so a
    recovery to exactly best - 0.05 is not a recovery; "best" is the best rolling mean up to the fall's first
    evaluation; a fall that recovers ends, and a later fall is judged afresh from the best so far then; "two
    evaluations after the fall" are two evaluations after the onset's (the onset at evaluation i needs an
    evaluation i + 2); with both a non-finite loss and an unrecovered fall, the onset is the earlier.
    """
    bad = [int(s) for s, v in losses if not math.isfinite(v)]
    means = rolling_means(evals)
    best, fall, fall_best = -math.inf, None, None
    for i, (_, r) in enumerate(means):
        if fall is not None and _gap(fall_best, r) < RECOVERY - TOL:  # back above best - 0.05: recovered
            fall = fall_best = None
        if math.isfinite(r):
            best = max(best, r)
        if fall is None and math.isfinite(best) and _gap(best, r) >= FALL - TOL:
            fall, fall_best = i, best
    reward = None
    note = ""
    if fall is not None:
        if len(means) - 1 - fall >= AFTER_FALL:
            reward = (means[fall][0], fall_best)
        else:
            note = f"fell at step {means[fall][0]}, ended fewer than {AFTER_FALL} evaluations after"
    if bad and (reward is None or bad[0] <= reward[0]):
        return Collapse(True, "non-finite loss", bad[0])
    if reward is not None:
        return Collapse(True, "reward fall", reward[0], reward[1])
    return Collapse(False, note=note)


def outcome(evals: Sequence[tuple[int, float]]) -> float:
    """The outcome of a run: the mean of its last 3 evaluations ("Verdicts")."""
    if len(evals) < WINDOW:
        raise ValueError(f"a run's outcome needs {WINDOW} evaluations, got {len(evals)}")
    return float(np.mean([r for _, r in evals[-WINDOW:]]))


# ----------------------------------------------------------------------------------------------- verdicts


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b) (continued fraction, Numerical Recipes' betacf)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return front * h / a


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got {p!r} / {df!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% interval (NaN bounds with fewer than 2 values) over ``n`` values."""

    mean: float
    lower: float
    upper: float
    n: int

    def describe(self, digits: int = 3) -> str:
        if not math.isfinite(self.lower):
            return f"{self.mean:+.{digits}f} (n = {self.n}, no interval)"
        return f"{self.mean:+.{digits}f} [{self.lower:+.{digits}f}, {self.upper:+.{digits}f}] (n = {self.n})"


def t_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean and Student's t interval of the mean: mean -+ t_{(1+level)/2, n-1} * sd / sqrt(n)."""
    if not len(values):
        raise ValueError("an interval needs at least one value")
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean, math.nan, math.nan, len(x))
    half = t_quantile(0.5 + level / 2, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return Interval(mean, mean - half, mean + half, len(x))


def paired_differences(sat: Mapping[int, float], base: Mapping[int, float]) -> dict[int, float]:
    """SAT - base per seed, over the seeds both have (in seed order)."""
    return {s: sat[s] - base[s] for s in sorted(set(sat) & set(base))}


def verdict(iv: Interval) -> str:
    """The paired verdict ("Verdicts"): SAT better if the interval's lower end > 0, SAT worse if its upper end < 0,
    equivalent if it lies inside (-0.01, +0.01), else inconclusive. Readings: the rules are taken in the order
    written, so an interval inside (0, 0.01) is "SAT better"; "inside" is strict (an interval touching +-0.01 is
    not equivalent); no interval (one seed) is inconclusive."""
    if not (math.isfinite(iv.lower) and math.isfinite(iv.upper)):
        return INCONCLUSIVE
    if iv.lower > 0:
        return BETTER
    if iv.upper < 0:
        return WORSE
    if iv.lower > -MARGIN + TOL and iv.upper < MARGIN - TOL:
        return EQUIVALENT
    return INCONCLUSIVE


def paired_verdict(sat: Mapping[int, float], base: Mapping[int, float]) -> tuple[Interval, str]:
    """The interval of SAT - base paired by seed and its :func:`verdict`."""
    d = paired_differences(sat, base)
    if not d:
        raise ValueError("SAT and its base share no seed")
    iv = t_interval(list(d.values()))
    return iv, verdict(iv)


# ----------------------------------------------------------------------------------------------- cells


def steady_state(values: Iterable[tuple[int, float]], lag: int) -> list[float]:
    """The values of the steady-state steps: those after the first lag window, step > lag (the window is
    ``lag`` trainer steps, at least 1). Reading: the demo's lag k is a sync every k steps, so steps 1..k train
    on the warm start's rollouts and step k + 1 is the first after a sync."""
    window = max(int(lag), 1)
    return [float(v) for s, v in values if int(s) > window]


def first_steps(values: Iterable[tuple[int, float]], n: int = CLIP_STEPS) -> list[float]:
    """The values of steps 1..n (the SAT runs' "first 50 steps")."""
    return [float(v) for s, v in values if 1 <= int(s) <= n]


@dataclass(frozen=True)
class CellClass:
    """A cell's class with the two medians it was read from (NaN where there were no values)."""

    label: str
    median_q: float
    median_clip: float
    n_q: int
    n_clip: int

    def describe(self) -> str:
        clip = f"{100 * self.median_clip:.2f}%" if math.isfinite(self.median_clip) else "n/a"
        q = f"{self.median_q:.4f}" if math.isfinite(self.median_q) else "n/a"
        return f"{self.label} (median q {q} over {self.n_q} steps; median newly clipped {clip} over {self.n_clip})"


def classify(base_q: Sequence[float], sat_clip: Sequence[float]) -> CellClass:
    """The cell's class ("Cells, classified before any outcome is read").

    ``base_q``: q of the cell's base runs over their steady-state steps, all seeds pooled; ``sat_clip``: the
    newly clipped fraction of the cell's SAT runs over their first 50 steps, all seeds pooled. SAT-inert if
    median q >= 0.18; SAT-active if median q < 0.12 and median newly clipped >= 1% (0.01); otherwise borderline.
    Readings: "median over seeds" is the median of the pooled steps (NumPy's: the mean of the two middle values
    of an even count); without base q, or with q < 0.18 and no SAT run, the cell is unclassified.
    """
    mq = float(np.median(base_q)) if len(base_q) else math.nan
    mc = float(np.median(sat_clip)) if len(sat_clip) else math.nan
    if not math.isfinite(mq):
        label = UNCLASSIFIED
    elif mq >= INERT_Q:
        label = INERT
    elif not math.isfinite(mc):
        label = UNCLASSIFIED
    elif mq < ACTIVE_Q and mc >= ACTIVE_CLIP:
        label = ACTIVE
    else:
        label = BORDERLINE
    return CellClass(label, mq, mc, len(base_q), len(sat_clip))


# ----------------------------------------------------------------------------------------------- E1


def clip_before(clip: Iterable[tuple[int, float]], onset: int, window: int = CLIP_WINDOW) -> float:
    """The median newly clipped fraction of a SAT run over the ``window`` steps before ``onset``, steps
    onset - 100 .. onset - 1 (those the run has); NaN where it has none. Reading: "newly clipped >= 1%" is the
    cell classification's statistic (the median over steps) on this window."""
    vals = [float(v) for s, v in clip if onset - window <= int(s) < onset]
    return float(np.median(vals)) if vals else math.nan


def outlives(base: Collapse, sat: Collapse) -> bool:
    """SAT outlives its paired base seed: the base collapsed and SAT did not, or did later (a later onset).
    Reading: where neither collapsed, SAT has not outlived the base."""
    return base.collapsed and (not sat.collapsed or (sat.onset is not None and sat.onset > base.onset))


@dataclass(frozen=True)
class E1Cell:
    """E1's outcome in one stage-2 cell and method pair."""

    support: bool
    refutation: bool
    base_collapsed: int
    sat_collapsed: int
    outlived: int
    pairs: int
    refuting_seeds: tuple[int, ...]
    note: str = ""

    @property
    def word(self) -> str:
        if self.support and self.refutation:
            return "support and refutation"
        return "support" if self.support else "refutation" if self.refutation else "neither"


def e1_cell(
    pairs: Mapping[int, tuple[Collapse, Collapse]],
    sat_clip: Mapping[int, Sequence[tuple[int, float]]],
    cell_active: bool,
) -> E1Cell:
    """E1's outcomes in a stage-2 cell ("E1", Outcomes), from (base, SAT) collapses per seed and each SAT run's
    per-step newly clipped fraction.

    Support: the base collapses in at least 4 of 5 seeds and SAT in none, or SAT outlives its paired base seed
    (later onset, or no collapse) in 5 of 5 pairs. Refutation: in some pair both collapse within one evaluation
    (25 steps) of each other while SAT's gate was acting: a SAT-active cell, and the SAT run's newly clipped
    >= 1% over the 100 steps before the base's onset. Reading: "4 of 5" and "5 of 5" need the 5 pre-registered
    pairs; with another number of pairs neither outcome is judged.
    """
    seeds = sorted(pairs)
    nb = sum(pairs[s][0].collapsed for s in seeds)
    ns = sum(pairs[s][1].collapsed for s in seeds)
    no = sum(outlives(*pairs[s]) for s in seeds)
    refuting = []
    for s in seeds:
        b, t = pairs[s]
        if not (cell_active and b.collapsed and t.collapsed) or abs(t.onset - b.onset) > ONE_EVAL:
            continue
        c = clip_before(sat_clip.get(s, ()), b.onset)
        if math.isfinite(c) and c >= ACTIVE_CLIP:
            refuting.append(s)
    if len(seeds) != SUPPORT_SEEDS:
        note = f"{len(seeds)} pairs, not the pre-registered {SUPPORT_SEEDS}: not judged"
        return E1Cell(False, False, nb, ns, no, len(seeds), tuple(refuting), note)
    support = (nb >= 4 and ns == 0) or no == SUPPORT_SEEDS
    return E1Cell(support, bool(refuting), nb, ns, no, len(seeds), tuple(refuting))


def e1_outcome(stage1_base_collapsed: Sequence[bool], cells: Sequence[E1Cell] | None) -> str:
    """E1's outcome over the experiment: ``"null"`` when no base collapsed in stage 1; otherwise, from the judged
    stage-2 cells (SAT-active ones), ``"support"`` / ``"refutation"`` where some cell gives it and none the other,
    ``"support and refutation"`` where cells disagree, ``"neither"`` where none gives either, ``"pending"`` when
    stage 2 has not run (``cells`` None). Readings: the text states the outcomes, not how cells combine; this
    reports each cell (:func:`e1_cell`) and summarises them so; a null needs stage 1 to have run; with no cell to
    judge (none SAT-active) the outcome is "neither"."""
    if not stage1_base_collapsed:
        return "pending"
    if not any(stage1_base_collapsed):
        return "null"
    if cells is None:
        return "pending"
    sup = any(c.support for c in cells)
    ref = any(c.refutation for c in cells)
    return "support and refutation" if sup and ref else "support" if sup else "refutation" if ref else "neither"


# ----------------------------------------------------------------------------------------------- E2


@dataclass(frozen=True)
class Slope:
    """A least-squares slope with its 95% interval over ``n`` points."""

    slope: float
    lower: float
    upper: float
    n: int

    @property
    def sign(self) -> str | None:
        """Sign "+" / "-" where the interval excludes 0, else None (E2: the sign is reported only then)."""
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            return None
        return "+" if self.lower > 0 else "-" if self.upper < 0 else None

    def describe(self, digits: int = 4) -> str:
        if not math.isfinite(self.lower):
            return f"{self.slope:+.{digits}f} per doubling of the lag (n = {self.n}, no interval)"
        sign = {"+": "positive", "-": "negative", None: "sign not reported: the interval contains 0"}[self.sign]
        return (
            f"{self.slope:+.{digits}f} per doubling of the lag [{self.lower:+.{digits}f}, {self.upper:+.{digits}f}] "
            f"(n = {self.n}; {sign})"
        )


def slope(points: Sequence[tuple[float, float]], level: float = LEVEL) -> Slope:
    """Ordinary least squares of y on x with the slope's Student-t interval (n - 2 degrees of freedom)."""
    if len(points) < 2:
        raise ValueError(f"a slope needs at least 2 points, got {len(points)}")
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    sxx = float(((x - x.mean()) ** 2).sum())
    if sxx == 0:
        raise ValueError("a slope needs at least two distinct x")
    b = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    if len(points) < 3:
        return Slope(b, math.nan, math.nan, len(points))
    resid = y - (y.mean() + b * (x - x.mean()))
    se = math.sqrt(float((resid**2).sum()) / (len(points) - 2) / sxx)
    half = t_quantile(0.5 + level / 2, len(points) - 2) * se
    return Slope(b, b - half, b + half, len(points))


def e2_slope(diffs: Mapping[int, Mapping[int, float]], classes: Mapping[int, str]) -> Slope | None:
    """E2's slope: the paired differences (``diffs[lag][seed]`` = SAT - base) against log2(lag), least squares
    over every pair of the lags whose cell is not SAT-inert, with its 95% interval; None with fewer than two
    lags left. Reading: only SAT-inert cells are left out (borderline and unclassified ones stay in)."""
    pts = [(math.log2(lag), d) for lag in sorted(diffs) if classes.get(lag) != INERT for d in diffs[lag].values()]
    if len({p[0] for p in pts}) < 2:
        return None
    return slope(pts)
