"""The config a verl preflight runs: the user's, with only what this machine cannot run changed, and each change
in the substitution table (docs/preflight.md).

:func:`plan` applies, in order:

1. on the CPU, a Megatron config on FSDP2 (:mod:`sat_ext.preflight.megatron_fsdp`);
2. the model: a tiny model of the same family (:mod:`sat_ext.tiny_model`);
3. on the CPU, the machine: SGLang to vLLM's CPU build, GPU and node counts to one, the CPU setup's settings
   (:func:`sat_ext.verl.cpu.config.cpu_settings`), worker processes to one each;
4. lengths and batch sizes divided by one factor (:func:`scale_factor`), the lag's prefetch kept;
5. the run's own: steps, logs, checkpoints off, the rollout dump the reward check reads, the data files where the
   config's do not exist.

Never changed (:data:`ALGORITHM`): a difference there is a bug and raises. Where one of them cannot be honoured
here (R3), it is reported as not checked (:class:`~sat_ext.preflight.substitution.Unchecked`), and the run needs
``--allow-unchecked`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sat_ext.lag.config import LagConfig
from sat_ext.runlog import Expectation
from sat_ext.verl.lag.overrides import (
    TRAINER_MODE,
    VerlSchedule,
    lag_from_sampler_kwargs,
    num_warmup_batches_for,
    uses_bypass,
    verl_warmup_prompts,
)

from .megatron_fsdp import is_megatron, to_fsdp
from .substitution import ABSENT, Edits, Plan, Unchecked, raw
from .verl_target import PreflightError

A, R = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
#: keys that define the algorithm (a prefix covers its subtree); the run has each as the config has it
ALGORITHM = (
    f"{A}.policy_loss",
    f"{A}.clip_ratio",
    f"{A}.clip_ratio_low",
    f"{A}.clip_ratio_high",
    f"{A}.clip_ratio_c",
    f"{A}.loss_agg_mode",
    f"{A}.loss_scale_factor",
    f"{A}.use_kl_loss",
    f"{A}.kl_loss_coef",
    f"{A}.kl_loss_type",
    f"{A}.entropy_coeff",
    f"{A}.ppo_epochs",
    f"{A}.optim.lr",
    f"{R}.n",
    f"{R}.temperature",
    f"{R}.top_p",
    f"{R}.top_k",
    f"{R}.calculate_log_probs",
    f"{R}.val_kwargs",
    f"{R}.enable_rollout_routing_replay",
    "algorithm",
    "reward.custom_reward_function",
    "reward.reward_manager",
    "reward.reward_kwargs",
    "data.custom_cls",
    "data.prompt_key",
    "data.return_raw_chat",
    "trainer.use_v1",
    "trainer.v1.trainer_mode",
    "trainer.v1.separate_async.parameter_sync_step",
    "trainer.v1.sampler",
    "trainer.test_freq",
    "trainer.val_before_train",
)
R3 = (f"{A}.megatron.router_replay.mode", f"{R}.enable_rollout_routing_replay")
R3_WHY = (
    "routing replay runs only on verl's Megatron (or VeOmni) engine on CUDA, with an engine that returns the routed "
    "experts (vLLM needs its Model Runner V2, which needs Triton): verl's FSDP engine ignores it and vLLM's CPU build "
    "refuses it at start, so the run here replays no routing"
)
LENGTHS = (
    "data.max_prompt_length",
    "data.max_response_length",
    f"{A}.ppo_max_token_len_per_gpu",
    f"{R}.max_model_len",
    f"{R}.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
)
BATCHES = ("data.train_batch_size", f"{A}.ppo_mini_batch_size")
MICRO = (
    f"{A}.ppo_micro_batch_size_per_gpu",
    f"{R}.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
)
MAX_FACTOR = 64
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
FP32_WHY = (
    "the trainer computes in fp32 here: one step at the config's lr moves a tiny model's weights by less than "
    "bf16's resolution, so old and new log-probs would round alike (d = 0 exactly, seen at lag 1)"
)
SCALE_WHY = "scaled down by the run's one factor"


@dataclass(frozen=True)
class Context:
    """What the plan puts in: the device, the model and data folders, the output folder, the steps (None: the
    default for the config's lag), the longest prompt of the data in the tiny model's tokens, and the factor
    (None: the largest that fits)."""

    device: str
    model: Path
    model_why: str
    data: tuple[Path, Path] | None  # (train, val) where the config's files do not exist
    out: Path
    steps: int | None
    prompt_tokens: int
    factor: int | None = None


def lag_of(config: DictConfig) -> LagConfig | None:
    """The lag block of a config that selects sat_ext's lag trainer, None for verl's own trainers."""
    if raw(config, "trainer.v1.trainer_mode", None) != TRAINER_MODE:
        return None
    return lag_from_sampler_kwargs(raw(config, "trainer.v1.sampler.sampler_kwargs", {}))[0]


def default_steps(lag: LagConfig | None) -> int:
    """Global steps that reach the lag's bound: interval n, 3 (lags 1..n in the windows after the first: 2n + 1
    optimizer steps and more); bounded L, L + 3; verl's own trainers, 4."""
    if lag is None or lag.mode == "off":
        return 4
    return 3 if lag.mode == "interval" else lag.max_lag + 3


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scale_factor(config: DictConfig, prompt_tokens: int, wanted: int | None) -> int:
    """The largest power of two <= :data:`MAX_FACTOR` (or ``wanted``) that divides every batch size and leaves
    ``data.max_prompt_length`` room for the data's longest prompt; raises naming what does not fit."""
    batches = {k: _int(raw(config, k, None)) for k in BATCHES}
    prompt = _int(raw(config, "data.max_prompt_length", None)) or prompt_tokens

    def fits(f: int) -> bool:
        return prompt // f >= prompt_tokens and all(b is None or (b % f == 0 and b >= f) for b in batches.values())

    if wanted is not None:
        if not fits(wanted):
            raise PreflightError(
                f"--scale {wanted}: data.max_prompt_length {prompt} / {wanted} is under the data's longest prompt "
                f"({prompt_tokens} tokens), or a batch size ({batches}) is not a multiple of it"
            )
        return wanted
    for f in (64, 32, 16, 8, 4, 2, 1):
        if f <= MAX_FACTOR and fits(f):
            return f
    raise PreflightError(
        f"data.max_prompt_length={prompt} is under the data's longest prompt ({prompt_tokens} tokens of the tiny "
        "model's tokenizer): the rows would be filtered out"
    )


def unchecked(config: DictConfig) -> list[Unchecked]:
    """The algorithm keys this machine cannot honour: R3 where it is on."""
    out = []
    for key in R3:
        value = raw(config, key, None)
        if value not in (None, False, "disabled"):
            out.append(Unchecked(key, value, R3_WHY))
    return out


def _model(edits: Edits, ctx: Context) -> None:
    edits.set("actor_rollout_ref.model.path", str(ctx.model), ctx.model_why)


def _machine(edits: Edits, separate_rollout: bool) -> None:
    from sat_ext.verl.cpu.config import cpu_settings

    for setting in cpu_settings(separate_rollout):
        edits.set(setting.key, setting.value, setting.why)
    if edits.get("actor_rollout_ref.ref") != ABSENT:
        edits.set("actor_rollout_ref.ref.fsdp_config.use_torch_compile", False, "no inductor compile on the CPU")
    if edits.get(f"{A}.strategy") == "fsdp":
        edits.set(
            f"{A}.strategy",
            "fsdp2",
            "FSDP1 wraps with sync_module_states, which needs the module on a GPU; FSDP2 shards the same way here",
        )
    for subtree in (A, "actor_rollout_ref.ref"):
        if edits.get(f"{subtree}.fsdp_config") != ABSENT:
            edits.set(f"{subtree}.fsdp_config.mixed_precision", dict(FP32), FP32_WHY)
    if edits.get(f"{R}.name") == "sglang":
        edits.set(f"{R}.name", "vllm", "SGLang needs CUDA here: vLLM's CPU build serves the rollout")
    why = "one machine, no GPU"
    edits.set(f"{R}.tensor_model_parallel_size", 1, why)
    edits.set("trainer.nnodes", 1, why)
    edits.set("trainer.n_gpus_per_node", 1, why)
    if separate_rollout:
        edits.set(f"{R}.nnodes", 1, why)
        edits.set(f"{R}.n_gpus_per_node", 1, why)
    for key in R3:
        if edits.get(key) is True:
            edits.set(key, False, "not checked here (R3, below): vLLM's CPU build refuses it at start")
    processes = "one process each on 2 cores (each is a Python process)"
    edits.set("data.dataloader_num_workers", 0, processes)
    edits.set("reward.num_workers", 1, processes)
    edits.set(f"{R}.agent.num_workers", 1, processes)
    edits.set("ray_kwargs.ray_init.num_cpus", 8, "logical CPUs: every verl actor is placed on this small machine")
    edits.set("ray_kwargs.ray_init.address", "local", "a private Ray instance, never another one on the machine")


def _scale(edits: Edits, factor: int) -> None:
    schedule = VerlSchedule.of(edits.config) if raw(edits.config, "trainer.v1.trainer_mode", None) else None
    for key in LENGTHS + BATCHES:
        value = _int(edits.get(key, None))
        if value is not None:
            edits.set(key, value // factor, f"{SCALE_WHY} ({factor})")
    for key in MICRO:
        value = _int(edits.get(key, None))
        if value is not None:
            edits.set(key, max(1, value // factor), f"{SCALE_WHY} ({factor}), at least 1")
    if schedule is not None and schedule.trainer_mode == TRAINER_MODE:
        ahead = verl_warmup_prompts(float(schedule.num_warmup_batches), schedule.train_batch_size)
        batches = ahead // schedule.ppo_mini_batch_size
        scaled = VerlSchedule.of(edits.config)
        value = num_warmup_batches_for(batches * scaled.ppo_mini_batch_size, scaled.train_batch_size)
        edits.set(
            "trainer.v1.separate_async.num_warmup_batches",
            value,
            f"the same {batches} batch(es) ahead, as verl counts them for the scaled batch",
        )


def _run_keys(edits: Edits, ctx: Context, steps: int) -> None:
    edits.set("trainer.total_training_steps", steps, "the preflight's steps")
    edits.set("trainer.save_freq", -1, "no checkpoints in a preflight")
    edits.set("trainer.default_local_dir", str(ctx.out / "checkpoints"), "the preflight's folder")
    edits.set("trainer.logger", ["console", "file"], "the file logger is what the checks read")
    edits.set("trainer.rollout_data_dir", str(ctx.out / "rollouts"), "verl's rollout dump, for the reward check")
    if ctx.data is not None:
        why = "the config's file does not exist here: the shipped sample in the same layout"
        edits.set("data.train_files", str(ctx.data[0]), why)
        edits.set("data.val_files", str(ctx.data[1]), why)


def _guard(config: DictConfig, run: DictConfig, allowed: list[Unchecked]) -> None:
    """Raise if a key of :data:`ALGORITHM` differs between ``config`` and ``run`` (other than a key not checked),
    or if the lag's prefetch changed."""
    skip = {u.key for u in allowed}
    for key in ALGORITHM:
        if key in skip:
            continue
        before, after = raw(config, key), raw(run, key)
        if before != ABSENT and before != after:
            raise RuntimeError(f"sat_ext preflight changed the algorithm key {key}: {before!r} -> {after!r} (a bug)")
    if lag_of(config) is not None:
        old, new = VerlSchedule.of(config), VerlSchedule.of(run)
        ahead = [
            verl_warmup_prompts(float(s.num_warmup_batches), s.train_batch_size) / s.ppo_mini_batch_size
            for s in (old, new)
        ]
        if ahead[0] != ahead[1]:
            raise RuntimeError(
                f"sat_ext preflight changed the batches submitted ahead: {ahead[0]} -> {ahead[1]} (a bug)"
            )


def expectation(config: DictConfig, lag: LagConfig | None) -> Expectation:
    """What the run's log must show, from the config: SAT where the loss is SAT's, the lag schedule in interval
    mode, the evaluation's samples per problem."""
    loss = raw(config, f"{A}.policy_loss.loss_mode", "vanilla")
    eval_n = _int(raw(config, f"{R}.val_kwargs.n", None))
    interval = lag.interval if lag is not None and lag.mode == "interval" else None
    return Expectation(
        sat=loss in ("sat", "sat_gspo"),
        sequence_gate=loss == "sat_gspo",
        rollout_denominator=uses_bypass(config),
        interval=interval,
        prefetch=lag.prefetch if lag is not None else 1,
        eval_n=eval_n,
    )


def plan(config: DictConfig, ctx: Context) -> Plan:
    """The run's config and its table (the module doc); the factor and steps chosen here unless ``ctx`` gives them."""
    edits = Edits(config)
    lag = lag_of(config)
    separate = raw(config, "actor_rollout_ref.hybrid_engine", True) is False
    if ctx.device == "cpu" and is_megatron(config):
        to_fsdp(edits)
    _model(edits, ctx)
    if ctx.device == "cpu":
        _machine(edits, separate)
        factor = scale_factor(config, ctx.prompt_tokens, ctx.factor)
    else:
        factor = 1
    if factor > 1:
        _scale(edits, factor)
    steps = ctx.steps or default_steps(lag)
    _run_keys(edits, ctx, steps)
    skipped = unchecked(config) if ctx.device == "cpu" else []
    _guard(config, edits.config, skipped)
    return Plan(edits.config, edits.rows, skipped, factor, steps, lag, expectation(config, lag))
