"""SAT as the paper writes it (arXiv 2607.18722, §4.2, Eq. 13-20), in plain torch: read it next to the paper.

This is the oracle the fast path (:mod:`sat_ext.core.losses`) is tested against, not the code a run uses:
no in-place operations, no metrics, no handling of non-finite inputs (they must be finite here). Besides the
paper's method it spells out, one line each, the base recipes' extras (verl's log-ratio clamps and dual
clip) and the options that are not the paper's (other kernels, the linear quantile, ``c_min``, the
``sequence`` and ``token`` SAT-GSPO gates, the rollout proxy), so that every setting has an oracle.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from .config import GSPO_LOG_RATIO_MAX, LOG_RATIO_CLAMP, SATConfig
from .kernels import C_FLOOR


def reference_quantile(values: torch.Tensor, mask: torch.Tensor, level: float, rule: str = "inverse_cdf"):
    """Eq. 14: q = inf{x >= 0 : F(x) >= level} = the ceil(level * n)-th smallest selected value (level read as
    the decimal it is written as); ``rule="linear"``: torch.quantile's interpolation. 0 when nothing is selected."""
    x = torch.sort(values[mask.bool()].float()).values
    n = x.numel()
    if n == 0:
        return torch.zeros(())
    if rule == "inverse_cdf":
        k = max(math.ceil(Fraction(repr(float(level))) * n), 1)  # Eq. 14: the ceil(alpha n)-th smallest
        return x[k - 1]
    pos = level * (n - 1)
    below = math.floor(pos)
    return torch.lerp(x[below], x[min(below + 1, n - 1)], pos - below)


def reference_kernel(abs_d: torch.Tensor, q: torch.Tensor, kernel: str, n: float) -> torch.Tensor:
    """Eq. 15, psi(u; q) = 1 / (1 + (u / q)^n) ("hill", n = 2), and the other forms; never below C_FLOOR > 0."""
    x = abs_d / q  # the paper's u / q
    u = (abs_d - q) / q  # the relative excess over the gate
    forms = {
        "hill": 1 / (1 + x**n),  # Eq. 15
        "hill_shifted": 1 / (1 + u**n),  # the named options, not the paper's
        "power": (q / abs_d) ** n,
        "exp": torch.exp(-(u**n)),
    }
    return forms[kernel].clamp(min=C_FLOOR)


def reference_bounds(d: torch.Tensor, mask: torch.Tensor, cfg: SATConfig, q: torch.Tensor | None = None):
    """Eq. 14-17: the clip bounds (lo, hi) of every entry of the score d, the gate and q.

    ``q`` overrides Eq. 14 (the global gate scope: the quantile of every rank's values)."""
    mask = mask.bool()
    abs_d = d.abs()
    if q is None:
        q = reference_quantile(abs_d, mask, cfg.quantile, cfg.quantile_rule)  # Eq. 14
    gated = mask & (q > 0) & (abs_d > q)  # Eq. 16: the strict gate
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    psi = reference_kernel(abs_d, safe_q, cfg.kernel, cfg.exponent).clamp(min=cfg.c_min)  # Eq. 15 (+ c_min)
    c = torch.where(gated, psi, torch.ones_like(psi))  # Eq. 16
    c_plus = torch.where(d > 0, c, torch.ones_like(c))  # Eq. 15: u+ = [d]+, only d > 0 contracts the upper radius
    c_minus = torch.where(d < 0, c, torch.ones_like(c))  # Eq. 15: u- = [-d]+, only d < 0 contracts the lower radius
    lo = 1 - cfg.eps_low * c_minus  # Eq. 17
    hi = 1 + cfg.eps_high * c_plus  # Eq. 17
    return lo, hi, gated, q


def reference_surrogate(ratio, adv, lo, hi, dual_clip: float | None, eps_low: float, eps_high: float):
    """Eq. 18-19, loss = -min(r A, clip(r, lo, hi) A); with verl's dual clip C: min(loss, -A C) where A < 0.

    For A > 0 the value depends on hi only, for A < 0 on lo only; the other endpoint is kept nominal, which
    changes no value but keeps autograd from splitting a pull-back token's gradient in half where r A and
    lo A round to the same float just beyond a contracted endpoint."""
    lo = torch.where(adv > 0, torch.full_like(lo, 1 - eps_low), lo)
    hi = torch.where(adv < 0, torch.full_like(hi, 1 + eps_high), hi)
    loss = -torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv)  # Eq. 18-19
    if dual_clip is not None:
        # verl's dual clip for A < 0 (not Eq. 19)
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual_clip), loss)
    return loss


def reference_token_loss(
    log_prob, old_log_prob, advantages, mask, cfg: SATConfig, rollout_log_prob=None, rollout_is_weights=None, q=None
) -> torch.Tensor:
    """SAT-GRPO (Eq. 13-19): the per-token loss, before the framework's aggregation."""
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # Eq. 13
    if cfg.proxy == "rollout":  # not the paper's: the score against the rollout log-prob
        d = torch.clamp(log_prob.detach() - rollout_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    else:
        d = log_ratio.detach()  # Eq. 13: d_sg = sg(d)
    lo, hi, _, _ = reference_bounds(d, mask, cfg, q)
    loss = reference_surrogate(torch.exp(log_ratio), advantages, lo, hi, cfg.dual_clip, cfg.eps_low, cfg.eps_high)
    return loss if rollout_is_weights is None else loss * rollout_is_weights


def reference_gspo_loss(
    log_prob,
    old_log_prob,
    advantages,
    mask,
    cfg: SATConfig,
    rollout_log_prob=None,
    rollout_is_weights=None,
    q=None,
    ratio_form: str = "token",
) -> torch.Tensor:
    """SAT-GSPO (Eq. 20): GSPO's sequence ratio in the clip and in the score, broadcast to the response's
    active tokens before the token quantile; ``ratio_form`` "token" is verl's gradient, "sequence" OpenRLHF's."""
    m = mask.float()
    length = m.sum(-1).clamp(min=1)
    seq_log_ratio = ((log_prob - old_log_prob) * m).sum(-1) / length  # log rho_b, Eq. 20
    if ratio_form == "token":  # value rho_b on every token, gradient through each token's own log-prob
        ratio = torch.exp(
            torch.clamp(log_prob - log_prob.detach() + seq_log_ratio.detach()[:, None], max=GSPO_LOG_RATIO_MAX)
        )
    else:
        ratio = torch.exp(torch.clamp(seq_log_ratio, max=GSPO_LOG_RATIO_MAX))[:, None] * m
    reference = log_prob.detach() - (old_log_prob if cfg.proxy == "old" else rollout_log_prob)
    seq_score = torch.clamp((reference * m).sum(-1) / length, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if cfg.gspo_gate_level == "broadcast":  # Eq. 20: the sequence score on every token, token quantile
        broadcast = seq_score[:, None].expand_as(m)
        lo, hi, _, _ = reference_bounds(broadcast, mask, cfg, q)  # Eq. 20: the token quantile on the broadcast score
    elif cfg.gspo_gate_level == "sequence":  # not the paper's: one score per response, quantile over responses
        lo, hi, _, _ = reference_bounds(seq_score, mask.any(-1), cfg, q)
        lo, hi = lo[:, None], hi[:, None]
    else:  # "token", not the paper's: each token's own log-ratio as the score
        lo, hi, _, _ = reference_bounds(torch.clamp(reference, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), mask, cfg, q)
    loss = reference_surrogate(ratio, advantages, lo, hi, cfg.dual_clip, cfg.eps_low, cfg.eps_high)
    return loss if rollout_is_weights is None else loss * rollout_is_weights
