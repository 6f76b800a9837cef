"""The diagnostics of one SAT loss call: the paper's Table 10 and Eq. 52, plus sat_ext's counters and verl's
own keys, always the same key set (:data:`METRIC_KEYS`), as one float32 vector (one device-to-host copy).

The loss measures the sums of :data:`SUM_NAMES` (one float32 vector, no host read); every metric is a ratio of two
linear combinations of them (plus a constant), evaluated by one matrix-vector product in float32
(:func:`metric_vector`; the coefficients are the rows of :func:`_coefficients`). Fractions divide
by max(n, 1), n an exact count: the active tokens (less the non-finite ones), or the gate scope's entries
for the Table 10 rows (responses, for SAT-GSPO's ``sequence`` option).
"""

from __future__ import annotations

import functools
import math

import torch

LINEAR_KEYS = (
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
"""The metrics that are ratios of the sums (:func:`metric_vector`'s matrix rows)."""
METRIC_KEYS = (*LINEAR_KEYS, "inert_frac")
"""Every metric, in the order of :func:`metric_vector`: the ratios, then ``inert_frac`` (1 when q is at least the
trust region's radius on both sides, log(1 + eps_high) and -log(1 - eps_low): then no token can be newly clipped
and SAT's gradient is its base loss's; docs/sat.md, "When SAT is inert")."""


INERT_MARGIN = 1e-5
"""Relative margin on the radius: a float32 exp(d) of a d just past log(1 + eps) can round back onto the nominal
endpoint, where the base loss does not clip yet; past the margin it cannot."""


def inert_radius(eps_low: float, eps_high: float, score_is_log_ratio: bool = True) -> float:
    """The q at and above which SAT cannot act: a gated token has |d| > q, so r is already outside the nominal
    interval [1 - eps_low, 1 + eps_high] on d's side, where the base loss clips too (up to :data:`INERT_MARGIN`).
    Infinite (never inert) when the gate's score d is not the clipped ratio's own log (``proxy="rollout"``, or
    SAT-GSPO's ``gspo_gate_level="token"``, which gates on the token's log-ratio and clips the sequence's)."""
    if not score_is_log_ratio:
        return math.inf
    return max(math.log1p(eps_high), -math.log1p(-eps_low)) * (1.0 + INERT_MARGIN)


SUM_NAMES = (
    "n_active",  # active tokens, less the non-finite ones
    "n_input",  # active tokens as given
    "kl_log_ratio_sum",  # sum of the log-ratio verl's ppo_kl is reported on
    "n_scope",  # active entries of the gate scope (tokens, or responses for "sequence")
    "contraction_min",  # min c over the gate (1 off it)
    "q",
    "score_abs_sum",  # sum of |d| over the gate scope
    "n_gated",
    "deficit_sum",  # sum over the gate of (1 - c)
    "deficit_signed_sum",  # sum over the gate of (1 - c) sign(d)
    "n_unclamped",  # active tokens whose |log-ratio| is at most 20
    "abs_log_ratio_sum",  # sum of |log r_tok| (Eq. 52)
    "n_clipped",  # #{-A clip(r) > -A r} (verl's pg_clipfrac)
    "n_nominal_clipped",  # clipped by the nominal interval too (SAT's lies inside it)
    "n_dual_clipped",  # dual-clipped, only with a dual clip (the vector is one shorter without)
)
"""The sums one loss call measures, in the order of the float32 vector :func:`metric_vector` takes."""

GATE_ROWS = SUM_NAMES[6:10]
"""The sums over the gate scope (each a row of the loss's metric product)."""
TOKEN_ROWS = SUM_NAMES[6:]
"""The sums token SAT takes in one matrix-vector product with the active mask (the gate scope is the tokens)."""
GSPO_TOKEN_ROWS = SUM_NAMES[10:]
"""The per-token sums SAT-GSPO takes in one matrix-vector product with the active mask."""


def _row(one: float = 0.0, **coef: float) -> list[float]:
    """Coefficients of the sums, then the constant."""
    return [coef.get(name, 0.0) for name in SUM_NAMES] + [one]


@functools.lru_cache(maxsize=16)
def _coefficients(eps_low: float, eps_high: float, dual: bool, device: torch.device) -> tuple[torch.Tensor, ...]:
    """metric i = offset_i + (num_i . sums + num const) / max(den_i . sums + den const, 1), as (the 30 x 15
    matrix of numerator and denominator rows, their constants, the offsets); read-only, cached per device.

    The Table 10 radii: E[eps c-] = eps (n - sum over the gate with d < 0 of (1 - c)) / n (c = 1 off the
    gate), the side sums being (deficit_sum -+ deficit_signed_sum) / 2. empty_microbatch = 1 - n / max(n, 1).
    """
    per_token = _row(n_active=1.0)
    rows = {
        "active": (_row(one=1.0), _row(), 0.0),
        "gate_rate": (_row(n_gated=1.0), _row(n_scope=1.0), 0.0),
        "threshold_q": (_row(q=1.0), _row(), 0.0),
        "radius_low_mean": (
            _row(n_scope=eps_low, deficit_sum=-eps_low / 2, deficit_signed_sum=eps_low / 2),
            _row(n_scope=1.0),
            0.0,
        ),
        "radius_high_mean": (
            _row(n_scope=eps_high, deficit_sum=-eps_high / 2, deficit_signed_sum=-eps_high / 2),
            _row(n_scope=1.0),
            0.0,
        ),
        "contraction_min": (_row(contraction_min=1.0), _row(), 0.0),
        "abs_log_ratio_mean": (_row(score_abs_sum=1.0), _row(n_scope=1.0), 0.0),
        "d_pi": (_row(abs_log_ratio_sum=1.0), per_token, 0.0),
        "newly_clipped_frac": (_row(n_clipped=1.0, n_nominal_clipped=-1.0), per_token, 0.0),
        "nonfinite_frac": (_row(n_input=1.0, n_active=-1.0), _row(n_input=1.0), 0.0),
        "log_ratio_clamped_frac": (_row(n_active=1.0, n_unclamped=-1.0), per_token, 0.0),
        "empty_microbatch": (_row(n_active=-1.0), per_token, 1.0),
        "pg_clipfrac": (_row(n_clipped=1.0), per_token, 0.0),
        "pg_clipfrac_lower": (_row(n_dual_clipped=1.0), per_token, 0.0),
        "ppo_kl": (_row(kl_log_ratio_sum=-1.0), per_token, 0.0),
    }
    table = torch.tensor([rows[k][0] for k in LINEAR_KEYS] + [rows[k][1] for k in LINEAR_KEYS], device=device)
    offset = torch.tensor([rows[k][2] for k in LINEAR_KEYS], device=device)
    coef = table[:, :-1] if dual else table[:, :-2]  # without a dual clip pg_clipfrac_lower is 0
    return coef.contiguous(), table[:, -1].contiguous(), offset


_Q = SUM_NAMES.index("q")


def metric_vector(sums: torch.Tensor, eps_low: float, eps_high: float, inert_at: float) -> torch.Tensor:
    """Every metric of :data:`METRIC_KEYS`, in that order, as one float32 vector, from the sums of
    :data:`SUM_NAMES` (a float32 vector in that order, without the last without a dual clip); ``inert_frac`` is
    q >= ``inert_at`` (:func:`inert_radius`)."""
    coef, const, offset = _coefficients(eps_low, eps_high, sums.numel() == len(SUM_NAMES), sums.device)
    num, den = torch.addmv(const, coef, sums).view(2, -1)
    ratios = torch.addcdiv(offset, num, den.clamp_min_(1.0))  # offset + num / max(den, 1)
    inert = sums[_Q : _Q + 1].double().ge(inert_at)  # in float64: float32 would round a tiny radius to 0
    return torch.cat((ratios, inert.float()))


def metric_dict(vector: torch.Tensor) -> dict[str, torch.Tensor]:
    """The metric vector as ``{key: 0-d tensor}``."""
    return dict(zip(METRIC_KEYS, vector.unbind()))
