"""SAT as the paper writes it (arXiv 2607.18722, §4.2 Eq. 13-20, App. G Table 10, App. F Eq. 52).

Written from the PDF's text, not from sat_ext.core, as the oracle of tests/paper. Everything is plain Python
float64, one token at a time, except the log-ratios d themselves: those are computed in the loss's own
float32 arithmetic (one subtraction per token; for Eq. 20 the float32 masked sum over the response divided by
its length), because q is an order statistic of the d values and is compared bit for bit.

    d_bt = log r_bt                                                     (13)
    q = inf{x >= 0 : F(x) >= alpha},  F(x) = #{(b,t) in T_act : |d_bt| <= x} / |T_act|   (14)
    psi(u; q) = 1 / (1 + (u / q)^2),  u+ = [d]+,  u- = [-d]+           (15)
    c+- = psi(u+-; q) if q > 0 and |d| > q, else 1                      (16)
    eps_low~ = eps_low c-,  eps_high~ = eps_high c+                     (17)
    S = min(r A, clip(r, 1 - eps_low~, 1 + eps_high~) A),  loss = -S    (18-19)
    SAT-GSPO: r and d are the sequence ratio rho_b = exp(mean_t log r_bt), broadcast to the response's
    active tokens before the same active-token quantile                 (20)
    d_pi = mean over T_act of |log r_tok|, the token ratio for GSPO too (52)

alpha is the decimal the user writes (0.9 = 9/10), so F(x) >= alpha is an exact comparison of fractions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch


@dataclass
class PaperSAT:
    """The paper's quantities for one micro-batch; per-token lists are [b][t] (0 / 1 / False off T_act)."""

    q: float
    gated: list[list[bool]]
    c_plus: list[list[float]]
    c_minus: list[list[float]]
    loss: list[list[float]]  # -S_bt, the per-token loss before aggregation
    n_active: int
    gate_rate: float  # Table 10 rows
    radius_low_mean: float
    radius_high_mean: float
    contraction_min: float
    d_pi: float


def empirical_quantile(values: list[float], alpha: float) -> float:
    """Eq. 14: the smallest x >= 0 with F(x) >= alpha (F steps at the values, so x is one of them)."""
    n = len(values)
    if n == 0:
        return 0.0  # T_act empty: the paper skips the step; nothing is gated
    a = Fraction(repr(alpha))
    for x in sorted(set(values)):
        if Fraction(sum(1 for v in values if v <= x), n) >= a:
            return x
    raise AssertionError("F reaches 1 at the largest value")


def psi(u: float, q: float) -> float:
    """Eq. 15, the Hill kernel with exponent 2."""
    return 1.0 / (1.0 + (u / q) ** 2)


def _log_ratios(logp: torch.Tensor, denom: torch.Tensor, mask: torch.Tensor, sequence: bool) -> list[list[float]]:
    """d_bt in float32: the token log-ratio, or (Eq. 20) its mean over the response's active tokens on
    every token of the response."""
    tok = logp.detach().float() - denom.float()
    if not sequence:
        return tok.tolist()
    m = mask.float()
    seq = (tok * m).sum(-1) / m.sum(-1).clamp(min=1)
    return seq[:, None].expand_as(tok).tolist()


def paper_sat(
    logp: torch.Tensor,
    denom: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    alpha: float = 0.9,
    sequence: bool = False,
    dual_clip: float | None = None,
) -> PaperSAT:
    """SAT-GRPO (``sequence=False``, Eq. 13-19) or SAT-GSPO (``sequence=True``, Eq. 20) on one micro-batch.

    ``denom`` is the ratio's reference log-prob; ``dual_clip`` is the base recipe's own extra (verl's
    vanilla applies min(loss, -A C) for A < 0), not part of Eq. 19.
    """
    M = mask.bool().tolist()
    A = adv.double().tolist()
    d = _log_ratios(logp, denom, mask, sequence)
    d_tok = (logp.detach().float() - denom.float()).tolist()
    B, T = len(M), len(M[0]) if M else 0
    act = [(b, t) for b in range(B) for t in range(T) if M[b][t]]
    q = empirical_quantile([abs(d[b][t]) for b, t in act], alpha)

    gated = [[False] * T for _ in range(B)]
    c_plus = [[1.0] * T for _ in range(B)]
    c_minus = [[1.0] * T for _ in range(B)]
    loss = [[0.0] * T for _ in range(B)]
    for b, t in act:
        x = d[b][t]
        if q > 0 and abs(x) > q:  # Eq. 16
            gated[b][t] = True
            c_plus[b][t] = psi(max(x, 0.0), q)
            c_minus[b][t] = psi(max(-x, 0.0), q)
        lo = 1.0 - eps_low * c_minus[b][t]  # Eq. 17
        hi = 1.0 + eps_high * c_plus[b][t]
        r = math.exp(x)
        a = A[b][t]
        s = min(r * a, min(max(r, lo), hi) * a)  # Eq. 18-19
        v = -s
        if dual_clip is not None and a < 0:
            v = min(v, -a * dual_clip)
        loss[b][t] = v

    n = len(act)
    mean = (lambda xs: sum(xs) / n) if n else (lambda xs: 0.0)
    return PaperSAT(
        q=q,
        gated=gated,
        c_plus=c_plus,
        c_minus=c_minus,
        loss=loss,
        n_active=n,
        gate_rate=mean([float(gated[b][t]) for b, t in act]),
        radius_low_mean=mean([eps_low * c_minus[b][t] for b, t in act]),
        radius_high_mean=mean([eps_high * c_plus[b][t] for b, t in act]),
        contraction_min=min((min(c_plus[b][t], c_minus[b][t]) for b, t in act), default=1.0),
        d_pi=mean([abs(d_tok[b][t]) for b, t in act]),
    )


def token_mean(res: PaperSAT, mask: torch.Tensor) -> float:
    """Sum of the active tokens' loss over their number (verl token-mean, OpenRLHF token-level)."""
    M = mask.bool().tolist()
    total = sum(res.loss[b][t] for b in range(len(M)) for t in range(len(M[b])) if M[b][t])
    return total / max(res.n_active, 1)


def seq_mean_token_mean(res: PaperSAT, mask: torch.Tensor) -> float:
    """Mean over responses with an active token of each response's token-mean (verl seq-mean-token-mean,
    OpenRLHF sequence-level)."""
    per_seq = []
    for b, row in enumerate(mask.bool().tolist()):
        ts = [t for t, on in enumerate(row) if on]
        if ts:
            per_seq.append(sum(res.loss[b][t] for t in ts) / len(ts))
    return sum(per_seq) / len(per_seq) if per_seq else 0.0
