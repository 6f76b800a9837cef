"""The ``lag:`` block as one validated, framework-free dataclass, and the engine compatibility check.

Errors name the key as the user wrote it (``lag.max_lag``) and the bad value, e.g.
``lag.max_lag must be an integer >= 0, got -1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

MODES = ("off", "bounded", "interval")
OVER_BOUND = ("wait", "drop", "regenerate")
DEFAULT_HIST_EDGES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32)


class LagConfigError(ValueError):
    """A lag setting is invalid or incompatible; ``key`` is the setting as the user spells it."""

    def __init__(self, key: str, value: Any, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"{key} {reason}, got {value!r}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class LagConfig:
    """Lag control settings (docs/lag.md, "Modes and settings"); construction validates every field.

    mode: "off" (tag and measure only), "bounded" (no consumed sample has lag > max_lag) or
        "interval" (weights are synced every ``interval`` trainer steps; lags follow a fixed schedule).
    max_lag: bounded mode's L, in weight syncs (the trainer syncs after every step in this mode).
    interval: interval mode's k, trainer steps between weight syncs.
    prefetch: interval mode: how many trainer steps ahead of the trainer the rollout generates
        (0 = a batch is generated after the previous step, 1 = one-step-off, ...).
    over_bound: bounded mode: "wait" (the default: groups are consumed first in, first out and the trainer
        waits for a straggler, so admission alone keeps every lag <= max_lag and nothing is dropped; a sample
        over the bound is a fault, dropped and counted under ``lag/dropped``), "drop" (take whatever finished
        first; a group over the bound is discarded and counted) or "regenerate" (as drop, but its id is
        generated again with current weights).
    batch_size: samples the trainer consumes per step.
    max_outstanding: off mode's queue bound (samples in flight + ready); None = 2 * batch_size.
    hist_edges: left edges of the lag histogram bins (strictly increasing, from 0; the last bin is open).
    """

    mode: str = "off"
    max_lag: int | None = None
    interval: int | None = None
    prefetch: int = 0
    over_bound: str = "wait"
    batch_size: int = 1
    max_outstanding: int | None = None
    hist_edges: tuple[int, ...] = field(default=DEFAULT_HIST_EDGES)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise LagConfigError("lag.mode", self.mode, f"must be one of {'|'.join(MODES)}")
        if self.over_bound not in OVER_BOUND:
            raise LagConfigError("lag.over_bound", self.over_bound, f"must be one of {'|'.join(OVER_BOUND)}")
        if self.over_bound != "wait" and self.mode != "bounded":
            raise LagConfigError(
                "lag.over_bound", self.over_bound, f"applies only to lag.mode=bounded (mode is {self.mode!r})"
            )
        if self.mode == "bounded":
            if not _is_int(self.max_lag) or self.max_lag < 0:
                raise LagConfigError("lag.max_lag", self.max_lag, "must be an integer >= 0 when lag.mode=bounded")
        elif self.max_lag is not None:
            raise LagConfigError(
                "lag.max_lag", self.max_lag, f"applies only to lag.mode=bounded (mode is {self.mode!r})"
            )
        if self.mode == "interval":
            if not _is_int(self.interval) or self.interval < 1:
                raise LagConfigError("lag.interval", self.interval, "must be an integer >= 1 when lag.mode=interval")
        elif self.interval is not None:
            raise LagConfigError(
                "lag.interval", self.interval, f"applies only to lag.mode=interval (mode is {self.mode!r})"
            )
        if not _is_int(self.prefetch) or self.prefetch < 0:
            raise LagConfigError("lag.prefetch", self.prefetch, "must be an integer >= 0")
        if self.prefetch and self.mode != "interval":
            raise LagConfigError(
                "lag.prefetch", self.prefetch, f"applies only to lag.mode=interval (mode is {self.mode!r})"
            )
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise LagConfigError("lag.batch_size", self.batch_size, "must be an integer >= 1")
        if self.max_outstanding is not None:
            if self.mode != "off":
                raise LagConfigError(
                    "lag.max_outstanding", self.max_outstanding, f"applies only to lag.mode=off (mode is {self.mode!r})"
                )
            if not _is_int(self.max_outstanding) or self.max_outstanding < self.batch_size:
                raise LagConfigError(
                    "lag.max_outstanding",
                    self.max_outstanding,
                    f"must be an integer >= lag.batch_size={self.batch_size} or null (fewer samples in flight than "
                    "one step consumes would never complete a step)",
                )
        edges = tuple(self.hist_edges) if isinstance(self.hist_edges, (list, tuple)) else None
        if (
            not edges
            or not all(_is_int(e) for e in edges)
            or edges[0] != 0
            or any(b <= a for a, b in zip(edges, edges[1:], strict=False))
        ):
            raise LagConfigError(
                "lag.hist_edges", self.hist_edges, "must be a non-empty, strictly increasing list of integers from 0"
            )
        object.__setattr__(self, "hist_edges", edges)

    @property
    def sync_every(self) -> int:
        """Trainer steps between weight syncs: ``interval`` in interval mode, 1 otherwise."""
        return self.interval if self.mode == "interval" else 1

    @property
    def outstanding_limit(self) -> int:
        """Off mode's bound on samples in flight plus ready."""
        return self.max_outstanding if self.max_outstanding is not None else 2 * self.batch_size

    @classmethod
    def from_dict(cls, block: Mapping[str, Any] | None) -> LagConfig:
        """Build from a user's ``lag:`` mapping; an unknown key raises naming it and the known keys."""
        block = dict(block or {})
        known = {f.name for f in fields(cls)}
        for key in block:
            if key not in known:
                raise LagConfigError(
                    f"lag.{key}", block[key], f"is not a lag setting (known: {', '.join(sorted(known))})"
                )
        if "hist_edges" in block and isinstance(block["hist_edges"], list):
            block["hist_edges"] = tuple(block["hist_edges"])
        return cls(**block)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (lists for tuples), round-trips through :meth:`from_dict`."""
        out = asdict(self)
        out["hist_edges"] = list(self.hist_edges)
        return out


@dataclass(frozen=True)
class EngineSettings:
    """What an engine will do and can do, as an adapter reads it from the engine's own config.

    engine: a name for messages (e.g. "verl separate_async").
    partial_rollout: a sample in flight at a weight sync continues on the new weights (spans versions).
    oversampling: the engine may generate more samples than a step consumes and serve the rest later.
    reports_sample_versions: each sample carries the oldest version that generated it.
    can_regenerate: the engine can generate a group over the bound again, with current weights
        (``lag.over_bound=regenerate``).
    prefetch_steps: trainer steps the engine generates ahead of the trainer.
    sync_every: trainer steps between weight broadcasts.
    keys: the engine's own spelling of the settings above, used in messages (e.g.
        {"sync_every": "trainer.v1.separate_async.parameter_sync_step"}).
    """

    engine: str
    partial_rollout: bool
    oversampling: bool
    reports_sample_versions: bool
    can_regenerate: bool
    prefetch_steps: int
    sync_every: int
    keys: Mapping[str, str] = field(default_factory=dict)

    def key(self, name: str) -> str:
        """The engine's name for setting ``name``."""
        return self.keys.get(name, f"{self.engine}:{name}")


def check_compatible(cfg: LagConfig, engine: EngineSettings) -> None:
    """Raise :class:`LagConfigError` if ``engine`` would break what ``cfg`` promises (docs/lag.md, "Modes and
    settings"); return None if not. The one home of the rules that hold for every engine."""
    if cfg.mode == "bounded":
        _check_bounded(cfg, engine)
    elif cfg.mode == "interval":
        _check_interval(cfg, engine)


def _check_bounded(cfg: LagConfig, engine: EngineSettings) -> None:
    """Bounded mode: no consumed sample may have lag > max_lag, and nothing over it may be trained on."""
    if cfg.over_bound == "regenerate" and not engine.can_regenerate:
        raise LagConfigError(
            "lag.over_bound",
            cfg.over_bound,
            f"is not available on {engine.engine}: it cannot generate a group over the bound again with current "
            "weights; use lag.over_bound=wait (nothing dropped) or drop",
        )
    if engine.sync_every != 1:
        raise LagConfigError(
            engine.key("sync_every"),
            engine.sync_every,
            "must be 1 with lag.mode=bounded (lag is counted in weight syncs, one after every trainer step)",
        )
    if engine.prefetch_steps > cfg.max_lag:
        raise LagConfigError(
            engine.key("prefetch_steps"),
            engine.prefetch_steps,
            f"lets a batch be generated up to {engine.prefetch_steps} weight syncs before it is trained, over "
            f"lag.max_lag={cfg.max_lag}; set it to at most {cfg.max_lag}",
        )
    if not engine.reports_sample_versions and (engine.partial_rollout or engine.oversampling):
        what = "partial_rollout" if engine.partial_rollout else "oversampling"
        raise LagConfigError(
            engine.key(what),
            True,
            f"cannot be bounded by lag.mode=bounded on {engine.engine}: its samples carry no per-sample version",
        )
    if engine.oversampling and cfg.over_bound == "wait":
        raise LagConfigError(
            engine.key("oversampling"),
            True,
            "breaks lag.mode=bounded with lag.over_bound=wait: the extra samples are trained at later steps without "
            "regeneration, outside the rollout's bound; turn oversampling off, or use lag.over_bound=drop / "
            "regenerate (leftovers over the bound are then dropped or generated again at consumption)",
        )


def _check_interval(cfg: LagConfig, engine: EngineSettings) -> None:
    """Interval mode: every batch's lag follows the fixed schedule of ``interval`` and ``prefetch``."""
    if engine.sync_every != cfg.interval:
        raise LagConfigError(
            engine.key("sync_every"),
            engine.sync_every,
            f"must equal lag.interval={cfg.interval} with lag.mode=interval",
        )
    if engine.prefetch_steps != cfg.prefetch:
        raise LagConfigError(
            engine.key("prefetch_steps"),
            engine.prefetch_steps,
            f"must equal lag.prefetch={cfg.prefetch} with lag.mode=interval",
        )
    if engine.partial_rollout and cfg.prefetch > 0:
        raise LagConfigError(
            engine.key("partial_rollout"),
            True,
            f"breaks lag.mode=interval with lag.prefetch={cfg.prefetch}: a sample in flight at a sync would span "
            "versions and leave the schedule; turn partial rollout off or use lag.prefetch=0",
        )
    if engine.oversampling:
        raise LagConfigError(
            engine.key("oversampling"),
            True,
            "breaks lag.mode=interval: leftover samples served at a later step leave the schedule; turn "
            "oversampling off",
        )
