"""The demo's code task: write a program in a small expression language from two input/output examples.

A problem is a hidden function f(x) = a*x + b with a in 0..9 and b in 0..49. The prompt shows f(0) and f(1),
two digits each: ``"07,10="`` means f(0) = 7, f(1) = 10 (so every prompt is 7 tokens, as in the addition
task). The response is a program in :mod:`sat_ext.demo.tasks.expr` ended by ``<eos>``; its reward is 1.0 if the
program, run by the package's interpreter, equals f on every hidden test input (x = 2, 3, 7: not the shown
ones), else 0.0 (wrong, malformed, over a limit, or no ``<eos>``). Any correct program earns the reward
(``3*x+7``, ``x+x+x+7``, ``7+3*x``); the warm start imitates the canonical one (``3*x+7``; ``x+7`` for a = 1,
``7`` for a = 0, ``3*x`` for b = 0), 1 to 6 characters against the addition task's 1 to 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .addition import CharVocab, answer_ids
from .expr import ExprError, Limits, run_program

CODE_CHARS = "0123456789x+-*(),="
CODE_VOCAB = CharVocab(CODE_CHARS)
HIDDEN_XS = (2, 3, 7)


@dataclass(frozen=True)
class FunctionProblem:
    """f(x) = a*x + b."""

    a: int
    b: int

    def f(self, x: int) -> int:
        return self.a * x + self.b

    @property
    def prompt(self) -> str:
        return f"{self.f(0):02d},{self.f(1):02d}="

    @property
    def answer(self) -> str:
        """The canonical program (what the warm start imitates)."""
        if self.a == 0:
            return str(self.b)
        slope = "x" if self.a == 1 else f"{self.a}*x"
        return slope if self.b == 0 else f"{slope}+{self.b}"


class CodeTask:
    """Problems f(x) = a*x + b (``0 <= a < 10``, ``0 <= b < 50``) from a seeded stream; rewards from hidden tests.

    ``prompt_len`` = 7 (``<bos>`` + ``"ff,gg="``); ``response_len`` = 8 (a program of up to 7 characters and
    ``<eos>``).
    """

    name = "code"
    reward_name = "all hidden tests pass"

    def __init__(self, vocab: CharVocab = CODE_VOCAB, limits: Limits = Limits()):
        self.vocab = vocab
        self.limits = limits
        self.prompt_len = 7
        self.response_len = 8

    def sample(self, n: int, generator: torch.Generator) -> list[FunctionProblem]:
        """``n`` problems from ``generator`` (same generator state -> same problems)."""
        a = torch.randint(0, 10, (n,), generator=generator)
        b = torch.randint(0, 50, (n,), generator=generator)
        return [FunctionProblem(int(x), int(y)) for x, y in zip(a.tolist(), b.tolist())]

    def prompt_ids(self, problems: list[FunctionProblem]) -> torch.Tensor:
        """(n, prompt_len) long tensor: ``<bos>`` and the prompt characters."""
        return torch.tensor([[self.vocab.bos] + self.vocab.encode(p.prompt) for p in problems], dtype=torch.long)

    def target_ids(self, problems: list[FunctionProblem]) -> torch.Tensor:
        """(n, response_len) long tensor: the canonical program, ``<eos>``, then ``<pad>``."""
        return answer_ids(self.vocab, [p.answer for p in problems], self.response_len)

    def reward(self, problem: FunctionProblem, response: list[int] | torch.Tensor) -> float:
        """1.0 iff the text before the first ``<eos>`` is a program that equals f on every hidden input."""
        return hidden_test_reward(response, problem, self.vocab, self.limits)

    def rewards(self, problems: list[FunctionProblem], responses: torch.Tensor) -> torch.Tensor:
        """(n,) float rewards of ``responses`` (n, L) for ``problems``."""
        return torch.tensor([self.reward(p, r) for p, r in zip(problems, responses)], dtype=torch.float32)


def hidden_test_reward(
    response: list[int] | torch.Tensor,
    problem: FunctionProblem,
    vocab: CharVocab = CODE_VOCAB,
    limits: Limits = Limits(),
    xs: tuple[int, ...] = HIDDEN_XS,
) -> float:
    """Run the program before the first ``<eos>`` on the hidden inputs; 1.0 iff every output equals f(x).
    No ``<eos>``, a special token in the program, a parse error or a broken limit gives 0.0."""
    ids = response.tolist() if isinstance(response, torch.Tensor) else list(response)
    if vocab.eos not in ids:
        return 0.0
    body = ids[: ids.index(vocab.eos)]
    if any(not 0 <= i < len(vocab.chars) for i in body):
        return 0.0
    try:
        outputs = run_program("".join(vocab.chars[i] for i in body), xs, limits)
    except ExprError:
        return 0.0
    return 1.0 if outputs == [problem.f(x) for x in xs] else 0.0
