"""Masked quantiles of non-negative values, on one process or over a process group, for any number of elements.

Definitions, with the n selected values sorted, x_(1) <= ... <= x_(n); an empty selection gives q = 0 (SAT
then gates nothing):

* ``rule="inverse_cdf"`` (the paper's, Eq. 14): ``q = inf{x >= 0 : F(x) >= level}`` with F the empirical
  CDF, i.e. the lower order statistic ``x_(k)``, ``k = ceil(level * n)``. ``level`` is read as the decimal
  it is written as (0.9 is 9/10, not the binary double just above it), so k is exact: ceil(0.9 * 10) = 9.
* ``rule="linear"`` (torch.quantile's default, not the paper's): ``pos = level * (n - 1)`` (0-based),
  ``q = lerp(x_(floor pos), x_(floor pos + 1), pos - floor pos)``.

Both versions find order statistics by radix selection on the float32 bit pattern, which is monotone
in the value for non-negative floats: the high 16 bits pick a bin, the low 16 bits the value in it.
Unselected entries are counted in a sentinel bin instead of being copied out (no boolean-indexed copy).

* :func:`masked_quantile` (one process): one histogram of the high 16 bits, then an exact selection among the
  few elements of the bin that holds each order statistic; equal, bit for bit, to ``torch.kthvalue`` on
  ``values[mask]``.
* ``method="exact"``: two all-reduces of at most 2 x 65,536 int64 counts; the result equals, bit for bit,
  :func:`masked_quantile` on the concatenation of every rank's selected values.
* ``method="hist"``: one all-reduce of 32,769 counts (the high-16-bit histogram and the number of exact
  zeros); every non-zero value is replaced by the upper edge of its high-16-bit bin and an exact zero stays 0,
  so ``0 <= q_hist - q_exact <= 2^-7 * q_exact`` for either rule (for q_exact == 0 or q_exact >= 1.2e-38): in particular
  q_hist == 0 exactly when q_exact == 0 (SAT then gates nothing, as with the exact threshold).

Non-negativity and finiteness of the selected values are the caller's contract (SAT passes |d|, sanitised).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import torch
import torch.distributed as dist

_HI_BINS = 1 << 15  # non-negative float32: the sign bit is 0, so the high 16 bits are < 2^15
_LO_BINS = 1 << 16
_SENTINEL = _HI_BINS  # the bin unselected entries are counted in (then dropped)


RULES = ("inverse_cdf", "linear")


@functools.lru_cache(maxsize=64)
def _decimal(level: float) -> Fraction:
    """``level`` as the shortest decimal that rounds to it (``repr``): 0.9 -> 9/10."""
    return Fraction(repr(float(level)))


def _order_positions(n: int, level: float, rule: str) -> tuple[int, int, float]:
    """0-based ranks (kf, kc) of the order statistics the quantile of ``n >= 1`` values interpolates, and
    the interpolation weight of kc."""
    if rule == "inverse_cdf":
        a = _decimal(level)
        k = max(-((-a.numerator * n) // a.denominator), 1)  # ceil(level * n), exactly, at least 1
        return k - 1, k - 1, 0.0
    if rule != "linear":
        raise ValueError(f"unknown quantile rule {rule!r} (one of {list(RULES)})")
    pos = level * (n - 1)
    kf = int(math.floor(pos))
    return kf, min(kf + 1, n - 1), pos - kf


def _lerp(xf: torch.Tensor, xc: torch.Tensor, frac: float) -> torch.Tensor:
    return torch.lerp(xf, xc, frac)


def _hi_bins(v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """High 16 bits of the flat float32 ``v`` where ``m`` (int32), ``_SENTINEL`` elsewhere."""
    return torch.where(m, v.view(torch.int32) >> 16, _SENTINEL)


def _masked_quantile_select(values: torch.Tensor, mask: torch.Tensor, level: float, rule: str) -> torch.Tensor:
    """Reference form: ``torch.kthvalue`` on the boolean-indexed selection (any finite values)."""
    x = values.detach().float()[mask.bool()]
    n = x.numel()
    if n == 0:
        return torch.zeros((), dtype=torch.float32, device=values.device)
    kf, kc, frac = _order_positions(n, level, rule)
    xf = torch.kthvalue(x, kf + 1).values
    xc = xf if kc == kf else torch.kthvalue(x, kc + 1).values
    return _lerp(xf, xc, frac)


def masked_quantile(
    values: torch.Tensor, mask: torch.Tensor, level: float, rule: str = "inverse_cdf"
) -> torch.Tensor:
    """The ``level`` quantile (``rule``) of ``values[mask]`` as a 0-d float32 tensor (0 when nothing is selected).

    The same order statistics as ``torch.kthvalue`` on ``values[mask]``, found by radix selection (a selected
    value with the sign bit set, outside the non-negative contract, takes the kthvalue path).
    """
    v = values.detach().float().reshape(-1)
    hi = _hi_bins(v, mask.bool().reshape(-1))
    try:
        hist = torch.bincount(hi, minlength=_SENTINEL + 1)
    except RuntimeError:  # a negative bin: a selected value with the sign bit set
        return _masked_quantile_select(values, mask, level, rule)
    n = hi.numel() - int(hist[_SENTINEL])
    if n == 0:
        return torch.zeros((), dtype=torch.float32, device=values.device)
    kf, kc, frac = _order_positions(n, level, rule)
    cum = torch.cumsum(hist[:_SENTINEL], 0)
    (bf, rf), (bc, rc) = _bin_of_rank(cum, kf, cumulative=True), _bin_of_rank(cum, kc, cumulative=True)
    in_bf = torch.masked_select(v, hi == bf)
    xf = torch.kthvalue(in_bf, rf + 1).values
    if kc == kf:
        xc = xf
    elif bc == bf:
        xc = torch.kthvalue(in_bf, rc + 1).values
    else:  # kc is the first element of the next non-empty bin
        xc = torch.masked_select(v, hi == bc).min()
    return _lerp(xf, xc, frac)


def weighted_quantile(
    values: torch.Tensor, counts: torch.Tensor, level: float, rule: str = "inverse_cdf"
) -> torch.Tensor:
    """The ``level`` quantile (``rule``) of the multiset that holds ``values[i]`` ``counts[i]`` times (0 when
    the counts sum to 0): what :func:`masked_quantile` gives on the expanded multiset, from a sort of the
    distinct entries (SAT-GSPO's Eq. 20 quantile over tokens from one score per response)."""
    keep = counts > 0
    v = values.detach().float().reshape(-1)[keep.reshape(-1)]
    w = counts.reshape(-1)[keep.reshape(-1)].long()
    if v.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=values.device)
    v, order = torch.sort(v)
    cum = torch.cumsum(w[order], 0)
    kf, kc, frac = _order_positions(int(cum[-1]), level, rule)
    ranks = torch.tensor([kf, kc], dtype=cum.dtype, device=cum.device)
    at = torch.searchsorted(cum, ranks, right=True)  # the first entry whose cumulative count exceeds the rank
    return _lerp(v[at[0]], v[at[1]], frac)


def _bin_of_rank(hist: torch.Tensor, rank: int, cumulative: bool = False) -> tuple[int, int]:
    """(bin index, rank inside that bin) of the element of global ``rank`` (0-based) in a histogram
    (``hist`` is already the cumulative sum when ``cumulative``)."""
    cum = hist if cumulative else torch.cumsum(hist, 0)
    b = int(torch.searchsorted(cum, torch.tensor(rank, dtype=cum.dtype, device=cum.device), right=True))
    below = int(cum[b - 1]) if b > 0 else 0
    return b, rank - below


def _float_of_bits(bits: int, device: torch.device) -> torch.Tensor:
    return torch.tensor([bits], dtype=torch.int32, device=device).view(torch.float32)[0]


def global_masked_quantile(
    values: torch.Tensor,
    mask: torch.Tensor,
    level: float,
    group: dist.ProcessGroup | None = None,
    method: str = "exact",
    rule: str = "inverse_cdf",
    counts: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``level`` quantile (``rule``) of the selected values of every rank in ``group`` (same result on all ranks).

    ``counts`` (integers, the shape of ``values``) makes each selected value stand for that many entries (SAT-GSPO's
    Eq. 20: one score per response, counted once per active token). Every rank of the group must call this, also
    with an empty selection (an all-padding micro-batch).
    """
    v = values.detach().float().reshape(-1)
    hi = _hi_bins(v, mask.bool().reshape(-1))
    w = None if counts is None else counts.reshape(-1).double()

    def histogram(x: torch.Tensor, select: torch.Tensor | None, minlength: int) -> torch.Tensor:
        if w is None:
            return torch.bincount(x, minlength=minlength)
        weights = w if select is None else torch.masked_select(w, select)
        return torch.bincount(x, weights=weights, minlength=minlength).round_().long()  # exact below 2^53

    hist = histogram(hi, None, _SENTINEL + 1)
    if method == "hist":
        # The sentinel slot carries the number of selected exact zeros instead (the same single collective):
        # bin 0 also holds the subnormals below 2^-133, and its upper edge is not 0.
        zeros = torch.logical_and(hi == 0, v == 0)
        hist[_SENTINEL] = torch.count_nonzero(zeros) if w is None else w[zeros].sum().round().long()
    else:
        hist = hist[:_HI_BINS]
    dist.all_reduce(hist, group=group)
    n_zero = int(hist[_SENTINEL]) if method == "hist" else 0
    hist = hist[:_HI_BINS]
    n = int(hist.sum())
    if n == 0:
        return torch.zeros((), dtype=torch.float32, device=values.device)
    kf, kc, frac = _order_positions(n, level, rule)
    (bf, rf), (bc, rc) = _bin_of_rank(hist, kf), _bin_of_rank(hist, kc)
    if method == "hist":  # the selected values sorted: the n_zero exact zeros come first
        xf = _float_of_bits(0 if kf < n_zero else (bf + 1) << 16, values.device)
        xc = _float_of_bits(0 if kc < n_zero else (bc + 1) << 16, values.device)
        return _lerp(xf, xc, frac)
    if method != "exact":
        raise ValueError(f"unknown global quantile method {method!r}")
    bits = v.view(torch.int32)
    in_f, in_c = hi == bf, hi == bc
    lo_f = histogram(torch.masked_select(bits, in_f) & 0xFFFF, in_f, _LO_BINS)
    lo_c = lo_f if bc == bf else histogram(torch.masked_select(bits, in_c) & 0xFFFF, in_c, _LO_BINS)
    lo_hist = torch.stack([lo_f, lo_c])
    dist.all_reduce(lo_hist, group=group)
    lf, _ = _bin_of_rank(lo_hist[0], rf)
    lc, _ = _bin_of_rank(lo_hist[1], rc)
    xf = _float_of_bits((bf << 16) | lf, values.device)
    xc = _float_of_bits((bc << 16) | lc, values.device)
    return _lerp(xf, xc, frac)
