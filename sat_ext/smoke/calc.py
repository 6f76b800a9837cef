"""The smoke runs' calculator, framework-free: how an assistant turn of the tiny random model is read as a
``calculator(expression)`` call, what the calculator returns, and whether the result reached the model.

The smoke's model cannot write any framework's tool-call format (its vocabulary has no ``< > { } "``), so both
agent smoke runs read every turn's text the same way: its first :data:`MAX_TERMS` digit groups, joined by
``+``, are the call's expression. verl's loop (:mod:`sat_ext.smoke.verl_calc`) and OpenRLHF's agent
(:mod:`sat_ext.smoke.openrlhf_calc`) both use these rules; neither has one of its own. Both write one JSON
line per episode to the file :data:`EPISODES_ENV` names (:data:`EPISODES` in the variant's folder), which the
checks read (:mod:`sat_ext.smoke.agent_checks`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TOOL_NAME = "calculator"
TURNS = 4  # assistant turns per episode: a tool call after each but the last
TURN_TOKENS = 8  # new tokens per assistant turn
MAX_TERMS, MAX_DIGITS = 4, 4  # an expression's digit groups: every result has at most 5 digits
EPISODES = "episodes.jsonl"
EPISODES_ENV = "SAT_EXT_SMOKE_EPISODES"


def digit_groups(text: str) -> list[str]:
    """The digit groups a turn's text is read as: its first :data:`MAX_TERMS`, each cut to :data:`MAX_DIGITS`
    digits ([] for a turn with no digit: a tool-format failure, where a framework counts one)."""
    return [group[:MAX_DIGITS] for group in re.findall(r"\d+", text)[:MAX_TERMS]]


def expression(text: str) -> str:
    """The calculator call a turn's text is read as: its :func:`digit_groups` joined by ``+``; "0" when it has
    none."""
    return "+".join(digit_groups(text)) or "0"


def evaluate(expr: object) -> str:
    """The sum of ``expr``'s ``+``-separated digit groups, as digits; raises ValueError naming anything else."""
    if not isinstance(expr, str) or not re.fullmatch(r"\d+(\+\d+)*", expr):
        raise ValueError(f"calculator: expression must be digit groups joined by '+', got {expr!r}")
    return str(sum(int(term) for term in expr.split("+")))


def _contains(tokens: Sequence[int], part: Sequence[int]) -> bool:
    part = list(part)
    return any(list(tokens[i : i + len(part)]) == part for i in range(len(tokens) - len(part) + 1))


def observations_seen(
    prompts: Sequence[Sequence[int]], turn_tokens: Sequence[int], results: Sequence[Sequence[int]]
) -> int:
    """How many tool results reached the model: result ``k`` (its tokens, ``results[k]``) counts when it is among
    the tokens the prompt of generate call ``k + 1`` adds after call ``k``'s prompt and its ``turn_tokens[k]``
    generated tokens."""
    seen = 0
    for k, result in enumerate(results):
        if k + 1 < len(prompts):
            seen += _contains(prompts[k + 1][len(prompts[k]) + turn_tokens[k] :], result)
    return seen
