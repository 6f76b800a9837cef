"""The demo's tasks behind one interface: ``addition`` (exact-match reward), ``code`` (all hidden test cases) and
``program`` (a program with a conditional and a loop, partial credit over hidden test cases) and ``agent``
(multi-turn calculator episodes, a sparse terminal reward).

Every task has a vocabulary, fixed prompt and response lengths, a seeded problem stream, the supervised targets
of its warm start and a reward in [0, 1] of a response (:class:`Task`: 0/1 for ``addition`` and ``code``). A task
may also have its own held-out evaluation stream (``sample_eval``, :func:`eval_sampler`), a larger position
budget (``max_positions``, :func:`max_positions`), and its own way of producing a policy's responses
(``respond``, :func:`respond`: ``agent`` plays episodes); ``addition`` and ``code`` have none of these. An
``episodic`` task is rolled out turn by turn (``sat_ext.demo.agent_producer``).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from .addition import AdditionTask, CharVocab
from .agent import AgentTask
from .code import CodeTask
from .program import ProgramTask

TASKS = ("addition", "code", "program", "agent")
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
    if name == "agent":
        return AgentTask()
    raise ValueError(f"task must be one of {list(TASKS)}, got {name!r}")


def eval_sampler(task: Task) -> Callable[[int, torch.Generator], list[Any]]:
    """The stream the held-out evaluation draws from: the task's ``sample_eval`` where it has one (a split
    disjoint from training), else ``sample`` itself (``addition``, ``code``: as before)."""
    return getattr(task, "sample_eval", task.sample)


def respond(
    task: Task,
    policy: torch.nn.Module,
    prompts: torch.Tensor,
    problems: list[Any],
    generator: torch.Generator,
    temperature: float = 1.0,
    greedy: bool = False,
) -> torch.Tensor:
    """(n, response_len) responses of ``policy`` (the trainer's own, no engine) to ``problems``: the task's
    ``respond`` where it has one (``agent``: whole episodes), else one sampled response per prompt."""
    own = getattr(task, "respond", None)
    if own is not None:
        return own(policy, prompts, problems, generator, temperature, greedy)
    from ..model import sample

    return sample(policy, prompts, task.response_len, generator, temperature, greedy=greedy)


def is_episodic(task: Task) -> bool:
    """Whether ``task`` is rolled out turn by turn (``agent``)."""
    return bool(getattr(task, "episodic", False))


def max_positions(task: Task) -> int:
    """The policy's position budget for ``task``: its ``max_positions`` where it sets one, else
    :data:`DEFAULT_POSITIONS` (``addition``, ``code``: as before); never less than prompt + response."""
    n = int(getattr(task, "max_positions", DEFAULT_POSITIONS))
    if n < task.prompt_len + task.response_len:
        raise ValueError(f"task {task.name!r}: {n} positions < prompt {task.prompt_len} + response {task.response_len}")
    return n
