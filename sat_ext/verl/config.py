"""SAT in verl: the config dataclass selected with ``policy_loss._target_``, and its resolution to a SATConfig.

verl's ``PolicyLossConfig`` rejects unknown keys, so SAT's knobs are fields of a subclass,
:class:`SATPolicyLossConfig`, named ``sat_<SATConfig field>`` and set from Hydra as
``+actor_rollout_ref.actor.policy_loss.sat_<name>=...``. The clip radii and the dual-clip constant stay verl's
own (``actor.clip_ratio_low/high``, ``clip_ratio_c``). Bad values fail when verl builds the config (driver
``validate_config`` and each worker's ``init_model``). Importing it registers the losses, as importing any module of
:mod:`sat_ext.verl` does (the package imports :mod:`sat_ext.verl.loss`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, fields
from typing import Any

from verl.base_config import BaseConfig
from verl.workers.config import PolicyLossConfig

from sat_ext.core import SATConfig, SATConfigError

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
