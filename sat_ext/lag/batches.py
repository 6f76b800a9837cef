"""Which prompt groups the trainer takes next, framework-free: the batch-wise rule and the over-bound rule.

The paper's batch-wise asynchrony (Fig. 1, §5.1; docs/lag.md): a batch's lag must not depend on how long its responses
are. Groups are ordered first in, first out by submission (the step they were submitted at, then the order they were
dispatched to the rollout in, then their id: an order fixed at submission, blind to length), and a batch is the first
``batch_size`` groups in that order, taken only once every one of them has finished (:func:`next_batch`). Taking them
in dispatch order lets a rollout that serves requests first come, first served finish the batch the trainer needs
first, while it generates the next one. The
alternative, :func:`first_finished`, takes the oldest groups among those already finished; it never waits for a
straggler, so the stragglers (the long responses) are the ones that grow stale and cross the bound.

The verl sampler (:mod:`sat_ext.verl.lag.sampler`), the in-process controller (:mod:`sat_ext.lag.controller`,
which the demo and the simulations drive) and the OpenRLHF adapter's consumption check use these functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .config import LagConfig


@dataclass(frozen=True)
class GroupState:
    """One prompt group as the selection rules see it.

    uid: its id (comparable within one run). submitted: the step it was submitted at. finished: all of its
    samples are done. position: the order it was dispatched to the rollout in (0 where not known).
    """

    uid: str | int
    submitted: int
    finished: bool
    position: int = 0


def fifo_key(group: GroupState) -> tuple[int, int, str | int]:
    """First in, first out: by submission step, then dispatch order, then id."""
    return group.submitted, group.position, group.uid


def next_batch(groups: Iterable[GroupState], batch_size: int) -> list[GroupState] | None:
    """The batch-wise rule: the first ``batch_size`` groups in :func:`fifo_key` order, or None while one of
    them (or a group not yet submitted: fewer than ``batch_size`` known) is still unfinished."""
    head = sorted(groups, key=fifo_key)[:batch_size]
    if len(head) < batch_size or not all(g.finished for g in head):
        return None
    return head


def first_finished(groups: Iterable[GroupState], batch_size: int) -> list[GroupState] | None:
    """The drop rule's selection: the ``batch_size`` oldest finished groups (None while fewer have finished)."""
    done = sorted((g for g in groups if g.finished), key=fifo_key)[:batch_size]
    return done if len(done) == batch_size else None


def over_bound(cfg: LagConfig, lag: int) -> bool:
    """Whether a sample with ``lag`` (in versions) may not be trained on: only bounded mode has a bound."""
    return cfg.mode == "bounded" and lag > cfg.max_lag


def waits_for_stragglers(cfg: LagConfig) -> bool:
    """Whether consumption follows :func:`next_batch` (interval mode, and bounded mode with ``over_bound=wait``)
    rather than :func:`first_finished` (off mode, bounded mode with ``drop`` / ``regenerate``)."""
    return cfg.mode == "interval" or (cfg.mode == "bounded" and cfg.over_bound == "wait")
