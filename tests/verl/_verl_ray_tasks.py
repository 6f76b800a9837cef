"""Code that runs inside a Ray worker for test_verl_registration.py (shipped by value, imports inside bodies).

Nothing here imports sat_ext at module level: what the worker sees after ``import verl`` is verl's plugin
loading alone; the ActorConfig conversion afterwards is the worker's ``init_model`` path.
"""

from __future__ import annotations


def worker_registration_and_loss(actor_cfg) -> dict:
    import os
    import sys

    import torch
    import verl  # noqa: F401  (a verl worker process imports verl first)
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    out = {
        "pid": os.getpid(),
        "plugins_env": os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto"),
        "after_import_verl": sorted(n for n in ("sat", "sat_gspo") if n in POLICY_LOSS_REGISTRY),
        "plugin_module_loaded": "sat_ext.verl.plugin" in sys.modules,
    }
    actor = omega_conf_to_dataclass(actor_cfg)  # engine_workers.py:593; imports the _target_ module
    out["after_actor_config"] = sorted(n for n in ("sat", "sat_gspo") if n in POLICY_LOSS_REGISTRY)
    out["policy_loss_type"] = type(actor.policy_loss).__module__ + "." + type(actor.policy_loss).__qualname__
    g = torch.Generator().manual_seed(0)
    old = -torch.rand((4, 6), generator=g) - 0.1
    lp = (old + 0.3 * torch.randn((4, 6), generator=g)).requires_grad_(True)
    adv = torch.randn((4, 6), generator=g)
    mask = torch.ones((4, 6), dtype=torch.bool)
    fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    loss, metrics = fn(
        old_log_prob=old,
        log_prob=lp,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=actor.loss_agg_mode,
        config=actor,
        rollout_is_weights=None,
    )
    loss.backward()
    out.update(
        fn_module=fn.__module__,
        loss=float(loss),
        grad_finite=bool(torch.isfinite(lp.grad).all()),
        metric_keys=sorted(metrics),
    )
    return out
