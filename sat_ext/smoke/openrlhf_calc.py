"""The ``agent-bounded1`` smoke run's agent for OpenRLHF 0.11.2 (``--train.agent_func_path`` this file): every prompt
a calculator episode of :data:`~sat_ext.smoke.calc.TURNS` assistant turns, each turn but the last read as a
calculator call whose result comes back as a ChatML tool turn.

OpenRLHF loads this file by path in each vLLM actor and constructs :class:`AgentExecutor` with no argument
(trainer/ray/vllm_engine.py:19-30, 56-57; absolute imports only). The smoke's random model cannot write a tool-call
format, so, as in verl's calculator loop (:mod:`sat_ext.smoke.verl_calc`), only how a turn is *read* is forced: every
turn's digit groups are the call's expression (:mod:`sat_ext.smoke.calc`, the same rules). The tokens stay the
model's own samples with vLLM's log-probs, and everything else is OpenRLHF's own path: its
``MultiTurnAgentExecutor.execute`` (utils/agent.py:37-185) runs the turns, appends each tool turn's tokens after the
model's, records the action ranges (:108-111) and gives the feedback tokens rollout log-prob 0.0 (:156-162); its
``SamplesGenerator`` turns that into the sample the trainer gets, with ``action_mask`` 1 on the action ranges only
(trainer/ppo_utils/samples_generator.py:256-263 there).

What this file adds around that executor (:class:`AgentExecutor`):

- a proxy of the vLLM actor (:class:`TurnEngine`) that caps each turn at :data:`~sat_ext.smoke.calc.TURN_TOKENS` new
  tokens (OpenRLHF sets ``max_tokens`` to the rest of ``--data.max_len`` before every turn, utils/agent.py:94), reports
  each turn's text as its tokens joined (vLLM's detokenizer spaces the smoke tokenizer's tokens, which would split
  digit groups) and records each call's prompt and tokens;
- the reward, computed inside the agent as OpenRLHF requires (``agent_func_path`` replaces ``--reward.remote_url``
  with "agent", cli/train_ppo_ray.py:636-637): sparse and terminal, 0 on every turn but the last, whose answer gets
  the smoke's reward rule (:func:`sat_ext.smoke.reward.compute_score`);
- the counters OpenRLHF logs per step from the last step's ``extra_logs`` (utils/agent.py:127, samples_generator.py
  :289-293): ``agent/tool_calls`` and ``agent/format_failures`` (call turns with no digit group: read as "0"), and
  ``sat_ext_generated_tokens`` (:data:`sat_ext.openrlhf.lag.samples.GENERATED_KEY`), the tokens the model generated,
  which sat_ext's lag trainer compares with the sample's action mask (its per-token lag metrics);
- where :data:`~sat_ext.smoke.calc.EPISODES_ENV` names a file, one JSON line per episode: tokens per turn, the calls
  ``[expression, result]``, how many results the model saw (found among the tokens of the next turn's prompt), the
  observation tokens between its turns, the format failures and the reward.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from sat_ext.openrlhf.lag.samples import GENERATED_KEY
from sat_ext.smoke.assets import DATA_SOURCE, GENERATION_PROMPT, SPECIAL
from sat_ext.smoke.calc import (
    EPISODES_ENV,
    TURN_TOKENS,
    TURNS,
    digit_groups,
    evaluate,
    expression,
    observations_seen,
)
from sat_ext.smoke.reward import compute_score

END = "<|im_end|>"  # the smoke tokenizer's end of turn (its EOS)
CALLS_KEY = "sat_ext_tool_calls"  # the last step's extra_logs: [expression, result] per call (taken out again)


def tool_turn(result: str, closed: bool) -> str:
    """The feedback after an assistant turn: the smoke chat template's tool turn with ``result`` and the next
    generation prompt, after closing the assistant turn (``closed``: the model already ended it with its EOS)."""
    return ("" if closed else END) + f"\n<|im_start|>tool\n{result}{END}\n{GENERATION_PROMPT}"


def _plain(text: str) -> str:
    for token in SPECIAL:
        text = text.replace(token, "")
    return text


class TurnEngine:
    """The vLLM actor as one episode's executor calls it (``generate``), each turn capped at ``max_tokens`` new
    tokens, its text the tokens joined, each call's prompt and new tokens recorded."""

    def __init__(self, engine: Any, tokenizer: Any, max_tokens: int):
        self.engine, self.tokenizer, self.max_tokens = engine, tokenizer, max_tokens
        self.prompts: list[list[int]] = []
        self.turns: list[list[int]] = []

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None):
        """The engine's ``generate`` (``sampling_params`` is the executor's per-call copy, utils/agent.py:102)."""
        sampling_params.max_tokens = min(sampling_params.max_tokens, self.max_tokens)
        output = await self.engine.generate(prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data)
        completion = output.outputs[0]
        completion.text = "".join(self.tokenizer.convert_ids_to_tokens(list(completion.token_ids)))
        self.prompts.append(list(prompt_token_ids))
        self.turns.append(list(completion.token_ids))
        return output


class CalcEpisode(AgentInstanceBase):
    """One episode's environment (OpenRLHF makes one per sample with no argument, utils/agent.py:39): turns
    1..TURNS-1 are calculator calls, turn TURNS ends the episode with the reward."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.calls: list[list[str]] = []
        self.failures = 0

    async def step(self, state_dict: dict, **kwargs: Any) -> dict:
        """OpenRLHF's step contract (utils/agent.py:114-127) for the turn in ``state_dict["action_text"]``."""
        text = state_dict["action_text"]
        if len(self.calls) + 1 < TURNS:
            expr = expression(text)
            self.calls.append([expr, evaluate(expr)])
            self.failures += not digit_groups(text)
            return {
                "rewards": torch.tensor(0.0),
                "scores": torch.tensor(0.0),
                "environment_feedback": tool_turn(self.calls[-1][1], closed=text.endswith(END)),
                "done": False,
            }
        reward = torch.tensor(compute_score(DATA_SOURCE, _plain(text), state_dict["label"]))
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": "",
            "done": True,
            "extra_logs": {
                "agent/tool_calls": float(len(self.calls)),
                "agent/format_failures": float(self.failures),
                CALLS_KEY: self.calls,
            },
        }


class AgentExecutor(MultiTurnAgentExecutor):
    """OpenRLHF's ``MultiTurnAgentExecutor`` over :class:`CalcEpisode`, through :class:`TurnEngine` (module doc)."""

    def __init__(self) -> None:
        super().__init__(CalcEpisode)

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        engine = TurnEngine(llm_engine, hf_tokenizer, TURN_TOKENS)
        out = await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, engine, images)
        logs = dict(out["extra_logs"])
        calls = logs.pop(CALLS_KEY, [])
        ranges = out["action_ranges"]
        logs[GENERATED_KEY] = float(sum(end - start for start, end in ranges))
        out["extra_logs"] = logs
        path = os.environ.get(EPISODES_ENV)
        if path:
            results = [hf_tokenizer(result, add_special_tokens=False)["input_ids"] for _, result in calls]
            episode = {
                "turns": [end - start for start, end in ranges],
                "tool_calls": calls,
                "observations_seen": observations_seen(engine.prompts, [len(t) for t in engine.turns], results),
                "observation_tokens": sum(b[0] - a[1] for a, b in zip(ranges, ranges[1:])),
                "format_failures": logs.get("agent/format_failures"),
                "reward": out["reward"],
            }
            with open(path, "a") as f:
                f.write(json.dumps(episode) + "\n")
        return out
