"""``agent-bounded2``'s agent loop offline: verl's real ``ToolAgentLoop`` machinery (its state machine, the tool
loaded through verl's registry from the variant's own tool config, the chat-template observation merge, the
response assembly) around a stand-in LLM client that returns scripted tokens and log-probs and bumps the weight
version between turns, one turn split across a sync as verl's resume makes it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")
from hydra import compose, initialize_config_dir  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap  # noqa: E402
from verl.tools.tool_registry import load_all_tools  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from sat_ext.lag.turns import TURNS_KEY  # noqa: E402
from sat_ext.runlog import Record  # noqa: E402
from sat_ext.smoke import agent_checks  # noqa: E402
from sat_ext.smoke.assets import write_model  # noqa: E402
from sat_ext.smoke.verl_calc import (  # noqa: E402
    CALLS_KEY,
    EPISODES_ENV,
    TURN_TOKENS,
    CalcToolAgentLoop,
    expression,
)
from sat_ext.smoke.verl_variants import AGENT_RESPONSE_LEN, VARIANTS, Paths, command, write_tools  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
# each turn's text (8 tokens at most) and the versions (min_global_steps, max_global_steps) the server reports
SCRIPT = [
    ("12+3a<|im_end|>", (0, 0)),  # ends with EOS: verl's Qwen builder inserts "\n" (mask 0) before the observation
    ("x7 40+1b", (0, 1)),  # split across a weight sync (aborted and resumed on the new weights)
    ("no digit", (1, 1)),
    ("9999+999", (2, 2)),
]


class ScriptedClient:
    """Returns :data:`SCRIPT`'s turns in order; log-probs -0.1, -0.2, ... per call."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        text, (oldest, newest) = SCRIPT[len(self.calls)]
        self.calls.append((list(prompt_ids), dict(sampling_params)))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: sampling_params["max_tokens"]]
        fields = {"global_steps": newest, "min_global_steps": oldest, "max_global_steps": newest}
        return TokenOutput(token_ids=ids, log_probs=[-0.1 * (i + 1) for i in range(len(ids))], extra_fields=fields)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(write_model(tmp_path_factory.mktemp("model")))


def _config(tmp_path: Path, response_len: int):
    """verl's config composed from the variant's own command line (what the agent loop worker holds)."""
    paths = Paths(
        Path("/m"), Path("/t"), Path("/v"), Path("/r"), Path("/a"), None, write_tools(tmp_path / "tools.yaml")
    )
    argv = command(VARIANTS["agent-bounded2"], paths, steps=4, device="cpu").argv[3:]
    argv = [a for a in argv if not a.startswith("data.max_response_length=")]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=argv + [f"data.max_response_length={response_len}"])


def _run(config, tokenizer):
    async def episode():
        client = ScriptedClient(tokenizer)
        tools = load_all_tools(config.actor_rollout_ref.rollout.multi_turn.tool_config_path, None)
        loop = CalcToolAgentLoop(
            trainer_config=DictConfigWrap(config),
            server_manager=client,
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            hf_model_type="qwen3",
            tools=ToolListWrap(tools),
        )
        output = await loop.run(
            {"temperature": 1.0, "logprobs": True}, raw_prompt=[{"role": "user", "content": "2+3="}]
        )
        return loop, client, output

    return asyncio.run(episode())


def _segments(mask):
    """Runs of equal mask values: [(value, length), ...]."""
    out = []
    for m in mask:
        if out and out[-1][0] == m:
            out[-1][1] += 1
        else:
            out.append([m, 1])
    return [tuple(s) for s in out]


def test_four_turns_three_masked_observations_and_the_turn_record(tmp_path, tokenizer, monkeypatch):
    episodes = tmp_path / "episodes.jsonl"
    monkeypatch.setenv(EPISODES_ENV, str(episodes))
    loop, client, out = _run(_config(tmp_path, AGENT_RESPONSE_LEN), tokenizer)
    texts = [tokenizer(t, add_special_tokens=False)["input_ids"][:TURN_TOKENS] for t, _ in SCRIPT]
    results = [str(sum(int(x) for x in expression(t).split("+"))) for t, _ in SCRIPT[:3]]
    assert results == ["15", "48", "0"]

    assert len(client.calls) == 4 and all(p["max_tokens"] == TURN_TOKENS for _, p in client.calls)
    assert out.num_turns == 8  # 4 assistant turns + 3 tool turns + 1
    assert out.extra_fields[CALLS_KEY] == [["12+3", "15"], ["7+40+1", "48"], ["0", "0"]]

    # layout: generated tokens mask 1 with their log-probs, observations mask 0 with log-prob 0.0
    mask, logp, resp = out.response_mask, out.response_logprobs, out.response_ids
    assert [v for v, _ in _segments(mask)] == [1, 0, 1, 0, 1, 0, 1]
    assert [n for v, n in _segments(mask) if v] == [len(t) for t in texts]
    assert [resp[i] for i, m in enumerate(mask) if m] == [x for t in texts for x in t]
    assert [logp[i] for i, m in enumerate(mask) if m] == pytest.approx(
        [-0.1 * (i + 1) for t in texts for i in range(len(t))]
    )
    assert all(logp[i] == 0.0 for i, m in enumerate(mask) if not m)
    observations = []
    for k, (start, end) in enumerate(_zero_runs(mask)):
        observations.append(tokenizer.decode(resp[start:end]).replace(" ", ""))
    assert observations[0] == "\n<|im_start|>tool\n15<|im_end|>\n<|im_start|>assistant\n".replace(" ", "")
    assert observations[1:] == [f"<|im_start|>tool\n{r}<|im_end|>\n<|im_start|>assistant\n" for r in results[1:]]
    # the model saw each observation: turn k+1's prompt is turn k's prompt, turn k's tokens and the observation
    for k in range(3):
        prompt, following = client.calls[k][0], client.calls[k + 1][0]
        start, end = _zero_runs(mask)[k]
        assert following == prompt + texts[k] + resp[start:end]

    # versions: the turn record, and verl's episode tags (first turn's oldest, last turn's newest)
    assert out.extra_fields[TURNS_KEY] == [[len(t), *v] for t, (_, v) in zip(texts, SCRIPT)]
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (0, 2)
    line = json.loads(episodes.read_text())
    assert line == {
        "num_turns": 8,
        "turns": out.extra_fields[TURNS_KEY],
        "tool_calls": out.extra_fields[CALLS_KEY],
        "observations_seen": 3,
    }


def _zero_runs(mask):
    runs, i = [], 0
    while i < len(mask):
        if mask[i]:
            i += 1
            continue
        j = i
        while j < len(mask) and not mask[j]:
            j += 1
        runs.append((i, j))
        i = j
    return runs


def test_the_turn_record_follows_the_cut_to_response_length(tmp_path, tokenizer):
    """A response cut inside turn 4: the record keeps only the generated tokens that remain."""
    full = _run(_config(tmp_path, AGENT_RESPONSE_LEN), tokenizer)[2]
    cut_len = len(full.response_mask) - 3
    out = _run(_config(tmp_path, cut_len), tokenizer)[2]
    assert len(out.response_mask) == cut_len
    record = out.extra_fields[TURNS_KEY]
    assert sum(n for n, _, _ in record) == sum(out.response_mask) == sum(full.response_mask) - 3
    assert record[-1] == [full.extra_fields[TURNS_KEY][-1][0] - 3, 2, 2]


# ---------------------------------------------------------------- the variant's checks fail where they should


def _episode(seen=3, calls=3, turns=((8, 0, 0), (8, 0, 0), (8, 0, 0), (8, 0, 0))):
    return {
        "num_turns": 8,
        "turns": [list(t) for t in turns],
        "tool_calls": [["1", "1"]] * calls,
        "observations_seen": seen,
    }


def _step(step, **values):
    good = {
        "lag/token_hist/0": 20.0,
        "lag/token_hist/1": 12.0,
        "lag/token_lag/max": 1.0,
        "lag/max": 2.0,
        "lag/token_unrecorded": 0.0,
        "lag/turn_tag_mismatch": 0.0,
        "training/num_turns/min": 8.0,
        "training/num_turns/max": 8.0,
    }
    return Record(step, {**good, **values})


def test_the_tool_call_check():
    assert agent_checks.check_tool_calls([_episode()] * 4, 4, trained=4).passed is True
    assert agent_checks.check_tool_calls([_episode()] * 3, 4, trained=4).passed is False  # too few episodes
    short = agent_checks.check_tool_calls([_episode()] * 3 + [_episode(seen=2)], 4, trained=4)
    assert short.passed is False and "1 episodes short" in short.detail
    assert agent_checks.check_tool_calls([_episode(calls=2)] * 4, 4, trained=4).passed is False


def test_the_turn_and_token_lag_checks():
    assert agent_checks.check_num_turns([_step(1), _step(2)], 8).passed is True
    assert agent_checks.check_num_turns([_step(1), _step(2, **{"training/num_turns/min": 6.0})], 8).passed is False
    good = agent_checks.check_token_lags([_step(1), _step(2)], 2)
    assert good.passed is True and "{0: 40, 1: 24}" in good.detail
    for bad in (
        {"lag/token_unrecorded": 3.0},
        {"lag/turn_tag_mismatch": 1.0},
        {"lag/token_lag/max": 3.0, "lag/max": 3.0},  # over the bound
        {"lag/token_lag/max": 2.0, "lag/max": 1.0},  # a token older than any trajectory
    ):
        assert agent_checks.check_token_lags([_step(1), _step(2, **bad)], 2).passed is False, bad
    missing = Record(2, {k: v for k, v in _step(2).values.items() if not k.startswith("lag/token_hist/")})
    assert agent_checks.check_token_lags([_step(1), missing], 2).passed is False


def test_the_spanning_check_skips_when_no_sync_landed_inside_an_episode():
    assert agent_checks.check_spanning([_episode()]).passed is None
    across = _episode(turns=((8, 0, 0), (8, 0, 1), (8, 1, 1), (8, 1, 1)))
    assert agent_checks.check_spanning([_episode(), across]).passed is True
