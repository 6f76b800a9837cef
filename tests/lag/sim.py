"""A seeded, tick-based simulation of producers and a trainer around one LagController (simulated time)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from sat_ext.lag import LagConfig, LagController, VersionSpan


def controller_stats(ctl: LagController) -> dict[str, int]:
    """Counts the tests check (from the controller's internals): opened and not consumed, of which ready
    (submitted), and the id counter."""
    return {
        "open": len(ctl._samples),
        "ready": sum(1 for s in ctl._samples.values() if s.span is not None),
        "next_id": ctl._next_id,
    }


@dataclass
class SimResult:
    consumed: list[tuple[int, int, int, int]] = field(default_factory=list)  # (step, sample_id, lag, lag_steps)
    metrics: list[dict[str, float]] = field(default_factory=list)
    max_outstanding: int = 0
    started: int = 0
    controller: LagController | None = None


def simulate(
    cfg: LagConfig,
    seed: int,
    steps: int,
    producers: int = 3,
    gen_time: tuple[float, float] = (0.5, 2.0),
    straggler_prob: float = 0.1,
    straggler_factor: float = 8.0,
    train_time: tuple[float, float] = (0.5, 1.5),
    slow_producers: int = 1,
    dt: float = 0.1,
    max_ticks: int = 200_000,
) -> SimResult:
    """Run until the trainer has completed ``steps`` steps; producers generate with partial-rollout spans.

    Producer i is ``straggler_factor`` times slower when i < slow_producers; any sample may straggle with
    ``straggler_prob``.
    """
    rng = random.Random(seed)
    ctl = LagController(cfg)
    res = SimResult(controller=ctl)
    now = 0.0
    busy: list[tuple[object, float] | None] = [None] * producers  # (claim, done_at)
    trainer_state, trainer_until, batch = "take", 0.0, None
    for _ in range(max_ticks):
        now += dt
        for i in range(producers):
            job = busy[i]
            if job is not None:
                claim, done_at = job
                if now >= done_at:
                    busy[i] = None
                    ctl.submit(claim, ("payload", claim.sample_id), VersionSpan(claim.version, ctl.version))
            if busy[i] is None:
                claim = ctl.claim()
                if claim is not None:
                    res.started += 1
                    duration = rng.uniform(*gen_time)
                    if i < slow_producers:
                        duration *= straggler_factor
                    if rng.random() < straggler_prob:
                        duration *= straggler_factor
                    busy[i] = (claim, now + duration)
        res.max_outstanding = max(res.max_outstanding, controller_stats(ctl)["open"])
        if trainer_state == "take":
            batch = ctl.take()
            if batch is not None:
                for s in batch:
                    res.consumed.append((ctl.steps_done + 1, s.sample_id, s.lag, s.lag_steps))
                trainer_state, trainer_until = "train", now + rng.uniform(*train_time)
        elif trainer_state == "train" and now >= trainer_until:
            trainer_state = "sync" if ctl.complete_step() else "done"
        if trainer_state == "sync" and ctl.sync_allowed():
            ctl.record_sync()
            trainer_state = "done"
        if trainer_state == "done":
            res.metrics.append(ctl.pop_metrics())
            if ctl.steps_done >= steps:
                return res
            trainer_state = "take"
    raise AssertionError(f"simulation did not finish {steps} steps in {max_ticks} ticks (deadlock?)")
