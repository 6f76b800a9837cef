"""The ``agent-bounded2`` smoke run's calculator: a verl tool, a tool-call parser and verl's tool agent loop with
every turn read as a calculator call.

The smoke's random model cannot write verl's hermes call format (its vocabulary has no ``< > { } "``), so
:class:`CalcToolAgentLoop` changes only how a turn is *read*: :class:`CalculatorCallParser` takes each turn's digit
groups as ``calculator(expression="a+b+...")`` (the rules of :mod:`sat_ext.smoke.calc`). The tokens stay the model's
own samples, with their log-probs; everything else is verl's ``ToolAgentLoop`` (``tool_agent_loop.py``): its state
machine, the tool call through verl's tool registry (:class:`CalculatorTool`, loaded from
``multi_turn.tool_config_path``), the observation rendered by the chat template and merged with response_mask 0
and log-prob 0.0, the response assembly and the cut to ``response_length``. A turn is capped at
:data:`TURN_TOKENS` new tokens, and the episode's per-turn weight versions are recorded
(:class:`sat_ext.verl.agent_turns.TurnRecorder`, ``extra_fields["sat_ext_turns"]``).

Where :data:`EPISODES_ENV` names a file, each episode appends one JSON line to it: its turn record, ``num_turns``,
the tool calls (expression, result) and how many results reached the model (found among the prompt tokens of the
next turn's ``generate`` call). The smoke's checks read it (:mod:`sat_ext.smoke.verl_variants`).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

from sat_ext.lag.turns import TURNS_KEY
from sat_ext.verl.agent_turns import TurnRecorder

from .calc import EPISODES_ENV, TOOL_NAME, TURN_TOKENS, evaluate, expression, observations_seen

CALLS_KEY = "sat_ext_tool_calls"  # extra_fields: [expression, result] per call, written by the tool


class CalculatorTool(BaseTool):
    """verl tool ``calculator(expression)``: the sum, as digits (every character is in the smoke vocabulary),
    after ``latency_s`` seconds (its tool config's ``config.latency_s``, default 0: a slow tool, as real ones are,
    keeps episodes in flight across weight syncs). Each call is noted in the episode's ``extra_fields`` under
    :data:`CALLS_KEY`."""

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        expr = parameters.get("expression")
        result = evaluate(expr)
        await asyncio.sleep(float(self.config.get("latency_s", 0.0)))
        agent_data = kwargs.get("agent_data")
        if agent_data is not None:
            agent_data.extra_fields.setdefault(CALLS_KEY, []).append([expr, result])
        return ToolResponse(text=result), 0.0, {}


class CalculatorCallParser(ToolParser):
    """Reads every turn as one ``calculator`` call (:func:`expression` of the turn's text, special tokens left
    out; the tokens are joined as they are, since the smoke tokenizer's ``decode`` spaces them)."""

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list | None = None
    ) -> tuple[str, list[FunctionCall]]:
        special = set(self.tokenizer.all_special_ids)
        text = "".join(self.tokenizer.convert_ids_to_tokens([i for i in responses_ids if i not in special]))
        return text, [FunctionCall(name=TOOL_NAME, arguments=json.dumps({"expression": expression(text)}))]


class CalcToolAgentLoop(ToolAgentLoop):
    """verl's ``ToolAgentLoop`` with :class:`CalculatorCallParser`, :data:`TURN_TOKENS` per turn and the turn
    record (module doc). ``required_tools``: the tools it calls, checked against the tool config before a run
    (:mod:`sat_ext.verl.agent_config`)."""

    required_tools = (TOOL_NAME,)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if TOOL_NAME not in self.tools:
            raise ValueError(
                f"{type(self).__name__} calls the tool {TOOL_NAME!r}; actor_rollout_ref.rollout.multi_turn."
                f"tool_config_path gives {sorted(self.tools)}"
            )
        self.tool_parser = CalculatorCallParser(self.tokenizer)
        self.recorder = TurnRecorder(self.server_manager, max_tokens=TURN_TOKENS)
        self.server_manager = self.recorder

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
        """verl's episode, with the turn record added to its ``extra_fields``."""
        output = await super().run(sampling_params, **kwargs)
        output.extra_fields[TURNS_KEY] = self.recorder.record(output.response_mask)
        path = os.environ.get(EPISODES_ENV)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(self.episode(output)) + "\n")
        return output

    def episode(self, output: Any) -> dict[str, Any]:
        """The episode's JSON line: turn record, ``num_turns``, tool calls, and ``observations_seen``: the calls
        whose result's tokens are in the prompt of the next ``generate`` call, after the turn that made the call."""
        calls = output.extra_fields.get(CALLS_KEY, [])
        results = [self.tokenizer.encode(result, add_special_tokens=False) for _, result in calls]
        seen = observations_seen(self.recorder.prompt_ids, [t.tokens for t in self.recorder.turns], results)
        return {
            "num_turns": output.num_turns,
            "turns": output.extra_fields[TURNS_KEY],
            "tool_calls": calls,
            "observations_seen": seen,
        }
