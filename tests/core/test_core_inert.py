"""``inert_frac``: SAT cannot act once q reaches the trust region's radius on both sides (docs/sat.md, "When SAT is
inert"). Then every gated token is already outside the nominal interval on its side, no token is newly clipped,
and SAT's gradient is its base loss's bit for bit (the loss value may differ on tokens both clip: the moved
endpoint is another constant)."""

from __future__ import annotations

import math

import torch
from _core_ref import batches, configs, gspo_loss, jacobian_rows, ppo_token_loss
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from sat_ext.core import SATConfig, sat_gspo_loss, sat_token_loss
from sat_ext.core.diagnostics import inert_radius

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STALE = ("floats", "huge", "equal", "normal", "scales")  # |d| large enough for q to pass the radius often


def _run(kind: str, batch, cfg: SATConfig, ratio_form: str):
    lp = batch.fresh_lp()
    if kind == "token":
        return (
            lp,
            sat_token_loss(lp, batch.old, batch.adv, batch.mask, cfg),
            ppo_token_loss(lp, batch.old, batch.adv, cfg),
        )
    out = sat_gspo_loss(lp, batch.old, batch.adv, batch.mask, cfg, ratio_form=ratio_form)
    return lp, out, gspo_loss(lp, batch.old, batch.adv, batch.mask, cfg, ratio_form)


@SETTINGS
@given(
    batch=batches(d_modes=STALE),
    cfg=configs(),
    kind=st.sampled_from(["token", "gspo"]),
    ratio_form=st.sampled_from(["token", "sequence"]),
)
def test_inert_means_the_base_losss_gradient_bit_for_bit(batch, cfg, kind, ratio_form):
    lp, out, base = _run(kind, batch, cfg, ratio_form)
    q, inert = float(out.region.q), float(out.metrics["inert_frac"])
    radius = inert_radius(cfg.eps_low, cfg.eps_high, not (kind == "gspo" and cfg.gspo_gate_level == "token"))
    assert inert == float(q >= radius), (q, inert)
    note(f"q={q} radius={radius} inert={inert} {batch.desc}")
    if not inert:
        return
    mask = batch.mask
    assert float(out.metrics["newly_clipped_frac"]) == 0.0
    idx = [tuple(i) for i in mask.nonzero().tolist()]
    g_sat, g_base = jacobian_rows(out.loss_mat, lp, idx), jacobian_rows(base, lp, idx)
    for key in idx:
        assert torch.equal(g_sat[key], g_base[key]), (key, g_sat[key], g_base[key], batch.desc)


def test_a_stale_batch_is_inert_and_a_fresh_one_is_not():
    """Lag 64 in the miniature: q 1.19 (inert); lag 1: q 0.149 (SAT can act on both sides)."""
    g = torch.Generator().manual_seed(0)
    cfg = SATConfig()  # the paper's: eps 0.2 / 0.2, alpha 0.9
    assert math.isclose(inert_radius(0.2, 0.2), -math.log(0.8) * (1 + 1e-5))
    for scale, want in ((1.5, 1.0), (0.1, 0.0)):
        old = -torch.rand(8, 64, generator=g) * 4
        lp = (old + torch.randn(8, 64, generator=g) * scale).requires_grad_(True)
        out = sat_token_loss(lp, old, torch.randn(8, 64, generator=g), torch.ones(8, 64, dtype=torch.bool), cfg)
        assert float(out.metrics["inert_frac"]) == want, float(out.region.q)


def test_a_radius_below_float32s_range_is_compared_exactly():
    """A radius that float32 rounds to 0 (eps_low 1.5e-145, eps_high 0): q = 0 lies below it, so SAT is not inert."""
    cfg = SATConfig(eps_low=1.51367200417365e-145, eps_high=0.0)
    old = -torch.ones(2, 4)
    out = sat_token_loss(
        old.clone().requires_grad_(True), old, torch.ones(2, 4), torch.ones(2, 4, dtype=torch.bool), cfg
    )
    assert float(out.region.q) == 0.0 < inert_radius(cfg.eps_low, cfg.eps_high)
    assert float(out.metrics["inert_frac"]) == 0.0


def test_a_score_that_is_not_the_clipped_ratios_log_is_never_called_inert():
    """SAT-GSPO gating on token log-ratios clips the sequence ratio: a token past q >= the radius can sit in a
    sequence whose ratio is inside the nominal interval and be newly clipped (the case hypothesis found); with
    ``proxy="rollout"`` the score is against the rollout policy, not the ratio's. Neither is certified inert."""
    old = torch.tensor([[-6.1079, -1.7096, -2.4531, -0.3084], [-4.1762, -2.5659, -4.8590, -4.1861]])
    lp = torch.tensor([[-6.1072, 14.2502, -2.4531, -0.3084], [-8.2250, -2.5659, -4.8587, -4.0884]])
    adv = torch.tensor([[-0.0809, 0.0513, -0.8688, -0.2757], [-1.2717, 0.8816, -0.6640, 0.2639]])
    mask = torch.tensor([[False, False, False, True], [True, False, False, True]])
    cfg = SATConfig(eps_low=0.875, eps_high=0.2, quantile_rule="linear", gspo_gate_level="token")
    out = sat_gspo_loss(lp.clone().requires_grad_(True), old, adv, mask, cfg)
    assert float(out.region.q) >= inert_radius(cfg.eps_low, cfg.eps_high)
    assert float(out.metrics["newly_clipped_frac"]) > 0 and float(out.metrics["inert_frac"]) == 0.0
    rollout_cfg = SATConfig(proxy="rollout")
    far = old - 5.0  # q = 5 against the rollout policy, far past the radius; the ratio against old is 1
    out = sat_token_loss(
        old.clone().requires_grad_(True), old, adv, torch.ones_like(mask), rollout_cfg, rollout_log_prob=far
    )
    assert float(out.region.q) > inert_radius(0.2, 0.2) and float(out.metrics["inert_frac"]) == 0.0
