"""One demo run: asynchronous GRPO-style RL from a warm start, under the lag controller.

The producer (:class:`~sat_ext.demo.producer.Producer`, with the rollout engine) and the trainer
(:class:`~sat_ext.demo.learner.Learner`) share one thread and a simulated clock of ticks (one tick = one
trainer step), so every run is deterministic for its seed while the lag bookkeeping is the real
:class:`sat_ext.lag.LagController` protocol: the producer ``claim()``\\ s a prompt group, generates it with
the weights of the engine's current version, and ``submit()``\\ s it ``latency`` ticks later with
``VersionSpan.at(version)``; the trainer ``take()``\\ s a batch (or idles a tick), trains,
``complete_step()``, and when a sync is due broadcasts its weights to the engine and ``record_sync()``. The
lags the trainer consumes are therefore exactly what the controller enforces:

- interval mode (``lag k`` = interval k): weights reach the engine every k trainer steps, so the batches
  of one interval come from weights 0..k-1 steps old (plus ``prefetch``);
- bounded mode (``lag L`` = max_lag L): a sync after every step, admission control keeps at most
  ``(L+1) * batch`` groups outstanding; with ``over_bound=wait`` the trainer takes groups first in, first
  out and waits for a slow one, with ``drop`` / ``regenerate`` a group that a slow generation (random
  latency) pushes past L is dropped or regenerated, and counted.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from .agent_producer import AgentProducer, agent_metrics
from .engines import engine_for
from .learner import Learner
from .model import build_policy
from .producer import Producer
from .spec import RunResult, RunSpec
from .tasks import is_episodic, make_task, max_positions
from .warm import eval_problems, evaluate, warm_start

MAX_IDLE_TICKS = 10_000


def lag_config(spec: RunSpec):
    """The :class:`sat_ext.lag.LagConfig` of the run's asynchrony and lag."""
    from sat_ext.lag import LagConfig

    a, batch = spec.asynchrony, spec.recipe.prompts_per_step
    if a.mode == "interval":
        return LagConfig(mode="interval", interval=spec.lag, prefetch=a.prefetch, batch_size=batch)
    return LagConfig(mode="bounded", max_lag=spec.lag, over_bound=a.over_bound, batch_size=batch)


class _Evaluator:
    """The run's fixed held-out problems and its own sampling generator (seeded from the run seed)."""

    def __init__(self, spec: RunSpec, task):
        self.task = task
        self.temperature = spec.recipe.temperature
        self.prompts, self.problems = eval_problems(task, spec.evaluation.size)
        self.gen = torch.Generator().manual_seed(50_000 + spec.seed)

    def __call__(self, policy: torch.nn.Module) -> float:
        return evaluate(policy, self.task, self.prompts, self.problems, self.gen, self.temperature)


def run(
    spec: RunSpec, warm_state: dict[str, torch.Tensor] | None = None, progress: Callable[[int], None] | None = None
) -> RunResult:
    """Train one run; ``progress(1)`` is called after every trainer step."""
    from sat_ext.lag import LagController
    from sat_ext.lag.turns import TokenLagMetrics

    t0, c0 = time.perf_counter(), time.process_time()
    task = make_task(spec.warm.task, spec.warm.max_operand)
    if warm_state is None:
        warm_state, _ = warm_start(spec.warm)
    policy = build_policy(spec.warm.model, seed=spec.warm.seed, vocab=task.vocab, max_positions=max_positions(task))
    policy.load_state_dict(warm_state)
    engine = engine_for(spec.engine.kind, policy, spec.engine.mismatch, spec.seed)
    ctrl = LagController(lag_config(spec))
    episodic = is_episodic(task)
    producer = (AgentProducer if episodic else Producer)(spec, task, engine, policy, ctrl)
    token_lags = TokenLagMetrics(ctrl.cfg.hist_edges) if episodic else None
    learner = Learner(spec, policy)
    evaluator = _Evaluator(spec, task)

    history: list[dict[str, float]] = []
    evals: list[tuple[int, float]] = [(0, evaluator(policy))]
    lag_counts: dict[int, int] = {}
    totals = {"nonfinite_steps": 0.0, "consumer_idle_ticks": 0.0, "producer_idle_ticks": 0.0}
    now, idle = 0, 0
    while ctrl.steps_done < spec.recipe.steps:
        producer.tick(now)
        batch = ctrl.take()
        if batch is None:
            ctrl.note_consumer_idle(1.0)
            totals["consumer_idle_ticks"] += 1
            now += 1
            idle += 1
            if idle > MAX_IDLE_TICKS:
                raise RuntimeError(f"{spec.run_id}: the trainer waited {MAX_IDLE_TICKS} ticks for a batch")
            continue
        idle = 0
        step_metrics = learner.step([s.payload for s in batch])
        if not math.isfinite(step_metrics["loss"]):
            totals["nonfinite_steps"] += 1
        for s in batch:
            lag_counts[s.lag_steps] = lag_counts.get(s.lag_steps, 0) + 1
        agent = agent_metrics(ctrl.version, [s.payload for s in batch], token_lags) if episodic else {}
        if ctrl.complete_step():
            while not ctrl.sync_allowed():
                now += 1
                producer.tick(now)
            producer.sync(policy, ctrl.version + 1)
            ctrl.record_sync()
        lagm = ctrl.pop_metrics()
        rec = {
            "step": float(ctrl.steps_done),
            **step_metrics,
            **{k: v for k, v in lagm.items() if not k.startswith("lag/hist/")},
            **agent,
        }
        if ctrl.steps_done % spec.evaluation.every == 0 or ctrl.steps_done == spec.recipe.steps:
            r = evaluator(policy)
            evals.append((ctrl.steps_done, r))
            rec["eval_reward"] = r
        history.append(rec)
        now += 1
        if progress is not None:
            progress(1)
    totals["producer_idle_ticks"] = float(producer.idle_ticks)
    totals["cpu_s"] = time.process_time() - c0
    totals["dropped"] = float(history[-1].get("lag/dropped_total", 0.0)) if history else 0.0
    totals["regenerated"] = float(history[-1].get("lag/regenerated_total", 0.0)) if history else 0.0
    return RunResult(spec, history, evals, lag_counts, totals, time.perf_counter() - t0)
