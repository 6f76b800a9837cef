"""The lag accounting of one consumed batch, as pure functions: the one home of the rule that the verl sampler
(:mod:`sat_ext.verl.lag.sampler`), OpenRLHF's trainer actor (:mod:`sat_ext.openrlhf.lag.actors`) and the
in-process controller (:mod:`sat_ext.lag.controller`) apply when the trainer takes a batch (docs/lag.md,
"Definitions" and "Metrics"). Callers record the result with :meth:`sat_ext.lag.LagMetrics.record_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .batches import over_bound
from .config import LagConfig
from .schedule import scheduled_lag
from .versions import VersionSpan, lag_in_steps, sample_lag


@dataclass(frozen=True)
class BatchLags:
    """The lags of one batch: per sample in versions and in trainer steps, whether each is over ``lag.max_lag``
    (bounded mode), and interval mode's scheduled (lag, lag in steps) of the batch (None in other modes)."""

    lags: tuple[int, ...]
    lag_steps: tuple[int, ...]
    over: tuple[bool, ...]
    scheduled: tuple[int, int] | None

    def max_over(self) -> int | None:
        """The largest lag over the bound, None when no sample is over it."""
        return max((lag for lag, o in zip(self.lags, self.over) if o), default=None)


def batch_lags(cfg: LagConfig, version: int, steps_done: int, spans: Sequence[VersionSpan]) -> BatchLags:
    """Lags of the samples (version ``spans``) the trainer takes for step ``steps_done + 1`` while it holds the
    weights of ``version``: lag = version - oldest; lag in steps from ``lag.sync_every``; the schedule in
    interval mode."""
    lags = tuple(sample_lag(version, span) for span in spans)
    return BatchLags(
        lags=lags,
        lag_steps=tuple(lag_in_steps(steps_done, span, cfg.sync_every) for span in spans),
        over=tuple(over_bound(cfg, lag) for lag in lags),
        scheduled=scheduled_lag(steps_done + 1, cfg.interval, cfg.prefetch) if cfg.mode == "interval" else None,
    )


def check_within_bound(cfg: LagConfig, lags: BatchLags, where: str) -> None:
    """Raise AssertionError naming ``where`` if a sample the trainer is about to train on is over the bound."""
    worst = lags.max_over()
    if worst is not None:
        raise AssertionError(f"{where}: a sample with lag {worst} > lag.max_lag={cfg.max_lag} reached the trainer")
