"""Tool observations inside a multi-turn response are invisible to verl's registered ``sat`` / ``sat_gspo`` losses.

verl 0.9.1's tool agent loop gives the observation tokens between two assistant turns ``response_mask`` 0 and a
rollout log-prob of 0.0 (``continuous_token.py`` ``align_response_metadata``; docs/research/agent-loops.md §1),
and in bypass mode that 0.0 becomes the old log-prob. SAT's threshold q is the quantile of ``|log r|`` over the
tokens the loss covers (Eq. 14, docs/sat.md), so an observation token that reached it would move q. Here a batch
``[turn 1 | observation | turn 2]`` must give what the same batch with the observation columns cut out gives:
the same q, gate rate, loss and gradients, and no gradient at the observations; the control leaves the
observations unmasked and q moves.
"""

from __future__ import annotations

import pytest
import torch
from _verl_helpers import actor_config
from verl.trainer.ppo.core_algos import get_policy_loss_fn

TURN1, OBS, TURN2, ROWS = 7, 5, 6, 16
# verl's agg modes whose value does not depend on the response width (seq-mean-token-sum-norm divides by it)
AGG = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean")


def _episode(seed: int = 0) -> dict[str, torch.Tensor]:
    """Rows ``[turn 1 | observation | turn 2 | right padding]`` in verl's padded layout; the observation has mask
    0, old log-prob 0.0 (verl's value for context tokens) and new log-probs far from 0."""
    g = torch.Generator().manual_seed(seed)
    width = TURN1 + OBS + TURN2
    old = -torch.rand(ROWS, width, generator=g) * 2.0 - 0.05
    new = old + torch.randn(ROWS, width, generator=g) * 0.4  # lagged: |log r| spread out, so q and the gate act
    adv = torch.randn(ROWS, 1, generator=g).expand(ROWS, width).clone()
    mask = torch.ones(ROWS, width)
    obs = slice(TURN1, TURN1 + OBS)
    mask[:, obs] = 0.0
    old[:, obs] = 0.0
    new[:, obs] = -4.0 - torch.rand(ROWS, OBS, generator=g)  # what the model assigns the tool's text: anything
    mask[1, width - 2 :] = 0.0  # right padding on one row
    return {"old": old, "new": new, "adv": adv, "mask": mask}


def _cut(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    keep = [i for i in range(TURN1 + OBS + TURN2) if not TURN1 <= i < TURN1 + OBS]
    return {k: v[:, keep].clone() for k, v in batch.items()}


def _loss(loss_mode: str, agg: str, batch: dict[str, torch.Tensor]):
    """verl's registered loss on ``batch``: (loss, metrics, gradient wrt the new log-probs)."""
    cfg = actor_config(loss_mode, extra=(f"actor_rollout_ref.actor.loss_agg_mode={agg}",))
    new = batch["new"].clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn(loss_mode)(
        old_log_prob=batch["old"],
        log_prob=new,
        advantages=batch["adv"],
        response_mask=batch["mask"],
        loss_agg_mode=agg,
        config=cfg,
    )
    (grad,) = torch.autograd.grad(loss, new)
    return loss.detach(), metrics, grad


@pytest.mark.parametrize("agg", AGG)
@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
def test_masked_observations_change_nothing(loss_mode, agg):
    batch = _episode()
    loss, metrics, grad = _loss(loss_mode, agg, batch)
    cut_loss, cut_metrics, cut_grad = _loss(loss_mode, agg, _cut(batch))
    assert metrics["actor/sat/active"] == 1.0
    assert 0.0 < metrics["actor/sat/gate_rate"] < 1.0  # the gate acts on this batch: the comparison means something
    for key in ("actor/sat/threshold_q", "actor/sat/gate_rate", "actor/sat/abs_log_ratio_mean", "actor/sat/d_pi"):
        assert metrics[key] == pytest.approx(cut_metrics[key], rel=1e-6, abs=1e-7), key
    torch.testing.assert_close(loss, cut_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(_cut({"g": grad})["g"], cut_grad, rtol=1e-6, atol=1e-7)
    assert torch.count_nonzero(grad[:, TURN1 : TURN1 + OBS]) == 0


@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
def test_unmasked_observations_move_the_threshold(loss_mode):
    """The control: the same observations left in the loss (mask 1, old log-prob 0.0) change q."""
    batch = _episode()
    leaked = {k: v.clone() for k, v in batch.items()}
    leaked["mask"][:, TURN1 : TURN1 + OBS] = 1.0
    _, metrics, _ = _loss(loss_mode, "token-mean", batch)
    _, leaked_metrics, grad = _loss(loss_mode, "token-mean", leaked)
    assert leaked_metrics["actor/sat/threshold_q"] > 2 * metrics["actor/sat/threshold_q"]
    assert torch.count_nonzero(grad[:, TURN1 : TURN1 + OBS]) > 0
