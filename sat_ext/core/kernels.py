"""Contraction kernels c = K(|d|; q) in (0, 1] for tokens above the gate threshold q > 0.

With ``x = |d|`` and ``u = (x - q) / q`` (the relative excess over the threshold):

* ``hill`` (the paper's, Eq. 15 with n = 2): ``c = psi(x; q) = 1 / (1 + (x / q)^n)``; psi(q; q) = 1/2, so
  with the strict gate x > q every gated token gets c < 1/2 (the factor jumps from 1 to 1/2 at the gate).
* ``hill_shifted`` (not the paper's): ``c = 1 / (1 + u^n)``: continuous at the gate (c = 1 at x = q), so
  it contracts far less near q (at x = 2q: 1/2 instead of 1/5); for a user who wants no jump at the gate.
* ``power`` (not the paper's):  ``c = (q / x)^n``: continuous at the gate, heavier contraction in the tail.
* ``exp`` (not the paper's):    ``c = exp(-u^n)``: continuous; Gaussian-shaped for n = 2.

Where a form's float32 value underflows to 0 (``exp`` once u^n > ~87, e.g. q = 0.011, x = 0.13; ``hill`` and
``power`` only for x / q > ~1e19), c is raised to :data:`C_FLOOR`, the smallest normal float32 (2^-126), so
that c stays in (0, 1] as Eq. 16 requires; 1 + eps * C_FLOOR then rounds to 1, the strongest contraction
float32 can express. Callers pass gated entries (x > q > 0), or, for ``hill``, every entry with the gate as a
0/1 mask (``on``) and q = inf when q == 0; the floor ``c_min`` is the caller's.
"""

from __future__ import annotations

import torch

from .scalars import scalar

C_FLOOR = torch.finfo(torch.float32).tiny


def contraction(
    abs_d: torch.Tensor, q: torch.Tensor, kernel: str, exponent: float, on: torch.Tensor | None = None
) -> torch.Tensor:
    """Contraction factor for ``abs_d > q > 0`` (elementwise; other entries are the caller's to overwrite).

    ``on`` (``hill`` only): a 0/1 float mask, c is exactly 1 where it is 0, ``1 / (1 + on (abs_d / q)^n)``;
    the caller guarantees ``abs_d / q <= 1`` there and ``exponent > 0`` (as SATConfig does), so that the product
    is 0, not inf * 0.
    """
    if on is not None and kernel != "hill":
        raise ValueError(f"contraction: the gate mask 'on' is for the hill kernel only, got kernel {kernel!r}")
    # Each form allocates one tensor and updates it in place (the same operations, in the same order, as
    # the formulas above).
    if kernel == "hill":
        x = (abs_d / q).pow_(exponent)
        c = (x if on is None else x.mul_(on)).add_(scalar(1.0)).reciprocal_()
    elif kernel == "hill_shifted":
        c = (abs_d - q).div_(q).pow_(exponent).add_(scalar(1.0)).reciprocal_()
    elif kernel == "power":
        c = (q / abs_d).pow_(exponent)
    elif kernel == "exp":
        c = (abs_d - q).div_(q).pow_(exponent).neg_().exp_()
    else:
        raise ValueError(f"unknown SAT kernel {kernel!r}")
    return c.clamp_min_(C_FLOOR)
