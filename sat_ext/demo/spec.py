"""What one demo run depends on (:class:`RunSpec`, in groups) and what it returns (:class:`RunResult`).

A run is one (method, lag, seed) with its loss setting, plus four groups that a sweep usually holds fixed:
the RL recipe (:class:`Recipe`), the asynchrony (:class:`Asynchrony`), the rollout engine
(:class:`EngineSpec`) and the evaluation (:class:`Evaluation`), and the supervised warm start it begins
from (:class:`WarmStartSpec`, which names the task).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .engines import ENGINE_KINDS, Mismatch
from .engines.vllm_engine import check_mismatch
from .losses import TIS_CAP, LossSetting
from .methods import Method
from .model import ModelConfig
from .tasks import TASKS

MODES = ("interval", "bounded")
DENOMINATORS = ("checkpoint", "rollout")
OVER_BOUND = ("wait", "drop", "regenerate")
BACKENDS = ("verl", "core")


@dataclass(frozen=True)
class WarmStartSpec:
    """The supervised warm start on ``task``: cross-entropy on correct answers, Adam steps of ``batch`` problems
    until the policy's sampled reward on the held-out problems reaches ``target`` (checked every
    ``check_every`` steps), at most ``max_steps``. Stopping at a reward rather than a step count puts every
    seed at a comparable start: the step at which a tiny model "gets" the task varies a lot with the seed.
    ``max_operand`` bounds the addition task's operands."""

    seed: int = 0
    task: str = "addition"
    target: float = 0.35
    max_steps: int = 2000
    check_every: int = 25
    batch: int = 64
    lr: float = 3e-3
    model: ModelConfig = ModelConfig()
    max_operand: int = 100

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {list(TASKS)}, got {self.task!r}")


@dataclass(frozen=True)
class Recipe:
    """The RL update: ``steps`` trainer steps of ``prompts_per_step`` groups x ``group_size`` responses, each
    step ``mini_batches`` AdamW updates (the paper's recipe: 1) at ``lr`` with gradient clip ``grad_clip``;
    losses from verl's registry (``backend="verl"``) or sat_ext.core. The ratio's denominator is the
    trainer-side log-prob under the weights of the sync that generated the batch, pi^(l) (``"checkpoint"``,
    Table 9), or the engine's log-prob mu (``"rollout"``, App. E.6); ``tis_cap`` is C of TIS's min(pi^(l)/mu, C).
    ``lr_warmup`` W > 0: a linear warm-up of the learning rate, ``lr * min(1, s / W)`` at trainer step s = 1, 2, ...
    (:func:`sat_ext.demo.learner.warmup_lr`; the pre-registered control wherever the lr is above x1,
    benchmarks/preregistered/miniature_e1_e2.md); 0 (the default): the constant ``lr``, as before."""

    backend: str = "verl"
    steps: int = 120
    prompts_per_step: int = 16
    group_size: int = 8
    mini_batches: int = 1
    lr: float = 5e-5
    grad_clip: float = 1.0
    temperature: float = 1.0
    denominator: str = "checkpoint"
    tis_cap: float = TIS_CAP
    lr_warmup: int = 0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {self.backend!r}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.prompts_per_step % self.mini_batches:
            raise ValueError(
                f"prompts_per_step ({self.prompts_per_step}) must be divisible by mini_batches ({self.mini_batches})"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if self.denominator not in DENOMINATORS:
            raise ValueError(f"denominator must be one of {list(DENOMINATORS)}, got {self.denominator!r}")
        if not (math.isfinite(self.tis_cap) and self.tis_cap > 0):
            raise ValueError(f"tis_cap must be a finite number > 0, got {self.tis_cap!r}")
        if isinstance(self.lr_warmup, bool) or not isinstance(self.lr_warmup, int) or self.lr_warmup < 0:
            raise ValueError(f"lr_warmup must be an integer >= 0 (trainer steps), got {self.lr_warmup!r}")


@dataclass(frozen=True)
class Asynchrony:
    """How lag is made (:mod:`sat_ext.lag`): ``interval`` mode (a sync every <lag> steps, ``prefetch`` steps of
    generation ahead) or ``bounded`` (a sync every step, no consumed sample older than <lag>; a group past
    the bound waits, is dropped or regenerated: ``over_bound``); ``latency_mean`` is the mean generation
    latency of a group in trainer steps (geometric)."""

    mode: str = "interval"
    prefetch: int = 1
    over_bound: str = "wait"
    latency_mean: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        if self.over_bound not in OVER_BOUND:
            raise ValueError(f"over_bound must be one of {list(OVER_BOUND)}, got {self.over_bound!r}")
        if self.prefetch < 0 or not self.latency_mean >= 0:
            raise ValueError(f"prefetch and latency_mean must be >= 0, got {self.prefetch!r} / {self.latency_mean!r}")


@dataclass(frozen=True)
class EngineSpec:
    """The rollout engine: ``kind`` (``vllm`` or ``emulated``) and the mismatch it has or emulates."""

    kind: str = "emulated"
    mismatch: Mismatch = Mismatch()

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"engine must be one of {list(ENGINE_KINDS)}, got {self.kind!r}")
        if self.kind == "vllm":
            check_mismatch(self.mismatch)


@dataclass(frozen=True)
class Evaluation:
    """Every ``every`` steps the trainer's own policy answers ``size`` fixed held-out problems. ``base_q``: a run
    of a base loss of SAT (GRPO, GSPO) also logs ``base/sat_threshold_q``, the q SAT's gate would take on the
    step's batch (Eq. 14, the estimator and tokens of ``actor/sat/threshold_q``; :mod:`sat_ext.demo.learner`);
    off by default, so a run's history is as before."""

    every: int = 10
    size: int = 256
    base_q: bool = False

    def __post_init__(self) -> None:
        if self.every < 1 or self.size < 1:
            raise ValueError(f"evaluation every / size must be >= 1, got {self.every} / {self.size}")


@dataclass(frozen=True)
class RunSpec:
    """Everything one RL run depends on (with its warm start). DPPO always takes mu as the ratio's denominator
    (its threshold is on pi - mu), whatever ``recipe.denominator`` says."""

    method: Method
    lag: int
    seed: int
    setting: LossSetting
    recipe: Recipe = Recipe()
    asynchrony: Asynchrony = Asynchrony()
    engine: EngineSpec = EngineSpec()
    evaluation: Evaluation = Evaluation()
    warm: WarmStartSpec = WarmStartSpec()

    def __post_init__(self) -> None:
        mode = self.asynchrony.mode
        if mode == "interval" and self.lag < 1:
            raise ValueError(f"interval mode needs lag (the sync interval) >= 1, got {self.lag}")
        if mode == "bounded" and self.lag < 0:
            raise ValueError(f"bounded mode needs lag (max_lag) >= 0, got {self.lag}")
        if self.method.tis and self.recipe.denominator == "rollout":
            raise ValueError(
                f"method {self.method.key!r}: TIS weights pi^(l) / mu, the gap between the checkpoint "
                "denominator and the engine; with denominator 'rollout' that gap is already in the ratio"
            )
        if self.method.r3 and self.warm.task == "agent":
            raise ValueError(
                f"method {self.method.key!r}: routing replay (R3) is not built for the agent task, whose turns are "
                "generated in separate engine calls"
            )

    @property
    def loss(self) -> str:
        """The method's key (``<loss>[+toy][+tis][+r3]``): what tables and plots group by."""
        return self.method.key

    @property
    def ratio_denominator(self) -> str:
        """The denominator this run's loss actually takes ("rollout" for DPPO whatever the recipe says)."""
        return "rollout" if self.method.needs_rollout_denominator else self.recipe.denominator

    @property
    def run_id(self) -> str:
        return f"{self.method.key}-{self.asynchrony.mode}{self.lag}-lr{self.recipe.lr:g}-s{self.seed}"


@dataclass
class RunResult:
    """One run's outcome: every step's metrics, the evaluations (step, reward), the consumed lags, totals."""

    spec: RunSpec
    history: list[dict[str, float]]
    evals: list[tuple[int, float]]
    lag_counts: dict[int, int]
    totals: dict[str, float]
    wall_s: float
    error: str | None = None

    @property
    def start(self) -> float:
        """The evaluation before the first update (the warm start's reward)."""
        return float(self.evals[0][1]) if self.evals else float("nan")

    @property
    def final(self) -> float:
        """Mean eval reward over the last three evaluations (the last ~20 steps by default)."""
        tail = [r for _, r in self.evals[-3:]]
        return float(np.mean(tail)) if tail else float("nan")

    @property
    def best(self) -> float:
        return float(max(r for _, r in self.evals)) if self.evals else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["final"], d["best"] = self.final, self.best
        return d
