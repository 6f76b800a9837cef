"""Bad lag settings raise errors that name the key and the value; check_compatible rejects broken engines."""

from __future__ import annotations

import pytest

from sat_ext.lag import EngineSettings, LagConfig, LagConfigError, check_compatible


@pytest.mark.parametrize(
    "block,message",
    [
        ({"mode": "bounded", "max_lag": -1}, "lag.max_lag must be an integer >= 0 when lag.mode=bounded, got -1"),
        ({"mode": "bounded"}, "lag.max_lag must be an integer >= 0 when lag.mode=bounded, got None"),
        ({"mode": "bounded", "max_lag": 1.5}, "lag.max_lag must be an integer >= 0 when lag.mode=bounded, got 1.5"),
        ({"mode": "bounded", "max_lag": True}, "lag.max_lag must be an integer >= 0 when lag.mode=bounded, got True"),
        ({"mode": "interval", "interval": 0}, "lag.interval must be an integer >= 1 when lag.mode=interval, got 0"),
        ({"mode": "sometimes"}, "lag.mode must be one of off|bounded|interval, got 'sometimes'"),
        (
            {"mode": "bounded", "max_lag": 2, "over_bound": "keep"},
            "lag.over_bound must be one of wait|drop|regenerate, got 'keep'",
        ),
        (
            {"mode": "interval", "interval": 2, "max_lag": 3},
            "lag.max_lag applies only to lag.mode=bounded (mode is 'interval'), got 3",
        ),
        (
            {"mode": "bounded", "max_lag": 3, "interval": 2},
            "lag.interval applies only to lag.mode=interval (mode is 'bounded'), got 2",
        ),
        (
            {"mode": "bounded", "max_lag": 3, "prefetch": 1},
            "lag.prefetch applies only to lag.mode=interval (mode is 'bounded'), got 1",
        ),
        ({"mode": "interval", "interval": 2, "prefetch": -1}, "lag.prefetch must be an integer >= 0, got -1"),
        ({"batch_size": 0}, "lag.batch_size must be an integer >= 1, got 0"),
        (
            {"batch_size": 4, "max_outstanding": 3},
            "lag.max_outstanding must be an integer >= lag.batch_size=4 or null (fewer samples in flight than one "
            "step consumes would never complete a step), got 3",
        ),
        (
            {"mode": "bounded", "max_lag": 1, "max_outstanding": 8},
            "lag.max_outstanding applies only to lag.mode=off (mode is 'bounded'), got 8",
        ),
        (
            {"mode": "interval", "interval": 2, "over_bound": "drop"},
            "lag.over_bound applies only to lag.mode=bounded (mode is 'interval'), got 'drop'",
        ),
        (
            {"over_bound": "regenerate"},
            "lag.over_bound applies only to lag.mode=bounded (mode is 'off'), got 'regenerate'",
        ),
        (
            {"hist_edges": [1, 2]},
            "lag.hist_edges must be a non-empty, strictly increasing list of integers from 0, got (1, 2)",
        ),
        (
            {"hist_edges": [0, 2, 2]},
            "lag.hist_edges must be a non-empty, strictly increasing list of integers from 0, got (0, 2, 2)",
        ),
        (
            {"max_lags": 3},
            "lag.max_lags is not a lag setting (known: batch_size, hist_edges, interval, max_lag, "
            "max_outstanding, mode, over_bound, prefetch), got 3",
        ),
    ],
)
def test_bad_values_name_key_and_value(block, message):
    with pytest.raises(LagConfigError) as err:
        LagConfig.from_dict(block)
    assert str(err.value) == message


def test_good_config_round_trips():
    cfg = LagConfig.from_dict({"mode": "interval", "interval": 8, "prefetch": 1, "hist_edges": [0, 4, 8]})
    assert cfg.sync_every == 8 and cfg.hist_edges == (0, 4, 8)
    assert LagConfig.from_dict(cfg.to_dict()) == cfg
    assert LagConfig.from_dict(None).mode == "off"


def _engine(**overrides) -> EngineSettings:
    base = dict(
        engine="test engine",
        partial_rollout=False,
        oversampling=False,
        reports_sample_versions=True,
        can_regenerate=True,
        prefetch_steps=0,
        sync_every=1,
        keys={
            "prefetch_steps": "engine.prefetch",
            "sync_every": "engine.sync",
            "partial_rollout": "engine.partial",
            "oversampling": "engine.oversample",
        },
    )
    base.update(overrides)
    return EngineSettings(**base)


def test_compatible_settings_pass():
    check_compatible(LagConfig(mode="bounded", max_lag=2), _engine(prefetch_steps=2, partial_rollout=True))
    check_compatible(LagConfig(mode="interval", interval=4), _engine(sync_every=4, partial_rollout=True))
    check_compatible(LagConfig(mode="off"), _engine(sync_every=7, oversampling=True, reports_sample_versions=False))


@pytest.mark.parametrize(
    "cfg,engine,message",
    [
        (
            LagConfig(mode="bounded", max_lag=1),
            _engine(prefetch_steps=2),
            "engine.prefetch lets a batch be generated up to 2 weight syncs before it is trained, over "
            "lag.max_lag=1; set it to at most 1, got 2",
        ),
        (
            LagConfig(mode="bounded", max_lag=1),
            _engine(sync_every=4),
            "engine.sync must be 1 with lag.mode=bounded "
            "(lag is counted in weight syncs, one after every trainer step), got 4",
        ),
        (
            LagConfig(mode="bounded", max_lag=1),
            _engine(partial_rollout=True, reports_sample_versions=False),
            "engine.partial cannot be bounded by lag.mode=bounded on test engine: its samples carry no per-sample "
            "version, got True",
        ),
        (
            LagConfig(mode="bounded", max_lag=1),
            _engine(oversampling=True, reports_sample_versions=False),
            "engine.oversample cannot be bounded by lag.mode=bounded on test engine: its samples carry no per-sample "
            "version, got True",
        ),
        (
            LagConfig(mode="interval", interval=8),
            _engine(sync_every=4),
            "engine.sync must equal lag.interval=8 with lag.mode=interval, got 4",
        ),
        (
            LagConfig(mode="interval", interval=2, prefetch=1),
            _engine(sync_every=2, prefetch_steps=1, partial_rollout=True),
            "engine.partial breaks lag.mode=interval with lag.prefetch=1: a sample in flight at a sync would span "
            "versions and leave the schedule; turn partial rollout off or use lag.prefetch=0, got True",
        ),
        (
            LagConfig(mode="interval", interval=2),
            _engine(sync_every=2, oversampling=True),
            "engine.oversample breaks lag.mode=interval: "
            "leftover samples served at a later step leave the schedule; turn oversampling off, got True",
        ),
        (
            LagConfig(mode="bounded", max_lag=1, over_bound="regenerate"),
            _engine(can_regenerate=False),
            "lag.over_bound is not available on test engine: it cannot generate a group over the bound again with "
            "current weights; use lag.over_bound=wait (nothing dropped) or drop, got 'regenerate'",
        ),
        (
            LagConfig(mode="bounded", max_lag=1),
            _engine(oversampling=True),
            "engine.oversample breaks lag.mode=bounded with lag.over_bound=wait: the extra samples are trained at "
            "later steps without regeneration, outside the rollout's bound; turn oversampling off, or use "
            "lag.over_bound=drop / regenerate (leftovers over the bound are then dropped or generated again at "
            "consumption), got True",
        ),
        (
            LagConfig(mode="interval", interval=2),
            _engine(sync_every=2, prefetch_steps=2),
            "engine.prefetch must equal lag.prefetch=0 with lag.mode=interval, got 2",
        ),
    ],
)
def test_incompatible_engine_settings_raise(cfg, engine, message):
    with pytest.raises(LagConfigError) as err:
        check_compatible(cfg, engine)
    assert str(err.value) == message


def test_what_an_engine_can_do_decides_the_rest():
    # oversampling's leftovers are dropped or regenerated at consumption; regenerate needs the capability
    check_compatible(LagConfig(mode="bounded", max_lag=1, over_bound="drop"), _engine(oversampling=True))
    check_compatible(LagConfig(mode="bounded", max_lag=1, over_bound="regenerate"), _engine(oversampling=True))
    check_compatible(LagConfig(mode="bounded", max_lag=1, over_bound="drop"), _engine(can_regenerate=False))
    check_compatible(LagConfig(mode="interval", interval=2), _engine(sync_every=2, partial_rollout=True))


# ------------------------------------------------------------------ the same rules through the adapters


def _openrlhf_args(lag: dict, queue_size=None, partial=False, gen_batch=None):
    """OpenRLHF's final arguments as sat_ext's launcher sees them (only the fields its checks read)."""
    from types import SimpleNamespace as NS

    return NS(
        lag=NS(**lag),
        train=NS(async_queue_size=queue_size, async_enable=True, partial_rollout_enable=partial),
        vllm=NS(num_engines=1),
        rollout=NS(vllm_generate_batch_size=gen_batch, batch_size=2),
        eval=NS(steps=-1, dataset=None),
    )


@pytest.mark.parametrize(
    "lag,settings,message",
    [
        (
            {"mode": "bounded", "max_lag": 1},
            {"gen_batch": 4},
            "--rollout.vllm_generate_batch_size 4 > --rollout.batch_size 2 breaks --lag.mode=bounded with "
            "--lag.over_bound=wait: the extra samples are trained at later steps",
        ),
        (
            {"mode": "bounded", "max_lag": 2},
            {"queue_size": 3},
            "--train.async_queue_size lets a batch be generated up to 3 weight syncs before it is trained, over "
            "--lag.max_lag=2; set it to at most 2, got 3",
        ),
        (
            {"mode": "interval", "interval": 2},
            {"gen_batch": 4},
            "--rollout.vllm_generate_batch_size 4 > --rollout.batch_size 2 breaks --lag.mode=interval: leftover",
        ),
        (
            {"mode": "interval", "interval": 2, "prefetch": 1},
            {"partial": True},
            "--train.partial_rollout_enable breaks --lag.mode=interval with --lag.prefetch=1: a sample in flight",
        ),
    ],
)
def test_openrlhf_launcher_refuses_through_check_compatible(lag, settings, message):
    from sat_ext.openrlhf.lag.flags import check_lag_args

    with pytest.raises(ValueError) as err:
        check_lag_args(_openrlhf_args(lag, **settings))
    assert message in str(err.value)
    assert isinstance(err.value.__cause__, LagConfigError)  # raised by check_compatible, spelled as flags


def test_openrlhf_launcher_accepts_what_its_engine_can_do():
    from sat_ext.openrlhf.lag.flags import check_lag_args

    args = _openrlhf_args({"mode": "bounded", "max_lag": 1, "over_bound": "regenerate"}, gen_batch=4)
    assert check_lag_args(args) == LagConfig(mode="bounded", max_lag=1, over_bound="regenerate")
    assert args.train.async_queue_size == 1


@pytest.mark.parametrize(
    "lag,schedule,message",
    [
        (
            LagConfig(mode="bounded", max_lag=1, over_bound="regenerate"),
            ("sat_separate_async", 1, 1, 8, 8),
            "lag.over_bound is not available on verl sat_separate_async: it cannot generate a group over the bound "
            "again with current weights",
        ),
        (
            LagConfig(mode="bounded", max_lag=1),
            ("sat_separate_async", 1, 2, 8, 8),
            "trainer.v1.separate_async.num_warmup_batches lets a batch be generated up to 2 weight syncs before it "
            "is trained, over lag.max_lag=1",
        ),
        (
            LagConfig(mode="interval", interval=2, prefetch=1),
            ("separate_async", 2, 0.5, 16, 8),
            "breaks lag.mode=interval with lag.prefetch=1: a sample in flight",
        ),
    ],
)
def test_verl_refuses_through_check_compatible(lag, schedule, message):
    pytest.importorskip("omegaconf")
    from sat_ext.verl.lag.overrides import VerlSchedule, check_verl_lag

    with pytest.raises(LagConfigError, match=message):
        check_verl_lag(lag, VerlSchedule(*schedule))
