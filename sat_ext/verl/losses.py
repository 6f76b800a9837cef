"""``sat`` and ``sat_gspo`` registered in verl's policy-loss registry with verl's exact keyword signature.

Each call: SATConfig from the actor config -> core loss (per-token, times verl's ``rollout_is_weights``
when given, under SAT's non-finite policy) -> verl's ``agg_loss(..., **config.global_batch_info)`` (every
``loss_agg_mode``); an all-padding micro-batch gives the core's zero loss with a zero gradient. Metrics: the SAT
diagnostics under ``actor/sat/...`` plus verl's ``actor/pg_clipfrac``, ``actor/ppo_kl`` and
``actor/pg_clipfrac_lower``; the same keys on every rank and micro-batch.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss

from sat_ext.core import METRIC_KEYS, SATLossOutput, empty_microbatch_loss, sat_gspo_loss, sat_token_loss
from sat_ext.verl.config import sat_config_for

LOSS_NAMES = ("sat", "sat_gspo")
_VERL_PG_KEYS = {"pg_clipfrac": "actor/pg_clipfrac", "pg_clipfrac_lower": "actor/pg_clipfrac_lower",
                 "ppo_kl": "actor/ppo_kl"}
METRIC_NAMES = tuple(_VERL_PG_KEYS.get(k, f"actor/sat/{k}") for k in METRIC_KEYS)


def data_parallel_group() -> dist.ProcessGroup | None:
    """The group the global gate scope reduces over: Megatron's DP x CP group when Megatron is up, else WORLD.

    Under FSDP the world is the data-parallel group; tensor-parallel replicas are excluded by Megatron's group.
    """
    try:
        from megatron.core import parallel_state as mpu
    except ImportError:
        return None
    if mpu.model_parallel_is_initialized():
        return mpu.get_data_parallel_group(with_context_parallel=True)
    return None


def _aggregate(
    out: SATLossOutput, response_mask: torch.Tensor, loss_agg_mode: str, config: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    values = torch.stack([out.metrics[k].float() for k in METRIC_KEYS]).tolist()
    metrics = dict(zip(METRIC_NAMES, values))
    if metrics["actor/sat/empty_microbatch"]:  # agg_loss would divide 0 by 0 without global totals
        return empty_microbatch_loss(out.loss_mat, response_mask), metrics
    return agg_loss(loss_mat=out.loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                    **config.global_batch_info), metrics


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
        out = core_loss(log_prob, old_log_prob, advantages, response_mask, cfg, group=group,
                        rollout_is_weights=rollout_is_weights)
        return _aggregate(out, response_mask, loss_agg_mode, config)

    policy_loss.__name__ = policy_loss.__qualname__ = f"compute_policy_loss_{name}"
    policy_loss.__doc__ = f"verl policy loss '{name}': {core_loss.__doc__}"
    return policy_loss


compute_policy_loss_sat = register_policy_loss("sat")(_make("sat", sat_token_loss))
compute_policy_loss_sat_gspo = register_policy_loss("sat_gspo")(_make("sat_gspo", sat_gspo_loss))
