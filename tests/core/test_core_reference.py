"""The fast path (sat_token_loss, sat_gspo_loss) against the plain-torch reference (sat_ext.core.reference).

Random and adversarial finite inputs (the strategies of _core_ref), every option: the per-token loss is equal
to float32 rounding and the gradient with respect to the log-probs too.
"""

from __future__ import annotations

import pytest
import torch
from _core_ref import batches, configs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sat_ext.core import sat_gspo_loss, sat_token_loss
from sat_ext.core.reference import reference_gspo_loss, reference_token_loss

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _grad(loss_mat, lp, mask):
    """The gradient of the active tokens' loss (padding's loss is the framework's to mask)."""
    (g,) = torch.autograd.grad(torch.where(mask.bool(), loss_mat, 0.0).sum(), lp, allow_unused=True)
    return torch.zeros_like(lp) if g is None else g


def _compare(fast, ref, lp_fast, lp_ref, mask):
    assert fast.shape == ref.shape
    m = mask.bool()
    tol = 1e-6 * (1 + ref.detach().abs())
    assert bool(((fast.detach() - ref.detach()).abs() <= tol)[m].all()), (fast - ref)[m].abs().max()
    gf, gr = _grad(fast, lp_fast, mask), _grad(ref, lp_ref, mask)
    assert bool(((gf - gr).abs() <= 1e-6 * (1 + gr.abs())).all()), (gf - gr).abs().max()


@SETTINGS
@given(batch=batches(), cfg=configs(), weighted=st.booleans())
def test_token_loss_equals_the_reference(batch, cfg, weighted):
    w = torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(1)) * 2 if weighted else None
    lp_f, lp_r = batch.fresh_lp(), batch.fresh_lp()
    fast = sat_token_loss(lp_f, batch.old, batch.adv, batch.mask, cfg, rollout_is_weights=w).loss_mat
    ref = reference_token_loss(lp_r, batch.old, batch.adv, batch.mask, cfg, rollout_is_weights=w)
    _compare(fast, ref, lp_f, lp_r, batch.mask)


@SETTINGS
@given(batch=batches(), cfg=configs(), ratio_form=st.sampled_from(["token", "sequence"]))
def test_gspo_loss_equals_the_reference(batch, cfg, ratio_form):
    lp_f, lp_r = batch.fresh_lp(), batch.fresh_lp()
    fast = sat_gspo_loss(lp_f, batch.old, batch.adv, batch.mask, cfg, ratio_form=ratio_form).loss_mat
    ref = reference_gspo_loss(lp_r, batch.old, batch.adv, batch.mask, cfg, ratio_form=ratio_form)
    _compare(fast, ref, lp_f, lp_r, batch.mask)


@pytest.mark.parametrize("proxy", ["rollout"])
def test_rollout_proxy_equals_the_reference(proxy):
    from sat_ext.core import SATConfig

    g = torch.Generator().manual_seed(3)
    old = -torch.rand(4, 9, generator=g) * 2
    lp = (old + torch.randn(4, 9, generator=g) * 0.1).requires_grad_(True)
    rollout = old + torch.randn(4, 9, generator=g) * 0.2
    adv = torch.randn(4, 9, generator=g)
    mask = torch.rand(4, 9, generator=g) < 0.8
    cfg = SATConfig(proxy=proxy)
    for fast_fn, ref_fn in ((sat_token_loss, reference_token_loss), (sat_gspo_loss, reference_gspo_loss)):
        lp_f, lp_r = lp.detach().clone().requires_grad_(True), lp.detach().clone().requires_grad_(True)
        fast = fast_fn(lp_f, old, adv, mask, cfg, rollout_log_prob=rollout).loss_mat
        ref = ref_fn(lp_r, old, adv, mask, cfg, rollout_log_prob=rollout)
        _compare(fast, ref, lp_f, lp_r, mask)
