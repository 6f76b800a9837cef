"""Masked quantiles of non-negative values, on one process or over a process group, without a host sync.

Definitions, with the n selected values sorted, x_(1) <= ... <= x_(n); an empty selection gives q = 0 (SAT
then gates nothing):

* ``rule="inverse_cdf"`` (the paper's, Eq. 14): ``q = inf{x >= 0 : F(x) >= level}`` with F the empirical
  CDF, i.e. the lower order statistic ``x_(k)``, ``k = ceil(level * n)``. ``level`` is read as the decimal
  it is written as (0.9 is 9/10, not the binary double just above it), so k is exact: ceil(0.9 * 10) = 9.
* ``rule="linear"`` (torch.quantile's default, not the paper's): ``pos = level * (n - 1)`` (0-based),
  ``q = lerp(x_(floor pos), x_(floor pos + 1), pos - floor pos)``.

n is a tensor (the number of selected entries is data), so the ranks are tensors and every shape is fixed by
the input's size alone: no ``.item()``, no boolean indexing, no data-dependent shape. Unselected entries are
set to 0, below or level with every selected value, so the order statistic of rank s from the top among the
selected values is the one of rank s from the top among all N entries. That entry is found by

* ``torch.topk`` of the static size ``s_max + 1`` (s_max: the largest rank any n <= N can give, about
  (1 - level) N) and an index at the tensor rank, for N <= :data:`TOPK_MAX_NUMEL` (or a caller's bound);
* one ``torch.kthvalue`` at the static rank s_max from the top, for one rank s and N <= :data:`KTH_MAX_NUMEL`:
  s_max - s of the zeros are first raised to the largest float (there are that many: at least the N - n
  unselected entries, and s_max - s <= N - n), which puts the entry of rank s at rank s_max;
* radix selection above: the float32 bit pattern is monotone in the value for non-negative floats, so a
  histogram of the high 16 bits (scatter-added into a fixed 32,768 bins) picks the bin, a histogram of the
  low 16 bits of that bin's entries the value; equal, bit for bit, to ``torch.kthvalue`` on the selection.

Over a process group (:func:`global_masked_quantile`) the radix histograms are all-reduced:

* ``method="exact"``: two all-reduces of at most 2 x 65,536 int64 counts; the result equals, bit for bit,
  :func:`masked_quantile` on the concatenation of every rank's selected values.
* ``method="hist"``: one all-reduce of 32,770 counts (the high-16-bit histogram, the selected count and the
  number of exact zeros); every non-zero value is replaced by the upper edge of its high-16-bit bin and an
  exact zero stays 0, so ``0 <= q_hist - q_exact <= 2^-7 * q_exact`` for either rule (for q_exact == 0 or
  q_exact >= 1.2e-38): in particular q_hist == 0 exactly when q_exact == 0.

Non-negativity and finiteness of the selected values are the caller's contract (SAT passes |d|, sanitised).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Callable

import torch
import torch.distributed as dist

from .scalars import scalar

RULES = ("inverse_cdf", "linear")
# The selections' ranges, each where SAT's loss is the fastest with it on the CPU (benchmarks/bench_select.py)
TOPK_MAX_NUMEL = 1 << 11
KTH_MAX_NUMEL = 1 << 14
_FLOAT_MAX = torch.finfo(torch.float32).max
_ZERO = scalar(0.0)
_HI_BINS = 1 << 15  # non-negative float32: the sign bit is 0, so the high 16 bits are < 2^15
_LO_BINS = 1 << 16
_INT64_MAX = (1 << 63) - 1

Reduce = Callable[[torch.Tensor], torch.Tensor]


@functools.lru_cache(maxsize=64)
def _tail_fraction(level: float) -> tuple[int, int]:
    """(b, c) with ``level`` = (b - c) / b, read as the shortest decimal that rounds to it (``repr``): 0.9 is
    9/10, so (10, 1)."""
    a = Fraction(repr(float(level)))
    return a.denominator, a.denominator - a.numerator


def _s_max(numel: int, level: float, rule: str) -> int:
    """The largest rank from the top :func:`top_ranks` gives for any n <= numel (the ranks grow with n)."""
    if rule == "inverse_cdf":
        b, c = _tail_fraction(level)
        return c * numel // b
    return max(numel - 1 - int(level * (numel - 1)), 0)


def top_ranks(n: torch.Tensor, level: float, rule: str, n_max: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Ranks from the top (0 = the largest) of the order statistics the quantile of n selected values takes,
    as an int64 tensor (0-d, or two entries for ``linear``), and the weight of the second (``linear``).

    inverse_cdf: s = n - ceil(level n) = floor((1 - level) n), level = a / b exactly; linear: s = n - 1 - k for
    k = floor(pos) and min(k + 1, n - 1). n is a 0-d tensor; ``n_max`` (a bound on n) picks the integer path,
    sync-free unless the level's decimal denominator b reaches 2^61 (about 19 significant digits).
    """
    n = n.long()
    if rule == "inverse_cdf":
        b, c = _tail_fraction(level)
        if c * n_max <= _INT64_MAX:
            return torch.div(n if c == 1 else n * c, b, rounding_mode="floor"), None
        if b < 1 << 61:
            # c n may overflow int64 (a level with many digits): a float64 estimate, off by at most one, corrected
            # with the exact remainder r = c n - t b, which int64 wraps back into range (|r| < 2 b < 2^62)
            t = torch.floor(n.double() * (c / b)).long()
            r = n * c - t * b
            return t - (r < 0).long() + (r >= b).long(), None
        # a level with about 19 significant digits: exact on the host (reads n back; no paper setting does)
        return torch.tensor(c * int(n) // b, device=n.device), None
    if rule != "linear":
        raise ValueError(f"unknown quantile rule {rule!r} (one of {list(RULES)})")
    n = n.reshape(1)
    pos = (n - 1).double() * level
    kf = torch.floor(pos)
    kc = torch.minimum(kf + 1, (n - 1).double())
    s = torch.cat([n - 1 - kf.long(), n - 1 - kc.long()]).clamp_min_(0)  # n = 0: both 0 (all entries are 0)
    return s, (pos - kf).float()


def _interpolate(x: torch.Tensor, frac: torch.Tensor | None) -> torch.Tensor:
    """The quantile from its order statistic(s) ``x``: x (0-d), or lerp(x[0], x[1], frac) (``linear``)."""
    return x if frac is None else torch.lerp(x[0], x[1], frac[0])


def _histogram(index: torch.Tensor, bins: int, weights: torch.Tensor | None) -> torch.Tensor:
    """Counts of ``index`` (int32, each < bins) in ``bins`` int64 slots, or the sums of the float64 ``weights``
    rounded (exact below 2^53): a scatter-add into a fixed-size tensor (``torch.bincount`` sizes its output from
    the data, which on CUDA reads the maximum back to the host)."""
    if weights is None:
        ones = torch.ones(1, dtype=torch.long, device=index.device).expand(index.numel())
        return torch.zeros(bins, dtype=torch.long, device=index.device).index_add_(0, index, ones)
    out = torch.zeros(bins, dtype=torch.float64, device=index.device).index_add_(0, index, weights)
    return out.round_().long()


class _Radix:
    """Radix selection on the flat non-negative float32 ``y`` (every entry counts, ``weights`` times if given),
    over the ranks of a process group when ``reduce`` all-reduces the histograms."""

    def __init__(self, y: torch.Tensor, weights: torch.Tensor | None = None, reduce: Reduce | None = None):
        self.bits = y.view(torch.int32)
        self.hi = self.bits >> 16
        self.weights, self.reduce = weights, reduce or (lambda t: t)

    def high_histogram(self, extra: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The 2^15-bin histogram of the high 16 bits, and ``extra`` counts reduced with it (one collective)."""
        hist = _histogram(self.hi, _HI_BINS, self.weights)
        if extra is None:
            return self.reduce(hist), None
        hist = self.reduce(torch.cat([hist, extra]))
        return hist[:_HI_BINS], hist[_HI_BINS:]

    def select(self, hist: torch.Tensor, s: torch.Tensor, zeros: torch.Tensor | None = None) -> torch.Tensor:
        """The entries of ranks ``s`` from the top; with ``zeros`` (the number of exact zeros) only the upper
        edge of each one's high-16-bit bin, or 0 for a zero (``hist`` method)."""
        shape, s = s.shape, s.reshape(-1)
        cum = hist.cumsum(0)
        rank = cum[-1] - 1 - s  # from the bottom; nothing at all gives -1 -> bin 0, value 0
        b = torch.searchsorted(cum, rank, right=True).clamp_max_(_HI_BINS - 1)
        if zeros is not None:
            return torch.where(rank < zeros, 0.0, ((b + 1) << 16).int().view(torch.float32)).view(shape)
        lo = self.bits & 0xFFFF
        r = rank - (cum[b] - hist[b])  # the rank inside the bin
        hists = []
        for bj in b.unbind():  # the low 16 bits of the bin's entries; every other entry in one slot, dropped
            idx = (self.hi - bj.int()).abs_().clamp_max_(1).bitwise_left_shift_(16).bitwise_or_(lo).clamp_max_(_LO_BINS)
            hists.append(_histogram(idx, _LO_BINS + 1, self.weights)[:_LO_BINS])
        lo_hist = self.reduce(hists[0] if len(hists) == 1 else torch.stack(hists)).view(len(hists), -1)
        low = torch.cat([torch.searchsorted(h.cumsum(0), rj.reshape(1), right=True) for h, rj in zip(lo_hist, r)])
        return ((b << 16) | low.clamp_max_(_LO_BINS - 1)).int().view(torch.float32).view(shape)


def _largest(y: torch.Tensor, s: torch.Tensor, s_max: int, topk_max: int | None = None) -> torch.Tensor:
    """The entries of ranks ``s`` from the top (0 = the largest, each <= s_max) of the flat non-negative
    float32 ``y``: by topk up to ``topk_max`` entries (default :data:`TOPK_MAX_NUMEL`), then by one kthvalue (one
    rank, up to :data:`KTH_MAX_NUMEL`), else by the radix selection."""
    if y.numel() <= (TOPK_MAX_NUMEL if topk_max is None else topk_max):
        return torch.take(torch.topk(y, min(s_max + 1, y.numel())).values, s)  # (a 0-d index would be read back)
    if s.dim() == 0 and y.numel() <= KTH_MAX_NUMEL:
        zero = torch.eq(y, _ZERO, out=torch.empty_like(y))  # 0/1 (a float output is vectorised, a bool one not)
        raised = torch.le(zero.cumsum(0), s_max - s, out=torch.empty_like(y)).mul_(zero)  # the first s_max - s
        return torch.kthvalue(torch.add(y, raised, alpha=_FLOAT_MAX), y.numel() - s_max).values
    radix = _Radix(y)
    hist, _ = radix.high_histogram()
    return radix.select(hist, s)


def quantile_of_zeroed(
    y: torch.Tensor, n: torch.Tensor, level: float, rule: str = "inverse_cdf", topk_max: int | None = None
) -> torch.Tensor:
    """The quantile of the n (a 0-d tensor) selected entries of the flat non-negative float32 ``y`` whose other
    entries are 0 (the loss has ``y = |d| * active`` anyway); ``topk_max`` moves the topk selection's upper
    size (values repeated many times, as SAT-GSPO's broadcast scores, select faster by topk)."""
    if y.numel() == 0:
        return y.new_zeros(())
    s, frac = top_ranks(n, level, rule, y.numel())
    return _interpolate(_largest(y, s, _s_max(y.numel(), level, rule), topk_max), frac)


def _zeroed(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` flat in float32, 0 where ``mask`` is off (whatever they held there); -0.0 becomes +0.0."""
    return torch.where(mask.reshape(-1), values.detach().float().reshape(-1), 0.0).add_(0.0)


def masked_quantile(values: torch.Tensor, mask: torch.Tensor, level: float, rule: str = "inverse_cdf") -> torch.Tensor:
    """The ``level`` quantile (``rule``) of ``values[mask]`` as a 0-d float32 tensor (0 when nothing is selected);
    unselected entries may hold anything (NaN included)."""
    mask = mask.bool()
    return quantile_of_zeroed(_zeroed(values, mask), torch.count_nonzero(mask), level, rule)


_N_MAX = 1 << 40  # the bound on a weighted or global count the integer rank arithmetic assumes (no host read)


def weighted_quantile(
    values: torch.Tensor, counts: torch.Tensor, level: float, rule: str = "inverse_cdf"
) -> torch.Tensor:
    """The ``level`` quantile (``rule``) of the multiset that holds ``values[i]`` ``counts[i]`` times (0 when
    the counts sum to 0): what :func:`masked_quantile` gives on the expanded multiset, from a sort of the
    entries (SAT-GSPO's Eq. 20 quantile over tokens from one score per response); entries with count 0 may
    hold anything."""
    w = counts.reshape(-1).long()
    if w.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=values.device)
    v, order = torch.sort(_zeroed(values, w > 0))
    cum = torch.cumsum(w[order], 0)
    s, frac = top_ranks(cum[-1], level, rule, _N_MAX)
    at = torch.searchsorted(cum, cum[-1] - 1 - s, right=True).clamp_max_(v.numel() - 1)
    return _interpolate(torch.take(v, at), frac)


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
    if method not in ("exact", "hist"):
        raise ValueError(f"unknown global quantile method {method!r}")
    mask = mask.bool()
    y = _zeroed(values, mask)
    if counts is None:  # unselected entries count as zeros, below every selected value
        weights, n, zeros = None, torch.count_nonzero(mask), torch.count_nonzero(y == 0)
    else:  # unselected entries have weight 0
        weights = torch.where(mask.reshape(-1), counts.reshape(-1).double(), 0.0)
        n, zeros = weights.sum().round().long(), torch.where(y == 0, weights, 0.0).sum().round().long()

    def all_reduce(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t, group=group)
        return t

    radix = _Radix(y, weights, all_reduce)
    hist, (n, zeros) = radix.high_histogram(torch.stack([n, zeros]))
    s, frac = top_ranks(n, level, rule, _N_MAX)
    return _interpolate(radix.select(hist, s, zeros if method == "hist" else None), frac)
