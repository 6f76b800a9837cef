"""The diagnostics of one SAT loss call: the paper's Table 10 and Eq. 52, plus sat_ext's counters and verl's
own keys, always the same key set (:data:`METRIC_KEYS`), as 0-d float32 tensors.

Fractions divide by max(n, 1), n an exact count: the active tokens (less the non-finite ones), or the gate
scope's entries for the Table 10 rows (responses, for SAT-GSPO's ``sequence`` option).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .surrogate import SurrogateOutput
from .trust_region import SparseRegion

METRIC_KEYS = (
    "active",
    "gate_rate",
    "threshold_q",
    "radius_low_mean",
    "radius_high_mean",
    "contraction_min",
    "abs_log_ratio_mean",
    "d_pi",
    "newly_clipped_frac",
    "nonfinite_frac",
    "log_ratio_clamped_frac",
    "empty_microbatch",
    "pg_clipfrac",
    "pg_clipfrac_lower",
    "ppo_kl",
)


@dataclass
class Measured:
    """Counts and sums one loss call measured (0-d tensors) and its gate."""

    n_active: torch.Tensor  # active tokens, less the non-finite ones
    n_input: torch.Tensor  # active tokens as given
    n_nonfinite: torch.Tensor  # of those, non-finite (masked out)
    n_clamped: torch.Tensor  # active tokens whose |log-ratio| exceeded 20
    abs_log_ratio_sum: torch.Tensor  # sum of |log r_tok| over active tokens (Eq. 52)
    kl_log_ratio_sum: torch.Tensor  # sum of the log-ratio verl's ppo_kl is reported on
    region: SparseRegion  # the gated entries of the gate scope
    n_scope: torch.Tensor  # active entries of the gate scope (tokens, or responses)
    score_abs_sum: torch.Tensor  # sum of |d| over them
    surrogate: SurrogateOutput


def metrics(m: Measured) -> dict[str, torch.Tensor]:
    """Every key of :data:`METRIC_KEYS` (Table 10 from :meth:`SparseRegion.table10`)."""
    s = m.surrogate
    denom = m.n_active.float().clamp_min(1.0)
    return {
        "active": torch.ones((), device=denom.device),
        **m.region.table10(m.n_scope),
        "abs_log_ratio_mean": m.score_abs_sum / m.n_scope.float().clamp_min(1.0),
        "d_pi": m.abs_log_ratio_sum / denom,
        "newly_clipped_frac": s.n_newly_clipped.float() / denom,
        "nonfinite_frac": m.n_nonfinite.float() / m.n_input.float().clamp_min(1.0),
        "log_ratio_clamped_frac": m.n_clamped.float() / denom,
        "empty_microbatch": (m.n_active == 0).float(),
        "pg_clipfrac": s.n_clipped.float() / denom,
        "pg_clipfrac_lower": s.n_dual_clipped.float() / denom,
        "ppo_kl": -m.kl_log_ratio_sum / denom,
    }
