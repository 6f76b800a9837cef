"""The rollout side of a run: claims prompt groups from the lag controller, generates them, hands them in.

:class:`Producer` owns the run's problem stream, sampling generator and latency draws (each seeded from the
run seed, so every loss sees the same prompts and noise at a given seed), the rollout engine, and pi^(l),
the frozen copy of the trainer's weights at the engine's last sync. One :meth:`Producer.tick` claims what
the controller admits, generates it with the engine's current weights, scores it with pi^(l), and submits
every group whose simulated latency has elapsed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import torch

from sat_ext.lag.turns import Turn

from .engines import RolloutEngine
from .model import copy_weights, frozen_copy, token_log_probs
from .spec import RunSpec
from .tasks import Task
from .tasks.addition import response_mask


@dataclass
class Group:
    """One prompt group as the producer hands it in: G responses, the engine's log-probs mu, the trainer-side
    log-probs pi^(l) under the weights of the sync that generated them, and the engine's routing (R3). An agent
    group (``sat_ext.demo.agent_producer``) also carries each episode's per-turn record (``turns``) and its tool
    counters (``tools``)."""

    index: int
    problem: Any
    prompt: torch.Tensor
    responses: torch.Tensor
    rollout_log_prob: torch.Tensor
    checkpoint_log_prob: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor
    routing: torch.Tensor | None = None
    turns: list[tuple[Turn, ...]] | None = None
    tools: dict[str, float] | None = None


@dataclass
class _InFlight:
    finish: int
    claim: Any
    group: Group = field(repr=False)


class Producer:
    """Generates the groups the controller admits; ``idle_ticks`` counts ticks with nothing to do."""

    def __init__(self, spec: RunSpec, task: Task, engine: RolloutEngine, policy: torch.nn.Module, ctrl: Any):
        self.spec = spec
        self.task = task
        self.engine = engine
        self.ctrl = ctrl
        self.checkpoint = frozen_copy(policy)  # pi^(l): the trainer's weights at the engine's last sync
        self.problems: list[Any] = []
        self.problem_gen = torch.Generator().manual_seed(20_000 + spec.seed)
        self.sample_gen = torch.Generator().manual_seed(30_000 + spec.seed)
        self.latency_rng = random.Random(40_000 + spec.seed)
        self.inflight: list[_InFlight] = []
        self.idle_ticks = 0

    def problem(self, i: int) -> Any:
        """The run's i-th problem (the stream is extended 256 at a time)."""
        while len(self.problems) <= i:
            self.problems.extend(self.task.sample(256, self.problem_gen))
        return self.problems[i]

    def latency(self) -> int:
        """Geometric on {0, 1, ...} with mean ``latency_mean``: most groups are quick, a few take long."""
        mean = self.spec.asynchrony.latency_mean
        if mean <= 0:
            return 0
        p = 1.0 / (1.0 + mean)
        return int(math.floor(math.log(1.0 - self.latency_rng.random()) / math.log(1.0 - p)))

    def tick(self, now: int) -> None:
        """Claim and generate what the controller admits, then submit every group due by ``now``."""
        from sat_ext.lag import VersionSpan

        claims = []
        while (c := self.ctrl.claim()) is not None:
            claims.append(c)
        if claims:
            for group, claim in zip(self._generate(claims), claims):
                self.inflight.append(_InFlight(now + self.latency(), claim, group))
        elif not self.inflight:
            self.idle_ticks += 1
            self.ctrl.note_producer_idle(1.0)
        for item in [x for x in self.inflight if x.finish <= now]:
            self.inflight.remove(item)
            self.ctrl.submit(item.claim, item.group, VersionSpan.at(item.claim.version), int(item.group.mask.sum()))

    def sync(self, policy: torch.nn.Module, version: int) -> None:
        """Broadcast the trainer's weights to the engine and to pi^(l)."""
        self.engine.sync(policy, version)
        copy_weights(self.checkpoint, policy)

    def _generate(self, claims: list[Any]) -> list[Group]:
        spec, task = self.spec, self.task
        if not all(c.version == self.engine.version for c in claims):
            raise RuntimeError(
                f"{spec.run_id}: the engine serves version {self.engine.version}, the controller "
                f"claimed {sorted({c.version for c in claims})}"
            )
        G = spec.recipe.group_size
        temperature = spec.recipe.temperature
        probs = [self.problem(c.sample_id) for c in claims]
        prompts = task.prompt_ids(probs).repeat_interleave(G, dim=0)
        rollout = self.engine.generate(
            prompts, task.response_len, self.sample_gen, temperature, capture_routing=spec.method.r3
        )
        responses = rollout.responses
        with torch.no_grad():
            ckpt_lp = token_log_probs(self.checkpoint, prompts, responses, temperature, rollout.routing)
        mask = response_mask(responses, task.vocab.eos)
        rewards = task.rewards([p for p in probs for _ in range(G)], responses)
        groups = []
        for j, c in enumerate(claims):
            sl = slice(j * G, (j + 1) * G)
            routing = rollout.routing[:, sl] if rollout.routing is not None else None
            groups.append(
                Group(
                    c.sample_id,
                    probs[j],
                    prompts[sl],
                    responses[sl],
                    rollout.log_probs[sl],
                    ckpt_lp[sl],
                    mask[sl],
                    rewards[sl],
                    routing,
                )
            )
        return groups
