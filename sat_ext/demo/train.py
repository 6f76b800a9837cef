"""One demo run: a supervised warm start, then asynchronous GRPO-style RL under the lag controller.

The producer (the :class:`~sat_ext.demo.model.RolloutEngine`) and the trainer share one thread and a
simulated clock of ticks (one tick = one trainer step), so every run is deterministic for its seed while
the lag bookkeeping is the real :class:`sat_ext.lag.LagController` protocol: the producer ``claim()``\\ s
a prompt group, generates it with the weights of the engine's current version, and ``submit()``\\ s it
``latency`` ticks later with ``VersionSpan.at(version)``; the trainer ``take()``\\ s a batch (or idles a
tick), trains, ``complete_step()``, and when a sync is due broadcasts its weights to the engine and
``record_sync()``. The lags the trainer consumes are therefore exactly what the controller enforces:

- interval mode (``lag k`` = interval k): weights reach the engine every k trainer steps, so the batches
  of one interval come from weights 0..k-1 steps old (plus ``prefetch``);
- bounded mode (``lag L`` = max_lag L): a sync after every step, admission control keeps at most
  ``(L+1) * batch`` groups outstanding; with ``over_bound=wait`` the trainer takes groups first in, first
  out and waits for a slow one, with ``drop`` / ``regenerate`` a group that a slow generation (random
  latency) pushes past L is dropped or regenerated, and counted.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from .losses import TIS_CAP, LossSetting, grpo_advantages, make_loss
from .methods import Method
from .engine_vllm import check_mismatch
from .engines import ENGINE_KINDS, engine_for
from .model import Mismatch, ModelConfig, build_policy, copy_weights, frozen_copy, sample, token_log_probs
from .task import VOCAB, AdditionTask, response_mask

MODES = ("interval", "bounded")
DENOMINATORS = ("checkpoint", "rollout")


@dataclass(frozen=True)
class WarmStartSpec:
    """The supervised warm start: cross-entropy on correct answers, Adam steps of ``batch`` problems until the
    policy's sampled reward on the held-out problems reaches ``target`` (checked every ``check_every``
    steps), at most ``max_steps``. Stopping at a reward rather than a step count puts every seed at a
    comparable start: the step at which a tiny model "gets" carrying varies a lot with the seed."""

    seed: int = 0
    target: float = 0.35
    max_steps: int = 2000
    check_every: int = 25
    batch: int = 64
    lr: float = 3e-3
    model: ModelConfig = ModelConfig()
    max_operand: int = 100


@dataclass(frozen=True)
class RunSpec:
    """Everything one RL run depends on (with its warm start).

    The paper's recipe by default: one optimizer step per batch (``mini_batches=1``) and
    ``denominator="checkpoint"``: the ratio's denominator is the trainer-side log-prob under the weights of
    the sync that generated the batch, pi^(l) (Table 9); ``"rollout"`` takes the engine's log-prob mu
    (App. E.6, verl's bypass mode). DPPO always takes mu (its threshold is on pi - mu)."""

    method: Method
    lag: int
    seed: int
    setting: LossSetting
    backend: str = "verl"
    mode: str = "interval"
    steps: int = 120
    prompts_per_step: int = 16
    group_size: int = 8
    mini_batches: int = 1
    lr: float = 5e-5
    denominator: str = "checkpoint"
    tis_cap: float = TIS_CAP
    engine: str = "emulated"
    grad_clip: float = 1.0
    temperature: float = 1.0
    mismatch: Mismatch = Mismatch()
    prefetch: int = 1
    over_bound: str = "wait"
    latency_mean: float = 0.0
    eval_every: int = 10
    eval_size: int = 256
    warm: WarmStartSpec = WarmStartSpec()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        if self.mode == "interval" and self.lag < 1:
            raise ValueError(f"interval mode needs lag (the sync interval) >= 1, got {self.lag}")
        if self.mode == "bounded" and self.lag < 0:
            raise ValueError(f"bounded mode needs lag (max_lag) >= 0, got {self.lag}")
        if self.prompts_per_step % self.mini_batches:
            raise ValueError(f"prompts_per_step ({self.prompts_per_step}) must be divisible by mini_batches "
                             f"({self.mini_batches})")
        if self.engine not in ENGINE_KINDS:
            raise ValueError(f"engine must be one of {list(ENGINE_KINDS)}, got {self.engine!r}")
        if self.engine == "vllm":
            check_mismatch(self.mismatch)
        if self.denominator not in DENOMINATORS:
            raise ValueError(f"denominator must be one of {list(DENOMINATORS)}, got {self.denominator!r}")
        if self.method.tis and self.denominator == "rollout":
            raise ValueError(f"method {self.method.key!r}: TIS weights pi^(l) / mu, the gap between the checkpoint "
                             "denominator and the engine; with denominator 'rollout' that gap is already in the ratio")
        if not (math.isfinite(self.tis_cap) and self.tis_cap > 0):
            raise ValueError(f"tis_cap must be a finite number > 0, got {self.tis_cap!r}")

    @property
    def loss(self) -> str:
        """The method's key (``<loss>[+toy][+tis][+r3]``): what tables and plots group by."""
        return self.method.key

    @property
    def ratio_denominator(self) -> str:
        """The denominator this run's loss actually takes ("rollout" for DPPO whatever ``denominator`` says)."""
        return "rollout" if self.method.needs_rollout_denominator else self.denominator

    @property
    def run_id(self) -> str:
        return f"{self.method.key}-{self.mode}{self.lag}-s{self.seed}"


@dataclass
class RunResult:
    spec: RunSpec
    history: list[dict[str, float]]
    evals: list[tuple[int, float]]
    lag_counts: dict[int, int]
    totals: dict[str, float]
    wall_s: float
    error: str | None = None

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


# --------------------------------------------------------------------------- evaluation and warm start

def eval_problems(task: AdditionTask, n: int) -> tuple[torch.Tensor, list]:
    """The fixed held-out problems every run is scored on (seed 2607, independent of the run seed)."""
    problems = task.sample(n, torch.Generator().manual_seed(2607))
    return task.prompt_ids(problems), problems


@torch.no_grad()
def evaluate(policy: torch.nn.Module, task: AdditionTask, prompts: torch.Tensor, problems: list,
             generator: torch.Generator, temperature: float = 1.0, greedy: bool = False) -> float:
    """Mean exact-match reward of the trainer's own policy (float32, no mismatch), sampled at ``temperature``."""
    responses = sample(policy, prompts, task.response_len, generator, temperature, greedy=greedy)
    return float(task.rewards(problems, responses).mean())


def warm_start(spec: WarmStartSpec) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Train the random policy on correct answers for ``spec.steps`` steps; returns (state_dict, stats)."""
    t0, c0 = time.perf_counter(), time.process_time()
    task = AdditionTask(spec.max_operand)
    policy = build_policy(spec.model, seed=spec.seed)
    g = torch.Generator().manual_seed(1_000 + spec.seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=spec.lr, weight_decay=0.0)
    ep, eprobs = eval_problems(task, 256)
    eg = torch.Generator().manual_seed(7)
    loss = torch.tensor(float("nan"))
    steps = 0
    while steps < spec.max_steps:
        problems = task.sample(spec.batch, g)
        prompts, targets = task.prompt_ids(problems), task.target_ids(problems)
        lp = token_log_probs(policy, prompts, targets)
        m = targets != VOCAB.pad
        loss = -(lp * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        if steps % spec.check_every == 0 and evaluate(policy, task, ep[:128], eprobs[:128], eg) >= spec.target:
            break
    stats = {
        "sft_steps": float(steps),
        "sft_loss": float(loss.detach()),
        "greedy_reward": evaluate(policy, task, ep, eprobs, eg, greedy=True),
        "sampled_reward": evaluate(policy, task, ep, eprobs, eg),
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
    }
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}, stats


# --------------------------------------------------------------------------- the asynchronous run

@dataclass
class _Group:
    """One prompt group as the producer hands it in: G responses, the engine's log-probs mu, the trainer-side
    log-probs pi^(l) under the weights of the sync that generated them, and the engine's routing (R3)."""

    index: int
    problem: Any
    prompt: torch.Tensor
    responses: torch.Tensor
    rollout_log_prob: torch.Tensor
    checkpoint_log_prob: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor
    routing: torch.Tensor | None = None


@dataclass
class _InFlight:
    finish: int
    claim: Any
    group: _Group = field(repr=False)


def lag_config(spec: RunSpec):
    from sat_ext.lag import LagConfig

    if spec.mode == "interval":
        return LagConfig(mode="interval", interval=spec.lag, prefetch=spec.prefetch,
                         batch_size=spec.prompts_per_step)
    return LagConfig(mode="bounded", max_lag=spec.lag, over_bound=spec.over_bound,
                     batch_size=spec.prompts_per_step)


def _quantiles(x: torch.Tensor) -> dict[str, float]:
    if x.numel() == 0:
        return {"mean": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    q = torch.quantile(x.float(), torch.tensor([0.9, 0.99]))
    return {"mean": float(x.mean()), "p90": float(q[0]), "p99": float(q[1]), "max": float(x.max())}


def run(spec: RunSpec, warm_state: dict[str, torch.Tensor] | None = None,
        progress: Callable[[int], None] | None = None) -> RunResult:
    """Train one run; ``progress(1)`` is called after every trainer step."""
    from sat_ext.lag import LagController, VersionSpan

    t0, c0 = time.perf_counter(), time.process_time()
    task = AdditionTask(spec.warm.max_operand)
    if warm_state is None:
        warm_state, _ = warm_start(spec.warm)
    policy = build_policy(spec.warm.model, seed=spec.warm.seed)
    policy.load_state_dict(warm_state)
    engine = engine_for(spec.engine, policy, spec.mismatch, spec.seed)
    checkpoint = frozen_copy(policy)  # the trainer's weights at the last sync: pi^(l) of every batch it generates
    loss_fn = make_loss(spec.method.loss, spec.setting, spec.backend, spec.group_size)
    opt = torch.optim.AdamW(policy.parameters(), lr=spec.lr, betas=(0.9, 0.99), weight_decay=0.0)
    params = [p for p in policy.parameters() if p.requires_grad]

    # The same prompt stream, sampling noise and latencies for every loss at a given seed.
    problem_gen = torch.Generator().manual_seed(20_000 + spec.seed)
    problems: list = []
    sample_gen = torch.Generator().manual_seed(30_000 + spec.seed)
    latency_rng = random.Random(40_000 + spec.seed)
    eval_gen = torch.Generator().manual_seed(50_000 + spec.seed)
    eval_prompts, eval_probs = eval_problems(task, spec.eval_size)

    def problem(i: int):
        while len(problems) <= i:
            problems.extend(task.sample(256, problem_gen))
        return problems[i]

    def latency() -> int:
        if spec.latency_mean <= 0:
            return 0
        # Geometric on {0, 1, ...} with the given mean: most groups are quick, a few take long (long answers).
        p = 1.0 / (1.0 + spec.latency_mean)
        return int(math.floor(math.log(1.0 - latency_rng.random()) / math.log(1.0 - p)))

    ctrl = LagController(lag_config(spec))
    inflight: list[_InFlight] = []
    now = 0
    producer_idle_ticks = 0

    def produce() -> None:
        nonlocal producer_idle_ticks
        claims = []
        while (c := ctrl.claim()) is not None:
            claims.append(c)
        if claims:
            assert all(c.version == engine.version for c in claims), "engine out of step with the controller"
            G = spec.group_size
            probs = [problem(c.sample_id) for c in claims]
            prompts = task.prompt_ids(probs).repeat_interleave(G, dim=0)
            rollout = engine.generate(prompts, task.response_len, sample_gen, spec.temperature,
                                      capture_routing=spec.method.r3)
            responses = rollout.responses
            with torch.no_grad():
                ckpt_lp = token_log_probs(checkpoint, prompts, responses, spec.temperature, rollout.routing)
            mask = response_mask(responses)
            rewards = task.rewards([p for p in probs for _ in range(G)], responses)
            for j, c in enumerate(claims):
                sl = slice(j * G, (j + 1) * G)
                routing = rollout.routing[:, sl] if rollout.routing is not None else None
                grp = _Group(c.sample_id, probs[j], prompts[sl], responses[sl], rollout.log_probs[sl], ckpt_lp[sl],
                             mask[sl], rewards[sl], routing)
                inflight.append(_InFlight(now + latency(), c, grp))
        elif not inflight:
            producer_idle_ticks += 1
            ctrl.note_producer_idle(1.0)
        for item in [x for x in inflight if x.finish <= now]:
            inflight.remove(item)
            ctrl.submit(item.claim, item.group, VersionSpan.at(item.claim.version), int(item.group.mask.sum()))

    history: list[dict[str, float]] = []
    evals: list[tuple[int, float]] = [(0, evaluate(policy, task, eval_prompts, eval_probs, eval_gen, spec.temperature))]
    lag_counts: dict[int, int] = {}
    totals = {"nonfinite_steps": 0.0, "consumer_idle_ticks": 0.0, "producer_idle_ticks": 0.0}
    kind = spec.backend
    idle_guard = 0
    while ctrl.steps_done < spec.steps:
        produce()
        batch = ctrl.take()
        if batch is None:
            ctrl.note_consumer_idle(1.0)
            totals["consumer_idle_ticks"] += 1
            now += 1
            idle_guard += 1
            if idle_guard > 10_000:
                raise RuntimeError(f"{spec.run_id}: the trainer waited 10000 ticks for a batch")
            continue
        idle_guard = 0
        groups: list[_Group] = [s.payload for s in batch]
        step_metrics = _train_step(spec, policy, opt, params, loss_fn, groups, kind)
        if not math.isfinite(step_metrics["loss"]):
            totals["nonfinite_steps"] += 1
        for s in batch:
            lag_counts[s.lag_steps] = lag_counts.get(s.lag_steps, 0) + 1
        if ctrl.complete_step():
            while not ctrl.sync_allowed():
                now += 1
                produce()
            engine.sync(policy, ctrl.version + 1)
            copy_weights(checkpoint, policy)
            ctrl.record_sync()
        lagm = ctrl.pop_metrics()
        rec = {"step": float(ctrl.steps_done), **step_metrics,
               **{k: v for k, v in lagm.items() if not k.startswith("lag/hist/")}}
        if ctrl.steps_done % spec.eval_every == 0 or ctrl.steps_done == spec.steps:
            r = evaluate(policy, task, eval_prompts, eval_probs, eval_gen, spec.temperature)
            evals.append((ctrl.steps_done, r))
            rec["eval_reward"] = r
        history.append(rec)
        now += 1
        if progress is not None:
            progress(1)
    totals["producer_idle_ticks"] = float(producer_idle_ticks)
    totals["cpu_s"] = time.process_time() - c0
    totals["dropped"] = float(history[-1].get("lag/dropped_total", 0.0)) if history else 0.0
    totals["regenerated"] = float(history[-1].get("lag/regenerated_total", 0.0)) if history else 0.0
    return RunResult(spec, history, evals, lag_counts, totals, time.perf_counter() - t0)


def tis_weights(checkpoint_lp: torch.Tensor, rollout_lp: torch.Tensor, mask: torch.Tensor, cap: float) -> torch.Tensor:
    """TIS (paper Eq. 41, verl's token-level rollout correction): w = min(pi^(l) / mu, C), 0 off the mask."""
    w = torch.exp((checkpoint_lp - rollout_lp).clamp(max=math.log(cap)))
    return torch.where(mask, w, torch.zeros_like(w))


def _masked_stats(x: torch.Tensor) -> dict[str, float]:
    return {"mean": float(x.abs().mean()), "var": float(x.var(unbiased=False))} if x.numel() else \
        {"mean": 0.0, "var": 0.0}


def _train_step(spec: RunSpec, policy, opt, params, loss_fn, groups: list, kind: str) -> dict[str, float]:
    """One trainer step on a batch of groups: GRPO advantages, then ``mini_batches`` optimizer updates.

    The loss's ratio is pi / pi^(l) (``ratio_denominator == "checkpoint"``) or pi / mu ("rollout"). Logged
    beside the loss's own metrics: ``abs_log_ratio/*`` and ``log_ratio/var`` of that ratio (Table 8),
    ``mismatch/d_pi`` = mean |log pi - log mu| (Eq. 52, the paper's d_pi) and ``mismatch/engine`` = mean
    |log pi^(l) - log mu| (the engine's numerics and routing at equal weights)."""
    G = spec.group_size
    prompts = torch.cat([g.prompt for g in groups])
    responses = torch.cat([g.responses for g in groups])
    mu = torch.cat([g.rollout_log_prob for g in groups])
    ckpt = torch.cat([g.checkpoint_log_prob for g in groups])
    mask = torch.cat([g.mask for g in groups])
    rewards = torch.cat([g.rewards for g in groups])
    routing = torch.cat([g.routing for g in groups], dim=1) if spec.method.r3 else None
    old_lp = ckpt if spec.ratio_denominator == "checkpoint" else mu
    weights = tis_weights(ckpt, mu, mask, spec.tis_cap) if spec.method.tis else None
    group_ids = np.repeat(np.arange(len(groups)), G)
    adv = grpo_advantages(rewards, mask, group_ids, kind)
    per_mb = (len(groups) // spec.mini_batches) * G
    sums: dict[str, float] = {}
    d_all, dmu_all = [], []
    loss_sum, n_mb, grad_norms = 0.0, 0, []
    for start in range(0, responses.shape[0], per_mb):
        sl = slice(start, start + per_mb)
        lp = token_log_probs(policy, prompts[sl], responses[sl], spec.temperature,
                             routing[:, sl] if routing is not None else None)
        m = mask[sl]
        d_all.append((lp.detach() - old_lp[sl])[m])
        dmu_all.append((lp.detach() - mu[sl])[m])
        loss, metrics = loss_fn(old_lp[sl], lp, adv[sl], m, weights[sl] if weights is not None else None)
        opt.zero_grad(set_to_none=True)
        if torch.isfinite(loss):
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
            if torch.isfinite(gn):
                opt.step()
            grad_norms.append(float(gn))
        loss_sum += float(loss.detach())
        n_mb += 1
        for k, v in metrics.items():
            sums[k] = sums.get(k, 0.0) + float(v)
    d = torch.cat(d_all)
    d_stats = _masked_stats(d)
    out = {"loss": loss_sum / n_mb, "train_reward": float(rewards.mean()),
           "grad_norm": float(np.mean(grad_norms)) if grad_norms else float("nan"),
           "response_len": float(mask.float().sum(-1).mean()),
           "log_ratio/var": d_stats["var"],
           "mismatch/d_pi": _masked_stats(torch.cat(dmu_all))["mean"],
           "mismatch/engine": _masked_stats((ckpt - mu)[mask])["mean"]}
    if weights is not None:
        w = weights[mask]
        out["tis/weight_mean"] = float(w.mean())
        out["tis/capped_frac"] = float((w >= spec.tis_cap * (1 - 1e-6)).float().mean())
    out.update({k: v / n_mb for k, v in sums.items()})
    out.update({f"abs_log_ratio/{k}": v for k, v in _quantiles(d.abs()).items()})
    return out
