"""PPO's clipped surrogate with per-token bounds as one autograd Function: SAT's fast path (Eq. 18-19).

Forward (no autograd graph kept): the per-token loss ``max(-A r, -A clip(r, lo, hi))`` (and, for A < 0 with
a dual clip C, ``min(., -A C)``) with the same float operations as verl's ``vanilla``, so that c == 1 is it
bit for bit. Everywhere but on a few tokens the value is PPO's unclipped branch ``-A r``; the exceptions,
evaluated op for op on their own, are the tokens outside the nominal interval, those near C, and the gated
ones whose endpoint SAT moved (at most the top decile).

Backward: ``d loss / d x = ((g w) A) coef`` with ``coef = -(dr/dx) K``, K in {0, 1/4, 1/2, 1} the share of
the unclipped branch that autograd gives the textbook formula (torch.maximum / torch.minimum split a float
tie in half; a tie inside the interval passes both halves). Saved: ``coef``, 4 bytes per token; the
advantages and weights are the caller's tensors. x is the log-prob (``dr/dx`` = r where the log-ratio clamp
passes, else 0) or, for OpenRLHF's sequence ratio, the ratio itself (``dr/dx`` = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_DUAL_MARGIN = 2.0**-20  # r < C (1 - margin): -A r < -A C holds after rounding, no tie with the dual clip
_TINY = 2.0**-100  # below this |A|, -A r and -A C may be subnormal and round to the same float


@dataclass
class SurrogateInput:
    """Flat (N,) float32 tensors of one loss call; ``gated_*`` are SAT's moved bounds (ascending index)."""

    ratio: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    gated_index: torch.Tensor
    gated_lo: torch.Tensor
    gated_hi: torch.Tensor
    eps_low: float
    eps_high: float
    dual_clip: float | None
    dratio_dx: torch.Tensor | None  # None: x is the ratio
    weights: torch.Tensor | None = None
    bad: torch.Tensor | None = None  # non-finite entries: zero loss and gradient


@dataclass
class SurrogateOutput:
    """The per-token loss (with its graph to x), SAT's clip mask and the counts of the clip metrics."""

    loss_mat: torch.Tensor
    clipped: torch.Tensor  # -A clip(r) > -A r (verl's pg_clipfrac), dense bool
    n_clipped: torch.Tensor  # over the active tokens
    n_dual_clipped: torch.Tensor
    n_newly_clipped: torch.Tensor  # clipped by SAT's interval, not by the nominal one


def _exceptions(s: SurrogateInput) -> torch.Tensor:
    """Ascending flat indices of the tokens whose value or gradient is not PPO's unclipped branch ``-A r``."""
    lo_nom, hi_nom = 1.0 - s.eps_low, 1.0 + s.eps_high
    top = hi_nom if s.dual_clip is None else min(hi_nom, s.dual_clip * (1.0 - _DUAL_MARGIN))
    cand = torch.gt(s.ratio, top).logical_or_(torch.lt(s.ratio, lo_nom))
    if s.dual_clip is not None:
        cand.logical_or_(torch.lt(s.adv, 0).logical_and_(torch.gt(s.adv, -_TINY)))
    cand[s.gated_index] = True
    return cand.nonzero().view(-1)


def _exact(s: SurrogateInput, idx: torch.Tensor):
    """verl's vanilla, op for op, on the tokens ``idx``: value, gradient share K and the clip masks."""
    a, r = s.adv[idx], s.ratio[idx]
    lo_nom, hi_nom = 1.0 - s.eps_low, 1.0 + s.eps_high
    lo, hi = torch.full_like(r, lo_nom), torch.full_like(r, hi_nom)
    if s.gated_index.numel():
        at = torch.searchsorted(idx, s.gated_index)
        lo[at], hi[at] = s.gated_lo, s.gated_hi
    # For A > 0 the value depends on hi only, for A < 0 on lo only: the other endpoint stays nominal, so a
    # pull-back token keeps PPO's whole gradient where -A r and -A lo round to the same float.
    lo = torch.where(a > 0, lo_nom, lo)
    hi = torch.where(a < 0, hi_nom, hi)
    neg_a = -a
    pg1 = neg_a * r
    cr = torch.clamp(r, lo, hi)
    pg2 = neg_a * cr
    value = torch.maximum(pg1, pg2)
    clipped = torch.gt(pg2, pg1)
    k = torch.where(pg1 > pg2, 1.0, torch.where(pg1 < pg2, 0.0, torch.where(cr == r, 1.0, 0.5)))
    dual = torch.zeros_like(clipped)
    if s.dual_clip is not None:
        pg3 = neg_a * s.dual_clip
        negative = a < 0
        dual = torch.gt(value, pg3) & negative
        k_min = torch.where(value < pg3, 1.0, torch.where(value > pg3, 0.0, 0.5))
        k = torch.where(negative, k * k_min, k)
        value = torch.where(negative, torch.min(pg3, value), value)
    ppo_clipped = torch.gt(neg_a * torch.clamp(r, lo_nom, hi_nom), pg1)
    return value, k, clipped, dual, clipped & ~ppo_clipped


class _ClippedSurrogate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, s: SurrogateInput, out: dict):  # type: ignore[override]
        idx = _exceptions(s)
        value, k, clipped_e, dual_e, newly_e = _exact(s, idx)
        loss = torch.mul(s.adv, s.ratio).neg_()  # -(A r) == (-A) r: the unclipped branch
        loss[idx] = value
        coef = s.dratio_dx.neg() if s.dratio_dx is not None else torch.full_like(s.ratio, -1.0)
        coef[idx] *= k
        if s.bad is not None:
            loss.masked_fill_(s.bad, 0.0)
            coef.masked_fill_(s.bad, 0.0)
        if s.weights is not None:
            loss.mul_(s.weights)
        active = s.mask[idx]
        clipped = torch.zeros_like(s.mask)
        clipped[idx] = clipped_e
        out.update(clipped=clipped, n_clipped=torch.count_nonzero(clipped_e & active),
                   n_dual_clipped=torch.count_nonzero(dual_e & active),
                   n_newly_clipped=torch.count_nonzero(newly_e & active))
        ctx.save_for_backward(coef)
        ctx.adv, ctx.weights, ctx.x_shape, ctx.x_dtype = s.adv, s.weights, x.shape, x.dtype
        return loss.view(x.shape)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        (coef,) = ctx.saved_tensors
        g = grad_out.reshape(-1)
        g = g * ctx.weights if ctx.weights is not None else g * 1.0
        g.mul_(ctx.adv).mul_(coef)  # ((g w) A) (-(dr/dx) K) == ((g w) (-A)) (dr/dx) K, as autograd orders it
        return g.view(ctx.x_shape).to(ctx.x_dtype), None, None


def clipped_surrogate(x: torch.Tensor, s: SurrogateInput) -> SurrogateOutput:
    """The per-token clipped surrogate of ``s`` with its gradient flowing to ``x`` (shape (B, T))."""
    out: dict = {}
    loss = _ClippedSurrogate.apply(x, s, out)
    return SurrogateOutput(loss_mat=loss, clipped=out["clipped"].view(x.shape), n_clipped=out["n_clipped"],
                           n_dual_clipped=out["n_dual_clipped"], n_newly_clipped=out["n_newly_clipped"])
