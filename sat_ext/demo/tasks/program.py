"""The demo's program task: write a program of tens of tokens, with a conditional and possibly a loop, from four
input/output examples; rewarded with the fraction of hidden test cases it passes.

A problem is a hidden program over three inputs x, y, z (0..9) in :mod:`sat_ext.demo.tasks.prog`, drawn from a seeded
generator::

    <arm u> if u < v else <arm v>         (u, v): one of (x, y), (x, z), (y, z)
    <arm w> := w * <k> <+|-> <c>                                     affine, 5 tokens
             | sum ( i * <k> + <c> for i in range ( w ) )            a loop, 15 tokens

with k in 1..9, c in 0..9, the then-arm in u and the else-arm in v, and a loop arm on one side (either, with equal
chance) with probability ``loop_prob`` = 2/3: 15 or 25 tokens, e.g.
``sum ( i * 5 + 4 for i in range ( y ) ) if y < z else z * 6 + 0``. The prompt shows the program's outputs at four
fixed inputs, x y z = 122, 212, 223, 231, chosen so that each condition holds on two of them and not on the other
two, and the arm's input is 1 and 2 on each side: ``"122=012,212=004,223=013,231=006"``, every output in three
characters (``-04`` below zero). The response is a program ended by ``<eos>`` within
:attr:`ProgramTask.response_len` tokens. Its reward is the fraction of the problem's 8 hidden test inputs (drawn
per problem, distinct, none of them shown, 4 on each side of the hidden condition) on which it returns the hidden
program's value: partial credit; 0.0 for a response without ``<eos>``, with a token outside the language, or that
does not parse; a test whose evaluation breaks a limit fails. Any correct program counts (``y + y + 1`` for
``y * 2 + 1``). The warm start imitates the generator's program (:attr:`ProgramProblem.program`).

Syntax tokens (``*``, ``if``, ``<``, ``else``, ``( i *``, ``for i in range (``, brackets; the condition's first
input once the then-arm is written, the else-arm's input once the condition is) are near-deterministic; the
decisions are the arms' kinds, constants and signs and the condition's inputs. The examples determine them only
partly: which pairs of examples share an arm (so the condition) and whether an arm is affine or a loop are
sometimes ambiguous. A policy that samples the exact posterior of this family scores 0.865 on the held-out set,
one that writes its most probable program 0.885 (``benchmarks/program_task_ceiling.py``).

Held-out evaluation: a program is held out iff the CRC-32 of its text is 0 mod :data:`HELD_OUT_MOD`;
:meth:`ProgramTask.sample` (training, warm start) never returns a held-out program and
:meth:`ProgramTask.sample_eval` (the evaluation set, :func:`sat_ext.demo.warm.eval_problems`) only returns
held-out ones, so the evaluation's programs are never trained on. Both are streams: the same generator state gives
the same problems, and n then m problems are the first n + m.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Sequence

import torch

from .addition import CharVocab, answer_ids
from .expr import ExprError
from .prog import INPUTS, TOKENS, ProgLimits, run_program, to_python


class TokenVocab(CharVocab):
    """:class:`~sat_ext.demo.tasks.addition.CharVocab` over multi-character tokens: ids 0..len(tokens)-1 are the tokens,
    then ``<pad>``, ``<bos>``, ``<eos>``; :meth:`encode` takes a token sequence."""

    def __init__(self, tokens: Sequence[str]) -> None:
        super().__init__(tuple(tokens))  # type: ignore[arg-type]  # CharVocab indexes, hashes and counts: a tuple works

    def encode(self, tokens: Sequence[str]) -> list[int]:  # type: ignore[override]
        """Ids of ``tokens`` (tokens of the vocabulary only; anything else raises KeyError)."""
        return [self.stoi[t] for t in tokens]

    def tokens(self, ids: Sequence[int]) -> list[str] | None:
        """The token strings of ``ids``, or None if any id is a special token or out of range."""
        if any(not 0 <= i < len(self.chars) for i in ids):
            return None
        return [self.chars[i] for i in ids]


PROMPT_TOKENS = ("=", ",")
PROGRAM_VOCAB = TokenVocab(TOKENS + PROMPT_TOKENS)
PROBES: tuple[tuple[int, int, int], ...] = ((1, 2, 2), (2, 1, 2), (2, 2, 3), (2, 3, 1))
CONDITIONS: tuple[tuple[str, str], ...] = (("x", "y"), ("x", "z"), ("y", "z"))
N_TESTS = 8
HELD_OUT_MOD = 8
_CANDIDATES = 32  # hidden-test candidate inputs drawn per problem (4 + 4 are kept)
_DRAWS = 9 + 3 * _CANDIDATES  # uniforms per candidate problem: condition, loop?, loop side, k, k, c, c, sign, sign
_LOOP_HEAD = ("sum", "(", "i", "*")


def affine_arm(w: str, k: int, sign: str, c: int) -> tuple[str, ...]:
    """``w * k + c`` or ``w * k - c`` as tokens."""
    return (w, "*", str(k), sign, str(c))


def loop_arm(w: str, k: int, c: int) -> tuple[str, ...]:
    """``sum ( i * k + c for i in range ( w ) )`` as tokens."""
    return (*_LOOP_HEAD, str(k), "+", str(c), "for", "i", "in", "range", "(", w, ")", ")")


@dataclass(frozen=True)
class Arm:
    """One side of the conditional: ``w * k + c`` (``c`` may be negative), or ``sum(i * k + c for i in
    range(w))`` when ``loop``; ``w`` is the index of the input (0, 1, 2 = x, y, z)."""

    loop: bool
    w: int
    k: int
    c: int

    def tokens(self) -> tuple[str, ...]:
        if self.loop:
            return loop_arm(INPUTS[self.w], self.k, self.c)
        return affine_arm(INPUTS[self.w], self.k, "-" if self.c < 0 else "+", abs(self.c))

    def value(self, xyz: Sequence[int]) -> int:
        """The arm's value at ``xyz`` in closed form (what the interpreter computes; the tests check it)."""
        w = xyz[self.w]
        if self.loop:
            return self.k * (w * (w - 1) // 2) + self.c * w if w > 0 else 0
        return self.k * w + self.c


def is_held_out(program: Sequence[str]) -> bool:
    """Whether ``program`` belongs to the evaluation split (CRC-32 of its text, 0 mod :data:`HELD_OUT_MOD`)."""
    return zlib.crc32(" ".join(program).encode()) % HELD_OUT_MOD == 0


def format_output(value: int) -> str:
    """An example's output in three characters: ``017``, ``405``, ``-04``; ValueError outside -99..999."""
    if not -99 <= value <= 999:
        raise ValueError(f"output {value} does not fit three characters")
    return f"{value:03d}" if value >= 0 else f"-{-value:02d}"


@dataclass(frozen=True)
class ProgramProblem:
    """A hidden program (tokens), its outputs at :data:`PROBES` (shown), its hidden test inputs and their outputs."""

    program: tuple[str, ...]
    examples: tuple[int, ...]
    tests: tuple[tuple[int, int, int], ...]
    expected: tuple[int, ...]

    @property
    def prompt(self) -> list[str]:
        """The prompt's tokens (without ``<bos>``): ``x y z = o o o`` per probe, separated by ``,``."""
        out: list[str] = []
        for j, (xyz, value) in enumerate(zip(PROBES, self.examples)):
            out += ([","] if j else []) + [str(v) for v in xyz] + ["="] + list(format_output(value))
        return out

    @property
    def text(self) -> str:
        """The hidden program as Python source."""
        return to_python(self.program)


def partial_credit(program: Sequence[str] | None, problem: ProgramProblem, limits: ProgLimits = ProgLimits()) -> float:
    """Fraction of ``problem``'s hidden tests on which ``program`` (tokens) returns the expected value; 0.0 for
    None, a program that does not parse, and per test for an evaluation that breaks a limit."""
    if program is None:
        return 0.0
    try:
        outputs = run_program(program, problem.tests, limits)
    except ExprError:
        return 0.0
    return sum(o == e for o, e in zip(outputs, problem.expected)) / len(problem.expected)


class ProgramTask:
    """Problems from the seeded generator of the module docstring; rewards = fraction of hidden tests passed.

    ``prompt_len`` = 32 (``<bos>`` + 4 examples of 7 tokens + 3 commas); ``response_len`` = 26 (a program of up to
    25 tokens and ``<eos>``); ``max_positions`` = 64 (the policy's position budget, twice the other tasks').
    ``loop_prob`` is the chance that a problem has a loop arm (then on either side with equal chance).
    """

    name = "program"
    reward_name = "fraction of hidden tests passed"

    def __init__(self, vocab: TokenVocab = PROGRAM_VOCAB, limits: ProgLimits = ProgLimits(), loop_prob: float = 2 / 3):
        if not 0.0 <= loop_prob <= 1.0:
            raise ValueError(f"loop_prob must be in [0, 1], got {loop_prob}")
        self.vocab = vocab
        self.limits = limits
        self.loop_prob = loop_prob
        self.prompt_len = 1 + len(PROBES) * 7 + len(PROBES) - 1
        self.response_len = 26
        self.max_positions = 64

    # -- the generator
    def _candidate(self, g: torch.Generator) -> tuple[tuple[str, ...], tuple[Arm, Arm], list[tuple[int, int, int]]]:
        """One candidate from ``g`` (one draw of :data:`_DRAWS` uniforms, so the problems form a stream: n then m
        problems are the first n + m): its program, its two arms and its hidden-test candidate inputs."""
        u = torch.rand(_DRAWS, generator=g).tolist()
        pick = lambda j, n: int(u[j] * n)  # noqa: E731  (u < 1: 0..n-1)
        cu, cv = CONDITIONS[pick(0, len(CONDITIONS))]
        loop_side = pick(2, 2) if u[1] < self.loop_prob else -1
        arms: list[Arm] = []
        for s, w in enumerate((cu, cv)):
            k, c = 1 + pick(3 + s, 9), pick(5 + s, 10)
            sign = -1 if s != loop_side and c and u[7 + s] < 0.5 else 1
            arms.append(Arm(s == loop_side, INPUTS.index(w), k, sign * c))
        program = (*arms[0].tokens(), "if", cu, "<", cv, "else", *arms[1].tokens())
        cand = [(pick(j, 10), pick(j + 1, 10), pick(j + 2, 10)) for j in range(9, _DRAWS, 3)]
        return program, (arms[0], arms[1]), cand

    def _complete(self, program: tuple[str, ...], arms: tuple[Arm, Arm], cand: list[tuple[int, int, int]]):
        """The problem of ``program``: its outputs at :data:`PROBES` and 4 + 4 hidden tests (distinct, none a probe,
        in draw order) from the candidate inputs ``cand``, each output from the arms' closed forms."""
        at = program.index("if")
        iu, iv = INPUTS.index(program[at + 1]), INPUTS.index(program[at + 3])
        fresh = list(dict.fromkeys(t for t in cand if t not in PROBES))
        half = N_TESTS // 2
        tests = [t for t in fresh if t[iu] < t[iv]][:half] + [t for t in fresh if not t[iu] < t[iv]][:half]
        tests += [t for t in fresh if t not in tests][: N_TESTS - len(tests)]  # a short side: fill from the rest
        value = lambda t: arms[0].value(t) if t[iu] < t[iv] else arms[1].value(t)  # noqa: E731
        return ProgramProblem(program, tuple(map(value, PROBES)), tuple(tests), tuple(map(value, tests)))

    def _sample_split(self, n: int, g: torch.Generator, held_out: bool) -> list[ProgramProblem]:
        """The next ``n`` problems of one split from the candidate stream ``g``."""
        out: list[ProgramProblem] = []
        while len(out) < n:
            program, arms, cand = self._candidate(g)
            if is_held_out(program) == held_out:
                out.append(self._complete(program, arms, cand))
        return out

    def sample(self, n: int, generator: torch.Generator) -> list[ProgramProblem]:
        """``n`` training problems from ``generator`` (same generator state -> same problems; never held out)."""
        return self._sample_split(n, generator, held_out=False)

    def sample_eval(self, n: int, generator: torch.Generator) -> list[ProgramProblem]:
        """``n`` held-out problems from ``generator`` (the evaluation set; disjoint from :meth:`sample`'s)."""
        return self._sample_split(n, generator, held_out=True)

    # -- the Task interface
    def prompt_ids(self, problems: list[ProgramProblem]) -> torch.Tensor:
        """(n, prompt_len) long tensor: ``<bos>`` and the prompt's tokens."""
        return torch.tensor([[self.vocab.bos] + self.vocab.encode(p.prompt) for p in problems], dtype=torch.long)

    def target_ids(self, problems: list[ProgramProblem]) -> torch.Tensor:
        """(n, response_len) long tensor: the generator's program, ``<eos>``, then ``<pad>``."""
        return answer_ids(self.vocab, [p.program for p in problems], self.response_len)  # type: ignore[misc]

    def reward(self, problem: ProgramProblem, response: list[int] | torch.Tensor) -> float:
        """Fraction of hidden tests passed by the program before the first ``<eos>`` (0.0 without one)."""
        ids = response.tolist() if isinstance(response, torch.Tensor) else list(response)
        if self.vocab.eos not in ids:
            return 0.0
        return partial_credit(self.vocab.tokens(ids[: ids.index(self.vocab.eos)]), problem, self.limits)

    def rewards(self, problems: list[ProgramProblem], responses: torch.Tensor) -> torch.Tensor:
        """(n,) float rewards of ``responses`` (n, L) for ``problems``."""
        return torch.tensor([self.reward(p, r) for p, r in zip(problems, responses)], dtype=torch.float32)


__all__ = [
    "CONDITIONS",
    "N_TESTS",
    "PROBES",
    "PROGRAM_VOCAB",
    "ProgramProblem",
    "ProgramTask",
    "TokenVocab",
    "format_output",
    "is_held_out",
    "partial_credit",
]
