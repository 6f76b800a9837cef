import pytest
import torch

from sat_ext.demo.engines import EmulatedEngine, Mismatch
from sat_ext.demo.model import build_policy, policy_inputs, token_log_probs
from sat_ext.demo.tasks.addition import response_mask

from ._probes import engine_log_probs, router_choices


def _gen(policy, task, prompts, mismatch):
    eng = EmulatedEngine(policy, mismatch, seed=0)
    out = eng.generate(prompts, task.response_len, torch.Generator().manual_seed(2))
    resp, lp = out.responses, out.log_probs
    with torch.no_grad():
        trainer = token_log_probs(policy, prompts, resp)
    return eng, resp, lp, trainer, response_mask(resp)


def test_off_is_identical(setup):
    policy, task, prompts = setup
    eng, resp, lp, trainer, m = _gen(policy, task, prompts, Mismatch())
    assert Mismatch().off
    assert torch.equal(lp, trainer)
    ids = policy_inputs(prompts, resp)
    for a, b in zip(router_choices(policy, ids), router_choices(eng.model, ids)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("engine", ["bf16", "bf16-native"])
def test_bf16_engine_changes_log_probs_by_a_small_nonzero_amount(setup, engine):
    policy, task, prompts = setup
    eng, resp, lp, trainer, m = _gen(policy, task, prompts, Mismatch(engine=engine))
    p = next(eng.model.parameters())
    if engine == "bf16-native":
        assert p.dtype == torch.bfloat16
    else:  # emulated: float32 storage holding bfloat16-representable values
        assert p.dtype == torch.float32 and torch.equal(p, p.to(torch.bfloat16).float())
    assert next(policy.parameters()).dtype == torch.float32
    d = (trainer - lp)[m].abs()
    assert d.max() > 0
    assert 1e-5 < d.mean() < 0.05
    assert lp.dtype == torch.float32


def test_routing_mismatch_changes_router_choices(setup):
    policy, task, prompts = setup
    eng, resp, lp, trainer, m = _gen(policy, task, prompts, Mismatch(route_noise=0.3))
    ids = policy_inputs(prompts, resp)
    flips = [
        (a.sort(-1).values != b.sort(-1).values).any(-1).float().mean().item()
        for a, b in zip(router_choices(policy, ids), router_choices(eng.model, ids))
    ]
    assert all(0 < f < 1 for f in flips)
    d = (trainer - lp)[m].abs()
    assert d.max() > 1e-3
    # The perturbation is fixed per engine: scoring again gives the same log-probs (sampling == scoring router).
    assert torch.equal(engine_log_probs(eng, prompts, resp), lp)


def test_rollout_top_k(setup):
    policy, task, prompts = setup
    eng = EmulatedEngine(policy, Mismatch(rollout_top_k=1))
    ids = policy_inputs(prompts, torch.zeros(prompts.shape[0], task.response_len, dtype=torch.long))
    assert all(c.shape[-1] == 1 for c in router_choices(eng.model, ids))
    assert all(c.shape[-1] == 2 for c in router_choices(policy, ids))


def test_sync_follows_the_trainer(setup):
    policy, task, prompts = setup
    trainer = build_policy(seed=0)
    trainer.load_state_dict(policy.state_dict())
    eng = EmulatedEngine(trainer, Mismatch())
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(0.01 * torch.randn_like(p))
    resp = torch.zeros(prompts.shape[0], task.response_len, dtype=torch.long)
    with torch.no_grad():
        new = token_log_probs(trainer, prompts, resp)
    assert not torch.equal(engine_log_probs(eng, prompts, resp), new)  # stale until the sync
    eng.sync(trainer, version=3)
    assert eng.version == 3
    assert torch.equal(engine_log_probs(eng, prompts, resp), new)
    bf = EmulatedEngine(trainer, Mismatch(engine="bf16"))
    bf.sync(trainer, version=1)
    p = next(bf.model.parameters())
    assert torch.equal(p, p.to(torch.bfloat16).float())  # rounded again after every sync


def test_mismatch_validation():
    with pytest.raises(ValueError, match="engine"):
        Mismatch(engine="fp8")
    with pytest.raises(ValueError, match="route_noise"):
        Mismatch(route_noise=-1)
    with pytest.raises(ValueError, match="rollout_top_k"):
        Mismatch(rollout_top_k=0)
    assert not Mismatch(engine="bf16").off
