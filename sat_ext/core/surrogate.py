"""PPO's clipped surrogate with per-token bounds as one autograd Function: SAT's fast path (Eq. 18-19).

Forward (no autograd graph kept), dense and branch-free, in the products ``p = A x`` (x = r, the clipped
ratio ``cr``; ``-A x`` is the loss's branch, so every comparison of verl's ``vanilla`` holds with the sides
swapped):

    loss = -max(min(A r, A cr), -|A| C)      (= max(-A r, -A cr), then min(., -A C) where A < 0)

with the same float products as ``vanilla``, so that c == 1 is it bit for bit (-|A| C is below both products
where A >= 0, so the dual clip only acts where A < 0).

Backward: ``d loss / d x = ((g w) A) coef`` with ``coef = -(dr/dx) K``, K in {0, 1/4, 1/2, 1} the share of
the unclipped branch that autograd gives the textbook formula: torch.maximum / torch.minimum split a float
tie in half, and a tie inside the interval (cr == r) passes both halves, so with s = sign:

    2 K_clip = 1 + s(A cr - A r) + [cr == r],     2 K_dual = 1 + s(min(A r, A cr) + |A| C)  (2 where A > 0)

Saved: ``coef``, 4 bytes per token; the advantages and weights are the caller's tensors. x is the log-prob
(``dr/dx`` = r where the log-ratio clamp passes, else 0) or, for OpenRLHF's sequence ratio, the ratio
itself (``dr/dx`` = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SurrogateInput:
    """One loss call's tensors (shapes broadcast to the advantages'); ``active`` is 0/1 float32."""

    ratio: torch.Tensor  # r, detached
    adv: torch.Tensor  # A, finite (0 where an input was not)
    clipped: torch.Tensor  # clip(r, lo, hi) with SAT's bounds
    clipped_nominal: torch.Tensor  # clip(r, 1 - eps_low, 1 + eps_high)
    active: torch.Tensor
    dual_clip: float | None
    dratio_dx: torch.Tensor | None  # None: x is the ratio
    weights: torch.Tensor | None = None  # finite per-token loss weights


@dataclass
class SurrogateOutput:
    """The per-token loss (with its graph to x), the clip counts over the active tokens *negated* (sums of
    -1 indicators: the metrics take them with a minus sign), and the sign of A cr - A r (-1: clipped)."""

    loss_mat: torch.Tensor
    neg_n_clipped: torch.Tensor
    neg_n_dual_clipped: torch.Tensor
    neg_n_nominal_clipped: torch.Tensor
    clip_sign: torch.Tensor

    @property
    def clipped(self) -> torch.Tensor:
        """-A clip(r) > -A r, dense bool."""
        return self.clip_sign < 0


def _count(indicator: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """The sum of the 0/-1 (or 0/1) ``indicator`` over the active tokens (a dot product: exact for counts below
    2^24 per BLAS accumulator)."""
    return torch.dot(indicator.reshape(-1), active.reshape(-1))


class _ClippedSurrogate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, s: SurrogateInput, out: dict):  # type: ignore[override]
        a, r, cr = s.adv, s.ratio, s.clipped
        p1, p2 = a * r, a * cr
        u = torch.minimum(p1, p2)
        clip_sign = torch.sub(p2, p1).sign_()
        k = torch.add(clip_sign, torch.eq(cr, r)).add_(1.0)  # 2 K_clip
        if s.dual_clip is None:
            loss, n_dual, scale = u.neg_(), torch.zeros((), device=a.device), -0.5
        else:
            p3 = a.abs().mul_(-s.dual_clip)
            dual_sign = torch.sub(u, p3).sign_()
            n_dual = _count(dual_sign.clamp_max(0.0), s.active)
            loss = torch.maximum(u, p3).neg_()
            k.mul_(dual_sign.add_(1.0))  # 4 K
            scale = -0.25
        coef = k.mul_(scale) if s.dratio_dx is None else k.mul_(scale).mul_(s.dratio_dx)
        if s.weights is not None:
            loss.mul_(s.weights)
        nominal = torch.mul(a, s.clipped_nominal).sub_(p1).sign_().clamp_max_(0.0)
        out.update(neg_n_clipped=_count(clip_sign.clamp_max(0.0), s.active), neg_n_dual_clipped=n_dual,
                   neg_n_nominal_clipped=_count(nominal, s.active), clip_sign=clip_sign)
        ctx.save_for_backward(coef)
        ctx.adv, ctx.weights, ctx.x_dtype = a, s.weights, x.dtype
        return loss.view(x.shape)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        (coef,) = ctx.saved_tensors
        g = grad_out * ctx.weights if ctx.weights is not None else grad_out * ctx.adv
        if ctx.weights is not None:
            g.mul_(ctx.adv)
        g.mul_(coef)  # ((g w) A) (-(dr/dx) K) == ((g w) (-A)) (dr/dx) K, as autograd orders it
        return g.to(ctx.x_dtype), None, None


def clipped_surrogate(x: torch.Tensor, s: SurrogateInput) -> SurrogateOutput:
    """The per-token clipped surrogate of ``s`` with its gradient flowing to ``x`` (the advantages' shape)."""
    out: dict = {}
    loss = _ClippedSurrogate.apply(x, s, out)
    return SurrogateOutput(loss_mat=loss, **out)
