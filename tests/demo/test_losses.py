import numpy as np
import pytest
import torch

from sat_ext.demo.losses import LOSSES, SAT_LOSSES, available_losses, default_settings, grpo_advantages, make_loss


def _batch(seed=0, n=16, R=4, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, R, generator=g) * 2
    new = (old + spread * torch.randn(n, R, generator=g)).requires_grad_(True)
    adv = torch.randn(n, 1, generator=g).expand(n, R).clone()
    mask = torch.ones(n, R, dtype=torch.bool)
    mask[::3, 2:] = False
    return old, new, adv, mask


def test_core_backend_has_only_sat_losses():
    assert available_losses("core") == SAT_LOSSES
    with pytest.raises(ValueError, match="needs verl"):
        make_loss("vanilla", default_settings()["vanilla"], "core", 8)
    old, new, adv, mask = _batch()
    for name in SAT_LOSSES:
        loss, metrics = make_loss(name, default_settings()[name], "core", 8)(old, new, adv, mask)
        assert torch.isfinite(loss)
        loss.backward()
        assert "actor/sat/gate_rate" in metrics and "actor/pg_clipfrac" in metrics


def test_core_backend_empty_micro_batch_is_the_shared_rule():
    """An all-padding micro-batch gives the core's zero loss with a zero gradient (sat_ext.core.aggregate), even where
    the padding's loss is infinite (a huge advantage times e^20): a masked mean would give inf * 0 = NaN."""
    old, new, adv, _ = _batch()
    adv = torch.full_like(adv, 3e38)
    with torch.no_grad():
        new += 25.0  # log-ratio clamped at 20: the ratio e^20 times 3e38 overflows
    mask = torch.zeros_like(old, dtype=torch.bool)
    for name in SAT_LOSSES:
        loss, metrics = make_loss(name, default_settings()[name], "core", 8)(old, new, adv, mask)
        assert metrics["actor/sat/empty_microbatch"] == 1.0
        assert loss.item() == 0.0
        (grad,) = torch.autograd.grad(loss, new)
        assert torch.equal(grad, torch.zeros_like(grad))


def test_verl_backend_uses_the_real_registry_and_actor_config():
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig

    from sat_ext.verl.config import SATPolicyLossConfig

    assert available_losses("verl") == LOSSES
    for name in LOSSES:
        fn = make_loss(name, default_settings()[name], "verl", 8)
        assert fn.verl_fn is get_policy_loss_fn(name)
        assert isinstance(fn.config, ActorConfig)
        assert isinstance(fn.config.policy_loss, SATPolicyLossConfig) == (name in SAT_LOSSES)
        old, new, adv, mask = _batch()
        loss, metrics = fn(old, new, adv, mask)
        assert torch.isfinite(loss) and "actor/pg_clipfrac" in metrics


@pytest.mark.parametrize("name", SAT_LOSSES)
def test_core_fallback_matches_verl(name):
    pytest.importorskip("verl")
    s = default_settings()[name]
    old, new, adv, mask = _batch(seed=1)
    lv, mv = make_loss(name, s, "verl", 8)(old, new, adv, mask)
    lc, mc = make_loss(name, s, "core", 8)(old, new, adv, mask)
    torch.testing.assert_close(lv, lc)
    assert mv["actor/sat/gate_rate"] == pytest.approx(mc["actor/sat/gate_rate"])


def test_grpo_advantages_verl_equals_core():
    pytest.importorskip("verl")
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1])
    mask = torch.ones(12, 4, dtype=torch.bool)
    mask[1, 2:] = False
    gid = np.repeat(np.arange(3), 4)
    a_v = grpo_advantages(rewards, mask, gid, "verl")
    a_c = grpo_advantages(rewards, mask, gid, "core")
    torch.testing.assert_close(a_v, a_c)
    assert torch.all(a_v[4:8] == 0)  # all-correct group: no signal
    assert a_v[0, 0] > 0 > a_v[1, 0]
    assert a_v[1, 2:].abs().sum() == 0  # masked tokens carry no advantage
