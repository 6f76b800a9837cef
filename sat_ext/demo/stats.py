"""The rules that decide the demo's verdicts: paired differences, WIN / TIE / LOSS, collapse, the stable lag.

Every comparison is between runs of the same seed (same warm start, prompt stream, sampling noise and
evaluation draws), so it is a paired difference: its mean over seeds and the standard error of that mean.

- :func:`verdict`: a difference counts only when its mean exceeds tol = max(``tol_floor``, 2 standard errors)
  (with one seed, whose standard error is unknown, tol = max(``tol_floor``, 0.05)); otherwise it is a tie.
  ``"above"`` / ``"below"`` read as WIN / LOSS when SAT is compared with a baseline.
- :func:`collapse_reason`: a run has collapsed when a step's loss was not finite, or when each of its last
  ``window`` evaluations is more than ``margin`` below its warm start (it ends far below where it started and
  is not recovering). Defined in docs/demo.md ("Collapse") before the frontier was run.
- :func:`stable_lag`: the largest lag up to which no seed has collapsed, lag by lag from the smallest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

TOL_FLOOR = 0.03
ONE_SEED_TOL = 0.05
ABOVE, TIE, BELOW = "above", "tie", "below"
WORDS = {ABOVE: "WIN", TIE: "tie", BELOW: "LOSS"}


@dataclass(frozen=True)
class Diff:
    """A mean over seeds with the standard error of that mean (NaN with one seed) and the number of seeds."""

    mean: float
    se: float
    n: int

    def describe(self, digits: int = 3) -> str:
        """``+0.012 ± 0.004`` (no ± with one seed)."""
        return f"{self.mean:+.{digits}f}" + (f" ± {self.se:.{digits}f}" if math.isfinite(self.se) else "")


def mean_se(values: Sequence[float]) -> Diff:
    """Mean and standard error (sample std / sqrt(n)) of ``values``; NaN error with one value."""
    if not values:
        raise ValueError("mean_se needs at least one value")
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")
    return Diff(float(np.mean(values)), se, len(values))


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> Diff | None:
    """a - b paired by seed (the keys) over the seeds both have, or None when they share none."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    return mean_se([a[s] - b[s] for s in seeds])


def verdict(diff: Diff, tol_floor: float = TOL_FLOOR) -> tuple[str, float]:
    """(``"above"`` | ``"tie"`` | ``"below"``, tol): above when mean > tol, below when mean < -tol, with
    tol = max(tol_floor, 2 * se), or max(tol_floor, 0.05) when the standard error is unknown (one seed)."""
    tol = max(tol_floor, 2 * diff.se) if math.isfinite(diff.se) else max(tol_floor, ONE_SEED_TOL)
    return (ABOVE if diff.mean > tol else BELOW if diff.mean < -tol else TIE), tol


@dataclass(frozen=True)
class CollapseRule:
    """A run collapses when a step's loss is not finite, or when each of its last ``window`` evaluations is
    more than ``margin`` below its first (the warm start's reward)."""

    margin: float = 0.10
    window: int = 3

    def __post_init__(self) -> None:
        if not (math.isfinite(self.margin) and self.margin > 0) or self.window < 1:
            raise ValueError(f"collapse rule needs margin > 0 and window >= 1, got {self.margin!r} / {self.window!r}")

    def describe(self) -> str:
        return (
            f"a non-finite loss at any step, or each of the last {self.window} evaluations more than "
            f"{self.margin:g} below the warm start"
        )


COLLAPSE = CollapseRule()


def collapse_reason(
    evals: Sequence[tuple[int, float]], nonfinite_steps: float, rule: CollapseRule = COLLAPSE
) -> str | None:
    """Why a run counts as collapsed under ``rule`` (``"non-finite loss"`` / ``"reward collapse"``), or None.

    ``evals`` are (step, reward) with the warm start's evaluation first; a non-finite evaluation counts as
    below any threshold. A run with fewer than ``window`` evaluations after the start cannot collapse on
    reward (too short to tell)."""
    if nonfinite_steps > 0:
        return "non-finite loss"
    if len(evals) < rule.window + 1:
        return None
    start = evals[0][1]
    if not math.isfinite(start):
        raise ValueError(f"the warm start's evaluation is not finite ({start!r})")
    tail = [r for _, r in evals[-rule.window :]]
    if all(not math.isfinite(r) or r < start - rule.margin for r in tail):
        return "reward collapse"
    return None


def collapse_onset(evals: Sequence[tuple[int, float]], rule: CollapseRule = COLLAPSE) -> int | None:
    """The first evaluation step from which every later evaluation is more than ``rule.margin`` below the
    warm start (non-finite counts as below), or None when the last evaluation is not: when a reward
    collapse began."""
    if len(evals) < 2:
        return None
    start, onset = evals[0][1], None
    for step, r in evals[1:]:
        below = not math.isfinite(r) or r < start - rule.margin
        onset = (onset if onset is not None else step) if below else None
    return onset


def stable_lag(collapsed_fraction: Mapping[int, float]) -> int | None:
    """The largest lag L such that no seed collapsed at any tried lag <= L (None: already at the smallest)."""
    stable = None
    for lag in sorted(collapsed_fraction):
        if collapsed_fraction[lag] > 0:
            break
        stable = lag
    return stable
