"""The demo's verifiable task: two-digit addition, a char-level vocabulary, and an exact-match reward.

A problem is ``"ab+cd="`` with zero-padded operands (so every prompt has the same length, no padding
inside the prompt); the answer is the sum written without leading zeros, ended by ``<eos>``:
``07+58=`` -> ``65<eos>``. The reward of a response is 1.0 if its text up to the first ``<eos>`` is
exactly the sum and an ``<eos>`` was emitted, else 0.0 (malformed, truncated or wrong).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CHARS = "0123456789+="


class CharVocab:
    """Token ids: the characters of ``chars`` (0..len-1), then ``<pad>``, ``<bos>``, ``<eos>``; for the addition
    task's ``CHARS``: 0-11, then ``<pad>`` 12, ``<bos>`` 13, ``<eos>`` 14."""

    def __init__(self, chars: str = CHARS) -> None:
        if len(set(chars)) != len(chars):
            raise ValueError(f"vocabulary characters must be distinct, got {chars!r}")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.pad = len(chars)
        self.bos = self.pad + 1
        self.eos = self.pad + 2
        self.size = self.pad + 3

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (characters of ``chars`` only; anything else raises KeyError)."""
        return [self.stoi[c] for c in text]

    def decode(self, ids: list[int] | torch.Tensor, stop_at_eos: bool = True) -> str:
        """Text of ``ids``; special tokens are written ``<pad>``/``<bos>``/``<eos>``; stops after the first eos."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i == self.eos:
                out.append("<eos>")
                if stop_at_eos:
                    break
            elif i == self.pad:
                out.append("<pad>")
            elif i == self.bos:
                out.append("<bos>")
            elif 0 <= i < len(self.chars):
                out.append(self.chars[i])
            else:
                out.append("<unk>")
        return "".join(out)


VOCAB = CharVocab()


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def prompt(self) -> str:
        return f"{self.a:02d}+{self.b:02d}="

    @property
    def answer(self) -> str:
        return str(self.a + self.b)


class AdditionTask:
    """Problems ``a+b=`` with ``0 <= a, b < max_operand`` (at most 100: two digits), drawn from a seeded stream.

    ``prompt_len`` = 7 (``<bos>`` + 6 characters); ``response_len`` = 4 (up to three digits + ``<eos>``).
    """

    name = "addition"
    reward_name = "exact match"

    def __init__(self, max_operand: int = 100, vocab: CharVocab = VOCAB):
        if not 1 <= max_operand <= 100:
            raise ValueError(f"max_operand must be in [1, 100], got {max_operand}")
        self.max_operand = max_operand
        self.vocab = vocab
        self.prompt_len = 7
        self.response_len = 4

    def sample(self, n: int, generator: torch.Generator) -> list[Problem]:
        """``n`` problems from ``generator`` (same generator state -> same problems)."""
        ab = torch.randint(0, self.max_operand, (n, 2), generator=generator)
        return [Problem(int(a), int(b)) for a, b in ab.tolist()]

    def prompt_ids(self, problems: list[Problem]) -> torch.Tensor:
        """(n, prompt_len) long tensor: ``<bos>`` and the prompt characters."""
        return torch.tensor([[self.vocab.bos] + self.vocab.encode(p.prompt) for p in problems], dtype=torch.long)

    def target_ids(self, problems: list[Problem]) -> torch.Tensor:
        """(n, response_len) long tensor: the answer, ``<eos>``, then ``<pad>``."""
        return answer_ids(self.vocab, [p.answer for p in problems], self.response_len)

    def reward(self, problem: Problem, response: list[int] | torch.Tensor) -> float:
        """1.0 iff ``response`` is the answer's digits followed by ``<eos>`` (anything after it is ignored)."""
        return exact_match_reward(response, problem.answer, self.vocab)

    def rewards(self, problems: list[Problem], responses: torch.Tensor) -> torch.Tensor:
        """(n,) float rewards of ``responses`` (n, L) for ``problems``."""
        return torch.tensor([self.reward(p, r) for p, r in zip(problems, responses)], dtype=torch.float32)


def answer_ids(vocab: CharVocab, answers: list[str], length: int) -> torch.Tensor:
    """(n, length) long tensor: each answer's ids, ``<eos>``, then ``<pad>`` (the warm start's targets)."""
    rows = []
    for a in answers:
        r = vocab.encode(a) + [vocab.eos]
        if len(r) > length:
            raise ValueError(f"answer {a!r} and <eos> take {len(r)} tokens, more than {length}")
        rows.append(r + [vocab.pad] * (length - len(r)))
    return torch.tensor(rows, dtype=torch.long)


def response_mask(responses: torch.Tensor, eos: int = VOCAB.eos) -> torch.Tensor:
    """(n, L) bool: tokens up to and including the first ``<eos>`` (all of them when there is none)."""
    is_eos = responses == eos
    before = torch.cumsum(is_eos.long(), dim=-1) - is_eos.long()  # eos seen strictly before this position
    return before == 0


def exact_match_reward(response: list[int] | torch.Tensor, answer: str, vocab: CharVocab = VOCAB) -> float:
    """Exact match of the text before the first ``<eos>`` against ``answer``; no ``<eos>`` -> 0.0."""
    ids = response.tolist() if isinstance(response, torch.Tensor) else list(response)
    if vocab.eos not in ids:
        return 0.0
    body = ids[: ids.index(vocab.eos)]
    if not body or any(not 0 <= i <= 9 for i in body):  # digits only: no '+', '=', pad or bos
        return 0.0
    return 1.0 if "".join(vocab.chars[i] for i in body) == answer else 0.0
