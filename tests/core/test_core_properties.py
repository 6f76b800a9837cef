"""The four properties of SPEC §1 (and the sign-selected endpoint), on random and adversarial inputs.

For ``sat_token_loss`` and ``sat_gspo_loss`` (both ratio forms, both gate levels), every kernel, with and
without c_min and dual clip:

1. containment: [lo, hi] inside [1 - eps_low, 1 + eps_high] and contains 1;
2. pointwise pessimism: per token, SAT loss >= PPO loss (the same surrogate with the nominal interval);
3. ungated tokens and pull-back updates (A > 0 with d < 0, A < 0 with d > 0) have PPO's exact value and
   gradient (one torch.autograd.grad per token, compared bit for bit);
4. c == 1 everywhere (c_min = 1) recovers PPO / GSPO exactly;

plus: only the sign-matched endpoint moves, and the core agrees with the per-token Python reference of
SPEC §1 (threshold, gate set, contraction factor, bounds, loss value).
"""

from __future__ import annotations

import math

import pytest
import torch
from _core_ref import (
    batches,
    check_metrics,
    configs,
    f32,
    gspo_loss,
    jacobian_rows,
    ppo_token_loss,
    ref_sat_gspo,
    ref_sat_token,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sat_ext.core import SATConfig, sat_gspo_loss, sat_token_loss

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SETTINGS_C1 = settings(SETTINGS, max_examples=60)


def _run(kind: str, batch, cfg: SATConfig, ratio_form: str | None):
    lp = batch.fresh_lp()
    if kind == "token":
        out = sat_token_loss(lp, batch.old, batch.adv, batch.mask, cfg)
        ppo = ppo_token_loss(lp, batch.old, batch.adv, cfg)
        ref = ref_sat_token(lp, batch.old, batch.adv, batch.mask, cfg)
    else:
        out = sat_gspo_loss(lp, batch.old, batch.adv, batch.mask, cfg, ratio_form=ratio_form)
        ppo = gspo_loss(lp, batch.old, batch.adv, batch.mask, cfg, ratio_form)
        ref = ref_sat_gspo(lp, batch.old, batch.adv, batch.mask, cfg, ratio_form)
    return lp, out, ppo, ref


def _token_bounds(kind: str, cfg: SATConfig, out, shape):
    """The (lo, hi, gated) that apply to each token, shape (B, T)."""
    r = out.region
    if kind == "gspo" and cfg.gspo_gate_level == "sequence":
        assert r.lo.shape == (shape[0],)
        return (
            r.lo[:, None].expand(shape),
            r.hi[:, None].expand(shape),
            r.gated[:, None].expand(shape),
            r.c[:, None].expand(shape),
        )
    assert r.lo.shape == shape
    return r.lo, r.hi, r.gated, r.c


def _check_all(kind: str, batch, cfg: SATConfig, ratio_form: str | None = None) -> None:
    lp, out, ppo, ref = _run(kind, batch, cfg, ratio_form)
    B, T = batch.mask.shape
    mask = batch.mask
    check_metrics(out.metrics)
    assert out.loss_mat.shape == (B, T)
    assert bool(torch.isfinite(out.loss_mat).all())
    lo, hi, gated, c = _token_bounds(kind, cfg, out, (B, T))
    lo_nom, hi_nom = f32(1.0 - cfg.eps_low), f32(1.0 + cfg.eps_high)

    # (1) containment, on every entry of the region (padding included)
    for t in (out.region.lo, out.region.hi):
        assert t.dtype == torch.float32 and bool(torch.isfinite(t).all())
    assert bool((out.region.lo >= lo_nom).all()) and bool((out.region.lo <= 1.0).all())
    assert bool((out.region.hi <= hi_nom).all()) and bool((out.region.hi >= 1.0).all())
    assert bool((out.region.c >= 0).all()) and bool((out.region.c <= 1).all())

    # only the sign-matched endpoint moves; ungated entries keep the nominal bounds exactly
    d = torch.tensor(ref.gate_d, dtype=torch.float32).view(B, T)
    assert bool((lo[d >= 0] == lo_nom).all()), "lo moved for d >= 0"
    assert bool((hi[d <= 0] == hi_nom).all()), "hi moved for d <= 0"
    assert bool((lo[~gated] == lo_nom).all()) and bool((hi[~gated] == hi_nom).all())
    assert bool((c[~gated] == 1).all())
    assert not bool((gated & (d == 0)).any())
    assert not bool((out.region.gated & ~(mask if out.region.gated.shape == mask.shape else mask.any(-1))).any())

    # the per-token Python reference of SPEC §1
    q = float(out.region.q)
    assert math.isclose(q, ref.q, rel_tol=1e-6, abs_tol=1e-37), (q, ref.q)
    for b in range(B):
        for t in range(T):
            rb = ref.bounds[b][t]
            if not bool(mask[b, t]):
                continue
            if not ref.boundary[b][t]:
                assert bool(gated[b, t]) == rb.gated, (b, t, ref.gate_d[b][t], q, ref.q)
                assert math.isclose(float(c[b, t]), rb.c, abs_tol=2e-5), (b, t, float(c[b, t]), rb.c)
                assert math.isclose(float(lo[b, t]), rb.lo, abs_tol=1e-5), (b, t, float(lo[b, t]), rb.lo)
                assert math.isclose(float(hi[b, t]), rb.hi, abs_tol=1e-5), (b, t, float(hi[b, t]), rb.hi)
                a, v = float(batch.adv[b, t]), float(out.loss_mat[b, t].detach())
                r = float(out.ratio[b, t].detach())
                tol = 2e-5 * abs(a) * (max(r, 1.0) + (cfg.dual_clip or 0.0)) + 1e-6
                assert math.isclose(v, ref.loss[b][t], abs_tol=tol), (b, t, v, ref.loss[b][t])

    # (2) pointwise pessimism, exact (float32 comparison, no tolerance)
    assert bool((out.loss_mat[mask] >= ppo[mask]).all()), (out.loss_mat, ppo)

    # (3) off the newly intercepted outward band: PPO's exact value and gradient
    a = batch.adv
    pull_back = ((a > 0) & (d < 0)) | ((a < 0) & (d > 0))
    same = mask & (~gated | pull_back | (a == 0))
    idx = [(b, t) for b in range(B) for t in range(T) if bool(same[b, t])]
    assert torch.equal(out.loss_mat[same], ppo[same]), (out.loss_mat, ppo, same)
    g_sat = jacobian_rows(out.loss_mat, lp, idx)
    g_ppo = jacobian_rows(ppo, lp, idx)
    for key in idx:
        assert torch.equal(g_sat[key], g_ppo[key]), (key, g_sat[key], g_ppo[key], batch.desc)

    # the gradient is finite everywhere
    (g_all,) = torch.autograd.grad(out.loss_mat[mask].sum(), lp, allow_unused=True)
    assert g_all is None or bool(torch.isfinite(g_all).all())


@SETTINGS
@given(batch=batches(), cfg=configs())
def test_token_loss_properties(batch, cfg):
    _check_all("token", batch, cfg)


@SETTINGS
@given(batch=batches(), cfg=configs(), ratio_form=st.sampled_from(["token", "sequence"]))
def test_gspo_loss_properties(batch, cfg, ratio_form):
    _check_all("gspo", batch, cfg, ratio_form)


@SETTINGS_C1
@given(batch=batches(), cfg=configs(c_min=1.0))
def test_token_loss_c_one_is_ppo(batch, cfg):
    """(4) c_min = 1: c == 1 everywhere, so value and gradient are PPO's at every active token."""
    lp, out, ppo, _ = _run("token", batch, cfg, None)
    mask = batch.mask
    assert bool((out.region.c == 1).all())
    assert torch.equal(out.loss_mat[mask], ppo[mask])
    idx = [tuple(i) for i in mask.nonzero().tolist()]
    g_sat, g_ppo = jacobian_rows(out.loss_mat, lp, idx), jacobian_rows(ppo, lp, idx)
    for key in idx:
        assert torch.equal(g_sat[key], g_ppo[key]), key
    check_metrics(out.metrics)
    assert float(out.metrics["newly_clipped_frac"]) == 0.0


@SETTINGS_C1
@given(batch=batches(), cfg=configs(c_min=1.0), ratio_form=st.sampled_from(["token", "sequence"]))
def test_gspo_loss_c_one_is_gspo(batch, cfg, ratio_form):
    lp, out, ppo, _ = _run("gspo", batch, cfg, ratio_form)
    mask = batch.mask
    assert bool((out.region.c == 1).all())
    assert torch.equal(out.loss_mat[mask], ppo[mask])
    idx = [tuple(i) for i in mask.nonzero().tolist()]
    g_sat, g_ppo = jacobian_rows(out.loss_mat, lp, idx), jacobian_rows(ppo, lp, idx)
    for key in idx:
        assert torch.equal(g_sat[key], g_ppo[key]), key
    assert float(out.metrics["newly_clipped_frac"]) == 0.0


def test_pessimism_is_strict_somewhere():
    """The properties are not vacuous: on a stale batch SAT clips tokens PPO leaves alone (loss > PPO's)."""
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 64, generator=g) * 3
    lp = (old + torch.randn(8, 64, generator=g) * 0.06).requires_grad_(True)
    adv = torch.randn(8, 64, generator=g)
    mask = torch.ones(8, 64, dtype=torch.bool)
    cfg = SATConfig(dual_clip=None)
    out = sat_token_loss(lp, old, adv, mask, cfg)
    ppo = ppo_token_loss(lp, old, adv, cfg)
    assert bool((out.loss_mat > ppo).any())
    assert float(out.metrics["newly_clipped_frac"]) > 0
    # level 0.9 of 512 values: q is the ceil(460.8) = 461st smallest, 51 above it
    assert float(out.metrics["gate_rate"]) == 51 / 512


# ------------------------------------------------------------------------------------------------------
# An adversarial pull-back token: the ratio one float32 step below the contracted lower endpoint
# ------------------------------------------------------------------------------------------------------


def _pull_back_tie_case():
    """A > 0, d < 0 gated (lo contracted), r < lo but -A*r == -A*lo in float32.

    19 tokens with |d| = 0.01 fix q = 0.01 (level 0.9 of 20 values); the 20th token's d = -x is searched
    near the crossing exp(-x) = 1 - 0.2 * c(x) so that r lies just below lo.
    """
    cfg = SATConfig(dual_clip=None)
    q = torch.tensor(0.01)
    from sat_ext.core import adaptive_trust_region

    xs = torch.linspace(0.02, 0.06, 400001)
    reg = adaptive_trust_region(-xs, torch.ones_like(xs, dtype=torch.bool), cfg, q=q)
    diff = torch.exp(-xs) - reg.lo
    i = int((diff[:-1].sign() != diff[1:].sign()).nonzero()[0])
    cand = [xs[i]]
    for _ in range(4000):
        cand.append(torch.nextafter(cand[-1], torch.tensor(1.0)))
    lower = [xs[i]]
    for _ in range(4000):
        lower.append(torch.nextafter(lower[-1], torch.tensor(0.0)))
    X = torch.stack(cand + lower)
    reg = adaptive_trust_region(-X, torch.ones_like(X, dtype=torch.bool), cfg, q=q)
    r = torch.exp(-X)
    for A in [1.0 + k / 7 for k in range(1, 80)]:
        tie = (r < reg.lo) & ((-A * r) == (-A * reg.lo))
        if bool(tie.any()):
            return cfg, float(X[tie.nonzero()[0, 0]]), A
    raise AssertionError("no tie found")


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_pull_back_gradient_exact_at_float_tie(dual_clip):
    cfg0, x, A = _pull_back_tie_case()
    cfg = SATConfig(dual_clip=dual_clip)
    n = 20
    lp = torch.full((1, n), 0.01)
    lp[0, 0] = -x
    lp.requires_grad_(True)
    old = torch.zeros(1, n)
    adv = torch.full((1, n), A)
    mask = torch.ones(1, n, dtype=torch.bool)
    out = sat_token_loss(lp, old, adv, mask, cfg)
    assert bool(out.region.gated[0, 0]) and float(out.region.lo[0, 0]) > f32(0.8)
    assert float(out.ratio[0, 0].detach()) < float(out.region.lo[0, 0])  # r just below the contracted lo
    ppo = ppo_token_loss(lp, old, adv, cfg)
    assert torch.equal(out.loss_mat[0, 0], ppo[0, 0])
    (g_sat,) = torch.autograd.grad(out.loss_mat[0, 0], lp, retain_graph=True)
    (g_ppo,) = torch.autograd.grad(ppo[0, 0], lp)
    assert torch.equal(g_sat, g_ppo), (g_sat[0, 0], g_ppo[0, 0])


def test_pull_back_gradient_exact_at_float_tie_negative_advantage():
    """The mirror case: A < 0, d > 0 gated (hi contracted), r just above hi with -A*r == -A*hi."""
    cfg = SATConfig(dual_clip=None)
    from sat_ext.core import adaptive_trust_region

    q = torch.tensor(0.01)
    xs = torch.linspace(0.02, 0.06, 400001)
    reg = adaptive_trust_region(xs, torch.ones_like(xs, dtype=torch.bool), cfg, q=q)
    diff = torch.exp(xs) - reg.hi
    i = int((diff[:-1].sign() != diff[1:].sign()).nonzero()[0])
    X = [xs[i]]
    for _ in range(4000):
        X.append(torch.nextafter(X[-1], torch.tensor(1.0)))
    lower = [xs[i]]
    for _ in range(4000):
        lower.append(torch.nextafter(lower[-1], torch.tensor(0.0)))
    X = torch.stack(X + lower)
    reg = adaptive_trust_region(X, torch.ones_like(X, dtype=torch.bool), cfg, q=q)
    r = torch.exp(X)
    above = r > reg.hi
    r, hi = r[above], reg.hi[above]
    # |A| * r and |A| * hi differ by less than one float32 step only when the product has just crossed a power
    # of two: search |A| just below 2 and 4 (on the pairs with r one step above hi).
    A = -torch.cat([torch.linspace(1.9, 2.0, 20001)[:-1], torch.linspace(3.8, 4.0, 20001)[:-1]])
    tie = (r[None, :] * -A[:, None]) == (hi[None, :] * -A[:, None])
    found = None
    if bool(tie.any()):
        ia, ix = (int(v) for v in tie.nonzero()[0])
        found = (float(X[above][ix]), float(A[ia]))
    assert found is not None
    x, A = found
    n = 20
    lp = torch.full((1, n), 0.01)
    lp[0, 0] = x
    lp.requires_grad_(True)
    old = torch.zeros(1, n)
    adv = torch.full((1, n), A)
    mask = torch.ones(1, n, dtype=torch.bool)
    out = sat_token_loss(lp, old, adv, mask, cfg)
    assert bool(out.region.gated[0, 0]) and float(out.ratio[0, 0].detach()) > float(out.region.hi[0, 0])
    ppo = ppo_token_loss(lp, old, adv, cfg)
    assert torch.equal(out.loss_mat[0, 0], ppo[0, 0])
    (g_sat,) = torch.autograd.grad(out.loss_mat[0, 0], lp, retain_graph=True)
    (g_ppo,) = torch.autograd.grad(ppo[0, 0], lp)
    assert torch.equal(g_sat, g_ppo), (g_sat[0, 0], g_ppo[0, 0])
