"""The metric key set is constant (== METRIC_KEYS) whatever the input, every value a finite 0-d tensor; a few
values against their definition."""

from __future__ import annotations

import pytest
import torch
from _core_ref import batches, check_metrics, configs, ppo_token_loss
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sat_ext.core import METRIC_KEYS, SATConfig, sat_gspo_loss, sat_token_loss


def test_metric_keys_are_the_documented_ones():
    assert len(set(METRIC_KEYS)) == len(METRIC_KEYS)
    assert {
        "gate_rate",
        "threshold_q",
        "radius_low_mean",
        "radius_high_mean",
        "contraction_min",
        "abs_log_ratio_mean",
        "newly_clipped_frac",
    } <= set(METRIC_KEYS)  # SPEC §1's diagnostics


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=batches(max_b=3, max_t=5),
    cfg=configs(),
    kind=st.sampled_from(["token", "gspo-token", "gspo-sequence"]),
    poison=st.sampled_from(["none", "nan_active", "inf_padding", "all_nan"]),
)
def test_metric_keys_constant_and_finite(batch, cfg, kind, poison):
    lp, old, adv = batch.lp.detach().clone(), batch.old.clone(), batch.adv.clone()
    mask = batch.mask
    if poison == "nan_active" and bool(mask.any()):
        b, t = mask.nonzero()[0].tolist()
        lp[b, t] = float("nan")
    elif poison == "inf_padding" and bool((~mask).any()):
        b, t = (~mask).nonzero()[0].tolist()
        old[b, t] = float("inf")
    elif poison == "all_nan":
        adv[:] = float("nan")
    if kind == "token":
        out = sat_token_loss(lp, old, adv, mask, cfg)
    else:
        out = sat_gspo_loss(lp, old, adv, mask, cfg, ratio_form=kind.split("-")[1])
    check_metrics(out.metrics)
    assert bool(torch.isfinite(out.loss_mat).all())
    m = out.metrics
    for k in (
        "gate_rate",
        "newly_clipped_frac",
        "nonfinite_frac",
        "log_ratio_clamped_frac",
        "pg_clipfrac",
        "pg_clipfrac_lower",
        "empty_microbatch",
    ):
        assert 0.0 <= float(m[k]) <= 1.0, k
    assert 0.0 <= float(m["contraction_min"]) <= 1.0
    assert 0.0 <= float(m["radius_low_mean"]) <= cfg.eps_low + 1e-6
    assert 0.0 <= float(m["radius_high_mean"]) <= cfg.eps_high + 1e-6
    assert float(m["threshold_q"]) >= 0 and float(m["active"]) == 1.0


def test_metric_values_against_their_definition():
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(6, 200, generator=g) * 3
    l = torch.randn(6, 200, generator=g) * 0.04
    l[0, :3] = torch.tensor([25.0, -30.0, 21.0])  # clamped
    lp = old + l
    adv = torch.randn(6, 200, generator=g)
    mask = torch.arange(200)[None, :] < torch.tensor([200, 175, 150, 125, 100, 75])[:, None]
    cfg = SATConfig(dual_clip=3.0)
    out = sat_token_loss(lp, old, adv, mask, cfg)
    m, n = out.metrics, int(mask.sum())
    d = torch.clamp(lp - old, -20, 20)
    r = out.region
    assert float(m["gate_rate"]) == pytest.approx(int((r.gated & mask).sum()) / n, abs=1e-7)
    assert float(m["threshold_q"]) == float(r.q)
    assert float(m["abs_log_ratio_mean"]) == pytest.approx(float(d.abs()[mask].mean()), rel=1e-5)
    assert float(m["radius_high_mean"]) == pytest.approx(float((r.hi - 1)[mask].mean()), rel=1e-5)
    assert float(m["radius_low_mean"]) == pytest.approx(float((1 - r.lo)[mask].mean()), rel=1e-5)
    assert float(m["contraction_min"]) == pytest.approx(float(r.c[mask].min()), abs=0)
    assert float(m["log_ratio_clamped_frac"]) == pytest.approx(3 / n, abs=1e-7)
    # newly clipped: clipped by SAT's bounds but not by PPO's nominal interval
    ratio = torch.exp(d)
    sat_clip = -adv * torch.clamp(ratio, r.lo, r.hi) > -adv * ratio
    ppo_clip = -adv * torch.clamp(ratio, 0.8, 1.2) > -adv * ratio
    assert float(m["newly_clipped_frac"]) == pytest.approx(int((sat_clip & ~ppo_clip & mask).sum()) / n, abs=1e-7)
    assert float(m["newly_clipped_frac"]) > 0
    assert float(m["pg_clipfrac"]) == pytest.approx(int((sat_clip & mask).sum()) / n, abs=1e-7)
    ppo = ppo_token_loss(lp, old, adv, cfg)
    assert bool((out.loss_mat[mask] >= ppo[mask]).all())
