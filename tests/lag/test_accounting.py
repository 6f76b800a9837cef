"""sat_ext.lag.accounting: the one lag-accounting rule the verl sampler, OpenRLHF's trainer and the controller
share (pure functions; < 1 s)."""

from __future__ import annotations

import pytest

from sat_ext.lag import LagConfig, LagMetrics, VersionSpan
from sat_ext.lag.accounting import batch_lags, check_within_bound


def test_interval_mode_lags_and_schedule():
    cfg = LagConfig(mode="interval", interval=2, prefetch=1, batch_size=2)
    # trainer step 4 (3 done) on version 1: its batch was scheduled on version (4 - 1 - 1) // 2 = 1
    lags = batch_lags(cfg, version=1, steps_done=3, spans=[VersionSpan(1, 1), VersionSpan(0, 1)])
    assert lags.lags == (0, 1) and lags.scheduled == (0, 1) and lags.over == (False, False)
    assert lags.lag_steps == (1, 3)
    metrics = LagMetrics(cfg.hist_edges, interval_schedule=True)
    metrics.record_batch(lags, [5, 7], keep=[True, False])
    out = metrics.flush(1, 4)
    assert out["lag/consumed"] == 1.0 and out["lag/off_schedule"] == 0.0 and out["lag/consumed_len_mean"] == 5.0


def test_bounded_mode_flags_and_refuses_samples_over_the_bound():
    cfg = LagConfig(mode="bounded", max_lag=1, batch_size=2)
    lags = batch_lags(cfg, version=3, steps_done=3, spans=[VersionSpan(2, 2), VersionSpan(1, 3)])
    assert lags.lags == (1, 2) and lags.over == (False, True) and lags.scheduled is None
    with pytest.raises(AssertionError, match="here: a sample with lag 2 > lag.max_lag=1"):
        check_within_bound(cfg, lags, "here")


@pytest.mark.parametrize("over_bound,dropped,regenerated,requeued", [("drop", 4, 0, []), ("regenerate", 0, 4, [0, 4])])
def test_a_group_with_a_sample_over_the_bound_leaves_whole(over_bound, dropped, regenerated, requeued):
    """LagMetrics.record_over_bound, the over-bound bookkeeping the controller (groups of 1) and OpenRLHF's trainer
    (prompt groups of n) share: the whole group leaves, counted with its response tokens."""
    metrics = LagMetrics(LagConfig().hist_edges)
    over, tokens = [True, False, False, False, False, True], [1, 2, 3, 4, 5, 6]
    keep, regenerate = metrics.record_over_bound(over_bound, over, tokens, group_size=2)
    assert keep == [False, False, True, True, False, False] and regenerate == requeued
    out = metrics.flush(0, 1)
    assert (out["lag/dropped"], out["lag/regenerated"]) == (dropped, regenerated)
    assert out["lag/dropped_len_mean"] == (1 + 2 + 5 + 6) / 4
