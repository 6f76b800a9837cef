"""The lag controller: version counter, admission control, claims with leases, the consumption check.

Framework-free and single-threaded: every method returns at once (``None`` where a caller would wait);
:mod:`sat_ext.lag.ray_actors` wraps it in an actor that waits. Protocol:

- producer: ``claim()`` -> generate (``renew(claim)`` while it runs) -> ``submit(claim, payload, span)``;
- consumer: ``take()`` -> train -> ``complete_step()`` -> if it returned True: ``sync_allowed()``, broadcast
  the weights, ``record_sync()`` -> ``pop_metrics()``.

A sample id is accepted once: a duplicate or late submit returns False, and a claim whose lease runs out
(its producer died) is handed out again under the same id, so no accepted sample is lost or duplicated.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .config import LagConfig, LagConfigError
from .metrics import LagMetrics
from .schedule import bounded_admits, last_claimable_step, scheduled_lag
from .versions import VersionSpan, lag_in_steps, sample_lag


class LagProtocolError(RuntimeError):
    """A call out of protocol order, e.g. ``take()`` while a due weight sync has not been recorded."""


@dataclass(frozen=True)
class Claim:
    """A producer's right to generate ``sample_id`` (attempt ``attempt``) until ``deadline``.

    version: the controller's version when claimed. step: interval mode's trainer step the sample is
    scheduled for (None in the other modes). epoch: the controller incarnation that issued it (each restore
    from saved state starts a new one, and claims of an earlier one are void).
    """

    claim_id: int
    sample_id: int
    attempt: int
    version: int
    step: int | None
    deadline: float
    epoch: int = 0


@dataclass(frozen=True)
class ConsumedSample:
    """A sample handed to the trainer, with its version span and lag (in versions and in trainer steps)."""

    sample_id: int
    payload: Any
    span: VersionSpan
    lag: int
    lag_steps: int


@dataclass
class _Open:
    attempt: int
    step: int | None
    claims: set[int]


@dataclass(frozen=True)
class _Ready:
    sample_id: int
    payload: Any
    span: VersionSpan
    step: int | None
    attempt: int
    seq: int


class LagController:
    """State of one lag-controlled run; see the module docstring for the call protocol."""

    def __init__(
        self,
        cfg: LagConfig,
        clock: Callable[[], float] = time.monotonic,
        track_producer_idle: bool = True,
    ):
        self.cfg = cfg
        self.clock = clock
        self.version = 0
        self.steps_done = 0
        self.epoch = 0
        self.metrics = LagMetrics(
            cfg.hist_edges, interval_schedule=cfg.mode == "interval", track_producer_idle=track_producer_idle
        )
        self._next_id = 0
        self._next_claim = 0
        self._accept_seq = 0
        self._fresh_scheduled = 0
        self._open: dict[int, _Open] = {}
        self._requeue: deque[int] = deque()
        self._claims: dict[int, Claim] = {}
        self._ready: dict[int, _Ready] = {}
        self._consumed_at_version = 0
        self._sync_due = False
        self._closed = False

    # ------------------------------------------------------------------ producer side

    def claim(self) -> Claim | None:
        """A claim on the next sample to generate, or None if admission control holds the producer back."""
        self._expire_leases()
        sample_id = self._pop_requeued()
        if sample_id is None:
            if self._closed or not self._admits_fresh():
                return None
            sample_id = self._open_fresh()
        item = self._open[sample_id]
        claim = Claim(
            claim_id=self._next_claim,
            sample_id=sample_id,
            attempt=item.attempt,
            version=self.version,
            step=item.step,
            deadline=self.clock() + self.cfg.lease_s,
            epoch=self.epoch,
        )
        self._next_claim += 1
        item.claims.add(claim.claim_id)
        self._claims[claim.claim_id] = claim
        return claim

    def renew(self, claim: Claim) -> Claim | None:
        """Extend a live claim's lease; None if it has expired or its sample was already accepted."""
        self._expire_leases()
        if claim.epoch != self.epoch or claim.claim_id not in self._claims:
            return None
        renewed = replace(claim, deadline=self.clock() + self.cfg.lease_s)
        self._claims[claim.claim_id] = renewed
        return renewed

    def release(self, claim: Claim) -> None:
        """The producer gives a claim up (e.g. its request was aborted); the sample is handed out again."""
        if claim.epoch == self.epoch and self._claims.pop(claim.claim_id, None) is not None:
            self._drop_claim_from_item(claim)

    def submit(self, claim: Claim, payload: Any, span: VersionSpan) -> bool:
        """Offer a generated sample; True if accepted, False for a duplicate, superseded or pre-restart claim."""
        if claim.epoch != self.epoch:
            return False
        if span.newest > self.version:
            raise ValueError(f"sample {claim.sample_id} claims version {span.newest}, the trainer is at {self.version}")
        item = self._open.get(claim.sample_id)
        if item is None or item.attempt != claim.attempt:
            self._claims.pop(claim.claim_id, None)
            return False
        del self._open[claim.sample_id]
        for claim_id in item.claims:
            self._claims.pop(claim_id, None)
        self._ready[claim.sample_id] = _Ready(claim.sample_id, payload, span, item.step, item.attempt, self._accept_seq)
        self._accept_seq += 1
        return True

    def note_producer_idle(self, seconds: float) -> None:
        """Add time a producer spent held back by admission control."""
        self.metrics.add_producer_idle(seconds)

    def close(self) -> None:
        """No new samples will be started (data exhausted); samples already opened still complete."""
        self._closed = True

    def finished_producing(self) -> bool:
        """Whether the run is closed and no opened sample is still waiting for a result."""
        return self._closed and not self._open

    # ------------------------------------------------------------------ consumer side

    def take(self) -> list[ConsumedSample] | None:
        """The next batch of ``cfg.batch_size`` samples, or None if it is not ready yet.

        After :meth:`close`, returns the remaining samples (fewer, or an empty list once drained).
        In bounded mode no returned sample has lag > ``max_lag``.
        """
        if self._sync_due:
            raise LagProtocolError("a weight sync is due: call record_sync() before take()")
        self._expire_leases()
        self._purge_over_bound()
        candidates = self._candidates()
        n = self.cfg.batch_size
        if len(candidates) < n:
            if not self.finished_producing():
                return None
            n = len(candidates)
        scheduled = self._scheduled_pair(self.steps_done + 1)
        batch = []
        for ready in candidates[:n]:
            del self._ready[ready.sample_id]
            lag = sample_lag(self.version, ready.span)
            lag_steps = lag_in_steps(self.steps_done, ready.span, self.cfg.sync_every)
            if self.cfg.mode == "bounded" and lag > self.cfg.max_lag:
                raise AssertionError(f"sample {ready.sample_id} has lag {lag} > max_lag {self.cfg.max_lag}")
            self.metrics.record_consumed(lag, lag_steps, scheduled)
            batch.append(ConsumedSample(ready.sample_id, ready.payload, ready.span, lag, lag_steps))
        self._consumed_at_version += len(batch)
        return batch

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
        return not any(item.step is not None and item.step <= last for item in self._open.values())

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
        self._purge_over_bound()
        return self.version

    def note_consumer_idle(self, seconds: float) -> None:
        """Add time the trainer spent waiting for samples or for a sync to be allowed."""
        self.metrics.add_consumer_idle(seconds)

    def pop_metrics(self) -> dict[str, float]:
        """Metrics of the step just completed (same keys every step); resets the per-step counters."""
        scheduled = self._scheduled_pair(self.steps_done) if self.steps_done >= 1 else None
        return self.metrics.flush(self.version, self.steps_done, scheduled)

    # ------------------------------------------------------------------ state

    def stats(self) -> dict[str, int]:
        """Counts for monitoring: open (in flight or waiting to be re-handed out), ready, live claims, ..."""
        return {
            "version": self.version,
            "steps_done": self.steps_done,
            "open": len(self._open),
            "requeued": sum(1 for sid in self._requeue if sid in self._open),
            "claims": len(self._claims),
            "ready": len(self._ready),
            "next_id": self._next_id,
        }

    def state_dict(self) -> dict[str, Any]:
        """What a trainer checkpoint must keep: the version counter, step count, id counter, totals."""
        return {
            "config": self.cfg.to_dict(),
            "version": self.version,
            "steps_done": self.steps_done,
            "next_id": self._next_id,
            "sync_due": self._sync_due,
            "epoch": self.epoch,
            "metrics": self.metrics.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` output, as a new epoch.

        Samples not consumed at save time are generated anew; ids issued after the save are issued again, and
        claims of the earlier epoch are rejected.
        """
        saved = state["config"]
        if saved.get("mode") != self.cfg.mode or saved.get("interval") != self.cfg.interval:
            raise LagConfigError(
                "lag.mode",
                f"{self.cfg.mode} (interval {self.cfg.interval})",
                f"must match the checkpoint's {saved.get('mode')} (interval {saved.get('interval')}) to resume",
            )
        version, steps_done = int(state["version"]), int(state["steps_done"])
        if version != steps_done // self.cfg.sync_every:
            raise ValueError(
                f"inconsistent lag state: version {version} after {steps_done} steps with a sync every "
                f"{self.cfg.sync_every}"
            )
        self.version, self.steps_done = version, steps_done
        self._next_id = int(state["next_id"])
        self._sync_due = bool(state["sync_due"])
        self.epoch = int(state.get("epoch", 0)) + 1
        self._fresh_scheduled = steps_done * self.cfg.batch_size
        self.metrics.load_state_dict(state.get("metrics", {}))

    # ------------------------------------------------------------------ internals

    def _outstanding(self) -> int:
        return len(self._open) + len(self._ready)

    def _admits_fresh(self) -> bool:
        cfg = self.cfg
        if cfg.mode == "off":
            return self._outstanding() < cfg.outstanding_limit
        if cfg.mode == "bounded":
            return bounded_admits(self._consumed_at_version, self._outstanding(), cfg.max_lag, cfg.batch_size)
        next_step = self._fresh_scheduled // cfg.batch_size + 1
        return next_step <= last_claimable_step(self.version, cfg.interval, cfg.prefetch)

    def _open_fresh(self) -> int:
        sample_id = self._next_id
        self._next_id += 1
        step = None
        if self.cfg.mode == "interval":
            step = self._fresh_scheduled // self.cfg.batch_size + 1
            self._fresh_scheduled += 1
        self._open[sample_id] = _Open(attempt=0, step=step, claims=set())
        return sample_id

    def _pop_requeued(self) -> int | None:
        while self._requeue:
            sample_id = self._requeue.popleft()
            if sample_id in self._open:
                return sample_id
        return None

    def _drop_claim_from_item(self, claim: Claim) -> None:
        item = self._open.get(claim.sample_id)
        if item is None or item.attempt != claim.attempt:
            return
        item.claims.discard(claim.claim_id)
        if not item.claims and claim.sample_id not in self._requeue:
            self._requeue.append(claim.sample_id)

    def _expire_leases(self) -> None:
        now = self.clock()
        for claim in [c for c in self._claims.values() if c.deadline < now]:
            del self._claims[claim.claim_id]
            self._drop_claim_from_item(claim)

    def _purge_over_bound(self) -> None:
        if self.cfg.mode != "bounded":
            return
        stale = [r for r in self._ready.values() if sample_lag(self.version, r.span) > self.cfg.max_lag]
        for ready in stale:
            del self._ready[ready.sample_id]
            if self.cfg.over_bound == "drop":
                self.metrics.record_dropped()
            else:
                self.metrics.record_regenerated()
                # A new attempt number, so a late submit of the stale attempt is rejected.
                self._open[ready.sample_id] = _Open(attempt=ready.attempt + 1, step=ready.step, claims=set())
                self._requeue.append(ready.sample_id)

    def _candidates(self) -> list[_Ready]:
        ready = list(self._ready.values())
        if self.cfg.mode == "interval":
            next_step = self.steps_done + 1
            return sorted((r for r in ready if r.step <= next_step), key=lambda r: (r.step, r.sample_id))
        if self.cfg.mode == "bounded":
            return sorted(ready, key=lambda r: (r.span.oldest, r.sample_id))
        return sorted(ready, key=lambda r: r.seq)

    def _scheduled_pair(self, step: int) -> tuple[int, int] | None:
        if self.cfg.mode != "interval":
            return None
        return scheduled_lag(step, self.cfg.interval, self.cfg.prefetch)
