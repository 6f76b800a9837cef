"""Threshold q and gate set on hand-worked examples; masked_quantile against a sort, torch.quantile and numpy.

The default rule is the paper's (Eq. 14): q = the ceil(alpha * n)-th smallest |d|. The "linear" rule (not
the paper's) interpolates as torch.quantile does.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from _core_ref import f32, ref_quantile
from hypothesis import given, settings
from hypothesis import strategies as st

from sat_ext.core import SATConfig, adaptive_trust_region, gate_threshold, masked_quantile, sat_token_loss
from sat_ext.core.quantile import weighted_quantile

LINEAR = SATConfig(quantile_rule="linear")

TENTHS = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])


def _gated_set(region) -> set[int]:
    return set(region.gated.reshape(-1).nonzero().reshape(-1).tolist())


def test_hand_worked_tenths_level_090():
    """|d| = 0.1 .. 1.0: ceil(0.9 * 10) = 9, q = the 9th smallest = 0.9 (linear: pos 8.1, q = 0.91): only
    |d| = 1.0 is gated either way."""
    d = TENTHS * torch.tensor([1, -1] * 5)  # signs do not matter for the gate
    mask = torch.ones(10, dtype=torch.bool)
    region = adaptive_trust_region(d, mask, SATConfig())
    assert float(region.q) == f32(0.9)
    assert _gated_set(region) == {9}
    # d[9] = -1.0: only the lower endpoint moves, to 1 - 0.2 / (1 + (1.0 / 0.9)^2) (Eq. 15)
    assert float(region.hi[9]) == f32(1.2)
    assert float(region.lo[9]) == pytest.approx(1 - 0.2 / (1 + (1 / 0.9) ** 2), abs=1e-6)
    linear = adaptive_trust_region(d, mask, LINEAR)
    assert float(linear.q) == pytest.approx(0.91, abs=1e-6) and _gated_set(linear) == {9}


def test_hand_worked_tenths_with_mask():
    """Masking out 1.0 and 0.5 leaves 8 values 0.1 .. 0.9 less 0.5: ceil(0.9 * 8) = 8, q = the largest, 0.9:
    nothing is gated (Eq. 14's gate selects *at most* the top decile). Linear: pos 6.3, q = 0.83, 0.9
    gated. The masked 1.0 is neither counted nor gated."""
    mask = torch.ones(10, dtype=torch.bool)
    mask[9] = False
    mask[4] = False
    region = adaptive_trust_region(TENTHS, mask, SATConfig())
    assert float(region.q) == f32(0.9) and _gated_set(region) == set()
    linear = adaptive_trust_region(TENTHS, mask, LINEAR)
    assert float(linear.q) == pytest.approx(0.83, abs=1e-6) and _gated_set(linear) == {8}
    assert float(linear.hi[9]) == f32(1.2) and float(linear.c[9]) == 1.0


def test_hand_worked_twenty_values():
    """|d| = 0.05 .. 1.0 (20 values): ceil(18) = 18, q = 0.9 (linear: pos 17.1, q = 0.905): {0.95, 1.0} gated."""
    d = torch.arange(1, 21, dtype=torch.float32) * 0.05
    mask = torch.ones(4, 5, dtype=torch.bool)
    region = adaptive_trust_region(d.view(4, 5), mask, SATConfig())
    assert float(region.q) == float(d[17]) and _gated_set(region) == {18, 19}
    linear = adaptive_trust_region(d.view(4, 5), mask, LINEAR)
    assert float(linear.q) == pytest.approx(0.905, abs=1e-6) and _gated_set(linear) == {18, 19}


def test_hand_worked_other_levels():
    mask = torch.ones(10, dtype=torch.bool)
    # level 0.5: ceil(5) = 5, q = 0.5 (linear: pos 4.5, q = 0.55): 0.6 .. 1.0 gated
    r = adaptive_trust_region(TENTHS, mask, SATConfig(quantile=0.5))
    assert float(r.q) == f32(0.5) and _gated_set(r) == {5, 6, 7, 8, 9}
    r = adaptive_trust_region(TENTHS, mask, SATConfig(quantile=0.5, quantile_rule="linear"))
    assert float(r.q) == pytest.approx(0.55, abs=1e-6) and _gated_set(r) == {5, 6, 7, 8, 9}
    # level 0.85: ceil(8.5) = 9, q = 0.9: only 1.0 gated
    r = adaptive_trust_region(TENTHS, mask, SATConfig(quantile=0.85))
    assert float(r.q) == f32(0.9) and _gated_set(r) == {9}
    # level 0.3 (0.3 * 10 is 3.0000000000000004 in binary, 3 as the decimal it is written as): q = 0.3
    r = adaptive_trust_region(TENTHS, mask, SATConfig(quantile=0.3))
    assert float(r.q) == f32(0.3) and _gated_set(r) == set(range(3, 10))
    # level 1/9 (linear: pos = 1.0 exactly, no interpolation): q = 0.2, 0.3 .. 1.0 gated, 0.2 (== q) not
    r = adaptive_trust_region(TENTHS, mask, SATConfig(quantile=1 / 9, quantile_rule="linear"))
    assert float(r.q) == f32(0.2) and _gated_set(r) == set(range(2, 10))
    # level 0.01 on 10 values: ceil(0.1) = 1, the smallest
    assert float(masked_quantile(TENTHS, mask, 0.01)) == f32(0.1)


def test_ties_at_the_threshold_are_not_gated():
    d = torch.tensor([0.3, -0.3, 0.3, 0.3, -0.3, 0.3, 0.1, 0.0, 0.3, 0.3])
    r = adaptive_trust_region(d, torch.ones(10, dtype=torch.bool), SATConfig())
    assert float(r.q) == f32(0.3)
    assert _gated_set(r) == set()
    # all |d| equal
    r = adaptive_trust_region(torch.full((7,), -2.5), torch.ones(7, dtype=torch.bool), SATConfig())
    assert float(r.q) == 2.5 and not bool(r.gated.any())


def test_q_zero_gates_nothing():
    """More than 90% on-policy tokens (d == 0): q = 0 and nothing is gated, not even the stale ones."""
    d = torch.zeros(30)  # pos = 0.9 * 29 = 26.1: sorted[26] = sorted[27] = 0
    d[29] = 5.0
    d[28] = -0.7
    r = adaptive_trust_region(d, torch.ones(30, dtype=torch.bool), SATConfig())
    assert float(r.q) == 0.0 and not bool(r.gated.any())
    assert bool((r.lo == f32(0.8)).all()) and bool((r.hi == f32(1.2)).all())


@pytest.mark.parametrize("shape", [(0,), (4, 0), (3, 5)])
def test_empty_mask_q_zero(shape):
    d = torch.randn(shape)
    mask = torch.zeros(shape, dtype=torch.bool)
    assert float(masked_quantile(d.abs(), mask, 0.9)) == 0.0
    r = adaptive_trust_region(d, mask, SATConfig())
    assert float(r.q) == 0.0 and not bool(r.gated.any())


def test_masked_values_ignored_even_if_huge_or_nan():
    g = torch.Generator().manual_seed(0)
    v = torch.rand(6, 9, generator=g)
    mask = torch.rand(6, 9, generator=g) < 0.5
    q = masked_quantile(v, mask, 0.9)
    for junk in (float("nan"), float("inf"), 1e30, 0.0):
        w = torch.where(mask, v, torch.full_like(v, junk))
        assert torch.equal(masked_quantile(w, mask, 0.9), q), junk
    assert float(q) == pytest.approx(ref_quantile(v[mask].tolist(), 0.9), rel=1e-6)


def test_gate_threshold_and_loss_metrics_agree_with_hand_example():
    """Through the loss: d = log-ratio, the gate rate and threshold metrics match the hand-worked set."""
    lp = (TENTHS * torch.tensor([1, -1] * 5)).view(1, 10)
    old = torch.zeros(1, 10)
    out = sat_token_loss(lp, old, torch.ones(1, 10), torch.ones(1, 10, dtype=torch.bool), SATConfig())
    assert float(out.metrics["threshold_q"]) == f32(0.9)
    assert float(out.metrics["gate_rate"]) == pytest.approx(0.1)
    assert _gated_set(out.region) == {9}
    q = gate_threshold(lp.abs(), torch.ones(1, 10, dtype=torch.bool), SATConfig())
    assert torch.equal(q, out.region.q)


_vals = st.floats(0, 1e4, width=32, allow_subnormal=False)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(1, 40), level=st.floats(0.001, 0.999))
def test_masked_quantile_inverse_cdf_matches_the_definition(data, n, level):
    """The smallest selected x with #{v <= x} >= level * n, bit for bit; numpy's "inverted_cdf" agrees
    where level * n is not within rounding of an integer (numpy multiplies in binary)."""
    values = torch.tensor(data.draw(st.lists(_vals, min_size=n, max_size=n)), dtype=torch.float32)
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if data.draw(st.booleans()):  # duplicates / ties
        values = values[torch.randint(0, n, (n,), generator=torch.Generator().manual_seed(n))]
    q = masked_quantile(values, mask, level)
    assert q.dtype == torch.float32 and q.dim() == 0
    sel = values[mask]
    if sel.numel() == 0:
        assert float(q) == 0.0
        return
    assert float(q) == ref_quantile(sel.tolist(), level)
    prod = level * sel.numel()
    if abs(prod - round(prod)) > 1e-9:
        assert float(q) == float(np.quantile(sel.numpy(), level, method="inverted_cdf"))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(1, 40), level=st.floats(0.001, 0.999))
def test_masked_quantile_linear_matches_torch_quantile(data, n, level):
    values = torch.tensor(data.draw(st.lists(_vals, min_size=n, max_size=n)), dtype=torch.float32)
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if data.draw(st.booleans()):  # duplicates / ties
        values = values[torch.randint(0, n, (n,), generator=torch.Generator().manual_seed(n))]
    q = masked_quantile(values, mask, level, rule="linear")
    assert q.dtype == torch.float32 and q.dim() == 0
    sel = values[mask]
    if sel.numel() == 0:
        assert float(q) == 0.0
        return
    expect = torch.quantile(sel.double(), level, interpolation="linear")
    span = float(sel.max() - sel.min())
    assert abs(float(q) - float(expect)) <= 1e-6 * span + 2 * float(torch.finfo(torch.float32).eps) * float(expect)
    assert float(q) == pytest.approx(ref_quantile(sel.tolist(), level, "linear"), rel=1e-6, abs=1e-30)
    # the same order statistics as torch.kthvalue (bit for bit): exact at the nodes level = k / (n - 1)
    m = sel.numel()
    if m > 1:
        k = int(level * (m - 1))
        node = k / (m - 1)
        assert torch.equal(masked_quantile(values, mask, node, rule="linear"), torch.kthvalue(sel, k + 1).values)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 4000),
    level=st.floats(0.001, 0.999),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 20.0]),
    rule=st.sampled_from(["inverse_cdf", "linear"]),
)
def test_masked_quantile_random_vs_sort(n, level, seed, scale, rule):
    g = torch.Generator().manual_seed(seed)
    values = torch.rand(n, generator=g) * scale
    mask = torch.rand(n, generator=g) < 0.7
    sel = torch.sort(values[mask]).values
    q = masked_quantile(values, mask, level, rule=rule)
    if sel.numel() == 0:
        assert float(q) == 0.0
        return
    if rule == "inverse_cdf":
        k = max(math.ceil(Fraction(repr(level)) * sel.numel()), 1)
        assert torch.equal(q, sel[k - 1])
        return
    pos = level * (sel.numel() - 1)
    k = int(pos)
    k2 = min(k + 1, sel.numel() - 1)
    assert torch.equal(q, torch.lerp(sel[k], sel[k2], pos - k))


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(), n=st.integers(1, 30), level=st.floats(0.001, 0.999), rule=st.sampled_from(["inverse_cdf", "linear"])
)
def test_weighted_quantile_is_the_expanded_masked_quantile(data, n, level, rule):
    """SAT-GSPO's Eq. 20 quantile from one score per response with its length equals the token quantile of
    the broadcast scores, bit for bit."""
    values = torch.tensor(data.draw(st.lists(_vals, min_size=n, max_size=n)), dtype=torch.float32)
    if data.draw(st.booleans()):  # ties
        values = values[torch.randint(0, n, (n,), generator=torch.Generator().manual_seed(n))]
    counts = torch.tensor(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)))
    expanded = values.repeat_interleave(counts)
    expect = masked_quantile(expanded, torch.ones_like(expanded, dtype=torch.bool), level, rule=rule)
    assert torch.equal(weighted_quantile(values, counts, level, rule=rule), expect)


def test_masked_quantile_above_torch_quantile_limit():
    """17M selected elements (torch.quantile refuses more than 16M): exact against a known sorted order
    (the values are p // 2 for a permutation p of 0 .. N-1 and the selection is p < n_sel, so the selected
    values sorted are i // 2) and against numpy's partition on the same data."""
    n_total, n_sel = 17_400_000, 17_000_001
    assert n_sel > 16_777_216  # torch.quantile's limit (2^24 elements)
    perm = torch.arange(n_total, dtype=torch.int64).mul_(7919).remainder_(n_total)  # 7919 prime, coprime to N
    values = torch.div(perm, 2, rounding_mode="floor").float()  # exact in float32 (< 2^24)
    mask = perm < n_sel
    del perm
    # level 0.9: ceil(0.9 * 17,000,001) = 15,300,001: q = sorted[15,300,000] (0-based) = 7,650,000; linear:
    # pos = 0.9 * 17,000,000 = 15,300,000 (integral), the same element
    assert float(masked_quantile(values, mask, 0.9)) == 7_650_000.0
    assert float(masked_quantile(values, mask, 0.9, rule="linear")) == 7_650_000.0
    # an interpolating level against numpy's selection on the same data
    level = 0.123456
    sel = values.numpy()[mask.numpy()]
    assert sel.size == n_sel
    pos = level * (n_sel - 1)
    k = int(pos)
    part = np.partition(sel, [k, k + 1])
    expect = torch.lerp(torch.tensor(part[k]), torch.tensor(part[k + 1]), pos - k)
    assert torch.equal(masked_quantile(values, mask, level, rule="linear"), expect)
    k = math.ceil(Fraction(repr(level)) * n_sel)  # inverse CDF: 2,098,752.12... -> the 2,098,753rd smallest
    assert float(masked_quantile(values, mask, level)) == float(np.partition(sel, k - 1)[k - 1])
