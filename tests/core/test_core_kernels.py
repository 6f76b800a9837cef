"""Contraction kernels: hand-worked values, monotonicity in |d|, continuity at q, c_min, endpoint selection."""

from __future__ import annotations

import math

import pytest
import torch
from _core_ref import f32, ref_kernel
from hypothesis import given, settings
from hypothesis import strategies as st

from sat_ext.core import SATConfig, adaptive_trust_region, contraction, sat_token_loss
from sat_ext.core.config import KERNELS
from sat_ext.core.kernels import C_FLOOR

CONTINUOUS = ("hill_shifted", "power", "exp")

# q = 0.1, |d| = 0.2, n = 2: u = (0.2 - 0.1) / 0.1 = 1, |d| / q = 2
#   hill_shifted 1 / (1 + 1^2) = 1/2; hill 1 / (1 + 2^2) = 1/5; power (1/2)^2 = 1/4; exp e^-(1^2) = e^-1
# q = 0.1, |d| = 0.3, n = 2: u = 2, |d| / q = 3
#   hill_shifted 1/5; hill 1/10; power 1/9; exp e^-4
# q = 0.5, |d| = 2.0, n = 3: u = 3, |d| / q = 4
#   hill_shifted 1/28; hill 1/65; power 1/64; exp e^-27
# q = 0.2, |d| = 0.3, n = 0.5: u = 0.5, |d| / q = 1.5
#   hill_shifted 1/(1 + sqrt(0.5)); hill 1/(1 + sqrt(1.5)); power sqrt(2/3); exp e^-sqrt(0.5)
HAND = [
    (0.1, 0.2, 2.0, {"hill_shifted": 1 / 2, "hill": 1 / 5, "power": 1 / 4, "exp": math.exp(-1)}),
    (0.1, 0.3, 2.0, {"hill_shifted": 1 / 5, "hill": 1 / 10, "power": 1 / 9, "exp": math.exp(-4)}),
    (0.5, 2.0, 3.0, {"hill_shifted": 1 / 28, "hill": 1 / 65, "power": 1 / 64, "exp": math.exp(-27)}),
    (
        0.2,
        0.3,
        0.5,
        {
            "hill_shifted": 1 / (1 + 0.5**0.5),
            "hill": 1 / (1 + 1.5**0.5),
            "power": (2 / 3) ** 0.5,
            "exp": math.exp(-(0.5**0.5)),
        },
    ),
]


@pytest.mark.parametrize("q,x,n,expect", HAND)
@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_worked_kernel_values(q, x, n, expect, kernel):
    c = contraction(torch.tensor([x]), torch.tensor(q), kernel, n)
    assert float(c[0]) == pytest.approx(expect[kernel], rel=2e-6, abs=1e-30)
    # through the trust region (q given) and its sign-selected endpoints, radii 0.2 / 0.28
    cfg = SATConfig(kernel=kernel, exponent=n, eps_low=0.2, eps_high=0.28)
    r = adaptive_trust_region(torch.tensor([x, -x, 0.0]), torch.ones(3, dtype=torch.bool), cfg, q=torch.tensor(q))
    assert r.gated.tolist() == [True, True, False]
    assert float(r.hi[0]) == pytest.approx(1 + 0.28 * expect[kernel], abs=2e-7)
    assert float(r.lo[0]) == f32(0.8)
    assert float(r.lo[1]) == pytest.approx(1 - 0.2 * expect[kernel], abs=2e-7)
    assert float(r.hi[1]) == f32(1.28)
    assert float(r.c[2]) == 1.0


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_worked_through_the_loss(kernel):
    """19 tokens with |d| = 0.1 and one with d = +0.2: q = 0.1 (level 0.9 of 20), the 0.2 token alone is gated
    and its upper bound is 1 + 0.2 * K(0.2; 0.1)."""
    lp = torch.full((1, 20), 0.1)
    lp[0, ::2] = -0.1
    lp[0, 7] = 0.2
    out = sat_token_loss(
        lp, torch.zeros(1, 20), torch.ones(1, 20), torch.ones(1, 20, dtype=torch.bool), SATConfig(kernel=kernel)
    )
    assert float(out.region.q) == f32(0.1)
    assert out.region.gated.nonzero().tolist() == [[0, 7]]
    expect = HAND[0][3][kernel]
    assert float(out.region.hi[0, 7]) == pytest.approx(1 + 0.2 * expect, abs=1e-6)
    assert float(out.metrics["contraction_min"]) == pytest.approx(expect, rel=1e-5)
    # r = e^0.2 = 1.2214 > hi: the token is clipped at hi (A = 1 > 0), a loss of -hi
    assert float(out.loss_mat[0, 7]) == pytest.approx(-(1 + 0.2 * expect), abs=1e-6)
    assert float(out.metrics["newly_clipped_frac"]) == 0.0  # e^0.2 > 1.2: PPO clips it too


@settings(max_examples=60, deadline=None)
@given(
    kernel=st.sampled_from(KERNELS),
    n=st.floats(0.25, 6),
    q=st.floats(1e-6, 10),
    c_min=st.sampled_from([0.0, 0.0, 0.05, 0.5]),
)
def test_contraction_monotone_non_increasing_in_abs_d(kernel, n, q, c_min):
    cfg = SATConfig(kernel=kernel, exponent=n, c_min=c_min)
    x = torch.cat([torch.linspace(0, 3 * q, 3001), torch.logspace(math.log10(3 * q), math.log10(max(20, 4 * q)), 500)])
    x = torch.sort(x).values
    for sign in (1.0, -1.0):
        r = adaptive_trust_region(sign * x, torch.ones_like(x, dtype=torch.bool), cfg, q=torch.tensor(q))
        c = r.c
        assert bool((c[1:] <= c[:-1]).all()), "c must be non-increasing in |d|"
        assert bool((c >= c_min).all()) and bool((c <= 1).all())
        assert bool((c[x <= f32(q)] == 1).all())
        # the moving endpoint follows c monotonically; the other stays nominal
        if sign > 0:
            assert bool((r.hi[1:] <= r.hi[:-1]).all()) and bool((r.lo == f32(0.8)).all())
        else:
            assert bool((r.lo[1:] >= r.lo[:-1]).all()) and bool((r.hi == f32(1.2)).all())


@pytest.mark.parametrize("kernel", CONTINUOUS)
@pytest.mark.parametrize("n", [0.5, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("q", [1e-3, 0.1, 2.0])
def test_continuous_at_the_threshold(kernel, n, q):
    """For the continuous kernels c -> 1 as |d| -> q from above: 1 - c(q (1 + delta)) -> 0."""
    prev = None
    for delta in (1e-1, 1e-2, 1e-3, 1e-4):
        x = q * (1 + delta)
        c = float(contraction(torch.tensor([x]), torch.tensor(q), kernel, n)[0])
        gap = 1 - c
        assert 0 <= gap <= 1.5 * max(delta**n, n * delta) + 1e-6, (delta, c)
        assert gap == pytest.approx(1 - ref_kernel(f32(x), f32(q), kernel, n), abs=1e-5)
        if prev is not None:
            assert gap <= prev
        prev = gap
    # just above q: no jump
    x = torch.nextafter(torch.tensor(q, dtype=torch.float32), torch.tensor(100.0))
    c = float(contraction(x[None], torch.tensor(q, dtype=torch.float32), kernel, n)[0])
    assert c > 0.999


@pytest.mark.parametrize("n", [1.0, 2.0, 3.0])
def test_hill_jumps_to_one_half_at_the_threshold(n):
    """The textbook Hill form is discontinuous at q: c = 1 at |d| = q (ungated), -> 1/2 just above."""
    q = torch.tensor(0.1)
    x = torch.tensor([0.1, float(torch.nextafter(torch.tensor(0.1), torch.tensor(1.0)))])
    r = adaptive_trust_region(x, torch.ones(2, dtype=torch.bool), SATConfig(kernel="hill", exponent=n), q=q)
    assert float(r.c[0]) == 1.0 and not bool(r.gated[0])
    assert float(r.c[1]) == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize("kernel", KERNELS)
def test_c_min_floor(kernel):
    cfg = SATConfig(kernel=kernel, c_min=0.3)
    x = torch.tensor([0.05, 0.2, 1.0, 20.0])
    r = adaptive_trust_region(x, torch.ones(4, dtype=torch.bool), cfg, q=torch.tensor(0.1))
    raw = [ref_kernel(float(v), f32(0.1), kernel, 2.0) for v in x[1:]]
    assert float(r.c[0]) == 1.0
    for got, k in zip(r.c[1:].tolist(), raw):
        assert got == pytest.approx(max(k, 0.3), abs=1e-6)
    assert float(r.c[-1]) == pytest.approx(0.3, abs=1e-7)  # the tail sits on the floor
    assert float(r.hi[-1]) == pytest.approx(1 + 0.2 * 0.3, abs=1e-6)


def test_tiny_threshold_extreme_contraction_stays_contained():
    """q tiny against |d| = 20: every kernel underflows towards c = 0; bounds stay in [nominal, 1]."""
    for kernel in KERNELS:
        r = adaptive_trust_region(
            torch.tensor([20.0, -20.0]),
            torch.ones(2, dtype=torch.bool),
            SATConfig(kernel=kernel),
            q=torch.tensor(1e-30),
        )
        # c stays in (0, 1] (Eq. 16): floored at the smallest normal float32 where the kernel underflows
        assert bool(torch.isfinite(r.c).all()) and bool((r.c > 0).all()) and bool((r.c < 1e-6).all())
        assert 1.0 <= float(r.hi[0]) < 1 + 1e-6 and float(r.lo[0]) == f32(0.8)
        assert 1 - 1e-6 < float(r.lo[1]) <= 1.0 and float(r.hi[1]) == f32(1.2)


def test_hill_at_a_subnormal_threshold_is_the_reference():
    """A subnormal q > 0 (Eq. 16 gates |d| > q): the hill kernel divides by q itself, as the reference does."""
    from sat_ext.core.reference import reference_bounds

    q = torch.tensor(1e-39)  # subnormal in float32
    assert 0 < float(q) < torch.finfo(torch.float32).tiny
    d = torch.tensor([2e-39, -3e-39, 5e-40, 1e-38])
    mask = torch.ones(4, dtype=torch.bool)
    cfg = SATConfig()
    r = adaptive_trust_region(d, mask, cfg, q=q)
    _, _, gated, _ = reference_bounds(d, mask, cfg, q=q)
    ref_c = torch.where(gated, 1 / (1 + (d.abs() / q) ** 2), torch.ones_like(d))
    assert torch.equal(r.gated, gated) and gated.tolist() == [True, True, False, True]
    assert torch.allclose(r.c, ref_c, rtol=1e-6, atol=0)  # 1/5, 1/10, 1, 1/101
    assert float(r.c[0]) < 0.5


@pytest.mark.parametrize("kernel", KERNELS)
def test_contraction_never_underflows_to_zero(kernel):
    """The exp form underflows in float32 once ((|d| - q) / q)^2 > ~87 (q = 0.011, |d| = 0.13 gives 117):
    c is then C_FLOOR = 2^-126, not 0, and ``contraction_min`` reports it (before the fix: exactly 0)."""
    x = torch.tensor([0.13, 1.0, 20.0])
    c = contraction(x, torch.tensor(0.011), kernel, 2.0)
    assert bool((c > 0).all()) and bool((c <= 1).all())
    if kernel == "exp":
        assert float(c[0]) == C_FLOOR
    lp = torch.tensor([[0.13] + [0.01] * 9], requires_grad=True)
    out = sat_token_loss(
        lp, torch.zeros(1, 10), torch.ones(1, 10), torch.ones(1, 10, dtype=torch.bool), SATConfig(kernel=kernel)
    )
    assert float(out.metrics["threshold_q"]) == f32(0.01)
    assert 0 < float(out.metrics["contraction_min"]) < 1


@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.999, 5.0), (3e-4, 4e-4), (0.0, 0.0), (0.1, 0.3)])
def test_nominal_bounds_exact_for_any_radii(eps):
    """Ungated entries keep exactly float32(1 - eps_low) / float32(1 + eps_high), whatever the radii."""
    el, eh = eps
    cfg = SATConfig(eps_low=el, eps_high=eh)
    g = torch.Generator().manual_seed(1)
    d = torch.randn(200, generator=g)
    d[:6] = torch.tensor([5.0, -5.0, 8.0, -8.0, 12.0, -12.0])  # a heavy tail: c well below 1
    r = adaptive_trust_region(d, torch.ones(200, dtype=torch.bool), cfg)
    assert bool((r.lo[~r.gated] == f32(1 - el)).all()) and bool((r.hi[~r.gated] == f32(1 + eh)).all())
    assert bool((r.lo >= f32(1 - el)).all()) and bool((r.hi <= f32(1 + eh)).all())
    assert bool((r.lo <= 1).all()) and bool((r.hi >= 1).all())
    if el > 0 and eh > 0:  # strictly inside where c is well below 1 (c ~ 1 may round to the nominal bound)
        strong = r.gated & (r.c <= 0.5)
        assert bool(strong.any())
        assert bool((r.hi[strong & (d > 0)] < f32(1 + eh)).all())
        assert bool((r.lo[strong & (d < 0)] > f32(1 - el)).all())


def test_the_hill_gate_mask_leaves_exactly_one_off_the_gate():
    """``contraction(..., on=gated)`` (the hill form, as the loss's gate calls it): on the gate the value of
    the plain form bit for bit, exactly 1 off it (also where q is inf: q == 0 gates nothing), also underflowing
    entries floored at C_FLOOR; any other kernel refuses the mask."""
    x = torch.tensor([0.0, 0.05, 0.1, 0.2, 3.0, 20.0])
    for q in (torch.tensor(0.1), torch.tensor(1e-20), torch.tensor(math.inf)):
        gated = torch.gt(x, q).float()
        c = contraction(x, q, "hill", 2.0, on=gated)
        plain = contraction(x, q, "hill", 2.0)
        assert torch.equal(c[gated > 0], plain[gated > 0])
        assert c[gated == 0].tolist() == [1.0] * int((gated == 0).sum())
    assert float(contraction(x, torch.tensor(1e-20), "hill", 2.0, on=torch.ones(6))[-1]) == C_FLOOR
    for kernel in CONTINUOUS:
        with pytest.raises(ValueError, match=f"hill kernel only, got kernel '{kernel}'"):
            contraction(x, torch.tensor(0.1), kernel, 2.0, on=torch.ones(6))
