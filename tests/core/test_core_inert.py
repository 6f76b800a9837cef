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
    assert inert == float(q >= inert_radius(cfg.eps_low, cfg.eps_high)), (q, inert)
    note(f"q={q} radius={inert_radius(cfg.eps_low, cfg.eps_high)} inert={inert} {batch.desc}")
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
