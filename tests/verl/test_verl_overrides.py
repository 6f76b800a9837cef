"""The lag block's verl overrides compose with verl 0.9.1's real Hydra configs, and the whole-config checks."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

verl = pytest.importorskip("verl")
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf, open_dict  # noqa: E402

from sat_ext.lag import LagConfig, LagConfigError, check_compatible  # noqa: E402
from sat_ext.verl.lag.overrides import (  # noqa: E402
    BASE_MODE,
    PREPARED_KEY,
    SAMPLER_NAME,
    SAMPLER_PATH,
    TRAINER_MODE,
    VerlSchedule,
    check_verl_config,
    verl_engine_settings,
    verl_overrides,
)
from sat_ext.verl.lag.prepared import UnpreparedConfigError, prepare_verl_config, prepared_lag  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def _compose(config_name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name=config_name, overrides=overrides)


def _engine(cfg):
    return verl_engine_settings(VerlSchedule.of(cfg))


def _lag(cfg) -> LagConfig:
    return LagConfig.from_dict(OmegaConf.to_container(cfg.trainer.v1.sampler.sampler_kwargs))


@pytest.mark.parametrize("path, accepted", [("pkg://sat_ext.verl.lag_sampler", True), ("pkg://elsewhere", False)])
def test_the_former_sampler_path_of_existing_configs_still_passes(path, accepted):
    overrides = verl_overrides(LagConfig(mode="bounded", max_lag=1), train_batch_size=4)
    cfg = _compose("ppo_trainer", overrides + [f"trainer.v1.sampler.custom_sampler.path={path}"])
    if accepted:
        assert check_verl_config(cfg) == {}
    else:
        with pytest.raises(LagConfigError, match="custom_sampler"):
            check_verl_config(cfg)


@pytest.mark.parametrize("config_name", ["ppo_trainer", "ppo_megatron_trainer"])
@pytest.mark.parametrize("over_bound", ["wait", "drop"])
def test_bounded_overrides_compose(config_name, over_bound):
    lag = LagConfig(mode="bounded", max_lag=8, over_bound=over_bound)
    overrides = verl_overrides(lag, train_batch_size=256)
    # only the free-form sampler_kwargs are new keys; every other override must exist in verl's schema
    assert all(o.startswith("+trainer.v1.sampler.sampler_kwargs.") for o in overrides if o.startswith("+"))
    cfg = _compose(config_name, overrides)
    v1 = cfg.trainer.v1
    assert cfg.trainer.use_v1 is True and v1.trainer_mode == TRAINER_MODE
    assert (v1.sampler.custom_sampler.path, v1.sampler.custom_sampler.name) == (SAMPLER_PATH, SAMPLER_NAME)
    assert v1.sampler.max_off_policy_threshold is None  # the sampler's exact rule replaces verl's span rule
    # the rollout may run max_lag batches ahead; first in, first out (wait) then never exceeds the bound
    assert v1.separate_async.parameter_sync_step == 1 and v1.separate_async.num_warmup_batches == 8
    assert cfg.data.gen_batch_size == 1  # what verl's async trainers force: single-group refills
    assert cfg.actor_rollout_ref.hybrid_engine is False
    assert cfg.algorithm.rollout_correction.bypass_mode is True  # a bounded batch mixes versions
    # verl's separate_async asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size
    assert cfg.data.train_batch_size == 256 == cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    assert _lag(cfg) == lag
    check_compatible(lag, _engine(cfg))
    assert check_verl_config(cfg) == {}


@pytest.mark.parametrize("config_name", ["ppo_trainer", "ppo_megatron_trainer"])
@pytest.mark.parametrize("interval,prefetch", [(8, 1), (8, 0), (1, 1), (4, 2)])
def test_interval_overrides_compose(config_name, interval, prefetch):
    lag = LagConfig(mode="interval", interval=interval, prefetch=prefetch)
    cfg = _compose(config_name, verl_overrides(lag, train_batch_size=256, eval_every=8))
    v1 = cfg.trainer.v1
    assert v1.separate_async.parameter_sync_step == interval
    # verl submits floor(num_warmup_batches * train_batch_size) warm-up prompts: exactly `prefetch` batches
    assert int(v1.separate_async.num_warmup_batches * cfg.data.train_batch_size) == prefetch * 256
    assert cfg.data.train_batch_size == interval * 256 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 256
    assert cfg.trainer.test_freq * interval == 8  # the same optimizer-step cadence at every lag
    assert cfg.algorithm.rollout_correction.bypass_mode is False  # the paper's trainer-side denominator
    assert _lag(cfg) == lag
    engine = _engine(cfg)
    assert (engine.sync_every, engine.prefetch_steps, engine.partial_rollout) == (interval, prefetch, False)
    check_compatible(lag, engine)


def test_the_rollout_denominator_is_a_choice_in_interval_mode():
    cfg = _compose("ppo_trainer", verl_overrides({"mode": "interval", "interval": 8}, 64, denominator="rollout"))
    assert cfg.algorithm.rollout_correction.bypass_mode is True


def test_off_mode_changes_nothing():
    assert verl_overrides({"mode": "off"}, train_batch_size=64) == []


def test_user_settings_that_break_the_bound_are_named():
    lag = LagConfig(mode="bounded", max_lag=2)
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64) + ["trainer.v1.separate_async.num_warmup_batches=3"])
    deep = r"^trainer\.v1\.separate_async\.num_warmup_batches lets a batch be generated up to 3 .* got 3$"
    with pytest.raises(LagConfigError, match=deep):
        check_compatible(lag, _engine(cfg))
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64) + ["trainer.v1.separate_async.parameter_sync_step=4"])
    with pytest.raises(LagConfigError, match=r"^trainer\.v1\.separate_async\.parameter_sync_step must be 1"):
        check_compatible(lag, _engine(cfg))
    interval = LagConfig(mode="interval", interval=8, prefetch=1)
    cfg = _compose("ppo_trainer", verl_overrides(interval, 64) + ["trainer.v1.separate_async.num_warmup_batches=0.3"])
    with pytest.raises(LagConfigError, match=r"^trainer\.v1\.separate_async\.num_warmup_batches must be a whole"):
        check_verl_config(cfg)


def test_verl_s_own_partial_rollout_trainer_is_refused_for_interval_prefetch():
    lag = LagConfig(mode="interval", interval=8, prefetch=1)
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64) + [f"trainer.v1.trainer_mode={BASE_MODE}"])
    with pytest.raises(LagConfigError, match=r"partial rollout.*breaks lag\.mode=interval with lag\.prefetch=1"):
        check_compatible(lag, _engine(cfg))


@pytest.mark.parametrize(
    "block,kwargs,message",
    [
        ({"mode": "bounded", "max_lag": 2, "over_bound": "regenerate"}, {}, "lag.over_bound is not available on verl"),
        ({"mode": "interval", "interval": 2}, {"denominator": "engine"}, "denominator must be one of"),
        ({"mode": "interval", "interval": 2}, {"eval_every": 5}, "eval_every must be a multiple of the broadcast"),
        ({"mode": "bounded", "max_lag": 2, "bogus": 1}, {}, "lag.bogus is not a lag setting"),
        ({"mode": "bounded", "max_lag": 2}, {"train_batch_size": 0}, "data.train_batch_size must be an integer"),
    ],
)
def test_translation_errors(block, kwargs, message):
    kwargs = {"train_batch_size": 64, **kwargs}
    with pytest.raises(LagConfigError, match="^" + message.replace(".", r"\.")):
        verl_overrides(block, **kwargs)


@pytest.mark.parametrize(
    "lag,extra,key",
    [
        (
            {"mode": "bounded", "max_lag": 1},
            ["actor_rollout_ref.hybrid_engine=true"],
            "actor_rollout_ref.hybrid_engine",
        ),
        (
            {"mode": "bounded", "max_lag": 1},
            ["algorithm.rollout_correction.bypass_mode=false"],
            "algorithm.rollout_correction.bypass_mode",
        ),
        (
            {"mode": "interval", "interval": 8, "prefetch": 1},
            ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"],
            "algorithm.filter_groups.enable",
        ),
        (
            {"mode": "bounded", "max_lag": 1},
            ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=null"],
            "algorithm.filter_groups.metric",
        ),
        (
            {"mode": "bounded", "max_lag": 1},
            ["trainer.v1.sampler.custom_sampler.name=ReplayBufferAsync"],
            "trainer.v1.sampler.custom_sampler.name",
        ),
        (  # TIS in bypass mode: verl computes no IS weights there
            {"mode": "bounded", "max_lag": 1},
            ["algorithm.rollout_correction.rollout_is=token"],
            "algorithm.rollout_correction.rollout_is",
        ),
        (  # TIS without rollout log-probs: nothing to weight with
            {"mode": "interval", "interval": 1, "prefetch": 1},
            ["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=false"],
            "actor_rollout_ref.rollout.calculate_log_probs",
        ),
        (  # several optimizer steps per batch: the schedule counts one
            {"mode": "interval", "interval": 2, "prefetch": 1},
            ["actor_rollout_ref.actor.ppo_epochs=2"],
            "actor_rollout_ref.actor.ppo_epochs",
        ),
        (  # verl's own keys disagree with the lag block: caught before Ray starts, not in the sampler
            {"mode": "interval", "interval": 8, "prefetch": 1},
            ["trainer.v1.separate_async.parameter_sync_step=4"],
            "trainer.v1.separate_async.parameter_sync_step",
        ),
        (
            {"mode": "interval", "interval": 2, "prefetch": 1},
            ["trainer.v1.separate_async.num_warmup_batches=1"],
            "trainer.v1.separate_async.num_warmup_batches",
        ),
        (  # kept weights in files: the path is read on other nodes
            {"mode": "interval", "interval": 2, "prefetch": 1},
            ["+trainer.v1.sat_ext.kept_weights_dir=relative/dir"],
            "trainer.v1.sat_ext.kept_weights_dir",
        ),
        (
            {"mode": "bounded", "max_lag": 1},
            ["+trainer.v1.sat_ext.kept_weights_dir=/local/kept"],
            "trainer.v1.sat_ext.kept_weights_dir",
        ),
        (  # a sampler block written by hand, not by verl_overrides
            {"mode": "bounded", "max_lag": 1},
            ["trainer.v1.sampler.sampler_kwargs.over_bound=regenerate"],
            "lag.over_bound",
        ),
        (
            {"mode": "interval", "interval": 2, "prefetch": 1},
            ["+trainer.v1.sampler.sampler_kwargs.over_bound=drop"],
            "lag.over_bound",
        ),
    ],
)
def test_whole_config_checks_name_the_key(lag, extra, key):
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64) + extra)
    with pytest.raises(LagConfigError) as err:
        check_verl_config(cfg)
    assert err.value.key == key


@pytest.mark.parametrize(
    "extra,key,fix",
    [
        (  # sat_ext's sampler under verl's own partial-rollout trainer: refused here, not inside Ray
            [f"trainer.v1.trainer_mode={BASE_MODE}"],
            "trainer.v1.trainer_mode",
            f"set trainer.v1.trainer_mode={TRAINER_MODE}",
        ),
        (  # verl asserts this only inside the TaskRunner, after Ray has started
            ["data.train_batch_size=96"],
            "data.train_batch_size",
            "set data.train_batch_size=128",
        ),
        (  # verl's span rule would be ignored by the sampler (and stall sampling with strategy wait)
            ["trainer.v1.sampler.max_off_policy_threshold=2"],
            "trainer.v1.sampler.max_off_policy_threshold",
            "set trainer.v1.sampler.max_off_policy_threshold=null",
        ),
    ],
)
@pytest.mark.parametrize("lag", [{"mode": "interval", "interval": 2, "prefetch": 1}, {"mode": "bounded", "max_lag": 2}])
def test_lag_configs_verl_would_break_are_refused_before_ray_starts(lag, extra, key, fix):
    if key == "data.train_batch_size" and lag["mode"] == "bounded":
        extra = ["data.train_batch_size=96"]  # parameter_sync_step 1: B = 64, so 64 is the value to set
        fix = "set data.train_batch_size=64"
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64) + extra)
    with pytest.raises(LagConfigError) as err:
        prepare_verl_config(cfg)
    assert err.value.key == key and fix in str(err.value)


@pytest.mark.parametrize("n,p,batch", [(11, 3, 5), (5, 7, 9), (3, 13, 9)])
def test_the_launch_check_counts_the_warmup_as_verl_does(n, p, batch):
    """p/n written as its nearest float makes verl submit one prompt short (p/n * (n*B) rounds under p*B): the
    overrides write the next float up, and the plain value is refused naming the one to set."""
    lag = {"mode": "interval", "interval": n, "prefetch": p}
    overrides = verl_overrides(lag, batch)
    written = [o for o in overrides if "num_warmup_batches=" in o][0]
    value = float(written.split("=", 1)[1])
    assert value == math.nextafter(p / n, math.inf) and _verl_warmup(value, n * batch) == p * batch
    assert _engine(_compose("ppo_trainer", overrides)).prefetch_steps == p
    plain = _compose("ppo_trainer", overrides + [f"trainer.v1.separate_async.num_warmup_batches={p / n!r}"])
    assert _verl_warmup(plain.trainer.v1.separate_async.num_warmup_batches, n * batch) == p * batch - 1
    with pytest.raises(LagConfigError, match=rf"verl would submit {p * batch - 1} prompts ahead.*set it to {value!r}"):
        check_verl_config(plain)


def _verl_warmup(num_warmup_batches: float, train_batch_size: int) -> int:
    """The prompts verl 0.9.1's own ``_add_async_warmup_batches`` submits (gen_batch_size 1, as its async
    trainers force it), on a stand-in ``self`` that holds only what the method reads."""
    from types import SimpleNamespace

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    config = OmegaConf.create(
        {"data": {"train_batch_size": train_batch_size, "gen_batch_size": 1}, "skip": {"rollout_tq": {"enable": False}}}
    )
    sent: list[int] = []
    fake = SimpleNamespace(config=config, _restored_tq_prompt_count=0, _add_prompts_to_generate=sent.append)
    PPOTrainer._add_async_warmup_batches(fake, num_warmup_batches)
    return sum(sent)


@settings(max_examples=400, deadline=None)
@given(n=st.integers(1, 128), p=st.integers(0, 16), batch=st.integers(1, 1024))
def test_verl_submits_exactly_the_prefetch_for_every_interval_setting(n, p, batch):
    """Over n <= 128, p <= 16, B <= 1024 no setting is refused, and verl's own warm-up arithmetic submits p*B."""
    overrides = verl_overrides({"mode": "interval", "interval": n, "prefetch": p}, batch)
    value = float([o for o in overrides if "num_warmup_batches=" in o][0].split("=", 1)[1])
    assert _verl_warmup(value, n * batch) == p * batch


def test_filter_groups_is_forwarded_in_bounded_mode():
    overrides = verl_overrides({"mode": "bounded", "max_lag": 2}, 64)
    cfg = _compose(
        "ppo_trainer", overrides + ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    )
    assert check_verl_config(cfg) == {"filter_groups_metric": "acc"}


def test_a_plain_verl_config_is_not_checked():
    assert check_verl_config(_compose("ppo_trainer", [])) == {}


def test_the_sampler_refuses_a_config_the_launcher_did_not_prepare():
    pytest.importorskip("transfer_queue")
    from sat_ext.verl.lag.sampler import SATLagReplayBuffer

    with pytest.raises(UnpreparedConfigError, match=r"sat_ext_prepared is missing.*python -m sat_ext\.verl\.main_ppo"):
        SATLagReplayBuffer(
            trainer_mode=TRAINER_MODE,
            trainer_config={"parameter_sync_step": 1, "num_warmup_batches": 1},
            max_off_policy_threshold=None,
            max_off_policy_strategy="drop",
            sampler_kwargs={"mode": "bounded", "max_lag": 1},
        )


def _plain(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=False)


@pytest.mark.parametrize("mode", ["bounded", "interval"])
def test_the_launcher_prepares_a_copy_with_what_the_workers_read(mode):
    lag = {"mode": "bounded", "max_lag": 2} if mode == "bounded" else {"mode": "interval", "interval": 4, "prefetch": 1}
    dapo = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"] if mode == "bounded" else []
    user = _compose("ppo_trainer", verl_overrides(lag, 64) + dapo)
    before = _plain(user)
    prepared = prepare_verl_config(user)
    assert _plain(user) == before and TRAINER_MODE not in user.trainer.v1  # the user's config is unchanged
    assert prepared is not user
    v1 = prepared.trainer.v1
    assert _plain(v1[TRAINER_MODE]) == _plain(v1[BASE_MODE])  # what verl's base class reads for this mode
    kwargs = OmegaConf.to_container(v1.sampler.sampler_kwargs)
    assert kwargs[PREPARED_KEY] == "sat_ext.verl.main_ppo"
    assert kwargs.get("filter_groups_metric") == ("acc" if mode == "bounded" else None)
    assert prepared_lag(v1.sampler.sampler_kwargs) == (LagConfig.from_dict(lag), kwargs.get("filter_groups_metric"))
    # everything else is the user's config
    rest = {k: v for k, v in _plain(prepared).items() if k != "trainer"}
    assert rest == {k: v for k, v in before.items() if k != "trainer"}
    check_verl_config(prepared)  # a prepared config still passes the launch checks (e.g. sat-ext doctor)


def test_the_launcher_leaves_a_plain_verl_config_alone():
    user = _compose("ppo_trainer", [])
    assert prepare_verl_config(user) is user


def test_the_launcher_refuses_before_preparing():
    user = _compose("ppo_trainer", verl_overrides({"mode": "bounded", "max_lag": 1}, 64))
    with open_dict(user):
        user.trainer.v1.sampler.sampler_kwargs.over_bound = "regenerate"
    before = _plain(user)
    with pytest.raises(LagConfigError, match=r"^lag\.over_bound is not available on verl"):
        prepare_verl_config(user)
    assert _plain(user) == before


def test_kept_weights_dir_is_a_checkpoint_denominator_option():
    lag = {"mode": "interval", "interval": 8, "prefetch": 1}
    cfg = _compose("ppo_trainer", verl_overrides(lag, 64, kept_weights_dir="/local/kept"))
    assert cfg.trainer.v1.sat_ext.kept_weights_dir == "/local/kept" and check_verl_config(cfg) == {}
    with pytest.raises(LagConfigError, match=r"^kept_weights_dir needs the checkpoint denominator"):
        verl_overrides(lag, 64, denominator="rollout", kept_weights_dir="/local/kept")
