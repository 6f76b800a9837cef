"""The agent task (``--task agent``): multi-turn calculator episodes with a sparse terminal reward.

A problem is a sum of 2-7 one-digit operands whose count is heavy-tailed (P(k) proportional to (k - 1)^-1.5, so
most episodes are short and a few are long). The policy may not answer at once: it calls a calculator once per
operand, carrying the running value, and then answers. Every assistant turn is :data:`TURN_LEN` generated tokens,
every tool observation :data:`OBS_LEN` tokens the environment writes (never sampled, out of the loss)::

    prompt  <bos>3+5+2________                 (the operands, filled with '_' to a fixed length)
    turn 1  03+5   -> observation >08           (a call: the running value in two digits, '+', the next operand)
    turn 2  08+2   -> observation >10
    turn 3  =10<eos>                            (the answer ends the episode)

A turn that is neither a well-formed call (``dd+d`` whose result is below 100) nor an answer (``=dd<eos>``) is a
tool-format failure: it is counted, the tool answers ``>??`` and the episode goes on; a turn with ``<eos>`` ends the
episode whatever it holds, as does the :data:`MAX_TURNS`-th turn. The reward is 1.0 iff the episode ended with the
answer equal to the sum, else 0.0 (nothing for a correct call, nothing for format).

:class:`Episode` is the one state machine both the rollout (``sat_ext.demo.agent_producer``, turns generated
asynchronously across weight versions) and the evaluation (:meth:`AgentTask.respond`, in lockstep) drive; a
response is the episode's transcript ``[turn | observation | turn | ...]`` after the prompt, padded to
:data:`RESPONSE_LEN`, and :meth:`AgentTask.rewards` replays a transcript through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .addition import CharVocab

CHARS = "0123456789+=>?_"
MIN_OPERANDS, MAX_OPERANDS = 2, 7
TAIL = 1.5  # P(k operands) proportional to (k - 1) ** -TAIL
TURN_LEN = 4  # tokens an assistant turn generates: a call "dd+d" or an answer "=dd<eos>"
OBS_LEN = 3  # tokens of a tool observation: ">dd" or ">??"
MAX_TURNS = MAX_OPERANDS + 1  # the calls and the answer of the longest problem, and one turn to spare
PROMPT_LEN = 1 + 2 * MAX_OPERANDS - 1  # <bos> and "a+b+...", filled with '_'
RESPONSE_LEN = MAX_TURNS * TURN_LEN + (MAX_TURNS - 1) * OBS_LEN  # no observation after the last turn
VOCAB = CharVocab(CHARS)


@dataclass(frozen=True)
class AgentProblem:
    """A sum of one-digit ``operands`` (2 to 7 of them)."""

    operands: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.operands)

    @property
    def prompt(self) -> str:
        return "+".join(str(o) for o in self.operands).ljust(PROMPT_LEN - 1, "_")

    def transcript(self) -> str:
        """The gold episode: one call per operand after the first (running value in two digits), each followed
        by its observation, then the answer (without ``<eos>``)."""
        run, out = self.operands[0], []
        for o in self.operands[1:]:
            out.append(f"{run:02d}+{o}>{run + o:02d}")
            run += o
        return "".join(out) + f"={run:02d}"


@dataclass
class TurnRecord:
    """One assistant turn of an episode: its tokens and where they start in the response, the version of the
    weights that generated it, and (in the rollout) the engine's and pi^(l)'s log-probs of its tokens."""

    start: int
    tokens: list[int]
    generated: int  # tokens up to and including <eos> (all TURN_LEN without one): the turn's loss tokens
    version: int = 0
    rollout_log_prob: torch.Tensor | None = None
    checkpoint_log_prob: torch.Tensor | None = None


@dataclass
class Episode:
    """One episode's state: its context (prompt + transcript so far), its turns, and how it ended."""

    problem: AgentProblem
    ids: list[int]
    prompt_len: int
    turns: list[TurnRecord] = field(default_factory=list)
    done: bool = False
    reward: float = 0.0
    calls: int = 0
    format_failures: int = 0
    answered: bool = False
    ready: int = 0  # the tick from which the rollout may generate its next turn

    def add_turn(self, tokens: list[int], vocab: CharVocab = VOCAB, **record) -> str | None:
        """Append one generated turn and what the environment answers; returns the observation text (None when
        the episode ended). ``record`` fills the turn's :class:`TurnRecord` (version, log-probs)."""
        if self.done:
            raise RuntimeError("add_turn on an episode that has ended")
        if len(tokens) != TURN_LEN:
            raise ValueError(f"a turn is {TURN_LEN} tokens, got {len(tokens)}")
        generated = tokens.index(vocab.eos) + 1 if vocab.eos in tokens else TURN_LEN
        self.turns.append(TurnRecord(len(self.ids) - self.prompt_len, list(tokens), generated, **record))
        self.ids.extend(tokens)
        kind, value = parse_turn(tokens, vocab)
        if kind == "answer":
            self.done, self.answered = True, True
            self.reward = 1.0 if value == self.problem.total else 0.0
            return None
        self.format_failures += kind == "bad"
        self.calls += kind == "call"
        if vocab.eos in tokens or len(self.turns) == MAX_TURNS:
            self.done = True
            return None
        obs = ">??" if kind == "bad" else f">{value:02d}"
        self.ids.extend(vocab.encode(obs))
        return obs

    @property
    def response(self) -> list[int]:
        return self.ids[self.prompt_len :]


def parse_turn(tokens: list[int], vocab: CharVocab = VOCAB) -> tuple[str, int]:
    """("call", the calculator's result), ("answer", the value) or ("bad", 0) for one turn's tokens."""
    text = vocab.decode(tokens, stop_at_eos=False)
    if len(text) == 8 and text.startswith("=") and text[1:3].isdigit() and text[3:] == "<eos>":
        return "answer", int(text[1:3])
    if len(text) == 4 and text[:2].isdigit() and text[2] == "+" and text[3].isdigit():
        result = int(text[:2]) + int(text[3])
        if result < 100:
            return "call", result
    return "bad", 0


def operand_counts(n: int, generator: torch.Generator) -> torch.Tensor:
    """(n,) operand counts in [MIN_OPERANDS, MAX_OPERANDS], P(k) proportional to (k - 1)^-TAIL."""
    ks = torch.arange(MIN_OPERANDS, MAX_OPERANDS + 1)
    p = (ks - 1).double() ** -TAIL
    return ks[torch.multinomial(p / p.sum(), n, replacement=True, generator=generator)]


class AgentTask:
    """Multi-turn calculator episodes (module doc): ``prompt_len`` 14, responses of up to ``RESPONSE_LEN`` = 53
    tokens (8 turns of 4 and 7 observations of 3)."""

    name = "agent"
    reward_name = "sparse terminal (the answer after tool calls)"
    episodic = True
    max_positions = 72  # prompt 14 + response 53, rounded up

    def __init__(self, vocab: CharVocab = VOCAB):
        self.vocab = vocab
        self.prompt_len = PROMPT_LEN
        self.response_len = RESPONSE_LEN

    def sample(self, n: int, generator: torch.Generator) -> list[AgentProblem]:
        """``n`` problems from ``generator`` (same generator state -> same problems)."""
        ks = operand_counts(n, generator).tolist()
        digits = torch.randint(0, 10, (n, MAX_OPERANDS), generator=generator).tolist()
        return [AgentProblem(tuple(row[:k])) for k, row in zip(ks, digits)]

    def prompt_ids(self, problems: list[AgentProblem]) -> torch.Tensor:
        """(n, prompt_len): ``<bos>`` and the operands, filled with '_'."""
        return torch.tensor([[self.vocab.bos] + self.vocab.encode(p.prompt) for p in problems], dtype=torch.long)

    def target_ids(self, problems: list[AgentProblem]) -> torch.Tensor:
        """(n, response_len): the gold transcript (calls, observations, answer), ``<eos>``, then ``<pad>``: the warm
        start's targets (its cross-entropy covers the observations too: the warm start is supervised imitation
        of whole episodes; the RL loss never sees them)."""
        rows = []
        for p in problems:
            r = self.vocab.encode(p.transcript()) + [self.vocab.eos]
            rows.append(r + [self.vocab.pad] * (self.response_len - len(r)))
        return torch.tensor(rows, dtype=torch.long)

    def start(self, problem: AgentProblem) -> Episode:
        """A new episode of ``problem``: its context is the prompt."""
        return Episode(problem, self.prompt_ids([problem])[0].tolist(), self.prompt_len)

    def replay(self, problem: AgentProblem, response: list[int] | torch.Tensor) -> Episode:
        """The episode whose transcript is ``response``, its turns re-read at their fixed offsets (an observation in
        the transcript that is not what the tool answers raises ValueError)."""
        ids = response.tolist() if isinstance(response, torch.Tensor) else list(response)
        ep = self.start(problem)
        while not ep.done:
            at = len(ep.response)
            obs = ep.add_turn(ids[at : at + TURN_LEN], self.vocab)
            if obs is not None and ids[at + TURN_LEN : at + TURN_LEN + OBS_LEN] != self.vocab.encode(obs):
                raise ValueError(f"transcript {self.vocab.decode(ids, False)!r}: the tool answered {obs!r} at {at}")
        return ep

    def rewards(self, problems: list[AgentProblem], responses: torch.Tensor) -> torch.Tensor:
        """(n,) the terminal rewards of the transcripts ``responses`` (n, response_len)."""
        return torch.tensor([self.replay(p, r).reward for p, r in zip(problems, responses)], dtype=torch.float32)

    def respond(
        self,
        policy: torch.nn.Module,
        prompts: torch.Tensor,
        problems: list[AgentProblem],
        generator: torch.Generator,
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> torch.Tensor:
        """(n, response_len) transcripts of ``policy`` playing every problem to the end, all episodes in lockstep
        (turn t of every live episode in one batch): the evaluation's episodes."""
        from ..model import sample

        episodes = [self.start(p) for p in problems]
        for _ in range(MAX_TURNS):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            ctx = torch.tensor([e.ids for e in live], dtype=torch.long)
            turns = sample(policy, ctx, TURN_LEN, generator, temperature, greedy=greedy)
            for e, row in zip(live, turns.tolist()):
                e.add_turn(row, self.vocab)
        return transcripts(episodes, self.response_len, self.vocab.pad)


def transcripts(episodes: list[Episode], length: int, pad: int) -> torch.Tensor:
    """(n, length) the episodes' responses, ``<pad>`` after each."""
    return torch.tensor([e.response + [pad] * (length - len(e.response)) for e in episodes], dtype=torch.long)
