"""The lag block's verl overrides compose with verl 0.9.1's real Hydra configs, with no unknown keys."""

from __future__ import annotations

import os

import pytest

verl = pytest.importorskip("verl")
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from sat_ext.lag import LagConfig, LagConfigError, check_compatible  # noqa: E402
from sat_ext.lag.verl_overrides import SAMPLER_NAME, SAMPLER_PATH, verl_engine_settings, verl_overrides  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def _compose(config_name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name=config_name, overrides=overrides)


def _engine(cfg):
    mode = cfg.trainer.v1.trainer_mode
    return verl_engine_settings(mode, cfg.trainer.v1[mode])


@pytest.mark.parametrize("config_name", ["ppo_trainer", "ppo_megatron_trainer"])
def test_bounded_overrides_compose(config_name):
    lag = LagConfig(mode="bounded", max_lag=8)
    overrides = verl_overrides(lag, train_batch_size=256)
    # only the free-form sampler_kwargs are new keys; every other override must exist in verl's schema
    assert all(o.startswith("+trainer.v1.sampler.sampler_kwargs.") for o in overrides if o.startswith("+"))
    cfg = _compose(config_name, overrides)
    v1 = cfg.trainer.v1
    assert cfg.trainer.use_v1 is True and v1.trainer_mode == "separate_async"
    assert (v1.sampler.custom_sampler.path, v1.sampler.custom_sampler.name) == (SAMPLER_PATH, SAMPLER_NAME)
    assert v1.sampler.max_off_policy_threshold == 9 and v1.sampler.max_off_policy_strategy == "drop"
    assert v1.separate_async.parameter_sync_step == 1 and v1.separate_async.num_warmup_batches == 1
    # verl's separate_async asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size
    assert cfg.data.train_batch_size == 256 == cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    assert LagConfig.from_dict(OmegaConf.to_container(v1.sampler.sampler_kwargs)) == lag
    check_compatible(lag, _engine(cfg))


@pytest.mark.parametrize("config_name", ["ppo_trainer", "ppo_megatron_trainer"])
def test_interval_overrides_compose(config_name):
    lag = LagConfig(mode="interval", interval=8)
    cfg = _compose(config_name, verl_overrides(lag, train_batch_size=256))
    v1 = cfg.trainer.v1
    assert v1.separate_async.parameter_sync_step == 8 and v1.separate_async.num_warmup_batches == 0
    assert v1.sampler.max_off_policy_threshold is None
    assert cfg.data.train_batch_size == 8 * 256 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 256
    assert LagConfig.from_dict(OmegaConf.to_container(v1.sampler.sampler_kwargs)) == lag
    engine = _engine(cfg)
    assert (engine.sync_every, engine.prefetch_steps) == (8, 0)
    check_compatible(lag, engine)


def test_colocate_async_bounded_overrides_compose():
    lag = LagConfig(mode="bounded", max_lag=0)
    cfg = _compose("ppo_trainer", verl_overrides(lag, train_batch_size=32, trainer_mode="colocate_async"))
    assert cfg.trainer.v1.trainer_mode == "colocate_async"
    assert cfg.trainer.v1.colocate_async.num_warmup_batches == 0  # lag 0: rollout may not run ahead
    check_compatible(lag, _engine(cfg))


def test_off_mode_changes_nothing():
    assert verl_overrides({"mode": "off"}, train_batch_size=64) == []


def test_user_settings_that_break_the_bound_are_named():
    lag = LagConfig(mode="bounded", max_lag=2)
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64) + ["trainer.v1.separate_async.num_warmup_batches=3"])
    with pytest.raises(LagConfigError, match=r"^trainer\.v1\.separate_async\.num_warmup_batches makes every .* got 3$"):
        check_compatible(lag, _engine(cfg))
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64) + ["trainer.v1.separate_async.parameter_sync_step=4"])
    with pytest.raises(LagConfigError, match=r"^trainer\.v1\.separate_async\.parameter_sync_step must be 1"):
        check_compatible(lag, _engine(cfg))


@pytest.mark.parametrize(
    "block,kwargs,message",
    [
        ({"mode": "bounded", "max_lag": 2, "over_bound": "regenerate"}, {}, "lag.over_bound is not available on verl"),
        ({"mode": "interval", "interval": 2, "prefetch": 1}, {}, "lag.prefetch must be 0 on verl"),
        (
            {"mode": "interval", "interval": 2},
            {"trainer_mode": "colocate_async"},
            "trainer.v1.trainer_mode must be separate_async",
        ),
        ({"mode": "bounded", "max_lag": 2}, {"trainer_mode": "sync"}, "trainer.v1.trainer_mode must be one of"),
        ({"mode": "bounded", "max_lag": 2, "bogus": 1}, {}, "lag.bogus is not a lag setting"),
    ],
)
def test_translation_errors(block, kwargs, message):
    with pytest.raises(LagConfigError, match="^" + message.replace(".", r"\.")):
        verl_overrides(block, train_batch_size=64, **kwargs)
