"""Bypass mode (research/verl-0.9.1.md §2.3): the setup under which SAT's proxy is the paper's.

With ``algorithm.rollout_correction.bypass_mode=true`` and ``rollout.calculate_log_probs=true``, the legacy
driver (``RayPPOTrainer.fit``) calls ``apply_bypass_mode``, which sets ``old_log_probs = rollout_log_probs`` and
rewrites ``loss_mode`` to ``bypass_mode`` in the *driver's* DictConfig only. The workers got their copy of
``config.actor_rollout_ref`` when they were created (Ray pickles constructor args) and built their ActorConfig
from it, so they keep ``loss_mode=sat``: SAT then runs with d = sg(logp - rollout_logp). Here: verl's own
``apply_bypass_mode`` on a real DataProto, the workers' pickled config copy, verl's ``_update_actor`` conversion
and verl's ``ppo_loss``. (The V1 trainer skips ``apply_bypass_mode`` and only copies the field, same result.)
"""

from __future__ import annotations

import pickle

import pytest
import torch
from _verl_helpers import compose, leaves, make_padded_batch, model_log_probs, padded_log_prob, sat_overrides, tag_rows
from verl import DataProto
from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding

from sat_ext.verl.config import SATPolicyLossConfig

BYPASS = ["algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.rollout.calculate_log_probs=true"]


@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
def test_bypass_mode_feeds_rollout_log_probs_to_sat(loss_mode):
    cfg = compose(sat_overrides(loss_mode, quantile=0.8) + BYPASS)
    assert cfg.algorithm.rollout_correction.bypass_mode is True
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    # init_workers(): the workers receive config.actor_rollout_ref through Ray (a pickled copy) ...
    worker_cfg = pickle.loads(pickle.dumps(cfg.actor_rollout_ref))

    # ... then fit() runs verl's driver-side bypass on the rollout batch (no old_log_probs recomputation).
    batch = make_padded_batch(bs=6, seed=9, log_ratio_scale=0.4, with_rollout_log_probs=True)
    tag_rows(batch)
    tensors = {k: v for k, v in batch.padded.items() if k != "old_log_probs"}
    data = DataProto.from_dict(tensors=tensors)
    apply_bypass_mode(
        batch=data,
        rollout_corr_config=cfg.algorithm.get("rollout_correction", None),
        policy_loss_config=cfg.actor_rollout_ref.actor.policy_loss,
    )
    rollout = batch.padded["rollout_log_probs"]
    assert torch.equal(data.batch["old_log_probs"], rollout)
    assert data.batch["old_log_probs"].data_ptr() == data.batch["rollout_log_probs"].data_ptr()
    # The rewrite lands in the driver's DictConfig only (if verl ever propagates it, actor/sat/active vanishes).
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "bypass_mode"
    assert worker_cfg.actor.policy_loss.loss_mode == loss_mode

    # The worker's ActorConfig (engine_workers.py:593) still selects SAT.
    actor = omega_conf_to_dataclass(worker_cfg.actor)
    assert isinstance(actor.policy_loss, SATPolicyLossConfig) and actor.policy_loss.loss_mode == loss_mode

    # _update_actor: DataProto -> TensorDict -> no-padding, plus the engine's global batch info.
    n_tok = int(batch.padded["response_mask"].sum())
    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=n_tok, global_batch_size=6)
    theta, junk = leaves(batch)
    loss, metrics = ppo_loss(actor, {"log_probs": model_log_probs(td, theta, junk)}, td)
    loss.backward()
    assert torch.isfinite(theta.grad).all()

    m = {k: v.values[0] for k, v in metrics.items()}
    assert m["actor/sat/active"] == 1.0
    mask = batch.padded["response_mask"].bool()
    logp = padded_log_prob(batch, theta.detach())
    d = (logp - rollout).float()
    assert (d[mask].abs() > 0).all()  # the current policy differs from the rollout policy
    ppo_kl = (-d * mask).sum() / mask.sum()
    assert m["actor/ppo_kl"] == pytest.approx(ppo_kl.item(), rel=1e-6)
    # d_pi (Eq. 52): mean |logp - rollout_logp| over the active tokens, for both losses
    d_pi = (d.abs() * mask).sum() / mask.sum()
    assert m["actor/sat/d_pi"] == pytest.approx(d_pi.item(), rel=1e-6)
    if loss_mode == "sat":
        # d is exactly sg(logp - rollout_logp): its mean |.| over the active tokens.
        assert m["actor/sat/abs_log_ratio_mean"] == pytest.approx(d_pi.item(), rel=1e-6)
    else:
        # Eq. 20: the sequence log-ratio on every active token of its response (long responses weigh more)
        seq = (d * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        expect = (seq.abs()[:, None] * mask).sum() / mask.sum()
        assert m["actor/sat/abs_log_ratio_mean"] == pytest.approx(expect.item(), rel=1e-6)


def test_bypass_requires_rollout_log_probs():
    """verl's own guard: with calculate_log_probs=false there is nothing to bypass with."""
    cfg = compose(sat_overrides("sat") + ["algorithm.rollout_correction.bypass_mode=true"])
    batch = make_padded_batch(bs=2, seed=1)
    data = DataProto.from_dict(tensors={k: v for k, v in batch.padded.items() if k != "old_log_probs"})
    with pytest.raises(ValueError, match="calculate_log_probs"):
        apply_bypass_mode(
            batch=data,
            rollout_corr_config=cfg.algorithm.rollout_correction,
            policy_loss_config=cfg.actor_rollout_ref.actor.policy_loss,
        )
