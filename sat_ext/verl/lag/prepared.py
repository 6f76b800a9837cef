"""The config verl's workers get: the lag settings checked once, in the driver, and shipped to them as data.

:func:`prepare_verl_config` runs in :mod:`sat_ext.verl.main_ppo` before Ray starts: every launch check
(:func:`.overrides.check_verl_config`, and the agent loops' and tools' files:
:func:`sat_ext.verl.agent_config.check_agent_config`), then a copy of the user's config (the user's object is not
changed) with what the workers read:

- ``trainer.v1.sat_separate_async``: verl's base trainer reads ``trainer.v1.<trainer_mode>``; sat_ext's trainer
  is configured by the ``separate_async`` block, mirrored here;
- ``trainer.v1.sampler.sampler_kwargs``: the lag block, plus DAPO's ``filter_groups`` metric in bounded mode
  (verl does not pass it to a custom sampler);
- ``trainer.v1.sampler.sampler_kwargs.sat_ext_prepared``: the marker that the launcher built this config.

The trainer (:class:`.trainer.SATSeparateAsyncTrainer`) and the sampler (:class:`.sampler.SATLagReplayBuffer`) trust a
prepared config and check nothing again (:func:`prepared_lag`); without the marker they refuse to start.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from sat_ext.lag.config import LagConfig

from .overrides import BASE_MODE, PREPARED_KEY, TRAINER_MODE, check_verl_config, lag_from_sampler_kwargs

LAUNCHER = "sat_ext.verl.main_ppo"


class UnpreparedConfigError(RuntimeError):
    """sat_ext's verl trainer or sampler was given a config that :func:`prepare_verl_config` did not build."""


def prepare_verl_config(config: DictConfig) -> DictConfig:
    """Check ``config`` once and return the config the workers get (a copy; ``config`` is unchanged).

    A config that does not select sat_ext's trainer (``trainer.v1.trainer_mode``) is returned as is: plain verl.
    Raises :class:`sat_ext.lag.LagConfigError` naming the key, as :func:`check_verl_config` does, and
    :class:`sat_ext.verl.agent_config.AgentConfigError` for a bad agent loop or tool setting.
    """
    from ..agent_config import check_agent_config

    check_agent_config(config)
    forwarded = check_verl_config(config)
    if OmegaConf.select(config, "trainer.v1.trainer_mode") != TRAINER_MODE:
        return config
    prepared = copy.deepcopy(config)
    v1 = prepared.trainer.v1
    with open_dict(prepared):
        v1[TRAINER_MODE] = copy.deepcopy(v1[BASE_MODE])
        v1.sampler.sampler_kwargs.update({**forwarded, PREPARED_KEY: LAUNCHER})
    return prepared


def prepared_lag(sampler_kwargs: Mapping[str, Any] | None) -> tuple[LagConfig, str | None]:
    """The lag settings and the forwarded ``filter_groups`` metric in a prepared config's sampler kwargs, read
    without checking them against verl again; raises :class:`UnpreparedConfigError` without the marker."""
    if not (sampler_kwargs or {}).get(PREPARED_KEY):
        raise UnpreparedConfigError(
            f"sat_ext's verl trainer mode {TRAINER_MODE} and its sampler need the config prepared by sat_ext's "
            f"launcher (trainer.v1.sampler.sampler_kwargs.{PREPARED_KEY} is missing): start the run with "
            f"`python -m {LAUNCHER}` (the same Hydra config and overrides as `python -m verl.trainer.main_ppo`), "
            f"or build the config with sat_ext.verl.lag.prepared.prepare_verl_config"
        )
    return lag_from_sampler_kwargs(sampler_kwargs)
