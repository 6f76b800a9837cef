"""The demo's tasks behind one interface: ``addition`` (exact-match reward) and ``code`` (hidden test cases).

Every task has a character vocabulary, fixed prompt and response lengths, a seeded problem stream, the
supervised targets of its warm start and a 0/1 reward of a response (:class:`Task`).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from .code_task import CodeTask
from .task import AdditionTask, CharVocab

TASKS = ("addition", "code")


class Task(Protocol):
    """What the warm start, the rollout and the evaluation need of a task."""

    name: str
    reward_name: str
    vocab: CharVocab
    prompt_len: int
    response_len: int

    def sample(self, n: int, generator: torch.Generator) -> list[Any]: ...

    def prompt_ids(self, problems: list[Any]) -> torch.Tensor: ...

    def target_ids(self, problems: list[Any]) -> torch.Tensor: ...

    def rewards(self, problems: list[Any], responses: torch.Tensor) -> torch.Tensor: ...


def make_task(name: str, max_operand: int = 100) -> Task:
    """The task called ``name``; ``max_operand`` bounds the addition task's operands (the code task has its own
    fixed ranges)."""
    if name == "addition":
        return AdditionTask(max_operand)
    if name == "code":
        return CodeTask()
    raise ValueError(f"task must be one of {list(TASKS)}, got {name!r}")
