"""The names SAT's diagnostics (:data:`sat_ext.core.METRIC_KEYS`) are logged under in verl (OpenRLHF's
``sat_<key>`` names are :data:`sat_ext.openrlhf.loss.METRIC_NAMES`).

verl: ``actor/sat/<key>``, except the three keys verl's own losses report, which keep verl's names
(``actor/pg_clipfrac``, ``actor/pg_clipfrac_lower``, ``actor/ppo_kl``); the verl adapter and the CPU demo (which
logs verl's names with or without verl installed) read them from here.
"""

from __future__ import annotations

from sat_ext.core import METRIC_KEYS

_VERL_OWN = {
    "pg_clipfrac": "actor/pg_clipfrac",
    "pg_clipfrac_lower": "actor/pg_clipfrac_lower",
    "ppo_kl": "actor/ppo_kl",
}

#: verl's metric name of each key of METRIC_KEYS, in that order
VERL_METRIC_NAMES = tuple(_VERL_OWN.get(k, f"actor/sat/{k}") for k in METRIC_KEYS)
