"""An in-process lag controller: version counter, admission control and the consumption rules, for one producer.

It drives the CPU demo and the lag simulations (benchmarks/); the verl and OpenRLHF paths keep their own
engines' queues and use the same rules (:mod:`.schedule` for admission and the interval schedule,
:mod:`.batches` for which groups are taken, :mod:`.versions` for lag, :mod:`.metrics`). Single-threaded:
every method returns at once (``None`` where a caller would wait). Protocol:

- producer: ``claim()`` -> generate -> ``submit(claim, payload, span)``;
- consumer: ``take()`` -> train -> ``complete_step()`` -> if it returned True: wait for ``sync_allowed()``,
  broadcast the weights, ``record_sync()`` -> ``pop_metrics()``.

A sample is submitted once per claim; ``regenerate`` opens a new claim on the same id (a new attempt), and a
submit of a superseded attempt, or of a claim the controller did not issue, is refused.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from .accounting import batch_lags, check_within_bound
from .batches import GroupState, first_finished, next_batch, over_bound, waits_for_stragglers
from .config import LagConfig
from .metrics import LagMetrics
from .schedule import bounded_admits, last_claimable_step, may_claim
from .versions import VersionSpan, sample_lag


class LagProtocolError(RuntimeError):
    """A call out of protocol order, e.g. ``take()`` while a due weight sync has not been recorded."""


@dataclass(frozen=True)
class Claim:
    """The right to generate ``sample_id`` (attempt ``attempt``) with the weights of ``version``.

    claim_id: unique per claim issued (a claim this controller did not issue is refused).
    step: interval mode's trainer step the sample is scheduled for (None in the other modes).
    """

    claim_id: int
    sample_id: int
    attempt: int
    version: int
    step: int | None


@dataclass(frozen=True)
class ConsumedSample:
    """A sample handed to the trainer, with its version span and lag (in versions and in trainer steps)."""

    sample_id: int
    payload: Any
    span: VersionSpan
    lag: int
    lag_steps: int


@dataclass
class _Sample:
    attempt: int
    step: int | None
    claim_id: int | None = None  # the claim issued for this attempt
    payload: Any = None
    span: VersionSpan | None = None  # set when submitted
    response_tokens: int = 0

    def state(self, sample_id: int) -> GroupState:
        order = self.step if self.step is not None else 0
        return GroupState(sample_id, order, self.span is not None)


class LagController:
    """State of one lag-controlled run; see the module docstring for the call protocol."""

    def __init__(self, cfg: LagConfig, track_producer_idle: bool = True):
        self.cfg = cfg
        self.version = 0
        self.steps_done = 0
        self.metrics = LagMetrics(
            cfg.hist_edges, interval_schedule=cfg.mode == "interval", track_producer_idle=track_producer_idle
        )
        self._next_id = 0
        self._next_claim = 0
        self._fresh_scheduled = 0
        self._samples: dict[int, _Sample] = {}  # opened, not yet consumed (in flight, waiting or ready)
        self._requeue: deque[int] = deque()
        self._consumed_at_version = 0
        self._sync_due = False
        self._closed = False

    # ------------------------------------------------------------------ producer side

    def claim(self) -> Claim | None:
        """A claim on the next sample to generate, or None if admission control holds the producer back."""
        if self._requeue:
            sample_id = self._requeue.popleft()
        elif self._closed or not self._admits_fresh():
            return None
        else:
            sample_id = self._open_fresh()
        item = self._samples[sample_id]
        item.claim_id, self._next_claim = self._next_claim, self._next_claim + 1
        return Claim(item.claim_id, sample_id, item.attempt, self.version, item.step)

    def submit(self, claim: Claim, payload: Any, span: VersionSpan, response_tokens: int = 0) -> bool:
        """Offer a generated sample (``response_tokens`` long, for the metrics); True if accepted, False for a
        claim this controller did not issue, a superseded attempt, or a sample already in."""
        if span.newest > self.version:
            raise ValueError(f"sample {claim.sample_id} claims version {span.newest}, the trainer is at {self.version}")
        item = self._samples.get(claim.sample_id)
        if item is None or item.claim_id != claim.claim_id or item.span is not None:  # a new attempt, a new claim id
            return False
        item.payload, item.span, item.response_tokens = payload, span, response_tokens
        return True

    def note_producer_idle(self, seconds: float) -> None:
        """Add time a producer spent held back by admission control."""
        self.metrics.add_producer_idle(seconds)

    def close(self) -> None:
        """No new samples will be started (data exhausted); samples already opened still complete."""
        self._closed = True

    def finished_producing(self) -> bool:
        """Whether the run is closed and every opened sample has been submitted."""
        return self._closed and all(s.span is not None for s in self._samples.values())

    # ------------------------------------------------------------------ consumer side

    def take(self) -> list[ConsumedSample] | None:
        """The next batch of ``cfg.batch_size`` samples, or None if it is not ready yet (:mod:`.batches`).

        After :meth:`close`, returns the remaining samples (fewer, or an empty list once drained).
        In bounded mode no returned sample has lag > ``max_lag``.
        """
        if self._sync_due:
            raise LagProtocolError("a weight sync is due: call record_sync() before take()")
        self._purge_over_bound()
        states = [s.state(sid) for sid, s in self._samples.items()]
        n = self.cfg.batch_size
        if self.finished_producing():
            n = min(n, len(states))
        rule = next_batch if waits_for_stragglers(self.cfg) else first_finished
        chosen = rule(states, n)
        if chosen is None:
            return None
        items = [self._samples[group.uid] for group in chosen]
        lags = batch_lags(self.cfg, self.version, self.steps_done, [item.span for item in items])
        check_within_bound(self.cfg, lags, "LagController.take")  # before anything is removed: no sample lost
        for group in chosen:
            del self._samples[group.uid]
        self.metrics.record_batch(lags, [item.response_tokens for item in items])
        self._consumed_at_version += len(items)
        return [
            ConsumedSample(group.uid, item.payload, item.span, lag, steps)
            for group, item, lag, steps in zip(chosen, items, lags.lags, lags.lag_steps, strict=True)
        ]

    def complete_step(self) -> bool:
        """The trainer finished a step; returns whether a weight sync is due now."""
        if self._sync_due:
            raise LagProtocolError("a weight sync is due: call record_sync() before complete_step()")
        self.steps_done += 1
        self._sync_due = self.steps_done % self.cfg.sync_every == 0
        return self._sync_due

    def sync_allowed(self) -> bool:
        """Whether the due sync may happen now (interval mode waits for every batch scheduled on these weights)."""
        if self.cfg.mode != "interval" or self._closed:
            return True
        last = last_claimable_step(self.version, self.cfg.interval, self.cfg.prefetch)
        if self._fresh_scheduled < last * self.cfg.batch_size:
            return False
        return not any(s.span is None and s.step <= last for s in self._samples.values())

    def record_sync(self) -> int:
        """The trainer broadcast its weights: the version advances by one; returns the new version."""
        if not self._sync_due:
            raise LagProtocolError("record_sync() called but no sync is due (call complete_step() first)")
        if not self.sync_allowed():
            raise LagProtocolError(
                "record_sync() before sync_allowed(): samples scheduled on these weights are missing"
            )
        self.version += 1
        self._sync_due = False
        self._consumed_at_version = 0
        return self.version

    def note_consumer_idle(self, seconds: float) -> None:
        """Add time the trainer spent waiting for samples or for a sync to be allowed."""
        self.metrics.add_consumer_idle(seconds)

    def pop_metrics(self) -> dict[str, float]:
        """Metrics of the step just completed (same keys every step); resets the per-step counters."""
        return self.metrics.flush(self.version, self.steps_done)

    # ------------------------------------------------------------------ internals

    def _admits_fresh(self) -> bool:
        cfg = self.cfg
        outstanding = len(self._samples)
        if cfg.mode == "off":
            return outstanding < cfg.outstanding_limit
        if cfg.mode == "bounded":
            return bounded_admits(self._consumed_at_version, outstanding, cfg.max_lag, cfg.batch_size)
        return may_claim(self._fresh_scheduled // cfg.batch_size + 1, self.version, cfg.interval, cfg.prefetch)

    def _open_fresh(self) -> int:
        sample_id = self._next_id
        self._next_id += 1
        step = None
        if self.cfg.mode == "interval":
            step = self._fresh_scheduled // self.cfg.batch_size + 1
            self._fresh_scheduled += 1
        self._samples[sample_id] = _Sample(attempt=0, step=step)
        return sample_id

    def _purge_over_bound(self) -> None:
        """drop / regenerate: a submitted sample already over the bound leaves now (wait never gets here)."""
        if self.cfg.mode != "bounded" or self.cfg.over_bound == "wait":
            return
        for sample_id, item in list(self._samples.items()):
            if item.span is None or not over_bound(self.cfg, sample_lag(self.version, item.span)):
                continue
            if self.cfg.over_bound == "drop":
                del self._samples[sample_id]
                self.metrics.record_dropped(1, item.response_tokens)
            else:
                self.metrics.record_regenerated(1, item.response_tokens)
                self._samples[sample_id] = _Sample(attempt=item.attempt + 1, step=item.step)
                self._requeue.append(sample_id)
