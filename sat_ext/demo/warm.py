"""The supervised warm start every run begins from, and the evaluation every run is scored by."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from .model import build_policy, token_log_probs
from .spec import WarmStartSpec
from .tasks import Task, eval_sampler, make_task, max_positions, respond

WARM_THREADS = 1  # the warm start always runs on one torch thread: its floats (and so its stopping step) do not
# depend on the caller's thread count


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, then restore the caller's count."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def eval_problems(task: Task, n: int) -> tuple[torch.Tensor, list[Any]]:
    """The fixed held-out problems every run is scored on (seed 2607, independent of the run seed), from the
    task's evaluation stream (:func:`sat_ext.demo.tasks.eval_sampler`)."""
    problems = eval_sampler(task)(n, torch.Generator().manual_seed(2607))
    return task.prompt_ids(problems), problems


@torch.no_grad()
def evaluate(
    policy: torch.nn.Module,
    task: Task,
    prompts: torch.Tensor,
    problems: list,
    generator: torch.Generator,
    temperature: float = 1.0,
    greedy: bool = False,
) -> float:
    """Mean reward of the trainer's own policy (float32, no mismatch), sampled at ``temperature``."""
    responses = respond(task, policy, prompts, problems, generator, temperature, greedy)
    return float(task.rewards(problems, responses).mean())


def warm_start(spec: WarmStartSpec) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Train the random policy on correct answers until its sampled reward reaches ``spec.target`` (checked every
    ``spec.check_every`` steps on 128 held-out problems) or ``spec.max_steps``; returns (state_dict, stats).
    Runs on :data:`WARM_THREADS` torch threads whatever the caller's setting."""
    with torch_threads(WARM_THREADS):
        return _warm_start(spec)


def _warm_start(spec: WarmStartSpec) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    t0, c0 = time.perf_counter(), time.process_time()
    task = make_task(spec.task, spec.max_operand)
    policy = build_policy(spec.model, seed=spec.seed, vocab=task.vocab, max_positions=max_positions(task))
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
        m = targets != task.vocab.pad
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
