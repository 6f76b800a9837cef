"""``agent-bounded1``'s agent offline: the agent file loaded by OpenRLHF's own loader, OpenRLHF's real
``MultiTurnAgentExecutor`` running its episodes against a stand-in vLLM actor that returns scripted tokens and
log-probs, OpenRLHF's real sample assembly (``SamplesGenerator._process_response_into_experience``) turning an
episode into what the trainer gets, and sat_ext's SAT loss on that sample with and without its observation tokens.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("vllm")

import torch  # noqa: E402
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator  # noqa: E402
from openrlhf.trainer.ray.vllm_engine import _load_agent_executor  # noqa: E402
from openrlhf.utils.agent import MultiTurnAgentExecutor  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.logprobs import Logprob  # noqa: E402
from vllm.outputs import CompletionOutput  # noqa: E402

from sat_ext.lag.turns import TokenLagMetrics  # noqa: E402
from sat_ext.openrlhf.agent import check_agent_file  # noqa: E402
from sat_ext.openrlhf.lag.samples import GENERATED_KEY, _tag, _trajectory  # noqa: E402
from sat_ext.openrlhf.loss import SATPolicyLoss  # noqa: E402
from sat_ext.runlog import Record  # noqa: E402
from sat_ext.smoke import agent_checks  # noqa: E402
from sat_ext.smoke import openrlhf_variants as ov  # noqa: E402
from sat_ext.smoke.assets import DATA_SOURCE, write_model  # noqa: E402
from sat_ext.smoke.calc import EPISODES_ENV, MAX_DIGITS, MAX_TERMS, TURN_TOKENS, TURNS  # noqa: E402
from sat_ext.smoke.openrlhf_calc import tool_turn  # noqa: E402
from sat_ext.smoke.reward import compute_score  # noqa: E402

AGENT_FILE = str(Path(ov.__file__).with_name("openrlhf_calc.py"))
LABEL = "5"
# each turn's text (TURN_TOKENS tokens at most) and vLLM's finish reason
SCRIPT = [
    ("12+3a<|im_end|>", "stop"),  # the model ended its turn itself: the tool turn does not close it again
    ("x7 40+1b", "length"),
    ("no digit", "length"),  # a format failure: read as calculator("0")
    ("9999+999", "length"),  # the last turn: the answer, rewarded
]
RESULTS = ["15", "48", "0"]


class ScriptedEngine:
    """The vLLM actor's ``generate`` as the executor calls it: :data:`SCRIPT`'s turns in order, log-probs -0.1,
    -0.2, ... per call, the text spaced as vLLM's detokenizer spaces the smoke tokenizer's tokens."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        text, finish = SCRIPT[len(self.calls)]
        self.calls.append((list(prompt_token_ids), sampling_params.max_tokens))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: sampling_params.max_tokens]
        logprobs = [{t: Logprob(-0.1 * (i + 1))} for i, t in enumerate(ids)]
        completion = CompletionOutput(0, self.tokenizer.decode(ids), ids, None, logprobs, finish_reason=finish)
        return SimpleNamespace(outputs=[completion])


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(write_model(tmp_path_factory.mktemp("model")))


def _prompt(tokenizer, question: str = "2+3=") -> str:
    """The prompt as OpenRLHF's dataset renders it (``--data.apply_chat_template``)."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )


@pytest.fixture(scope="module")
def episode(tokenizer, tmp_path_factory):
    """(the executor OpenRLHF's loader built, the engine's calls, the episode's response, its episodes-file line)."""
    episodes = tmp_path_factory.mktemp("episodes") / "episodes.jsonl"
    executor = _load_agent_executor(AGENT_FILE)
    engine = ScriptedEngine(tokenizer)
    params = SamplingParams(temperature=1.0, max_tokens=TURN_TOKENS, logprobs=1)  # as OpenRLHF dispatches them
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(EPISODES_ENV, str(episodes))
        out = asyncio.run(
            executor.execute(_prompt(tokenizer), LABEL, params, ov.AGENT_MAX_LEN, tokenizer, engine, images=None)
        )
    return executor, engine.calls, out, json.loads(episodes.read_text())


def _sample(response):
    """OpenRLHF's real assembly of the trainer's sample from an executor's response (it uses nothing of ``self``)."""
    return SamplesGenerator._process_response_into_experience(
        object.__new__(SamplesGenerator), response, max_len=ov.AGENT_MAX_LEN
    )


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of the runs of zeros between the first and the last one of ``mask``."""
    ones = [i for i, m in enumerate(mask) if m]
    out, i = [], ones[0]
    while i < ones[-1]:
        if mask[i]:
            i += 1
            continue
        j = i
        while not mask[j]:
            j += 1
        out.append((i, j))
        i = j
    return out


def test_openrlhfs_loader_and_the_launch_check_accept_the_agent_file(episode):
    executor = episode[0]
    assert isinstance(executor, MultiTurnAgentExecutor) and type(executor).__name__ == "AgentExecutor"
    assert check_agent_file(AGENT_FILE).__name__ == "AgentExecutor"


def test_four_turns_capped_with_three_tool_turns_between_them(tokenizer, episode):
    _, calls, out, _ = episode
    assert len(calls) == TURNS and all(max_tokens == TURN_TOKENS for _, max_tokens in calls)  # agent.py:94 clamped
    tokens, ranges = out["observation_tokens"], out["action_ranges"]
    turns = [tokenizer(t, add_special_tokens=False)["input_ids"][:TURN_TOKENS] for t, _ in SCRIPT]
    assert [tokens[a:b] for a, b in ranges] == turns
    # the feedback between two turns: the chat template's tool turn with the calculator's result
    for k, result in enumerate(RESULTS):
        closed = SCRIPT[k][0].endswith("<|im_end|>")
        chat = tokenizer.apply_chat_template(
            [{"role": "tool", "content": result}], tokenize=False, add_generation_prompt=True
        )
        assert tool_turn(result, closed) == ("\n" if closed else "<|im_end|>\n") + chat
        feedback = tokens[ranges[k][1] : ranges[k + 1][0]]
        assert feedback == tokenizer(tool_turn(result, closed), add_special_tokens=False)["input_ids"]
        assert calls[k + 1][0] == tokens[: ranges[k + 1][0]]  # the model saw it: the next turn's prompt
    # rollout log-probs: vLLM's on the turns, 0.0 on the prompt and the feedback
    logp = out["rollout_log_probs"]
    inside = {i for a, b in ranges for i in range(a, b)}
    assert [logp[i] for i in sorted(inside)] == pytest.approx([-0.1 * (i + 1) for t in turns for i in range(len(t))])
    assert all(logp[i] == 0.0 for i in range(len(tokens)) if i not in inside)


def test_the_reward_is_terminal_and_the_counters_reach_extra_logs(episode):
    _, _, out, line = episode
    final = compute_score(DATA_SOURCE, "9999+999", LABEL)
    assert out["reward"] == pytest.approx(final) and out["scores"].item() == pytest.approx(final)
    generated = sum(b - a for a, b in out["action_ranges"])
    assert out["extra_logs"] == {"agent/tool_calls": 3.0, "agent/format_failures": 1.0, GENERATED_KEY: generated}
    assert line["tool_calls"] == [["12+3", "15"], ["7+40+1", "48"], ["0", "0"]]
    assert line["observations_seen"] == 3 and line["format_failures"] == 1.0
    gaps = [b[0] - a[1] for a, b in zip(out["action_ranges"], out["action_ranges"][1:])]
    assert line["turns"] == [b - a for a, b in out["action_ranges"]] and line["observation_tokens"] == sum(gaps)
    assert line["reward"] == pytest.approx(final)


def test_openrlhfs_sample_has_the_observations_out_of_its_action_mask(episode):
    out = episode[2]
    sample = _sample(out)
    mask = sample.action_mask[0].tolist()  # over sequences[1:]
    want = [0] * (len(out["observation_tokens"]) - 1)
    for a, b in out["action_ranges"]:
        want[a - 1 : b - 1] = [1] * (b - a)
    assert mask == want and sample.info[GENERATED_KEY].item() == sum(mask)
    assert all(r == 0.0 for r, m in zip(sample.rollout_log_probs[0].tolist(), mask) if not m)
    # what sat_ext's lag trainer reads of it: one turn of the generated tokens, every loss token recorded
    _tag([sample], 3, None)
    trajectory = _trajectory(sample)
    assert trajectory.loss_tokens == sum(mask) and trajectory.turns[0].tokens == sum(mask)
    metrics = TokenLagMetrics((0, 1, 2))
    metrics.record_batch(4, [trajectory])
    got = metrics.flush()
    assert got["lag/token_unrecorded"] == 0.0 and got["lag/token_hist/1"] == sum(mask)
    # the control: observations left in the action mask are loss tokens the agent did not generate
    leaked = _sample(out)
    for a, b in _runs(mask):
        leaked.action_mask[0, a:b] = 1
    _tag([leaked], 3, None)
    metrics.record_batch(4, [_trajectory(leaked)])
    assert metrics.flush()["lag/token_unrecorded"] == sum(b - a for a, b in _runs(mask)) > 0


ROWS = 16


def _batch(sample, seed: int = 0) -> dict[str, torch.Tensor]:
    """``ROWS`` copies of the episode's layout as the actor's loss gets them: vLLM's rollout log-probs, new
    log-probs that moved on the turns (the lag), 0 elsewhere (OpenRLHF multiplies them by the action mask,
    models/actor.py:298), a group-normalised advantage per row."""
    g = torch.Generator().manual_seed(seed)
    mask = sample.action_mask.expand(ROWS, -1).clone().bool()
    rollout = torch.where(mask, -torch.rand(ROWS, mask.shape[1], generator=g) * 2.0 - 0.05, 0.0)
    new = torch.where(mask, rollout + torch.randn(ROWS, mask.shape[1], generator=g) * 0.4, 0.0)
    adv = torch.randn(ROWS, 1, generator=g).expand(ROWS, mask.shape[1]).clone()
    return {"new": new, "rollout": rollout, "adv": adv, "mask": mask}


def _loss(loss_type: str, batch: dict[str, torch.Tensor]):
    """sat_ext's SAT loss (OpenRLHF's ``PolicyLoss`` subclass) on ``batch``: (loss, metrics, gradient)."""
    fn = SATPolicyLoss(policy_loss_type=loss_type, is_correction_level="token")
    new = batch["new"].clone().requires_grad_(True)
    loss, *_ = fn(new, batch["rollout"], batch["adv"], action_mask=batch["mask"], rollout_log_probs=batch["rollout"])
    (grad,) = torch.autograd.grad(loss, new)
    return loss.detach(), {k: v.item() for k, v in fn.extra_metrics.items()}, grad


@pytest.mark.parametrize("loss_type", ["sat", "sat_gspo"])
def test_sats_quantile_and_loss_ignore_the_masked_observations(episode, loss_type):
    batch = _batch(_sample(episode[2]))
    observations = [i for a, b in _runs(batch["mask"][0].int().tolist()) for i in range(a, b)]
    keep = [i for i in range(batch["mask"].shape[1]) if i not in observations]
    cut = {k: v[:, keep].clone() for k, v in batch.items()}
    loss, metrics, grad = _loss(loss_type, batch)
    cut_loss, cut_metrics, cut_grad = _loss(loss_type, cut)
    assert metrics["sat_active"] == 1.0 and 0.0 < metrics["sat_gate_rate"] < 1.0  # the gate acts on this batch
    for key in ("sat_threshold_q", "sat_gate_rate", "sat_d_pi"):
        assert metrics[key] == pytest.approx(cut_metrics[key], rel=1e-6, abs=1e-7), key
    torch.testing.assert_close(loss, cut_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad[:, keep], cut_grad, rtol=1e-6, atol=1e-7)
    assert torch.count_nonzero(grad[:, observations]) == 0
    # the control: the same observations in the action mask (rollout log-prob 0.0, the model's log-prob there)
    leaked = {k: v.clone() for k, v in batch.items()}
    leaked["mask"][:, observations] = True
    leaked["new"][:, observations] = -4.0
    _, leaked_metrics, leaked_grad = _loss(loss_type, leaked)
    assert leaked_metrics["sat_threshold_q"] > 2 * metrics["sat_threshold_q"]
    assert torch.count_nonzero(leaked_grad[:, observations]) > 0


def test_the_longest_episode_fits_the_variants_max_len(tokenizer):
    longest = tokenizer(_prompt(tokenizer, "49+49="), add_special_tokens=False)["input_ids"]
    result = str(MAX_TERMS * (10**MAX_DIGITS - 1))
    feedback = tokenizer(tool_turn(result, closed=False), add_special_tokens=False)["input_ids"]
    assert len(longest) + TURNS * TURN_TOKENS + (TURNS - 1) * len(feedback) <= ov.AGENT_MAX_LEN


# ---------------------------------------------------------------- the variant's checks fail where they should


def _line(observations=60):
    """An episodes-file line as the mask check reads it (the tool-call check is verl's: test_smoke_verl_agent.py)."""
    return {"observation_tokens": observations}


GOOD_STEP = {"agent/tool_calls": 3.0, "agent/format_failures": 0.25}


def _step(step, **values):
    good = {**GOOD_STEP, "lag/token_unrecorded": 0.0, "lag/token_lag_spread/max": 0.0}
    return Record(step, {**good, **{k.replace("__", "/"): v for k, v in values.items()}})


def test_the_openrlhf_agent_checks_fail_where_they_should():
    good = [_step(1), _step(2)]
    assert agent_checks.check_observations_masked([_line()] * 4, good).passed is True
    assert agent_checks.check_observations_masked([_line(), _line(observations=0)], good).passed is False
    leaked = [_step(1), _step(2, lag__token_unrecorded=12.0)]
    assert agent_checks.check_observations_masked([_line()], leaked).passed is False
    assert agent_checks.check_observations_masked([], good).passed is False
    assert agent_checks.check_agent_counters(good, 3).passed is True
    assert agent_checks.check_agent_counters([_step(1), _step(2, agent__tool_calls=2.5)], 3).passed is False
    assert agent_checks.check_one_version_per_batch(good).passed is True
    spread = [_step(1), _step(2, lag__token_lag_spread__max=1.0)]
    assert agent_checks.check_one_version_per_batch(spread).passed is False
