"""PPO's clipped surrogate with per-token bounds: SAT's fast path (Eq. 18-19), value and gradient share
computed without an autograd graph, then attached to x by one autograd Function.

Value, dense and branch-free, in the products ``p = A x`` (x = r, the clipped ratio ``cr``; ``-A x`` is the
loss's branch, so every comparison of verl's ``vanilla`` holds with the sides swapped):

    loss = -max(min(A r, A cr), -|A| C)      (= max(-A r, -A cr), then min(., -A C) where A < 0)

with the same float products as ``vanilla``, so that c == 1 is it bit for bit (-|A| C is below both products
where A > 0, so the dual clip only acts where A < 0).

Gradient: ``d loss / d x = ((g w) A) coef`` with ``coef = -(dr/dx) K``, K in {0, 1/4, 1/2, 1} the share of
the unclipped branch that autograd gives the textbook formula: torch.maximum / torch.minimum split a float
tie in half, and a tie inside the interval (cr == r) passes both halves, so with s = sign:

    2 K_clip = 1 + s(A cr - A r) + [cr == r],     2 K_dual = 1 + s(min(A r, A cr) + |A| C)  (2 where A > 0)

Kept for the backward: ``coef``, 4 bytes per token; the advantages and weights are the caller's tensors. x is
the log-prob (``dr/dx`` = r where the log-ratio clamp passes, else 0) or, for OpenRLHF's sequence ratio, the
ratio itself (``dr/dx`` = 1). The value and coef of a call may be computed in parts (:func:`surrogate_part` on
slices, into slices of the outputs) before :func:`attach` gives the loss its graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .scalars import scalar

_ONE, _ZERO = scalar(1.0), scalar(0.0)


@dataclass(slots=True)
class SurrogateInput:
    """Tensors of (a part of) one loss call, broadcasting to the advantages' shape; ``active`` is 0/1 float32."""

    ratio: torch.Tensor  # r, detached
    adv: torch.Tensor  # A, finite (0 where an input was not)
    clipped: torch.Tensor  # clip(r, lo, hi) with SAT's bounds
    clipped_nominal: torch.Tensor  # clip(r, 1 - eps_low, 1 + eps_high)
    active: torch.Tensor
    dual_clip: float | None
    dratio_dx: torch.Tensor | None  # None: x is the ratio
    weights: torch.Tensor | None = None  # finite per-token loss weights


def surrogate_part(
    s: SurrogateInput,
    loss: torch.Tensor | None = None,
    coef: torch.Tensor | None = None,
    counts: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The per-token loss (times the weights) and ``-(dr/dx) K`` (the advantages' shape), written into ``loss``
    and ``coef`` when given (slices of a call's outputs), and the indicators the clip metrics count, as
    float32 0/1 written into ``counts`` when given (rows of the metric product), else bool: clipped (A cr < A r, verl's
    pg_clipfrac), clipped by the nominal interval too (A clip(r, 1 - eps_low, 1 + eps_high) < A r), and, with a
    dual clip, dual-clipped (min(A r, A cr) < -|A| C)."""
    a, r, cr = s.adv, s.ratio, s.clipped
    out = counts or [None] * 3
    p1, p2 = a * r, a * cr
    u = torch.minimum(p1, p2)
    k = torch.sub(p2, p1).sign_().add_(torch.eq(cr, r, out=u.new_empty(0))).add_(_ONE)  # 2 K_clip (a float eq)
    indicators = [torch.lt(p2, p1, out=out[0]), torch.lt(torch.mul(a, s.clipped_nominal), p1, out=out[1])]
    if s.dual_clip is None:
        loss = torch.neg(u, out=loss)
        scale = -0.5
    else:
        p3 = a.abs().mul_(scalar(-s.dual_clip))
        indicators.append(torch.lt(u, p3, out=out[2]))
        k.mul_(torch.sub(u, p3).sign_().add_(_ONE))  # 4 K
        loss = torch.maximum(u, p3, out=loss).neg_()
        scale = -0.25
    if s.dratio_dx is None:
        coef = torch.mul(k, scalar(scale), out=coef)
    else:
        coef = torch.addcmul(_ZERO, k, s.dratio_dx, value=scale, out=coef)  # exact: scale k is -K
    if s.weights is not None:
        loss.mul_(s.weights)
    return loss, coef, indicators


@dataclass(slots=True)
class _Grad:
    """What the backward of :func:`attach` reads, as one Python object: ``apply`` neither scans these tensors as
    inputs nor version-checks them as saved tensors (no one writes to them after the forward)."""

    coef: torch.Tensor
    adv: torch.Tensor
    weights: torch.Tensor | None
    x_dtype: torch.dtype


class _Attach(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, boxed_loss, grad):  # type: ignore[override]
        ctx.grad = grad
        return boxed_loss[0]

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        s: _Grad = ctx.grad
        g = grad_out * s.weights if s.weights is not None else grad_out * s.adv
        if s.weights is not None:
            g.mul_(s.adv)
        g.mul_(s.coef)  # ((g w) A) (-(dr/dx) K) == ((g w) (-A)) (dr/dx) K, as autograd orders it
        return (g if g.dtype == s.x_dtype else g.to(s.x_dtype)), None, None


def attach(
    x: torch.Tensor, loss: torch.Tensor, coef: torch.Tensor, adv: torch.Tensor, weights: torch.Tensor | None
) -> torch.Tensor:
    """``loss`` (computed without a graph, x's shape) with the gradient ``((g w) A) coef`` flowing to x."""
    if loss.shape != x.shape:
        raise ValueError(f"attach: loss shape {tuple(loss.shape)} differs from x's {tuple(x.shape)}")
    # the loss in a tuple is not an input of the Function, so it is returned as it is (an input would be viewed)
    return _Attach.apply(x, (loss,), _Grad(coef, adv, weights, x.dtype))
