"""SATPolicyLoss against OpenRLHF 0.11.2's real PolicyLoss (loaded by sat_ext.openrlhf.compat, not mocked).

With c == 1 (c_min = 1) SAT must be PolicyLoss to the last bit, values and gradients, on the same ratio
reference: SAT takes its ratio against ``rollout_log_probs``, so PolicyLoss gets them as ``old_log_probs``.
"""

import itertools

import pytest
import torch

from sat_ext.core import SATConfigError
from sat_ext.openrlhf.compat import openrlhf_loss
from sat_ext.openrlhf.loss import METRIC_NAMES, SATPolicyLoss

PolicyLoss = openrlhf_loss().PolicyLoss


def _batch(seed, B=6, T=24, spread=0.3, wild=True):
    """(log_probs, old, rollout, advantages, mask) with OpenRLHF's conventions plus adversarial entries."""
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(B, T, generator=g) * 3
    old = lp + torch.randn(B, T, generator=g) * 0.05
    rollout = lp + torch.randn(B, T, generator=g) * spread
    adv = torch.randn(B, T, generator=g)
    mask = torch.rand(B, T, generator=g) > 0.25
    mask[0] = False  # an empty sequence
    mask[1, :3] = True
    adv[2, :4] = 0.0  # zero advantage
    rollout[1, 0] = lp[1, 0]  # ratio exactly 1
    if wild:
        rollout[1, 1] = lp[1, 1] - 30.0  # |log-ratio| > 20: clamped
        rollout[1, 2] = lp[1, 2] + 25.0
    lp = lp * mask  # OpenRLHF multiplies the actor's log-probs by the action mask
    return lp, old, rollout, adv, mask


def _with_grad(fn, lp):
    leaf = lp.clone().requires_grad_(True)
    out = fn(leaf)
    out[0].backward()
    return out, leaf.grad


def _dp_totals(mask, dp):
    if not dp:
        return {}
    return {"dp_size": 4, "batch_num_tokens": mask.sum().float() * 3, "global_batch_size": torch.tensor(17.0)}


def _assert_same(a, b, n=3):
    (out_a, grad_a), (out_b, grad_b) = a, b
    for i in range(n):
        assert torch.equal(out_a[i], out_b[i]), (i, out_a[i], out_b[i])
    assert torch.equal(grad_a, grad_b)


@pytest.mark.parametrize(
    "seed,token_level,dp,dual_clip,eps",
    list(itertools.product([0, 1], [True, False], [False, True], [None, 3.0], [(0.2, 0.2), (0.2, 0.28)])),
)
def test_sat_with_c_1_is_openrlhf_ppo(seed, token_level, dp, dual_clip, eps):
    lp, old, rollout, adv, mask = _batch(seed)
    common = dict(clip_eps_low=eps[0], clip_eps_high=eps[1], dual_clip=dual_clip, token_level_loss=token_level)
    ppo = PolicyLoss(policy_loss_type="ppo", **common)
    sat = SATPolicyLoss(policy_loss_type="sat", is_correction_level="token", c_min=1.0, **common)
    totals = _dp_totals(mask, dp)
    want = _with_grad(lambda x: ppo(x, rollout, adv, action_mask=mask, **totals), lp)
    got = _with_grad(lambda x: sat(x, old, adv, action_mask=mask, rollout_log_probs=rollout, **totals), lp)
    _assert_same(got, want)
    assert sat.extra_metrics["sat_gate_rate"] > 0  # the gate fired; c == 1 made it a no-op


@pytest.mark.parametrize(
    "seed,dp,dual_clip,gate_level",
    list(itertools.product([0, 1], [False, True], [None, 3.0], ["sequence", "token"])),
)
def test_sat_gspo_with_c_1_is_openrlhf_gspo(seed, dp, dual_clip, gate_level):
    lp, old, rollout, adv, mask = _batch(seed, spread=2e-3, wild=False)
    common = dict(clip_eps_low=3e-4, clip_eps_high=4e-4, dual_clip=dual_clip, token_level_loss=True)
    sat = SATPolicyLoss(
        policy_loss_type="sat_gspo", is_correction_level="token", c_min=1.0, gspo_gate_level=gate_level, **common
    )
    totals = _dp_totals(mask, dp)
    got = _with_grad(lambda x: sat(x, old, adv, action_mask=mask, rollout_log_probs=rollout, **totals), lp)
    # gspo on the same reference: rollout as old_log_probs, IS correction off.
    gspo = PolicyLoss(policy_loss_type="gspo", **common)
    _assert_same(got, _with_grad(lambda x: gspo(x, rollout, adv, action_mask=mask, **totals), lp))
    # gspo with IS correction on also takes its ratio against the rollout log-probs (its ppo_kl stays on old).
    gspo_is = PolicyLoss(policy_loss_type="gspo", is_correction_level="token", **common)
    _assert_same(
        got, _with_grad(lambda x: gspo_is(x, old, adv, action_mask=mask, rollout_log_probs=rollout, **totals), lp), n=2
    )
    assert not sat.token_level_loss and not gspo.token_level_loss


def test_vllm_kl_is_openrlhfs_and_nothing_is_filtered():
    lp, old, rollout, adv, mask = _batch(3)
    _, _, _, vllm_kl, filtered = SATPolicyLoss(is_correction_level="token")(
        lp, old, adv, action_mask=mask, rollout_log_probs=rollout
    )
    ref = PolicyLoss(is_correction_level="token")(lp, old, adv, action_mask=mask, rollout_log_probs=rollout)
    assert torch.equal(vllm_kl, ref[3])
    assert filtered.item() == 0.0


def test_sat_is_pessimistic_and_contracts_stale_tokens():
    lp, old, rollout, adv, mask = _batch(4, spread=0.1, wild=False)
    sat = SATPolicyLoss(policy_loss_type="sat", is_correction_level="token")
    loss = sat(lp, old, adv, action_mask=mask, rollout_log_probs=rollout)[0]
    ppo = PolicyLoss()(lp, rollout, adv, action_mask=mask)[0]
    assert loss >= ppo
    m = sat.extra_metrics
    assert m["sat_gate_rate"] > 0 and m["sat_newly_clipped_frac"] > 0 and m["sat_contraction_min"] < 1


@pytest.mark.parametrize("loss_type", ["sat", "sat_gspo"])
def test_metric_keys_are_constant_even_for_an_empty_micro_batch(loss_type):
    lp, old, rollout, adv, mask = _batch(5)
    sat = SATPolicyLoss(policy_loss_type=loss_type, is_correction_level="token")
    seen = []
    for m in (mask, torch.zeros_like(mask)):
        sat(lp, old, adv, action_mask=m, rollout_log_probs=rollout)
        seen.append(tuple(sat.extra_metrics))
        assert all(v.dim() == 0 and not v.requires_grad for v in sat.extra_metrics.values())
    assert seen == [METRIC_NAMES, METRIC_NAMES]
    assert sat.extra_metrics["sat_empty_microbatch"] == 1


@pytest.mark.parametrize("token_level", [True, False])
@pytest.mark.parametrize("loss_type", ["sat", "sat_gspo"])
def test_empty_micro_batch_is_zero_loss_and_zero_gradient_whatever_the_padding(loss_type, token_level):
    """OpenRLHF's masked_mean of an all-padding micro-batch multiplies padding by 0: garbage there (here
    advantages whose product with the ratio overflows) must not make the loss NaN."""
    lp, old, rollout, _, mask = _batch(6, wild=False)
    adv = torch.full_like(lp, 3e38)
    rollout = lp - 25.0
    sat = SATPolicyLoss(policy_loss_type=loss_type, is_correction_level="token", token_level_loss=token_level)
    leaf = lp.clone().requires_grad_(True)
    loss, *_ = sat(leaf, old, adv, action_mask=torch.zeros_like(mask), rollout_log_probs=rollout)
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert torch.equal(leaf.grad, torch.zeros_like(leaf))
    assert sat.extra_metrics["sat_empty_microbatch"] == 1


def test_missing_rollout_log_probs_is_a_clear_error():
    lp, old, _, adv, mask = _batch(6)
    with pytest.raises(ValueError, match="is_correction_level"):
        SATPolicyLoss()(lp, old, adv, action_mask=mask)


def test_constructor_rejects_bad_settings():
    with pytest.raises(SATConfigError, match="quantile"):
        SATPolicyLoss(quantile=1.5)
    with pytest.raises(SATConfigError, match="is not a SAT option"):
        SATPolicyLoss(eps_low=0.1)  # the radii are clip_eps_low/high, as for PolicyLoss
    with pytest.raises(ValueError, match="policy_loss_type"):
        SATPolicyLoss(policy_loss_type="ppo")
    assert SATPolicyLoss(clip_eps_low=0.1, clip_eps_high=0.3, dual_clip=2.0, kernel="power").sat_config.to_dict() == {
        **SATPolicyLoss().sat_config.to_dict(),
        "eps_low": 0.1,
        "eps_high": 0.3,
        "dual_clip": 2.0,
        "kernel": "power",
    }


def test_like_copies_openrlhfs_settings():
    base = PolicyLoss(
        clip_eps_low=0.1,
        clip_eps_high=0.3,
        dual_clip=4.0,
        token_level_loss=False,
        policy_loss_type="sat_gspo",
        is_correction_level="seq",
    )
    sat = SATPolicyLoss.like(base, quantile=0.8)
    assert (sat.clip_eps_low, sat.clip_eps_high, sat.dual_clip, sat.policy_loss_type, sat.is_correction_level) == (
        0.1,
        0.3,
        4.0,
        "sat_gspo",
        "seq",
    )
    assert sat.sat_config.quantile == 0.8 and not sat.token_level_loss
