"""Bad input through verl's registry: an all-padding micro-batch with garbage at its padding, and non-finite
``rollout_is_weights`` at active tokens (verl multiplies the per-token loss by them before agg_loss).

Each case failed before the fix it checks: an empty micro-batch with a NaN weight at padding gave a NaN
loss where verl's ``vanilla`` gives 0, and a NaN/Inf weight at an active token gave a NaN loss with
``nonfinite_frac`` 0, even with ``sat_nonfinite=raise``.
"""

from __future__ import annotations

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig

import sat_ext.verl.config  # noqa: F401
from sat_ext.verl.config import SATPolicyLossConfig

AGG = ("token-mean", "seq-mean-token-mean", "token-sum")
GARBAGE = ("nan_weights", "inf_weights", "huge_advantages", "nan_log_prob")


def _config(loss_mode: str, agg: str, **knobs) -> ActorConfig:
    pl = (
        SATPolicyLossConfig(loss_mode=loss_mode, **knobs)
        if loss_mode.startswith("sat")
        else PolicyLossConfig(loss_mode=loss_mode)
    )
    cfg = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=agg, policy_loss=pl)
    # this rank's micro-batch is empty, the other rank's is not: verl's global totals are positive
    cfg.global_batch_info.update(dp_size=2, batch_num_tokens=17, global_batch_size=3, loss_scale_factor=None)
    return cfg


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 6, generator=g) * 3
    lp = (old + torch.randn(3, 6, generator=g) * 0.1).requires_grad_(True)
    adv = torch.randn(3, 6, generator=g)
    weights = torch.rand(3, 6, generator=g) + 0.5
    return lp, old, adv, weights


def _call(loss_mode, cfg, lp, old, adv, mask, weights):
    return get_policy_loss_fn(loss_mode)(
        old_log_prob=old,
        log_prob=lp,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=cfg.loss_agg_mode,
        config=cfg,
        rollout_is_weights=weights,
    )


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("agg", AGG)
@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
def test_empty_micro_batch_is_zero_loss_and_zero_gradient_whatever_the_padding(loss_mode, agg, garbage):
    lp, old, adv, weights = _batch()
    mask = torch.zeros(3, 6, dtype=torch.bool)
    if garbage == "nan_weights":
        weights[1, 2] = float("nan")
    elif garbage == "inf_weights":
        weights[0, 0] = float("inf")
    elif garbage == "huge_advantages":  # finite inputs whose product -A * r overflows to -inf at padding
        adv = torch.full_like(adv, 3e38)
        with torch.no_grad():
            lp += 25.0
    else:
        with torch.no_grad():
            lp[2, 5] = float("nan")
    cfg = _config(loss_mode, agg)
    loss, metrics = _call(loss_mode, cfg, lp, old, adv, mask, weights)
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert torch.equal(lp.grad, torch.zeros_like(lp))
    assert metrics["actor/sat/empty_microbatch"] == 1.0
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values()), metrics


def test_verl_vanilla_gives_zero_on_the_same_empty_micro_batch():
    """The parity the SAT losses keep: verl's own loss is 0 there (its masked_sum drops NaN at padding)."""
    lp, old, adv, weights = _batch()
    weights[1, 2] = float("nan")
    cfg = _config("vanilla", "token-mean")
    loss, _ = _call("vanilla", cfg, lp, old, adv, torch.zeros(3, 6, dtype=torch.bool), weights)
    assert float(loss.detach()) == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
def test_nonfinite_rollout_is_weight_at_an_active_token_is_masked_and_counted(loss_mode, bad):
    lp, old, adv, weights = _batch(1)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[2, 4:] = False
    weights[0, 3] = bad
    cfg = _config(loss_mode, "token-mean")
    loss, metrics = _call(loss_mode, cfg, lp, old, adv, mask, weights)
    assert torch.isfinite(loss)
    assert metrics["actor/sat/nonfinite_frac"] == pytest.approx(1 / int(mask.sum()))
    loss.backward()
    assert torch.isfinite(lp.grad).all() and float(lp.grad[0, 3]) == 0.0
    # the same as the batch with that token masked out (it is padding for the gate too), up to verl's
    # precomputed token count
    lp2 = lp.detach().clone().requires_grad_(True)
    mask2 = mask.clone()
    mask2[0, 3] = False
    weights2 = weights.clone()
    weights2[0, 3] = 1.0
    loss2, metrics2 = _call(loss_mode, cfg, lp2, old, adv, mask2, weights2)
    assert float(loss.detach()) == pytest.approx(float(loss2.detach()), rel=1e-6, abs=1e-7)
    assert metrics["actor/sat/threshold_q"] == metrics2["actor/sat/threshold_q"]


@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
def test_nonfinite_rollout_is_weight_with_raise_names_the_tensor(loss_mode):
    lp, old, adv, weights = _batch(2)
    weights[1, 1] = float("nan")
    cfg = _config(loss_mode, "token-mean", sat_nonfinite="raise")
    with pytest.raises(ValueError, match="'rollout_is_weights' has 1 non-finite"):
        _call(loss_mode, cfg, lp, old, adv, torch.ones(3, 6, dtype=torch.bool), weights)
    # at padding it is no error: it never reaches the loss
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 1] = False
    loss, metrics = _call(loss_mode, cfg, lp, old, adv, mask, weights)
    assert torch.isfinite(loss) and metrics["actor/sat/nonfinite_frac"] == 0.0
