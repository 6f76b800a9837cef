"""The staleness-adaptive trust region: clip bounds from the detached score d (the paper's Eq. 14-17).

    q      = quantile_level(|d| over the active entries of the gate scope)     Eq. 14
    gated  = active & (q > 0) & (|d| > q)                                       Eq. 16
    c      = max(K(|d|; q), c_min)            for gated entries, 1 otherwise    Eq. 15-16
    hi     = 1 + eps_high * c  if gated and d > 0, else 1 + eps_high            Eq. 17 (c+ = c where d > 0)
    lo     = 1 - eps_low  * c  if gated and d < 0, else 1 - eps_low             Eq. 17 (c- = c where d < 0)

so [lo, hi] always lies inside [1 - eps_low, 1 + eps_high] and contains 1. Everything is dense and
branch-free (no host read, no data-dependent shape): :class:`Gate` holds q, the gate as 0/1 and c; the loss
applies Eq. 17 to the clip directly (:func:`sat_clip`); :func:`adaptive_trust_region`, the public clip
strategy any clipped loss can take, returns the bounds as tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import SATConfig
from .kernels import C_FLOOR, contraction
from .quantile import global_masked_quantile, quantile_of_zeroed, weighted_quantile
from .scalars import scalar

_TINY = torch.finfo(torch.float32).tiny
_ZERO, _ONE, _INF = scalar(0.0), scalar(1.0), scalar(torch.inf)


@dataclass
class TrustRegion:
    """Dense bounds of one gate scope; tensors have the shape of the score d."""

    lo: torch.Tensor
    hi: torch.Tensor
    c: torch.Tensor
    gated: torch.Tensor
    q: torch.Tensor

    def diagnostics(self, d: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """The paper's Table 10 over ``mask`` (the mask the region was built with): realised gate rate, q,
        E[eps_low c-], E[eps_high c+], min c, and the mean |d|."""
        m = mask.bool()
        n = torch.count_nonzero(m).float().clamp_min(1.0)
        on = lambda t: torch.where(m, t, 0.0).sum() / n  # noqa: E731
        return {
            "gate_rate": on(self.gated.float()),
            "threshold_q": self.q.detach().float(),
            "radius_low_mean": on(1.0 - self.lo),
            "radius_high_mean": on(self.hi - 1.0),
            "contraction_min": torch.where(m, self.c, 1.0).amin() if m.numel() else torch.ones(()),
            "abs_log_ratio_mean": on(d.abs()),
        }


@dataclass(slots=True)
class Gate:
    """Eq. 14-16 on a score d over its gate scope, dense: the threshold ``q``, the strict gate's bound
    ``threshold`` (q, or inf when q == 0: Eq. 16 gates only for q > 0), ``gated`` as 0/1 (float32) and ``c``
    (c on gated entries, 1 elsewhere)."""

    q: torch.Tensor
    threshold: torch.Tensor
    d: torch.Tensor
    gated: torch.Tensor
    c: torch.Tensor

    def region(self, cfg: SATConfig) -> TrustRegion:
        """The bounds as dense tensors (Eq. 17; c == 1 keeps the nominal endpoint bit for bit)."""
        hi_nom, lo_nom = 1.0 + cfg.eps_high, 1.0 - cfg.eps_low
        sign = self.d.sign()
        e, moved = endpoint(self.c, sign, cfg), self.c < 1
        hi = torch.where(moved & (sign > 0), e, hi_nom).clamp_(max=hi_nom)
        lo = torch.where(moved & (sign < 0), -e, lo_nom).clamp_(min=lo_nom)
        return TrustRegion(lo=lo, hi=hi, c=self.c, gated=self.gated > 0, q=self.q)


def endpoint(c: torch.Tensor, side: torch.Tensor, cfg: SATConfig) -> torch.Tensor:
    """Eq. 17's moved endpoint on the side ``side`` (the sign, +1 or -1, of the d it moves for), signed:
    ``1 + eps_high c`` for +1, ``-(1 - eps_low c)`` for -1 (the same float operations as the bound:
    ``-(1 - x) == -1 + x`` exactly)."""
    if cfg.eps_high == cfg.eps_low:
        eps = scalar(cfg.eps_high)
    else:
        eps = torch.where(side > 0, scalar(cfg.eps_high), scalar(cfg.eps_low))
    return torch.add(torch.mul(c, eps), side)  # side may be wider than c (a gate per response)


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
        return global_masked_quantile(
            abs_d, mask, cfg.quantile, group=group, method=cfg.global_method, rule=cfg.quantile_rule, counts=counts
        )
    if counts is not None:
        return weighted_quantile(abs_d, torch.where(mask.bool(), counts, 0), cfg.quantile, cfg.quantile_rule)
    m = mask.bool()
    return quantile_of_zeroed(
        torch.where(m, abs_d, 0.0).reshape(-1), torch.count_nonzero(m), cfg.quantile, cfg.quantile_rule
    )


def gate(
    d: torch.Tensor, abs_active: torch.Tensor, q: torch.Tensor, cfg: SATConfig, out: torch.Tensor | None = None
) -> Gate:
    """Eq. 15-16 for the detached, finite score ``d`` given ``abs_active`` = |d| on the active entries and 0
    elsewhere, and the threshold q (Eq. 14); the 0/1 gate is written into ``out`` (float32) when given."""
    threshold = torch.where(q > _ZERO, q, _INF)  # Eq. 16, q > 0
    gated = torch.gt(abs_active, threshold, out=out) if out is not None else torch.gt(abs_active, threshold).float()
    # The kernel is evaluated everywhere and kept on the gate only. The paper's hill form takes the threshold
    # itself (q, or inf when q == 0: c = 1, finite) and is 1 off the gate as 1 / (1 + 0 (|d| / q)^n) (off the
    # gate |d| / q <= 1, so the product is finite); the others need a finite q > 0 and |d| raised to it.
    if cfg.kernel == "hill":
        c = contraction(abs_active, threshold, cfg.kernel, cfg.exponent, on=gated)
    else:
        q_safe = q.clamp_min(_TINY)
        c = contraction(abs_active.clamp_min(q_safe), q_safe, cfg.kernel, cfg.exponent)
    if cfg.c_min > C_FLOOR:
        c = c.clamp_min_(cfg.c_min)
    if cfg.kernel != "hill":
        c = torch.addcmul(torch.sub(_ONE, gated), c, gated)  # c on the gate, exactly 1 elsewhere
    return Gate(q=q, threshold=threshold, d=d, gated=gated, c=c)


def sat_clip(clipped_nominal: torch.Tensor, adv_sign: torch.Tensor, g: Gate, cfg: SATConfig) -> torch.Tensor:
    """``clip(r, lo, hi)`` with Eq. 17's bounds from ``clip(r, 1 - eps_low, 1 + eps_high)``, for the clip of a
    loss whose advantage has sign ``adv_sign`` (0 off the active tokens; shapes broadcast: a gate per response
    serves its tokens).

    Only the endpoint on A's side matters to the loss (the other is kept nominal, as verl's ``vanilla`` and
    the reference do), so only gated entries with sign(d) == sign(A) move, i.e. those with ``d sign(A) > q``
    (with ``q > 0``), and on one side: for A > 0 ``min(clip, 1 + eps_high c)``, for A < 0
    ``max(clip, 1 - eps_low c)``, both ``sign(A) min(sign(A) clip, e)`` with the signed endpoint e
    (:func:`endpoint` on A's side); elsewhere e is raised past every clip value.
    """
    if cfg.c_min >= 1:  # c == 1 everywhere: the nominal clip bit for bit
        return clipped_nominal
    moved = torch.mul(g.d, adv_sign)
    torch.gt(moved, g.threshold, out=moved)  # 1 where the endpoint moves, else 0 (a float output: vectorised)
    # e = the endpoint where it moves; elsewhere raised by 4 + eps_high + eps_low, past every signed clip value
    e = endpoint(g.c, adv_sign, cfg).add_(moved.sub_(_ONE), alpha=-(4.0 + cfg.eps_high + cfg.eps_low))
    return torch.minimum(torch.mul(adv_sign, clipped_nominal), e).mul_(adv_sign)


def adaptive_trust_region(
    d: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    group: dist.ProcessGroup | None = None,
    q: torch.Tensor | None = None,
) -> TrustRegion:
    """Per-entry bounds ``(lo, hi)`` for the score ``d`` (detached, finite); ``q`` overrides the threshold."""
    d = d.detach().float()
    m = mask.bool()
    abs_active = torch.where(m, d.abs(), 0.0)
    if q is None:
        q = gate_threshold(d.abs(), m, cfg, group)
    return gate(d, abs_active, q.to(device=d.device, dtype=torch.float32), cfg).region(cfg)
