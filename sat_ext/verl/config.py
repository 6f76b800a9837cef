"""SAT in verl: the config dataclass selected with ``policy_loss._target_`` and the ``sat`` / ``sat_gspo`` losses.

verl's ``PolicyLossConfig`` rejects unknown keys, so SAT's knobs are fields of a subclass,
:class:`SATPolicyLossConfig`, named ``sat_<SATConfig field>`` and set from Hydra as
``+actor_rollout_ref.actor.policy_loss.sat_<name>=...``. The clip radii and the dual-clip constant stay verl's
own (``actor.clip_ratio_low/high``, ``clip_ratio_c``). Bad values fail when verl builds the config (driver
``validate_config`` and each worker's ``init_model``). Importing this module registers the losses, so the
``_target_`` (which Hydra imports in every process that builds an ActorConfig) and the ``verl.plugins`` entry
point both do.

Each loss call: SATConfig from the actor config (resolved once per config) -> core loss (per-token, times
verl's ``rollout_is_weights`` when given, under SAT's non-finite policy) -> verl's ``agg_loss(...,
**config.global_batch_info)`` (every ``loss_agg_mode``); an all-padding micro-batch gives the core's zero loss
with a zero gradient. Metrics: the SAT diagnostics under ``actor/sat/...`` plus verl's ``actor/pg_clipfrac``,
``actor/ppo_kl`` and ``actor/pg_clipfrac_lower``; the same keys on every rank and micro-batch, copied to the
host in one transfer (the call's only host-sync point; verl's ``vanilla`` makes three).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, fields
from typing import Any, Callable

import torch
import torch.distributed as dist
from verl.base_config import BaseConfig
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss
from verl.workers.config import PolicyLossConfig

from sat_ext.core import (METRIC_KEYS, SATConfig, SATConfigError, SATLossOutput, empty_microbatch_loss,
                          sat_gspo_loss, sat_token_loss)

KEY_PREFIX = "actor_rollout_ref.actor.policy_loss."
TARGET = "sat_ext.verl.config.SATPolicyLossConfig"
_DEFAULTS = SATConfig()
_VERL_KEYS = {
    "eps_low": "actor_rollout_ref.actor.clip_ratio_low",
    "eps_high": "actor_rollout_ref.actor.clip_ratio_high",
    "dual_clip": "actor_rollout_ref.actor.clip_ratio_c",
}


def knob_key(name: str) -> str:
    """The Hydra path of SAT knob ``name`` (a SATConfig field)."""
    return f"{KEY_PREFIX}sat_{name}"


@dataclass
class SATPolicyLossConfig(PolicyLossConfig):
    """verl's PolicyLossConfig plus SAT's knobs (see :class:`sat_ext.core.SATConfig` for their meaning)."""

    loss_mode: str = "sat"
    sat_quantile: float = _DEFAULTS.quantile
    sat_quantile_rule: str = _DEFAULTS.quantile_rule
    sat_gate_scope: str = _DEFAULTS.gate_scope
    sat_global_method: str = _DEFAULTS.global_method
    sat_kernel: str = _DEFAULTS.kernel
    sat_exponent: float = _DEFAULTS.exponent
    sat_c_min: float = _DEFAULTS.c_min
    sat_proxy: str = _DEFAULTS.proxy
    sat_gspo_gate_level: str = _DEFAULTS.gspo_gate_level
    sat_nonfinite: str = _DEFAULTS.nonfinite

    def __post_init__(self) -> None:
        if self.sat_proxy == "rollout":
            raise SATConfigError(
                knob_key("proxy"),
                self.sat_proxy,
                "is not available in verl (its loss call passes no rollout log-probs); set "
                "algorithm.rollout_correction.bypass_mode=true so old_log_prob is the rollout log-prob, "
                "and keep sat_proxy=old",
            )
        SATConfig.from_mapping(self.sat_knobs(), key_of=knob_key)

    def sat_knobs(self) -> dict[str, Any]:
        """SAT's own knobs as SATConfig field names (without verl-owned radii)."""
        return {f.name[4:]: getattr(self, f.name) for f in fields(self) if f.name.startswith("sat_")}


_dataclass_init = SATPolicyLossConfig.__init__


def _init_naming_unknown_keys(self: SATPolicyLossConfig, *args: Any, **kwargs: Any) -> None:
    # The dataclass __init__ would raise a bare TypeError ("unexpected keyword argument 'sat_x'") that names
    # neither the Hydra key nor the value; name both, as for a bad value.
    known = {f.name for f in fields(type(self)) if f.init}
    for name, value in kwargs.items():
        if name not in known:
            knobs = sorted(n for n in known if n.startswith("sat_"))
            raise SATConfigError(f"{KEY_PREFIX}{name}", value, f"is not a setting of {TARGET} (SAT knobs: {knobs})")
    _dataclass_init(self, *args, **kwargs)


SATPolicyLossConfig.__init__ = _init_naming_unknown_keys  # type: ignore[method-assign]


_RESOLVED: dict[tuple[int, str], tuple[weakref.ref, SATConfig]] = {}


def sat_config_for(actor_config: Any, loss: str) -> SATConfig:
    """The SATConfig of one loss call: SAT's knobs from ``policy_loss`` plus verl's clip radii, resolved and
    validated once per actor config (verl's configs freeze these fields) and then looked up by identity.

    A plain PolicyLossConfig (``loss_mode=sat`` without the ``_target_``) gets SAT's defaults.
    """
    if not isinstance(actor_config, BaseConfig):  # e.g. a mutable OmegaConf node: resolved every call
        return _resolve(actor_config, loss)
    key = (id(actor_config), loss)
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0]() is actor_config:
        return hit[1]
    cfg = _resolve(actor_config, loss)
    _RESOLVED[key] = (weakref.ref(actor_config, lambda _, key=key: _RESOLVED.pop(key, None)), cfg)
    return cfg


def _resolve(actor_config: Any, loss: str) -> SATConfig:
    pl = actor_config.policy_loss
    knobs = pl.sat_knobs() if isinstance(pl, SATPolicyLossConfig) else {}
    clip = actor_config.clip_ratio
    low = actor_config.clip_ratio_low if actor_config.clip_ratio_low is not None else clip
    high = actor_config.clip_ratio_high if actor_config.clip_ratio_high is not None else clip
    dual = actor_config.get("clip_ratio_c", 3.0) if loss == "sat" else None
    radii = {"eps_low": low, "eps_high": high, "dual_clip": dual}
    return SATConfig.from_mapping({**radii, **knobs}, key_of=lambda n: _VERL_KEYS.get(n) or knob_key(n))


# ------------------------------------------------------------------------------------------- the losses

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
    metrics = dict(zip(METRIC_NAMES, out.metric_vector.tolist()))  # the call's one device-to-host copy
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
