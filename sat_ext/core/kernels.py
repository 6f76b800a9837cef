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
    if kernel == "hill_shifted":
        return torch.reciprocal(1.0 + ((abs_d - q) / q).pow(exponent))
    if kernel == "hill":
        return torch.reciprocal(1.0 + (abs_d / q).pow(exponent))
    if kernel == "power":
        return (q / abs_d).pow(exponent)
    if kernel == "exp":
        return torch.exp(-((abs_d - q) / q).pow(exponent))
    raise ValueError(f"unknown SAT kernel {kernel!r}")
