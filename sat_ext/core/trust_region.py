"""The staleness-adaptive trust region: clip bounds from the detached score d (the paper's Eq. 14-17).

    q      = quantile_level(|d| over the active entries of the gate scope)     Eq. 14
    gated  = active & (q > 0) & (|d| > q)                                       Eq. 16
    c      = max(K(|d|; q), c_min)            for gated entries, 1 otherwise    Eq. 15-16
    hi     = 1 + eps_high * c  if gated and d > 0, else 1 + eps_high            Eq. 17 (c+ = c where d > 0)
    lo     = 1 - eps_low  * c  if gated and d < 0, else 1 - eps_low             Eq. 17 (c- = c where d < 0)

so [lo, hi] always lies inside [1 - eps_low, 1 + eps_high] and contains 1. Only the gated entries (at most
the top decile) differ from the nominal interval, so :func:`sparse_trust_region` keeps just those (their
index, score, c and bounds); :func:`adaptive_trust_region`, the public clip strategy any clipped loss can
take, returns the same bounds as dense tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import SATConfig
from .kernels import C_FLOOR, contraction
from .quantile import global_masked_quantile, masked_quantile, weighted_quantile


@dataclass
class SparseRegion:
    """The gated entries of a score of shape ``shape``: flat ``index`` (ascending), score ``d``, factor ``c``
    and bounds ``lo`` / ``hi``; every other entry has the nominal interval and c = 1."""

    q: torch.Tensor
    shape: torch.Size
    index: torch.Tensor
    d: torch.Tensor
    c: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    eps_low: float
    eps_high: float

    def table10(self, n_scope: torch.Tensor) -> dict[str, torch.Tensor]:
        """The paper's Table 10 over the ``n_scope`` active entries the gate was taken over: realised gate
        rate, q, E[eps_low c-] and E[eps_high c+] (= eps (n - sum over d's side of (1 - c)) / n, c = 1 off
        the gate), and min c."""
        scope = n_scope.float().clamp_min(1.0)
        deficit = 1.0 - self.c
        one = torch.ones((), device=scope.device)
        return {
            "gate_rate": torch.tensor(float(self.index.numel()), device=scope.device) / scope,
            "threshold_q": self.q.detach().float(),
            "radius_low_mean": self.eps_low * ((n_scope - deficit[self.d < 0].sum()) / scope),
            "radius_high_mean": self.eps_high * ((n_scope - deficit[self.d > 0].sum()) / scope),
            "contraction_min": self.c.min() if self.c.numel() else one,
        }

    def dense(self) -> "TrustRegion":
        """The same bounds as dense tensors of ``shape``."""
        lo = torch.full(self.shape, 1.0 - self.eps_low, device=self.c.device)
        hi = torch.full(self.shape, 1.0 + self.eps_high, device=self.c.device)
        c = torch.ones(self.shape, device=self.c.device)
        gated = torch.zeros(self.shape, dtype=torch.bool, device=self.c.device)
        for dense, sparse in ((lo, self.lo), (hi, self.hi), (c, self.c)):
            dense.view(-1)[self.index] = sparse
        gated.view(-1)[self.index] = True
        return TrustRegion(lo=lo, hi=hi, c=c, gated=gated, q=self.q, sparse=self)


@dataclass
class TrustRegion:
    """Dense bounds of one gate scope; tensors have the shape of the score d."""

    lo: torch.Tensor
    hi: torch.Tensor
    c: torch.Tensor
    gated: torch.Tensor
    q: torch.Tensor
    sparse: SparseRegion

    def diagnostics(self, d: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Table 10 (:meth:`SparseRegion.table10`) and the mean |d| over ``mask``, the mask the region was
        built with."""
        mask = mask.bool()
        n = torch.count_nonzero(mask)
        return {**self.sparse.table10(n),
                "abs_log_ratio_mean": torch.where(mask, d.abs(), 0.0).sum() / n.float().clamp_min(1.0)}


def gate_threshold(
    abs_d: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    group: dist.ProcessGroup | None = None,
    counts: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 14's q over the configured scope: the local micro-batch, or every rank of ``group``; ``counts``
    weighs each entry (SAT-GSPO's Eq. 20: a response's score once per active token).

    Without an initialised process group the global scope is the local one (a world of one process).
    """
    if cfg.gate_scope == "global" and dist.is_available() and dist.is_initialized():
        return global_masked_quantile(abs_d, mask, cfg.quantile, group=group, method=cfg.global_method,
                                      rule=cfg.quantile_rule, counts=counts)
    if counts is not None:
        return weighted_quantile(abs_d, torch.where(mask.bool(), counts, 0), cfg.quantile, cfg.quantile_rule)
    return masked_quantile(abs_d, mask, cfg.quantile, rule=cfg.quantile_rule)


def gated_bounds(d: torch.Tensor, abs_d: torch.Tensor, q: torch.Tensor, cfg: SATConfig):
    """Eq. 15-17 for gated entries (|d| > q > 0): (c, lo, hi), each endpoint moved only on d's side."""
    c = contraction(abs_d, q, cfg.kernel, cfg.exponent)
    if cfg.c_min > C_FLOOR:
        c = c.clamp_min_(cfg.c_min)
    hi_nom, lo_nom = 1.0 + cfg.eps_high, 1.0 - cfg.eps_low
    moved = c < 1  # c == 1 (c_min = 1) keeps the nominal endpoint bit for bit
    hi = torch.where(moved & (d > 0), (c * cfg.eps_high).add_(1.0), hi_nom).clamp_(max=hi_nom)
    lo = torch.where(moved & (d < 0), (c * cfg.eps_low).neg_().add_(1.0), lo_nom).clamp_(min=lo_nom)
    return c, lo, hi


def sparse_trust_region(
    d: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    group: dist.ProcessGroup | None = None,
    q: torch.Tensor | None = None,
    abs_d: torch.Tensor | None = None,
) -> SparseRegion:
    """The gated entries of the detached, finite score ``d`` and their bounds; ``q`` overrides Eq. 14 and
    ``abs_d`` may pass ``|d|`` when the caller has it."""
    d = d.detach().float()
    mask = mask.bool()
    abs_d = d.abs() if abs_d is None else abs_d
    if q is None:
        q = gate_threshold(abs_d, mask, cfg, group)
    q = q.to(device=d.device, dtype=torch.float32)
    if bool(q > 0):
        index = torch.gt(abs_d, q).logical_and_(mask).view(-1).nonzero().view(-1)
    else:  # q == 0: nothing is gated
        index = torch.zeros(0, dtype=torch.long, device=d.device)
    d_g = d.reshape(-1)[index]
    c, lo, hi = gated_bounds(d_g, abs_d.reshape(-1)[index], q, cfg)
    return SparseRegion(q=q, shape=d.shape, index=index, d=d_g, c=c, lo=lo, hi=hi, eps_low=cfg.eps_low,
                        eps_high=cfg.eps_high)


def adaptive_trust_region(
    d: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    group: dist.ProcessGroup | None = None,
    q: torch.Tensor | None = None,
) -> TrustRegion:
    """Per-entry bounds ``(lo, hi)`` for the score ``d`` (detached, finite); ``q`` overrides the threshold."""
    return sparse_trust_region(d, mask, cfg, group, q).dense()
