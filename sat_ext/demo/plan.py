"""The plan of a demo sweep: which runs, in which order, from the command line's options and a preset.

A :class:`Plan` holds one warm start per seed and one :class:`~sat_ext.demo.spec.RunSpec` per (method, lag,
learning-rate multiple, seed); nothing runs here. Bad options raise :class:`PlanError` with the option's
name and value.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from .engines import Mismatch
from .losses import available_losses, backend, default_settings, setting_for
from .methods import Method, parse_method
from .model import ModelConfig
from .spec import Asynchrony, EngineSpec, Evaluation, Recipe, RunSpec, WarmStartSpec

PRESETS: dict[str, dict[str, Any]] = {
    # The default sweep: the paper's main rows over its lags and beyond, in about 15 minutes on 2 cores.
    "default": dict(
        methods=("vanilla", "gspo", "dppo_tv+toy", "sat", "sat_gspo", "sat_gspo+r3"),
        lags=(1, 2, 4, 8, 16, 32),
        seeds=2,
        steps=80,
        eval_every=10,
        eval_size=256,
    ),
    # Table 1's grid at the paper's lags: every method it reports, R3 and TIS rows included.
    "table1": dict(
        methods=(
            "vanilla",
            "gspo",
            "vanilla+r3",
            "gspo+r3",
            "vanilla+tis",
            "gspo+tis",
            "vanilla+tis+r3",
            "gspo+tis+r3",
            "dppo_tv",
            "dppo_tv+toy",
            "sat",
            "sat_gspo",
            "sat+r3",
            "sat_gspo+r3",
        ),
        lags=(1, 8),
        seeds=2,
        steps=100,
        eval_every=10,
        eval_size=256,
    ),
    # The long horizon: where the paper sees GRPO and GSPO collapse late at lag 8 (steps 429 / 424 of 544).
    "long": dict(
        methods=("vanilla", "gspo", "sat", "sat_gspo"), lags=(8, 32), seeds=2, steps=300, eval_every=20, eval_size=256
    ),
    # The stability frontier: lag x learning-rate multiple (the per-update change), docs/demo.md "Frontier";
    # sized so that one task's sweep takes under an hour on one core here (64 steps: one full window at lag 64).
    "frontier": dict(
        methods=("vanilla", "gspo", "vanilla+tis", "sat", "sat_gspo"),
        lags=(1, 8, 64),
        lr_mults=(16.0, 64.0),
        seeds=3,
        steps=64,
        eval_every=8,
        eval_size=256,
    ),
    # CI: GRPO, SAT-GRPO and SAT-GSPO w/ R3 (both SAT losses, R3, both of the paper's lags).
    "quick": dict(
        methods=("vanilla", "sat", "sat_gspo+r3"), lags=(1, 8), seeds=1, steps=30, eval_every=10, eval_size=128
    ),
}


class PlanError(ValueError):
    """Options that make no plan; the message names the option and its value."""


@dataclass(frozen=True)
class Plan:
    """A sweep: its warm starts (index = seed) and runs, in the order the tables list them."""

    preset: str
    task: str
    backend: str
    methods: tuple[Method, ...]
    lags: tuple[int, ...]
    lr_mults: tuple[float, ...]
    base_lr: float
    seeds: int
    steps: int
    warm: tuple[WarmStartSpec, ...]
    specs: tuple[RunSpec, ...]
    argv: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def is_frontier(self) -> bool:
        """``--frontier``, or more than one learning-rate multiple: the frontier's outputs, not the lag sweep's."""
        return self.preset == "frontier" or len(self.lr_mults) > 1

    @property
    def engine(self) -> EngineSpec:
        return self.specs[0].engine

    def describe(self) -> str:
        """One line: how many runs of what."""
        spec = self.specs[0]
        mode = spec.asynchrony.mode
        lag_word = (
            "interval k (weights to the rollout copy every k steps)"
            if mode == "interval"
            else "max_lag L (sync every step, no consumed sample older than L)"
        )
        pressure = f" x {len(self.lr_mults)} lr multiples" if len(self.lr_mults) > 1 else ""
        return (
            f"{len(self.specs)} runs = {len(self.methods)} losses x {len(self.lags)} lags{pressure} x {self.seeds} "
            f"seeds, {self.steps} steps each; task {self.task}; backend {self.backend}; lag = {lag_word}; engine "
            f"{spec.engine.kind} ({spec.engine.mismatch.describe()})"
        )


def describe_preset(preset: dict[str, Any]) -> str:
    return (
        f"methods {','.join(preset['methods'])}, lags {','.join(map(str, preset['lags']))}"
        + (f", lr x {','.join(f'{m:g}' for m in preset['lr_mults'])}" if "lr_mults" in preset else "")
        + f", {preset['seeds']} seed(s), {preset['steps']} steps"
    )


def _methods(keys: list[str], kind: str) -> tuple[list[Method], list[str]]:
    try:
        methods = list(dict.fromkeys(parse_method(k) for k in keys))
    except ValueError as e:
        raise PlanError(f"--methods: {e}") from None
    have = available_losses(kind)
    missing = [m.key for m in methods if m.loss not in have]
    notes = []
    if missing:
        notes.append(
            f"verl is not installed: skipping {missing} (only {list(have)} run on sat_ext.core; "
            f"`pip install verl==0.9.1` for the baselines)"
        )
        methods = [m for m in methods if m.loss in have]
        if not methods:
            raise PlanError(notes[0])
    if kind == "core":
        notes.append(
            "backend: sat_ext.core (verl not used): SAT losses with a local aggregation, GRPO advantages "
            "computed by the demo itself"
        )
    return methods, notes


def _pick(value: Any, preset: dict[str, Any], key: str) -> Any:
    return value if value is not None else preset[key]


def build_plan(args: argparse.Namespace, engine: str, engine_note: str = "") -> Plan:
    """The plan of ``sat-ext demo`` for parsed ``args`` on the resolved rollout ``engine`` (``vllm`` or
    ``emulated``); :class:`PlanError` on options that make none."""
    try:
        kind = backend(None if args.backend == "auto" else args.backend == "verl")
    except RuntimeError as e:
        raise PlanError(str(e)) from None
    preset = PRESETS[args.preset]
    methods, notes = _methods(args.methods if args.methods is not None else list(preset["methods"]), kind)
    if engine_note:
        notes.append(engine_note)
    lags = tuple(_pick(args.lags, preset, "lags"))
    lr_mults = tuple(args.lr_mults or preset.get("lr_mults", (1.0,)))
    n_seeds, steps = _pick(args.seeds, preset, "seeds"), _pick(args.steps, preset, "steps")
    if n_seeds < 1 or steps < 1:
        raise PlanError(f"--seeds and --steps must be >= 1, got {n_seeds} / {steps}")
    if any(not m > 0 for m in lr_mults):
        raise PlanError(f"--lr-mults must be > 0, got {list(lr_mults)}")
    if args.task != "addition" and args.max_operand != 100:
        raise PlanError(
            f"--max-operand applies to the addition task only, got {args.max_operand} with --task {args.task}"
        )
    route_noise = args.route_noise if args.route_noise is not None else (0.1 if engine == "emulated" else 0.0)
    try:
        mismatch = Mismatch() if args.no_mismatch else Mismatch(args.numerics, route_noise, args.rollout_top_k)
        settings = default_settings(
            tuple(args.gspo_eps), **({"dppo_toy_delta": args.dppo_toy_delta} if args.dppo_toy_delta is not None else {})
        )
        latency = args.latency_mean if args.latency_mean is not None else (1.0 if args.mode == "bounded" else 0.0)
        asynchrony = Asynchrony(args.mode, args.prefetch if args.mode == "interval" else 0, args.over_bound, latency)
        evaluation = Evaluation(
            args.eval_every or preset["eval_every"],
            args.eval_size or preset["eval_size"],
            base_q=getattr(args, "log_base_q", False),
        )
        engine_spec = EngineSpec(engine, mismatch)
        warm = tuple(
            WarmStartSpec(
                seed=s,
                task=args.task,
                target=args.sft_target,
                max_steps=args.sft_max_steps,
                max_operand=args.max_operand,
                model=ModelConfig(),
            )
            for s in range(n_seeds)
        )
        recipes = {
            m: Recipe(
                kind,
                steps,
                args.prompts_per_step,
                args.group_size,
                args.mini_batches,
                args.lr * m,
                temperature=args.temperature,
                denominator=args.denominator,
                tis_cap=args.tis_cap,
                lr_warmup=getattr(args, "lr_warmup", 0),
            )
            for m in lr_mults
        }
        specs = tuple(
            RunSpec(
                method=meth,
                lag=k,
                seed=s,
                setting=setting_for(settings, meth),
                recipe=recipes[m],
                asynchrony=asynchrony,
                engine=engine_spec,
                evaluation=evaluation,
                warm=warm[s],
            )
            for meth in methods
            for k in lags
            for m in lr_mults
            for s in range(n_seeds)
        )
    except ValueError as e:
        raise PlanError(str(e)) from None
    return Plan(
        preset=args.preset,
        task=args.task,
        backend=kind,
        methods=tuple(methods),
        lags=lags,
        lr_mults=lr_mults,
        base_lr=args.lr,
        seeds=n_seeds,
        steps=steps,
        warm=warm,
        specs=specs,
        argv=tuple(getattr(args, "argv", ())),
        notes=tuple(notes),
    )
