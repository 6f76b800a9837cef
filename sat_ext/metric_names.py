"""Every name SAT's diagnostics (:data:`sat_ext.core.METRIC_KEYS`) are logged under, in verl and in OpenRLHF, and
the names the run checks (:mod:`sat_ext.runlog`) read.

verl: ``actor/sat/<key>``, except the three keys verl's own losses report, which keep verl's names
(``actor/pg_clipfrac``, ``actor/pg_clipfrac_lower``, ``actor/ppo_kl``); the verl adapter and the CPU demo (which
logs verl's names with or without verl installed) read them from here. OpenRLHF: ``sat_<key>`` in the policy
actor's step status.
"""

from __future__ import annotations

from dataclasses import dataclass

from sat_ext.core import METRIC_KEYS

_VERL_OWN = {
    "pg_clipfrac": "actor/pg_clipfrac",
    "pg_clipfrac_lower": "actor/pg_clipfrac_lower",
    "ppo_kl": "actor/ppo_kl",
}

#: verl's metric name of each key of METRIC_KEYS, in that order
VERL_METRIC_NAMES = tuple(_VERL_OWN.get(k, f"actor/sat/{k}") for k in METRIC_KEYS)
#: OpenRLHF's metric name of each key of METRIC_KEYS, in that order
OPENRLHF_METRIC_NAMES = tuple(f"sat_{k}" for k in METRIC_KEYS)


@dataclass(frozen=True)
class MetricNames:
    """A framework's names for what the checks read: ``training`` is the prefix of a key that only training
    steps carry; the SAT keys, and the gradient norm (checked with the ``*loss*`` keys). ``evaluation``: whether
    its log carries verl's ``val-core/`` evaluation keys (the eval-count check runs only then)."""

    training: str
    sat_active: str
    gate_rate: str
    threshold_q: str
    d_pi: str
    nonfinite: str
    grad_norm: str
    inert: str
    evaluation: bool = True


VERL_NAMES = MetricNames(
    "actor/",
    "actor/sat/active",
    "actor/sat/gate_rate",
    "actor/sat/threshold_q",
    "actor/sat/d_pi",
    "actor/sat/nonfinite_frac",
    "actor/grad_norm",
    "actor/sat/inert_frac",
)
#: OpenRLHF's step status (its console line; its wandb / TensorBoard loggers add ``train/``)
OPENRLHF_NAMES = MetricNames(
    "policy_loss",
    "sat_active",
    "sat_gate_rate",
    "sat_threshold_q",
    "sat_d_pi",
    "sat_nonfinite_frac",
    "actor_grad_norm",
    "sat_inert_frac",
    evaluation=False,
)
