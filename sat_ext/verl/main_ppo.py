"""``python -m sat_ext.verl.main_ppo``: verl's V1 PPO entry point with sat_ext's lag trainer.

The same Hydra config (verl's ``ppo_trainer``, or any config that builds on it via ``--config-name`` /
``--config-path``) and the same overrides as ``python -m verl.trainer.main_ppo``, plus
:func:`sat_ext.verl.lag.overrides.verl_overrides`. The config is checked once, before Ray starts, and the
config the workers get is built from a copy of it (:func:`~sat_ext.verl.lag.prepared.prepare_verl_config`); then
verl's own ``run_ppo`` runs a TaskRunner that is verl's ``TaskRunnerV1`` after importing
:mod:`sat_ext.verl.lag.trainer`, which registers ``trainer.v1.trainer_mode=sat_separate_async`` in the process
that looks it up.
"""

from __future__ import annotations

import hydra
import ray
from omegaconf import DictConfig
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.device import auto_set_device

from .lag.prepared import prepare_verl_config


@ray.remote
class SATTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's V1 TaskRunner with sat_ext's lag trainer registered."""

    def run(self, config: DictConfig):
        from .lag import trainer  # noqa: F401  (registers the trainer mode in this Ray worker)

        return super().run(config)


@hydra.main(config_path="pkg://verl.trainer.config", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    """Check the lag settings and prepare the workers' config, then run verl's V1 trainer as
    ``verl.trainer.main_ppo`` would."""
    config = prepare_verl_config(config)
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    run_ppo(config, task_runner_class=SATTaskRunner)


if __name__ == "__main__":
    main()
