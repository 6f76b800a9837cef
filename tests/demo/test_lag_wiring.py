import pytest

from sat_ext.demo.engines import Mismatch
from sat_ext.demo.losses import default_settings
from sat_ext.demo.methods import Method
from sat_ext.demo.model import build_policy
from sat_ext.demo.spec import WarmStartSpec
from sat_ext.demo.train import lag_config, run
from sat_ext.lag.schedule import scheduled_lag

from .conftest import flat_spec


@pytest.fixture(scope="module")
def warm_state():
    return build_policy(seed=0).state_dict()  # a random policy: the lag wiring does not need a trained one


def _spec(**kw):
    base = dict(
        method=Method("sat"),
        lag=4,
        seed=0,
        setting=default_settings()["sat"],
        backend="core",
        steps=12,
        prompts_per_step=2,
        group_size=2,
        mini_batches=1,
        eval_every=100,
        eval_size=8,
        mismatch=Mismatch(engine="bf16"),
        warm=WarmStartSpec(seed=0),
    )
    base.update(kw)
    return flat_spec(**base)


@pytest.mark.parametrize("k,prefetch", [(1, 0), (4, 1), (3, 2)])
def test_interval_mode_consumed_lags_follow_the_schedule(warm_state, k, prefetch):
    res = run(_spec(lag=k, prefetch=prefetch, steps=9), warm_state)
    assert len(res.history) == 9
    for h in res.history:
        step = int(h["step"])
        lag_versions, lag_steps = scheduled_lag(step, k, prefetch)
        assert h["lag/steps/min"] == h["lag/steps/max"] == lag_steps, step
        assert h["lag/min"] == h["lag/max"] == lag_versions, step
        assert h["lag/off_schedule"] == 0
        assert h["lag/version"] == step // k  # one weight sync every k trainer steps
    expected = {}
    for s in range(1, 10):
        lag = scheduled_lag(s, k, prefetch)[1]
        expected[lag] = expected.get(lag, 0) + 2
    assert res.lag_counts == expected
    assert max(res.lag_counts) == (k - 1 + prefetch if k > 1 or prefetch else 0)


@pytest.mark.parametrize("over_bound", ["drop", "regenerate"])
def test_bounded_mode_never_exceeds_max_lag(warm_state, over_bound):
    L = 2
    res = run(_spec(mode="bounded", lag=L, prefetch=0, steps=16, latency_mean=2.0, over_bound=over_bound), warm_state)
    assert len(res.history) == 16
    assert all(h["lag/max"] <= L for h in res.history)
    assert max(res.lag_counts) <= L
    assert all(h["lag/version"] == h["step"] for h in res.history)  # bounded mode syncs after every step
    assert sum(res.lag_counts.values()) == 16 * 2
    # Slow (geometric latency) groups exceed the bound and are counted, not trained on.
    key = "dropped" if over_bound == "drop" else "regenerated"
    assert res.totals[key] > 0
    assert len(set(res.lag_counts)) > 1  # heterogeneous lags under the bound


def test_bounded_wait_mode_drops_nothing(warm_state):
    L = 2
    res = run(_spec(mode="bounded", lag=L, prefetch=0, steps=16, latency_mean=2.0, over_bound="wait"), warm_state)
    assert max(res.lag_counts) <= L and sum(res.lag_counts.values()) == 16 * 2
    assert res.totals["dropped"] == res.totals["regenerated"] == 0  # the trainer waited for the slow groups


def test_bounded_fast_producer_runs_at_the_bound(warm_state):
    res = run(_spec(mode="bounded", lag=3, prefetch=0, steps=12, latency_mean=0.0), warm_state)
    lags = [int(h["lag/max"]) for h in res.history]
    assert max(lags) == 3 and all(x <= 3 for x in lags)
    assert res.totals["dropped"] == 0


def test_lag_config_mapping():
    cfg = lag_config(_spec(lag=8, prefetch=1))
    assert (cfg.mode, cfg.interval, cfg.prefetch, cfg.batch_size, cfg.sync_every) == ("interval", 8, 1, 2, 8)
    cfg = lag_config(_spec(mode="bounded", lag=5, prefetch=0))
    assert (cfg.mode, cfg.max_lag, cfg.sync_every) == ("bounded", 5, 1)
    with pytest.raises(ValueError, match="interval mode"):
        _spec(lag=0)
