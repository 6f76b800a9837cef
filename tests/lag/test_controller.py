"""Unit and seeded randomized tests of the framework-free LagController (simulated time, no Ray)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sat_ext.lag import Claim, LagConfig, LagController, LagProtocolError, VersionSpan, lag_in_steps, sample_lag
from sat_ext.lag.schedule import bounded_admits, scheduled_lag, scheduled_version

from .sim import controller_stats, simulate


def _step(ctl: LagController) -> dict[str, float]:
    """Complete a step, sync if due, return its metrics."""
    if ctl.complete_step():
        ctl.record_sync()
    return ctl.pop_metrics()


def _claims(ctl: LagController) -> list:
    out = []
    while (c := ctl.claim()) is not None:
        out.append(c)
    return out


# --------------------------------------------------------------------------- admission


def test_bounded_admission_is_areals_capacity():
    ctl = LagController(LagConfig(mode="bounded", max_lag=1, batch_size=2))
    first = _claims(ctl)
    assert len(first) == 4  # (L + 1) * B samples may be outstanding at version 0
    for c in first:
        assert ctl.submit(c, c.sample_id, VersionSpan.at(0))
    assert ctl.claim() is None
    batch = ctl.take()
    assert [s.sample_id for s in batch] == [0, 1]
    # consumed 2 at this version, 2 ready: 2 + 2 == (1 + 1) * 2, still full until the sync
    assert ctl.claim() is None
    _step(ctl)
    assert len(_claims(ctl)) == 2


def test_bounded_admits_formula_edges():
    assert bounded_admits(0, 0, 0, 1)
    assert not bounded_admits(0, 1, 0, 1)
    assert not bounded_admits(1, 0, 0, 1)
    assert bounded_admits(0, 5, 2, 2)
    assert not bounded_admits(1, 5, 2, 2)


def test_off_mode_bounds_the_queue_only():
    ctl = LagController(LagConfig(mode="off", batch_size=2, max_outstanding=3))
    assert len(_claims(ctl)) == 3


# --------------------------------------------------------------------------- consumption check


def _straggler_setup(over_bound: str):
    """L=1, B=1: sample 0 is claimed at version 0 and submitted only after two syncs."""
    ctl = LagController(LagConfig(mode="bounded", max_lag=1, batch_size=1, over_bound=over_bound))
    straggler, other = ctl.claim(), ctl.claim()
    assert ctl.claim() is None
    assert ctl.submit(other, "fresh", VersionSpan.at(0))
    assert [s.sample_id for s in ctl.take()] == [other.sample_id]
    _step(ctl)  # version 1
    c2 = ctl.claim()
    ctl.submit(c2, "fresh", VersionSpan.at(1))
    assert [s.sample_id for s in ctl.take()] == [c2.sample_id]
    _step(ctl)  # version 2
    assert ctl.submit(straggler, "stale", VersionSpan(0, 2))
    return ctl, straggler


def test_over_bound_sample_is_dropped_and_counted():
    ctl, straggler = _straggler_setup("drop")
    assert ctl.take() is None  # the stale sample is not handed out
    m = ctl.metrics.flush(ctl.version, ctl.steps_done)
    assert m["lag/dropped"] == 1 and m["lag/dropped_total"] == 1 and m["lag/regenerated"] == 0
    c = ctl.claim()
    assert c.sample_id != straggler.sample_id  # dropped for good


def test_over_bound_sample_is_regenerated_under_the_same_id():
    ctl, straggler = _straggler_setup("regenerate")
    assert ctl.take() is None
    assert ctl.metrics.regenerated_total == 1
    again = ctl.claim()
    assert again.sample_id == straggler.sample_id and again.attempt == straggler.attempt + 1
    assert not ctl.submit(straggler, "late duplicate", VersionSpan(0, 2))  # the stale attempt is void
    assert ctl.submit(again, "regenerated", VersionSpan.at(2))
    [s] = ctl.take()
    assert (s.sample_id, s.payload, s.lag) == (straggler.sample_id, "regenerated", 0)


def test_lag_uses_the_oldest_version_of_a_partial_rollout():
    ctl = LagController(LagConfig(mode="bounded", max_lag=3, batch_size=1))
    c = ctl.claim()
    for _ in range(2):
        filler = ctl.claim()
        ctl.submit(filler, None, VersionSpan.at(ctl.version))
        ctl.take()
        _step(ctl)
    ctl.submit(c, None, VersionSpan(0, 2))
    [s] = ctl.take()
    assert (s.lag, s.span.spans_syncs) == (2, True)


def test_version_span_of_a_resumed_partial_rollout():
    span = VersionSpan.at(3).extended(4).extended(6)  # one segment per version the request ran on
    assert (span.oldest, span.newest, span.spans_syncs) == (3, 6, True)
    assert sample_lag(7, span) == 4 and lag_in_steps(14, span, sync_every=2) == 8
    assert not VersionSpan.at(5).spans_syncs
    with pytest.raises(ValueError, match="older version 5"):
        sample_lag(5, span)
    with pytest.raises(ValueError, match="newest must be >= oldest"):
        VersionSpan(4, 2)
    with pytest.raises(ValueError, match="oldest must be an integer >= 0"):
        VersionSpan(-1, 2)


# --------------------------------------------------------------------------- idempotence


def test_duplicate_submit_is_rejected():
    ctl = LagController(LagConfig(mode="bounded", max_lag=2, batch_size=1))
    c = ctl.claim()
    assert ctl.submit(c, "a", VersionSpan.at(0))
    assert not ctl.submit(c, "b", VersionSpan.at(0))
    assert [s.payload for s in ctl.take()] == ["a"]


def test_future_version_is_rejected():
    ctl = LagController(LagConfig(mode="bounded", max_lag=0, batch_size=1))
    c = ctl.claim()
    with pytest.raises(ValueError, match="version 3"):
        ctl.submit(c, None, VersionSpan(0, 3))


# --------------------------------------------------------------------------- protocol


def test_protocol_order_is_enforced():
    ctl = LagController(LagConfig(mode="bounded", max_lag=1, batch_size=1))
    with pytest.raises(LagProtocolError, match="no sync is due"):
        ctl.record_sync()
    assert ctl.complete_step() is True
    with pytest.raises(LagProtocolError, match="record_sync"):
        ctl.take()
    with pytest.raises(LagProtocolError, match="record_sync"):
        ctl.complete_step()
    assert ctl.record_sync() == 1


def test_close_drains_the_remaining_samples():
    ctl = LagController(LagConfig(mode="bounded", max_lag=1, batch_size=4))
    c = ctl.claim()
    ctl.close()
    assert ctl.take() is None  # c is still open
    ctl.submit(c, None, VersionSpan.at(0))
    assert len(ctl.take()) == 1
    assert ctl.take() == [] and ctl.finished_producing()


# --------------------------------------------------------------------------- interval mode


def test_interval_schedule_values():
    # k = 3, one-step-off: lags in trainer steps cycle 1, 2, 3 after the first step
    assert [scheduled_lag(s, 3, 1)[1] for s in range(1, 9)] == [0, 1, 2, 3, 1, 2, 3, 1]
    assert [scheduled_version(s, 3, 1) for s in range(1, 9)] == [0, 0, 0, 0, 1, 1, 1, 2]
    # no prefetch: a fresh generation every k steps, trained on for k steps
    assert [scheduled_lag(s, 2, 0) for s in range(1, 6)] == [(0, 0), (0, 1), (0, 0), (0, 1), (0, 0)]


def test_interval_sync_waits_for_the_batches_scheduled_on_current_weights():
    ctl = LagController(LagConfig(mode="interval", interval=1, prefetch=1, batch_size=1))
    c1, c2 = ctl.claim(), ctl.claim()
    assert (c1.step, c2.step) == (1, 2)
    assert ctl.claim() is None  # step 3 is scheduled on version 1
    ctl.submit(c1, None, VersionSpan.at(0))
    ctl.take()
    assert ctl.complete_step()
    assert not ctl.sync_allowed()  # step 2's sample must be generated on version 0 first
    with pytest.raises(LagProtocolError, match="sync_allowed"):
        ctl.record_sync()
    ctl.submit(c2, None, VersionSpan.at(0))
    assert ctl.sync_allowed()
    ctl.record_sync()
    assert ctl.claim().step == 3


# --------------------------------------------------------------------------- metrics


def test_metrics_keys_are_the_same_every_step_and_histogram_counts_samples():
    ctl = LagController(LagConfig(mode="bounded", max_lag=2, batch_size=2, hist_edges=(0, 1, 4)))
    keys = None
    for _ in range(4):
        for c in _claims(ctl):
            ctl.submit(c, None, VersionSpan.at(c.version))
        batch = ctl.take()
        m = _step(ctl)
        keys = keys or set(m)
        assert set(m) == keys
        assert m["lag/hist/0"] + m["lag/hist/1-3"] + m["lag/hist/4+"] == len(batch) == m["lag/consumed"]
        assert m["lag/max"] == max(s.lag for s in batch)


# --------------------------------------------------------------------------- seeded randomized runs


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    max_lag=st.integers(0, 3),
    batch_size=st.integers(1, 4),
    producers=st.integers(1, 5),
    over_bound=st.sampled_from(["wait", "drop", "regenerate"]),
)
def test_bounded_simulation_never_trains_on_a_sample_over_the_bound(seed, max_lag, batch_size, producers, over_bound):
    cfg = LagConfig(mode="bounded", max_lag=max_lag, batch_size=batch_size, over_bound=over_bound)
    res = simulate(cfg, seed=seed, steps=40, producers=producers, straggler_prob=0.2)
    lags = [lag for _, _, lag, _ in res.consumed]
    assert max(lags) <= max_lag
    ids = [sid for _, sid, _, _ in res.consumed]
    assert len(ids) == len(set(ids)) == 40 * batch_size
    assert res.max_outstanding <= (max_lag + 1) * batch_size  # admission control held producers back
    assert sum(m["lag/consumed"] for m in res.metrics) == len(ids)
    if over_bound == "wait":  # first in, first out: nothing is dropped or regenerated, ids come in order
        assert res.metrics[-1]["lag/dropped_total"] == res.metrics[-1]["lag/regenerated_total"] == 0
        assert ids == sorted(ids)


def test_bounded_simulation_with_stragglers_exercises_the_consumption_check():
    cfg = LagConfig(mode="bounded", max_lag=1, batch_size=4, over_bound="drop")
    res = simulate(cfg, seed=7, steps=150, producers=6, slow_producers=2, straggler_prob=0.25)
    assert max(lag for _, _, lag, _ in res.consumed) == 1  # the bound is reached...
    assert res.metrics[-1]["lag/dropped_total"] > 0  # ...and samples over it were dropped, not trained on
    stats = controller_stats(res.controller)
    # conservation: every sample ever opened is consumed, dropped, or still open (in flight or ready)
    assert len(res.consumed) + res.metrics[-1]["lag/dropped_total"] + stats["open"] == stats["next_id"]


def test_wait_mode_waits_for_the_straggler_and_drops_nothing():
    cfg = LagConfig(mode="bounded", max_lag=1, batch_size=4)
    res = simulate(cfg, seed=7, steps=150, producers=6, slow_producers=2, straggler_prob=0.25)
    assert max(lag for _, _, lag, _ in res.consumed) <= 1
    assert res.metrics[-1]["lag/dropped_total"] == 0
    ids = [sid for _, sid, _, _ in res.consumed]
    assert ids == list(range(len(ids)))  # every opened sample trained, in the order opened


def test_regenerate_refuses_the_superseded_attempt():
    ctl = LagController(LagConfig(mode="bounded", max_lag=0, batch_size=1, over_bound="regenerate"))
    stale = ctl.claim()
    ctl.submit(stale, "first", VersionSpan.at(0))
    assert ctl.complete_step()
    ctl.record_sync()  # the sample is now 1 version old, over max_lag 0
    assert ctl.take() is None and ctl.pop_metrics()["lag/regenerated"] == 1
    again = ctl.claim()
    assert (again.sample_id, again.attempt, again.version) == (stale.sample_id, 1, 1)
    assert not ctl.submit(stale, "late", VersionSpan.at(0))
    forged = Claim(claim_id=again.claim_id + 1, sample_id=again.sample_id, attempt=1, version=1, step=None)
    assert not ctl.submit(forged, "forged", VersionSpan.at(1))  # never issued
    assert ctl.submit(again, "fresh", VersionSpan.at(1), response_tokens=5)
    assert [s.payload for s in ctl.take()] == ["fresh"]
    assert ctl.pop_metrics()["lag/consumed_len_mean"] == 5.0


@pytest.mark.parametrize("interval,prefetch", [(1, 1), (3, 1), (4, 0), (2, 3)])
def test_interval_simulation_follows_the_schedule(interval, prefetch):
    cfg = LagConfig(mode="interval", interval=interval, prefetch=prefetch, batch_size=3)
    res = simulate(cfg, seed=interval * 10 + prefetch, steps=5 * interval + 3, producers=3, straggler_prob=0.2)
    for step, _, lag, lag_steps in res.consumed:
        assert (lag, lag_steps) == scheduled_lag(step, interval, prefetch)
    assert all(m["lag/off_schedule"] == 0 for m in res.metrics)
    assert max(m["lag/steps/max"] for m in res.metrics) == max(
        scheduled_lag(s, interval, prefetch)[1] for s in range(1, 5 * interval + 4)
    )


def test_a_sample_over_the_bound_cannot_wedge_wait_mode():
    """wait mode: a sample over the bound (here the trainer moved on without it) is evicted and counted, and the
    run goes on; it used to stay at the head of the queue, where every take() raised."""
    ctl = LagController(LagConfig(mode="bounded", max_lag=0, batch_size=1))
    claim = ctl.claim()
    assert ctl.submit(claim, "payload", VersionSpan.at(claim.version))
    ctl.complete_step()  # the trainer moves on without it (what a lost sample would look like)
    ctl.record_sync()
    assert ctl.take() is None
    metrics = ctl.pop_metrics()
    assert (metrics["lag/dropped"], metrics["lag/consumed"]) == (1.0, 0.0)
    fresh = ctl.claim()
    assert fresh is not None and fresh.sample_id != claim.sample_id
    assert ctl.submit(fresh, "fresh", VersionSpan.at(ctl.version))
    assert [s.payload for s in ctl.take()] == ["fresh"]


def test_a_span_older_than_its_claim_is_refused_at_submit():
    """A sample claimed at version 2 cannot have been generated by version 0: refused, naming both versions,
    instead of being queued over the bound (bounded wait, L = 1)."""
    ctl = LagController(LagConfig(mode="bounded", max_lag=1, batch_size=1))
    for _ in range(2):
        filler = ctl.claim()
        ctl.submit(filler, None, VersionSpan.at(ctl.version))
        ctl.take()
        _step(ctl)
    late = ctl.claim()
    assert late.version == 2
    with pytest.raises(ValueError, match=rf"sample {late.sample_id} claims oldest version 0, older than the version 2"):
        ctl.submit(late, "stale", VersionSpan(0, 2))
    assert ctl.submit(late, "fresh", VersionSpan.at(2))  # the claim is still open
    assert [s.payload for s in ctl.take()] == ["fresh"]


def test_schedule_metrics_cover_every_optimizer_step_of_the_logged_step():
    from sat_ext.lag.metrics import LagMetrics

    metrics = LagMetrics((0, 1, 2, 4), interval_schedule=True)
    for lag_steps in (1, 2, 2):  # three batches of one logged step, e.g. verl's local updates
        metrics.record_consumed(1, lag_steps, scheduled=(1, lag_steps))
    out = metrics.flush(version=3, trainer_step=6)
    assert (out["lag/scheduled_steps/min"], out["lag/scheduled_steps/mean"], out["lag/scheduled_steps/max"]) == (
        1.0,
        5 / 3,
        2.0,
    )
    assert out["lag/scheduled/max"] == 1.0 and out["lag/off_schedule"] == 0.0
    assert "lag/scheduled" not in out and "lag/scheduled_steps" not in out
