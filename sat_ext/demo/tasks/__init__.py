"""The demo's tasks behind one interface: ``addition`` (exact-match reward), ``code`` (all hidden test cases) and
``program`` (a program with a conditional and a loop, partial credit over hidden test cases).

Every task has a vocabulary, fixed prompt and response lengths, a seeded problem stream, the supervised targets
of its warm start and a reward in [0, 1] of a response (:class:`Task`: 0/1 for ``addition`` and ``code``). A task
may also have its own held-out evaluation stream (``sample_eval``, :func:`eval_sampler`) and a larger position
budget (``max_positions``, :func:`max_positions`); ``addition`` and ``code`` have neither.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from .addition import AdditionTask, CharVocab
from .code import CodeTask
from .program import ProgramTask

TASKS = ("addition", "code", "program")
DEFAULT_POSITIONS = 32  # the policy's max_position_embeddings (and vLLM's max_model_len) unless a task needs more


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
    if name == "program":
        return ProgramTask()
    raise ValueError(f"task must be one of {list(TASKS)}, got {name!r}")


def eval_sampler(task: Task) -> Callable[[int, torch.Generator], list[Any]]:
    """The stream the held-out evaluation draws from: the task's ``sample_eval`` where it has one (a split
    disjoint from training), else ``sample`` itself (``addition``, ``code``: as before)."""
    return getattr(task, "sample_eval", task.sample)


def max_positions(task: Task) -> int:
    """The policy's position budget for ``task``: its ``max_positions`` where it sets one, else
    :data:`DEFAULT_POSITIONS` (``addition``, ``code``: as before); never less than prompt + response."""
    n = int(getattr(task, "max_positions", DEFAULT_POSITIONS))
    if n < task.prompt_len + task.response_len:
        raise ValueError(f"task {task.name!r}: {n} positions < prompt {task.prompt_len} + response {task.response_len}")
    return n
