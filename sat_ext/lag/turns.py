"""Per-turn weight versions of multi-turn (agent) episodes and the per-token lag they give, framework-free.

An agent episode is generated turn by turn, and a weight sync between two turns (or inside one: the rollout
aborts the turn and resumes it on the new weights) makes its turns come from different versions. A trajectory's
version tags (:class:`~sat_ext.lag.versions.VersionSpan`) keep only the oldest and newest; the turn record kept
under :data:`TURNS_KEY` keeps, per assistant turn, ``[tokens, oldest, newest]``. A token's lag is the trainer's
version minus its turn's oldest version (:func:`~sat_ext.lag.versions.sample_lag`); a turn generated across a
sync counts all its tokens at its oldest version, the bound's convention (docs/lag.md, "Definitions").

:class:`TokenLagMetrics` turns the records of the batches a trainer takes into per-step metrics
(``lag/`` prefix; emitted only on steps whose batches carried a record):

- ``token_hist/<bin>``: generated (loss) tokens per lag, over the lag histogram's bins (``lag.hist_edges``),
  summed over the step's batches;
- ``token_lag/min|mean|max``: their lag;
- ``token_lag_spread/max``: the widest range of token lags inside one batch;
- ``split_turn_tokens``: tokens of turns generated across a sync;
- ``token_unrecorded``: loss tokens the records do not account for (a trajectory without a record, or whose
  record's token count differs from its loss tokens): 0 when every token's lag is known;
- ``turn_tag_mismatch``: trajectories whose version tags are not their turns' oldest and newest versions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .metrics import hist_bin_index, hist_bin_names
from .versions import VersionSpan, sample_lag

TURNS_KEY = "sat_ext_turns"
"""The key of the turn record in a trajectory's extra fields: a list of ``[tokens, oldest, newest]``, one per
assistant turn, in order."""


@dataclass(frozen=True)
class Turn:
    """One assistant turn: ``tokens`` generated tokens, by the versions ``span``."""

    tokens: int
    span: VersionSpan

    @classmethod
    def parse(cls, raw: object, where: str) -> Turn:
        """A turn from its record ``[tokens, oldest, newest]``; raises ValueError naming ``where`` and the value."""
        ok = isinstance(raw, (list, tuple)) and len(raw) == 3
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw)
        if not ok or raw[2] < raw[1]:
            raise ValueError(
                f"{where}: a turn record must be [tokens, oldest, newest] with 0 <= oldest <= newest, got {raw!r}"
            )
        return cls(raw[0], VersionSpan(raw[1], raw[2]))

    def as_list(self) -> list[int]:
        """The record ``[tokens, oldest, newest]``."""
        return [self.tokens, self.span.oldest, self.span.newest]


def parse_turns(raw: object, where: str) -> tuple[Turn, ...]:
    """The turns of one record (a list of ``[tokens, oldest, newest]``)."""
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{where}: {TURNS_KEY} must be a list of [tokens, oldest, newest], got {raw!r}")
    return tuple(Turn.parse(t, f"{where} turn {i}") for i, t in enumerate(raw))


def trim_turns(turns: Sequence[Turn], kept: int) -> list[Turn]:
    """The turns as they survive a response cut to its first ``kept`` generated tokens (verl cuts an episode's
    response to ``response_length``: the generated tokens kept are a prefix of all of them, turn by turn)."""
    out = []
    for turn in turns:
        if kept <= 0:
            break
        out.append(Turn(min(turn.tokens, kept), turn.span))
        kept -= turn.tokens
    return out


@dataclass(frozen=True)
class Trajectory:
    """What a trainer knows of one trajectory it trains on: its turn record (None: none was kept), its loss
    tokens (``response_mask`` ones) and its version tags (None: the rollout reported none)."""

    turns: tuple[Turn, ...] | None
    loss_tokens: int
    span: VersionSpan | None


def token_lags(version: int, turns: Sequence[Turn]) -> Counter[int]:
    """Tokens per lag of ``turns`` trained on while the trainer holds ``version``."""
    out: Counter[int] = Counter()
    for turn in turns:
        out[sample_lag(version, turn.span)] += turn.tokens
    return out


class TokenLagMetrics:
    """Accumulates the per-token lags of a step's batches; :meth:`flush` returns the metrics (module doc)."""

    def __init__(self, hist_edges: Sequence[int], prefix: str = "lag/"):
        self.hist_edges = tuple(hist_edges)
        self.prefix = prefix
        self._reset()

    def _reset(self) -> None:
        self.lags: Counter[int] = Counter()
        self.spread = 0
        self.split = 0
        self.unrecorded = 0
        self.mismatched = 0
        self.recorded = False

    def record_batch(self, version: int, trajectories: Sequence[Trajectory]) -> None:
        """One batch trained on while the trainer holds ``version``."""
        batch: Counter[int] = Counter()
        for t in trajectories:
            if t.turns is None:
                self.unrecorded += t.loss_tokens
                continue
            self.recorded = True
            batch += token_lags(version, t.turns)
            self.split += sum(turn.tokens for turn in t.turns if turn.span.spans_syncs)
            self.unrecorded += abs(t.loss_tokens - sum(turn.tokens for turn in t.turns))
            if t.turns and t.span is not None:
                tagged = VersionSpan(min(u.span.oldest for u in t.turns), max(u.span.newest for u in t.turns))
                self.mismatched += tagged != t.span
        if batch:
            self.spread = max(self.spread, max(batch) - min(batch))
        self.lags += batch

    def flush(self) -> dict[str, float]:
        """The step's metrics, {} when no batch since the last flush carried a turn record; starts a new step."""
        if not self.recorded:
            self._reset()
            return {}
        p, hist = self.prefix, [0] * len(self.hist_edges)
        for lag, tokens in self.lags.items():
            hist[hist_bin_index(self.hist_edges, lag)] += tokens
        total = sum(self.lags.values())
        out = {f"{p}token_hist/{name}": float(c) for name, c in zip(hist_bin_names(self.hist_edges), hist, strict=True)}
        out.update(
            {
                f"{p}token_lag/min": float(min(self.lags, default=0)),
                f"{p}token_lag/mean": sum(lag * n for lag, n in self.lags.items()) / total if total else 0.0,
                f"{p}token_lag/max": float(max(self.lags, default=0)),
                f"{p}token_lag_spread/max": float(self.spread),
                f"{p}split_turn_tokens": float(self.split),
                f"{p}token_unrecorded": float(self.unrecorded),
                f"{p}turn_tag_mismatch": float(self.mismatched),
            }
        )
        self._reset()
        return out
