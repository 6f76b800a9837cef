"""The staleness-adaptive trust region: per-token (or per-sequence) clip bounds from the staleness proxy d.

Given the detached proxy d and the active mask (the paper's Eq. 14-17):

    q      = quantile_level(|d| over the active entries of the gate scope)     Eq. 14
    gated  = active & (q > 0) & (|d| > q)                                       Eq. 16
    c      = max(K(|d|; q), c_min)            for gated entries, 1 otherwise    Eq. 15-16
    hi     = 1 + eps_high * c  if gated and d > 0, else 1 + eps_high            Eq. 17 (c+ = c where d > 0)
    lo     = 1 - eps_low  * c  if gated and d < 0, else 1 - eps_low             Eq. 17 (c- = c where d < 0)

so [lo, hi] always lies inside [1 - eps_low, 1 + eps_high] and contains 1. Entries with c == 1 keep the
nominal bounds bit for bit. :func:`adaptive_trust_region` is the public clip strategy: any clipped loss
can take its ``lo`` / ``hi`` in place of its fixed interval.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import SATConfig
from .kernels import C_FLOOR, contraction
from .quantile import global_masked_quantile, masked_quantile


def _into(op, fresh: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``op(fresh, other)`` written into ``fresh`` (a temporary of the caller's) when the shapes allow it."""
    if fresh.shape == other.shape:
        return op(fresh, other, out=fresh)
    return op(fresh, other)


@dataclass
class TrustRegion:
    """Bounds and diagnostics of one gate scope; tensors have the shape of the proxy d."""

    lo: torch.Tensor
    hi: torch.Tensor
    c: torch.Tensor
    gated: torch.Tensor
    q: torch.Tensor
    eps_low: float
    eps_high: float

    def diagnostics(
        self, d: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None,
        count: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Table 10 over the active entries: realised gate rate, q, mean effective radii E[eps_low c-] and
        E[eps_high c+], min c; plus the mean |d| of the proxy.

        ``weights`` (``mask.float()``) and ``count`` (the number of active entries) may be passed when the
        caller has them already. Counts are exact integers; means are float32 sums over the active entries
        divided by max(count, 1). c+ is c where d > 0 and 1 elsewhere (c- likewise where d < 0), so
        E[eps c+] = eps * (n - sum over d > 0 of (1 - c)) / n.
        """
        mask = mask.bool()
        m = mask.float() if weights is None else weights
        n = torch.count_nonzero(mask) if count is None else count
        denom = n.float().clamp_min(1.0)
        ones = torch.ones((), dtype=self.c.dtype, device=self.c.device)
        deficit = 1.0 - self.c  # 0 off the gate, and only active entries are gated
        up, down = torch.gt(d, 0), torch.lt(d, 0)
        return {
            "gate_rate": torch.count_nonzero(self.gated & mask).float() / denom,
            "threshold_q": self.q.detach().float(),
            "radius_low_mean": self.eps_low * ((n - torch.where(down, deficit, 0.0).sum()) / denom),
            "radius_high_mean": self.eps_high * ((n - torch.where(up, deficit, 0.0).sum()) / denom),
            "contraction_min": torch.where(mask, self.c, ones).min() if self.c.numel() else ones,
            "abs_log_ratio_mean": _into(torch.mul, d.abs(), m).sum() / denom,
        }


def gate_threshold(
    abs_d: torch.Tensor, mask: torch.Tensor, cfg: SATConfig, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """The gate threshold q over the configured scope: the local micro-batch, or every rank of ``group``.

    Without an initialised process group the global scope is the local one (a world of one process).
    """
    if cfg.gate_scope == "global" and dist.is_available() and dist.is_initialized():
        return global_masked_quantile(abs_d, mask, cfg.quantile, group=group, method=cfg.global_method,
                                      rule=cfg.quantile_rule)
    return masked_quantile(abs_d, mask, cfg.quantile, rule=cfg.quantile_rule)


def adaptive_trust_region(
    d: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    group: dist.ProcessGroup | None = None,
    q: torch.Tensor | None = None,
) -> TrustRegion:
    """Per-entry bounds ``(lo, hi)`` for the proxy ``d`` (detached, finite); ``q`` overrides the threshold."""
    d = d.detach().float()
    mask = mask.bool()
    abs_d = d.abs()
    if q is None:
        q = gate_threshold(abs_d, mask, cfg, group)
    q = q.to(device=d.device, dtype=torch.float32)
    hi_nom, lo_nom = 1.0 + cfg.eps_high, 1.0 - cfg.eps_low
    radii = dict(eps_low=cfg.eps_low, eps_high=cfg.eps_high)
    if q.numel() != 1:  # a per-entry threshold given by the caller: the general form
        return _region_general(d, abs_d, mask, q, cfg)
    if not bool(q > 0):  # q == 0: nothing is gated, nominal bounds
        return TrustRegion(lo=torch.full_like(d, lo_nom), hi=torch.full_like(d, hi_nom), c=torch.ones_like(d),
                           gated=torch.zeros_like(mask), q=q, **radii)
    gated = _into(torch.bitwise_and, torch.gt(abs_d, q), mask)
    if cfg.c_min >= 1:  # c = max(K, 1) = 1 everywhere: PPO's bounds
        return TrustRegion(lo=torch.full_like(d, lo_nom), hi=torch.full_like(d, hi_nom), c=torch.ones_like(d),
                           gated=gated, q=q, **radii)
    # Gated entries have |d| > q, so the kernel sees them as the general form's max(|d|, q) would; the
    # others get c = 1 whatever the kernel gives them. On gated entries K is in [C_FLOOR, 1], so only
    # c_min > C_FLOOR needs the clamp.
    k = contraction(abs_d, q, cfg.kernel, cfg.exponent)
    if cfg.c_min > C_FLOOR:
        k = k.clamp_min_(cfg.c_min)
    c = torch.where(gated, k, 1.0)
    contracted = c < 1  # c == 1 off the gate
    # The selections below are sparse (the contracted tail): a where on a dense random mask is several times
    # slower on CPU (branch mispredictions), so the sign is folded into the sparse mask, not selected alone.
    hi = torch.where(_into(torch.bitwise_and, torch.gt(d, 0), contracted), (c * cfg.eps_high).add_(1.0), hi_nom)
    lo = torch.where(_into(torch.bitwise_and, torch.lt(d, 0), contracted), (c * cfg.eps_low).neg_().add_(1.0),
                     lo_nom)
    if not _nominal_is_unit_step(cfg):
        hi, lo = hi.clamp_(max=hi_nom), lo.clamp_(min=lo_nom)
    # else: float32 1 + eps * 1 is the nominal bound and c <= 1, so 1 + eps * c lies inside the nominal interval
    # and the clamps are the identity.
    return TrustRegion(lo=lo, hi=hi, c=c, gated=gated, q=q, **radii)


def _nominal_is_unit_step(cfg: SATConfig) -> bool:
    """Whether float32 ``1 + eps * 1`` equals float32 ``1 + eps`` for both radii (true for the usual radii)."""
    return _unit_step(cfg.eps_high, cfg.eps_low)


@functools.lru_cache(maxsize=64)
def _unit_step(eps_high: float, eps_low: float) -> bool:
    one = torch.ones(1)
    hi_ok = bool((one * eps_high).add_(1.0) == torch.full((1,), 1.0 + eps_high))
    lo_ok = bool((one * eps_low).neg_().add_(1.0) == torch.full((1,), 1.0 - eps_low))
    return hi_ok and lo_ok


def _region_general(
    d: torch.Tensor, abs_d: torch.Tensor, mask: torch.Tensor, q: torch.Tensor, cfg: SATConfig
) -> TrustRegion:
    """The defining form, op for op, for a threshold tensor with more than one element."""
    gated = mask & (abs_d > q) & (q > 0)
    q_safe = torch.where(q > 0, q, torch.ones_like(q))
    k = contraction(torch.maximum(abs_d, q_safe), q_safe, cfg.kernel, cfg.exponent).clamp_min(cfg.c_min)
    c = torch.where(gated, k, torch.ones_like(k))
    contracted = gated & (c < 1)
    hi_nom, lo_nom = 1.0 + cfg.eps_high, 1.0 - cfg.eps_low
    hi = torch.where(contracted & (d > 0), 1.0 + cfg.eps_high * c, hi_nom).clamp(max=hi_nom)
    lo = torch.where(contracted & (d < 0), 1.0 - cfg.eps_low * c, lo_nom).clamp(min=lo_nom)
    return TrustRegion(lo=lo, hi=hi, c=c, gated=gated, q=q, eps_low=cfg.eps_low, eps_high=cfg.eps_high)
