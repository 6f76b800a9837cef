"""The SAT loss inside OpenRLHF's Ray policy actor.

OpenRLHF builds its ``PolicyLoss`` in ``ActorPPOTrainer.__init__``, inside the ``PolicyModelActor`` Ray
worker, so a patch made in the driver process never reaches it. :func:`sat_policy_model_actor` subclasses
the actor class itself (``ray.remote(...)(class X(PolicyModelActor.__ray_actor_class__))``); Ray ships that
class to every worker it starts, and its ``init_model_from_pretrained`` runs OpenRLHF's own, then, for
``--actor.policy_loss_type sat|sat_gspo``, :func:`use_sat_loss` on the trainer it built. For any other loss
type the override does nothing, so the actor behaves as OpenRLHF's. :func:`install` puts the class where
OpenRLHF's CLI looks it up.

Importing this module is cheap; the functions import OpenRLHF's trainer stack (DeepSpeed, vLLM, ...).
"""

from __future__ import annotations

import functools

from sat_ext.pinned import LOSS_NAMES

from .config import sat_options


def _dp_group(strategy):
    mesh = getattr(strategy, "ds_device_mesh", None)
    return mesh["dp"].get_group() if mesh is not None else None


def use_sat_loss(trainer, strategy) -> None:
    """Replace ``trainer.actor_loss_fn`` (OpenRLHF's PolicyLoss) by SAT with the same settings plus ``--sat.*``,
    and add the SAT metrics to each ``training_step``'s status as token-weighted metrics (OpenRLHF then
    all-reduces and logs them like ``ppo_kl``; every rank emits the same keys)."""
    from .loss import SATPolicyLoss

    loss_fn = SATPolicyLoss.like(trainer.actor_loss_fn, process_group=_dp_group(strategy), **sat_options(trainer.args))
    trainer.actor_loss_fn = loss_fn
    step = trainer.training_step

    @functools.wraps(step)
    def training_step(*args, **kwargs):
        status = step(*args, **kwargs)
        status["metrics"].update(loss_fn.extra_metrics)
        status["weights"].update(dict.fromkeys(loss_fn.extra_metrics, "token"))
        return status

    trainer.training_step = training_step


@functools.cache
def sat_policy_model_actor():
    """OpenRLHF's ``PolicyModelActor`` Ray actor class, with SAT for the SAT loss types."""
    import ray
    from openrlhf.trainer.ray import ppo_actor

    base = ppo_actor.PolicyModelActor.__ray_actor_class__

    class SATPolicyModelActor(base):
        def init_model_from_pretrained(self, strategy, *args, **kwargs):
            super().init_model_from_pretrained(strategy, *args, **kwargs)
            if strategy.args.actor.policy_loss_type in LOSS_NAMES:
                use_sat_loss(self.trainer, strategy)

    return ray.remote(num_gpus=1)(SATPolicyModelActor)  # OpenRLHF's own decoration of PolicyModelActor


def install() -> None:
    """Make ``openrlhf.trainer.ray.ppo_actor.PolicyModelActor`` the SAT actor class (idempotent).

    ``openrlhf.cli.train_ppo_ray`` binds that name when it runs, so call this before running it.
    """
    from openrlhf.trainer.ray import ppo_actor

    ppo_actor.PolicyModelActor = sat_policy_model_actor()
