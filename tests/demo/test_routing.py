"""R3 on the demo's transformers Qwen3-MoE: capture in the emulated engine, replay in the trainer (Eq. 40)."""

import pytest
import torch

from sat_ext.demo.engines import EmulatedEngine, Mismatch
from sat_ext.demo.model import policy_inputs, token_log_probs
from sat_ext.demo.routing import capture_routing, replay_routing, routers
from sat_ext.demo.tasks.addition import response_mask

from ._probes import router_choices


def _trainer_choices(policy, prompts, responses, routing=None):
    """The experts the trainer's routers pick in its forward, (layers, n, T, k), sorted per token."""
    n = prompts.shape[0]
    with capture_routing(policy, n) as found, torch.no_grad():
        token_log_probs(policy, prompts, responses, routing=routing)
    return torch.stack(found).sort(-1).values


def test_emulated_capture_is_the_trainers_routing_without_mismatch(setup):
    policy, task, prompts = setup
    ro = EmulatedEngine(policy, Mismatch(), seed=0).generate(
        prompts, task.response_len, torch.Generator().manual_seed(2), capture_routing=True
    )
    n, P, R = prompts.shape[0], prompts.shape[1], task.response_len
    assert ro.routing.shape == (len(routers(policy)), n, P + R - 1, policy.config.num_experts_per_tok)
    assert torch.equal(ro.routing.sort(-1).values, _trainer_choices(policy, prompts, ro.responses))
    ref = router_choices(policy, policy_inputs(prompts, ro.responses))
    assert torch.equal(ro.routing.reshape(len(ref), -1, ref[0].shape[-1]), torch.stack(ref))


def test_replay_makes_the_trainer_choose_the_engines_experts(setup):
    policy, task, prompts = setup
    eng = EmulatedEngine(policy, Mismatch(route_noise=0.5), seed=0)
    ro = eng.generate(prompts, task.response_len, torch.Generator().manual_seed(2), capture_routing=True)
    own = _trainer_choices(policy, prompts, ro.responses)
    engine = ro.routing.sort(-1).values
    differs = ~(own == engine).all(-1)
    assert differs.float().mean() > 0.01, "the perturbed engine should route some tokens differently"
    replayed = _trainer_choices(policy, prompts, ro.responses, routing=ro.routing)
    assert torch.equal(replayed, engine)  # every token, every layer
    # Replay changes the trainer's log-probs exactly where its own choice differed somewhere upstream.
    with torch.no_grad():
        plain = token_log_probs(policy, prompts, ro.responses)
        r3 = token_log_probs(policy, prompts, ro.responses, routing=ro.routing)
    m = response_mask(ro.responses)
    assert ((plain - r3).abs() * m).max() > 1e-4
    # R3 brings the trainer closer to the engine (the routing mismatch is gone, the rest stays).
    assert ((r3 - ro.log_probs).abs() * m).sum() < ((plain - ro.log_probs).abs() * m).sum()


def test_replay_weights_are_the_live_softmax_over_the_replayed_experts(setup):
    policy, task, prompts = setup
    r = routers(policy)[0]
    h = torch.randn(5, r.hidden_dim, generator=torch.Generator().manual_seed(0))
    chosen = torch.tensor([[0, 1], [2, 3], [3, 0], [1, 2], [0, 3]])
    routing = torch.stack([chosen.view(1, 5, 2)] * len(routers(policy)))
    with replay_routing(policy, routing):
        logits, weights, idx = r(h)
    assert torch.equal(idx, chosen)
    z = (h @ r.weight.T).gather(-1, chosen)
    assert torch.allclose(weights, torch.softmax(z, -1), atol=1e-6)  # Eq. 40
    h.requires_grad_(True)
    with replay_routing(policy, routing):
        r(h)[1][:, 0].sum().backward()
    assert h.grad is not None and h.grad.abs().sum() > 0  # gradients flow through the live router
    assert "forward" not in r.__dict__  # the router is restored


def test_replay_refuses_a_wrong_shape(setup):
    policy, _task, _prompts = setup
    with pytest.raises(ValueError, match="layers"):
        with replay_routing(policy, torch.zeros(1, 1, 3, 2, dtype=torch.long)):
            pass
    with pytest.raises(ValueError, match="top-3"):
        with replay_routing(policy, torch.zeros(len(routers(policy)), 1, 3, 3, dtype=torch.long)):
            pass
