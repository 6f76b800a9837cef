"""The verl policy losses ``sat`` and ``sat_gspo``, registered in verl's ``POLICY_LOSS_REGISTRY`` on import.

Imported by :mod:`sat_ext.verl.config` (the ``_target_``) and by the ``verl.plugins`` entry point
(:mod:`sat_ext.verl.plugin`). Each loss call: SATConfig from the actor config (resolved once per config,
:func:`sat_ext.verl.config.sat_config_for`) -> core loss (per-token, times verl's ``rollout_is_weights`` when
given, under SAT's non-finite policy) -> verl's ``agg_loss(..., **config.global_batch_info)`` (every
``loss_agg_mode``); an all-padding micro-batch gives the core's zero loss with a zero gradient
(:func:`sat_ext.core.aggregate`). Metrics: the SAT diagnostics under ``actor/sat/...`` plus verl's
``actor/pg_clipfrac``, ``actor/ppo_kl`` and ``actor/pg_clipfrac_lower``; the same keys on every rank and
micro-batch, copied to the host in one transfer (the call's only host-sync point; verl's ``vanilla`` makes three).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.distributed as dist
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss

from sat_ext.core import SATLossOutput, aggregate, sat_gspo_loss, sat_token_loss
from sat_ext.metric_names import VERL_METRIC_NAMES
from sat_ext.pinned import LOSS_NAMES

from .config import sat_config_for

METRIC_NAMES = VERL_METRIC_NAMES


@functools.cache
def _megatron_parallel_state() -> Any:
    """``megatron.core.parallel_state``, or None where Megatron is not installed (looked up once: a failed
    import is not cached by Python and cost 0.1-0.3 ms on every global-scope call)."""
    try:
        from megatron.core import parallel_state
    except ImportError:
        return None
    return parallel_state


def data_parallel_group() -> dist.ProcessGroup | None:
    """The group the global gate scope reduces over: Megatron's DP x CP group when Megatron is up, else WORLD.

    Under FSDP the world is the data-parallel group; tensor-parallel replicas are excluded by Megatron's group.
    """
    mpu = _megatron_parallel_state()
    if mpu is not None and mpu.model_parallel_is_initialized():
        return mpu.get_data_parallel_group(with_context_parallel=True)
    return None


def _aggregate(
    out: SATLossOutput, response_mask: torch.Tensor, loss_agg_mode: str, config: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    metrics = dict(zip(METRIC_NAMES, out.metric_vector.tolist()))  # the call's one device-to-host copy
    loss = aggregate(
        out.loss_mat,
        response_mask,
        bool(metrics["actor/sat/empty_microbatch"]),
        lambda: agg_loss(
            loss_mat=out.loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
        ),
    )
    return loss, metrics


def _make(name: str, core_loss: Callable[..., SATLossOutput]) -> Callable[..., tuple[torch.Tensor, dict]]:
    def policy_loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if config is None:
            raise ValueError(f"verl policy loss '{name}' needs the actor config (config=None was passed)")
        cfg = sat_config_for(config, name)
        group = data_parallel_group() if cfg.gate_scope == "global" else None
        out = core_loss(
            log_prob, old_log_prob, advantages, response_mask, cfg, group=group, rollout_is_weights=rollout_is_weights
        )
        return _aggregate(out, response_mask, loss_agg_mode, config)

    policy_loss.__name__ = policy_loss.__qualname__ = f"compute_policy_loss_{name}"
    policy_loss.__doc__ = f"verl policy loss '{name}': {core_loss.__doc__}"
    return policy_loss


_CORE_LOSSES = {"sat": sat_token_loss, "sat_gspo": sat_gspo_loss}
compute_policy_loss_sat, compute_policy_loss_sat_gspo = (
    register_policy_loss(name)(_make(name, _CORE_LOSSES[name])) for name in LOSS_NAMES
)
