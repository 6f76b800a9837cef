"""Per-step lag metrics: a flat dict with the same keys every step of a run.

Keys (all under ``lag/``): ``min``, ``mean``, ``max`` (lag in versions of the samples consumed this step;
0.0 when none), ``steps/min|mean|max`` (lag in trainer steps), ``hist/<bin>`` (counts over fixed bins),
``consumed``, ``dropped``, ``regenerated`` (this step) and ``dropped_total``, ``regenerated_total``
(cumulative), ``consumed_len_mean`` and ``dropped_len_mean`` (mean response length, in tokens, of the samples
consumed and of those dropped or regenerated for staleness this step; 0.0 when none or not reported),
``consumer_idle_s``, ``producer_idle_s`` (when tracked), ``consumer_waits`` (when tracked: the times the trainer
looked for its batch and found it not ready, an event count that a busy machine does not inflate as it does
seconds), ``version``, ``trainer_step``, and in interval mode ``scheduled/min|mean|max`` and
``scheduled_steps/min|mean|max`` (the schedule's lag of the samples consumed this step, in versions and in trainer
steps) and ``off_schedule`` (samples whose lag differs from the schedule).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .accounting import BatchLags


def hist_bin_names(edges: tuple[int, ...]) -> list[str]:
    """Names of the bins with left edges ``edges``: "3" for a one-wide bin, "8-11", and "32+" for the last."""
    names = []
    for i, lo in enumerate(edges):
        if i == len(edges) - 1:
            names.append(f"{lo}+")
        else:
            hi = edges[i + 1] - 1
            names.append(str(lo) if hi == lo else f"{lo}-{hi}")
    return names


def hist_bin_index(edges: tuple[int, ...], lag: int) -> int:
    """Index of the bin that holds ``lag`` (>= 0)."""
    index = 0
    for i, lo in enumerate(edges):
        if lag >= lo:
            index = i
    return index


class LagMetrics:
    """Accumulates one step's lag observations; :meth:`flush` returns the flat dict and starts a new step."""

    def __init__(
        self,
        hist_edges: tuple[int, ...],
        interval_schedule: bool = False,
        track_producer_idle: bool = True,
        prefix: str = "lag/",
        track_consumer_waits: bool = False,
    ):
        self.hist_edges = tuple(hist_edges)
        self.bin_names = hist_bin_names(self.hist_edges)
        self.interval_schedule = interval_schedule
        self.track_producer_idle = track_producer_idle
        self.track_consumer_waits = track_consumer_waits
        self.prefix = prefix
        self.dropped_total = 0
        self.regenerated_total = 0
        self._reset_step()

    def _reset_step(self) -> None:
        self.lags: list[int] = []
        self.lag_steps: list[int] = []
        self.hist = [0] * len(self.hist_edges)
        self.dropped = 0
        self.regenerated = 0
        self.consumed_tokens = 0
        self.stale_tokens = 0
        self.off_schedule = 0
        self.scheduled: list[int] = []
        self.scheduled_steps: list[int] = []
        self.consumer_idle_s = 0.0
        self.consumer_waits = 0
        self.producer_idle_s = 0.0

    def record_consumed(
        self, lag: int, lag_steps: int, scheduled: tuple[int, int] | None = None, response_tokens: int = 0
    ) -> None:
        """One sample trained on with ``lag`` versions / ``lag_steps`` steps (and its scheduled pair, if any)."""
        self.consumed_tokens += response_tokens
        self.lags.append(lag)
        self.lag_steps.append(lag_steps)
        self.hist[hist_bin_index(self.hist_edges, lag)] += 1
        if scheduled is not None:
            self.scheduled.append(scheduled[0])
            self.scheduled_steps.append(scheduled[1])
            if (lag, lag_steps) != tuple(scheduled):
                self.off_schedule += 1

    def record_batch(self, lags: BatchLags, response_tokens: Sequence[int], keep: Sequence[bool] | None = None) -> None:
        """Every sample of a consumed batch (:func:`sat_ext.lag.accounting.batch_lags`) that is kept (all by
        default), with its response length."""
        keep = [True] * len(lags.lags) if keep is None else keep
        for lag, steps, tokens, kept in zip(lags.lags, lags.lag_steps, response_tokens, keep, strict=True):
            if kept:
                self.record_consumed(lag, steps, lags.scheduled, tokens)

    def record_dropped(self, n: int = 1, response_tokens: int = 0) -> None:
        """``n`` samples (``response_tokens`` in all) discarded for staleness."""
        self.stale_tokens += response_tokens
        self.dropped += n
        self.dropped_total += n

    def record_regenerated(self, n: int = 1, response_tokens: int = 0) -> None:
        """``n`` samples (``response_tokens`` in all) sent back to be generated again for staleness."""
        self.stale_tokens += response_tokens
        self.regenerated += n
        self.regenerated_total += n

    def record_over_bound(
        self, over_bound: str, over: Sequence[bool], response_tokens: Sequence[int], group_size: int = 1
    ) -> tuple[list[bool], list[int]]:
        """Count the samples ``over`` the bound (:func:`sat_ext.lag.batches.over_bound`), in contiguous whole groups
        of ``group_size``: a group with one over leaves whole, counted as regenerated if ``over_bound`` is
        "regenerate", else as dropped (with "wait" it is a fault, dropped rather than left at the head of the queue).
        Returns whether each sample stays, and the first sample of each group to regenerate."""
        regenerating = over_bound == "regenerate"
        record = self.record_regenerated if regenerating else self.record_dropped
        keep, leaving = [True] * len(over), []
        for start in range(0, len(over), group_size):
            if any(over[start : start + group_size]):
                keep[start : start + group_size] = [False] * group_size
                record(group_size, sum(response_tokens[start : start + group_size]))
                leaving.append(start)
        return keep, leaving if regenerating else []

    def add_consumer_idle(self, seconds: float) -> None:
        """Time the trainer spent waiting for samples or for a sync to be allowed."""
        self.consumer_idle_s += seconds

    def add_consumer_wait(self) -> None:
        """The trainer looked for its batch and it was not ready (it waits for the next look)."""
        self.consumer_waits += 1

    def add_producer_idle(self, seconds: float) -> None:
        """Time a producer spent held back by admission control."""
        self.producer_idle_s += seconds

    @staticmethod
    def _stats(values: Iterable[int]) -> tuple[float, float, float]:
        values = list(values)
        if not values:
            return 0.0, 0.0, 0.0
        return float(min(values)), sum(values) / len(values), float(max(values))

    def flush(self, version: int, trainer_step: int) -> dict[str, float]:
        """This step's metrics (keys fixed by the constructor's arguments); resets the per-step counters."""
        p = self.prefix
        lo, mean, hi = self._stats(self.lags)
        slo, smean, shi = self._stats(self.lag_steps)
        out: dict[str, float] = {
            f"{p}min": lo,
            f"{p}mean": mean,
            f"{p}max": hi,
            f"{p}steps/min": slo,
            f"{p}steps/mean": smean,
            f"{p}steps/max": shi,
        }
        out.update({f"{p}hist/{name}": float(c) for name, c in zip(self.bin_names, self.hist, strict=True)})
        out.update(
            {
                f"{p}consumed": float(len(self.lags)),
                f"{p}dropped": float(self.dropped),
                f"{p}regenerated": float(self.regenerated),
                f"{p}dropped_total": float(self.dropped_total),
                f"{p}regenerated_total": float(self.regenerated_total),
                f"{p}consumed_len_mean": self.consumed_tokens / len(self.lags) if self.lags else 0.0,
                f"{p}dropped_len_mean": self.stale_tokens / max(1, self.dropped + self.regenerated),
                f"{p}consumer_idle_s": self.consumer_idle_s,
                f"{p}version": float(version),
                f"{p}trainer_step": float(trainer_step),
            }
        )
        if self.track_producer_idle:
            out[f"{p}producer_idle_s"] = self.producer_idle_s
        if self.track_consumer_waits:
            out[f"{p}consumer_waits"] = float(self.consumer_waits)
        if self.interval_schedule:
            for name, values in (("scheduled", self.scheduled), ("scheduled_steps", self.scheduled_steps)):
                out.update(zip((f"{p}{name}/min", f"{p}{name}/mean", f"{p}{name}/max"), self._stats(values)))
            out[f"{p}off_schedule"] = float(self.off_schedule)
        self._reset_step()
        return out

    def state_dict(self) -> dict[str, int]:
        """Cumulative counters, for a checkpoint."""
        return {"dropped_total": self.dropped_total, "regenerated_total": self.regenerated_total}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore the cumulative counters saved by :meth:`state_dict`."""
        self.dropped_total = int(state.get("dropped_total", 0))
        self.regenerated_total = int(state.get("regenerated_total", 0))
