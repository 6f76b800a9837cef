"""Contraction kernels c = K(|d|; q) in (0, 1] for tokens above the gate threshold q > 0.

The paper names a Hill kernel with exponent n = 2 without giving its exact form, so four forms are offered;
``x = |d|`` and ``u = (x - q) / q`` (the relative excess over the threshold):

* ``hill_shifted`` (default): ``c = 1 / (1 + u^n)``: continuous at the gate (c = 1 at x = q).
* ``hill``:                   ``c = 1 / (1 + (x / q)^n)``: the textbook Hill form; c = 1/2 at the gate (a jump).
* ``power``:                  ``c = (q / x)^n``: continuous at the gate, heavier contraction in the tail.
* ``exp``:                    ``c = exp(-u^n)``: continuous; Gaussian-shaped for n = 2.

Callers pass only gated entries (x > q > 0); the floor ``c_min`` is applied by the caller.
"""

from __future__ import annotations

import torch


def contraction(abs_d: torch.Tensor, q: torch.Tensor, kernel: str, exponent: float) -> torch.Tensor:
    """Contraction factor for ``abs_d > q > 0`` (elementwise; other entries are the caller's to overwrite)."""
    # Each form allocates one tensor and updates it in place (the same operations, in the same order, as
    # the formulas above).
    if kernel == "hill_shifted":
        return (abs_d - q).div_(q).pow_(exponent).add_(1.0).reciprocal_()
    if kernel == "hill":
        return (abs_d / q).pow_(exponent).add_(1.0).reciprocal_()
    if kernel == "power":
        return (q / abs_d).pow_(exponent)
    if kernel == "exp":
        return (abs_d - q).div_(q).pow_(exponent).neg_().exp_()
    raise ValueError(f"unknown SAT kernel {kernel!r}")
