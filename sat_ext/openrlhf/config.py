"""SAT's settings in OpenRLHF terms: which :class:`~sat_ext.core.SATConfig` fields a user sets, where the rest
come from, and the launch-time check of OpenRLHF's parsed arguments.

- ``eps_low`` / ``eps_high`` are OpenRLHF's ``--actor.eps_clip_low_high`` (or ``--actor.eps_clip``) and
  ``dual_clip`` is ``--actor.dual_clip``, so SAT and PPO/GSPO runs share one spelling of the base radii.
- ``proxy`` is not offered: the ratio's reference is vLLM's rollout log-prob (old := rollout, the paper's
  App. E.6 variant; its reported runs divide by the trainer-side log-prob at the rollout checkpoint, Table 9,
  which OpenRLHF's recomputed ``old_log_probs`` are only at lag 0), so the "old" and "rollout" proxies are the
  same quantity here.
- every other field is a SAT option (:data:`SAT_OPTIONS`): ``--sat.<name>`` on the launcher, or a key of
  ``--actor.policy_loss_kwargs`` with the policy-loss registry patch (``patches/``).
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace
from typing import Any, Callable, Mapping

from sat_ext.core import SATConfig, SATConfigError
from sat_ext.core.config import (
    GATE_SCOPES,
    GLOBAL_METHODS,
    GSPO_GATE_LEVELS,
    KERNELS,
    NONFINITE_POLICIES,
    QUANTILE_RULES,
)

SAT_OPTIONS = tuple(f.name for f in fields(SATConfig) if f.name not in ("eps_low", "eps_high", "dual_clip", "proxy"))
SAT_OPTION_DEFAULTS = {f.name: f.default for f in fields(SATConfig) if f.name in SAT_OPTIONS}
SAT_OPTION_CHOICES = {
    "quantile_rule": QUANTILE_RULES,
    "gate_scope": GATE_SCOPES,
    "global_method": GLOBAL_METHODS,
    "kernel": KERNELS,
    "gspo_gate_level": GSPO_GATE_LEVELS,
    "nonfinite": NONFINITE_POLICIES,
}

_OPENRLHF_FLAGS = {
    "eps_low": "--actor.eps_clip_low_high LOW (or --actor.eps_clip)",
    "eps_high": "--actor.eps_clip_low_high HIGH (or --actor.eps_clip)",
    "dual_clip": "--actor.dual_clip",
}


def sat_options(args: SimpleNamespace) -> dict[str, Any]:
    """The ``--sat.*`` values given on the launcher's command line (absent flags keep SATConfig's defaults)."""
    return dict(vars(getattr(args, "sat", SimpleNamespace())))


def sat_config(
    clip_eps_low: float,
    clip_eps_high: float,
    dual_clip: float | None,
    options: Mapping[str, Any],
    key_of: Callable[[str], str] = str,
) -> SATConfig:
    """The SATConfig of one OpenRLHF run; an invalid value raises SATConfigError naming the flag.

    ``key_of`` spells a SAT option as the user wrote it (e.g. ``--sat.quantile``); the clip radii and the
    dual clip are always named by OpenRLHF's own flags.
    """
    for name, value in options.items():
        if name not in SAT_OPTIONS:
            raise SATConfigError(
                key_of(name),
                value,
                f"is not a SAT option (options: {list(SAT_OPTIONS)}; the clip "
                "radii and dual clip are --actor.eps_clip_low_high and --actor.dual_clip)",
            )
    values = {"eps_low": clip_eps_low, "eps_high": clip_eps_high, "dual_clip": dual_clip, **options}
    return SATConfig.from_mapping(values, key_of=lambda name: _OPENRLHF_FLAGS.get(name) or key_of(name))


def check_openrlhf_args(
    args: SimpleNamespace, options: Mapping[str, Any], key_of: Callable[[str], str] = str
) -> SATConfig:
    """Validate a SAT run (``args.actor.policy_loss_type`` sat or sat_gspo) from OpenRLHF's final (hierarchized,
    validated) arguments; returns its SATConfig.

    Raises ValueError with a message naming the flag: a bad SAT value (a SATConfigError), or a configuration
    in which vLLM's rollout log-probs, SAT's ratio reference, would not reach the loss.
    """
    loss_type = args.actor.policy_loss_type
    if not args.vllm.num_engines:
        raise ValueError(
            f"--actor.policy_loss_type {loss_type} needs vLLM's rollout log-probs, so vLLM engines: "
            f"set --vllm.num_engines > 0 (got {args.vllm.num_engines!r})"
        )
    if args.algo.advantage.is_correction_level == "off":
        raise ValueError(
            f"--actor.policy_loss_type {loss_type} needs vLLM's rollout log-probs (SAT's ratio is taken against "
            "the behaviour policy), and OpenRLHF 0.11.2 requests them only when "
            "--algo.advantage.is_correction_level is token or seq, got 'off'. Add "
            "--algo.advantage.is_correction_level token: with SAT it only switches the log-probs on, SAT "
            "applies no separate IS correction (the other --algo.advantage.is_correction_* flags are unused)."
        )
    low, high = args.actor.eps_clip_low_high
    return sat_config(low, high, args.actor.dual_clip, options, key_of)
