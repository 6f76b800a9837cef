"""An OpenRLHF command as the preflight runs it: every flag classified, only the machine's changed, with rows.

The command is OpenRLHF's flag list (``--group.name value ...``), from the example's ``run.sh`` (its dry run) or
from the user. :data:`ALGORITHM` flags are never changed (:func:`transform` raises if one would be);
:data:`MACHINE` flags get the value this machine can run; :data:`SCALED` flags are divided by the run's factor;
:data:`RUN` flags are the preflight's own (the model, the data, the folders, the run length); :data:`KEPT`
machine flags run here as they are. A flag in none of them is kept and listed as not classified.
"""

from __future__ import annotations

from dataclasses import dataclass

from .substitution import ABSENT, Row

ALGORITHM = (
    "--actor.policy_loss_type",
    "--actor.eps_clip_low_high",
    "--actor.dual_clip",
    "--actor.loss_agg_mode",
    "--actor.entropy_coef",
    "--actor.adam.lr",
    "--actor.adam.betas",
    "--actor.adam.weight_decay",
    "--actor.lr_scheduler",
    "--actor.lr_warmup_ratio",
    "--actor.max_norm",
    "--algo.advantage.estimator",
    "--algo.advantage.is_correction_level",
    "--algo.advantage.is_correction_mode",
    "--algo.advantage.is_correction_threshold",
    "--algo.kl.use_loss",
    "--algo.kl.estimator",
    "--algo.kl.init_coef",
    "--rollout.n_samples_per_prompt",
    "--rollout.temperature",
    "--rollout.top_p",
    "--train.max_epochs",
    "--train.async_enable",
    "--reward.remote_url",
    "--eval.n_samples_per_prompt",
    "--eval.temperature",
    "--eval.steps",
    "--data.input_key",
    "--data.label_key",
    "--data.apply_chat_template",
)
ALGORITHM_PREFIXES = ("--sat.", "--lag.")
ONE_MACHINE = "one machine, no GPU: one rank and one engine"
MACHINE = {
    "--actor.num_nodes": ("1", ONE_MACHINE),
    "--actor.num_gpus_per_node": ("1", ONE_MACHINE),
    "--ref.num_nodes": ("1", ONE_MACHINE),
    "--ref.num_gpus_per_node": ("1", ONE_MACHINE),
    "--vllm.num_engines": ("1", ONE_MACHINE),
    "--vllm.tensor_parallel_size": ("1", ONE_MACHINE),
    "--ds.ring_attn_size": (
        "1",
        "ring attention needs flash-attn's CUDA kernels (ring_flash_attn); the token budget keeps the ring's "
        "size in --train.max_tokens_per_gpu",
    ),
    "--ds.attn_implementation": (
        "sdpa",
        "flash-attn has no CPU build; the CPU setup also gives OpenRLHF's models sdpa where its CLI turns the "
        "flag back into flash_attention_2 (packing)",
    ),
}
KEPT = {
    "--vllm.gpu_memory_utilization": "ignored on the CPU, whose KV cache is VLLM_CPU_KVCACHE_SPACE",
    "--vllm.enable_prefix_caching": "runs on vLLM's CPU build",
    "--train.colocate_actor_ref": "runs here",
    "--train.dynamic_batch_enable": "runs here (its micro-batches are what SAT's micro gate scope sees)",
    "--ds.packing_samples": "runs here (the CPU setup's plain-torch flash_attn.bert_padding)",
    "--ds.zero_stage": "ZeRO-3 runs on DeepSpeed's CPU accelerator",
    "--ds.param_dtype": "bf16 runs on the CPU",
    "--actor.gradient_checkpointing_enable": "runs here",
    "--ckpt.save_steps": "as configured",
    "--ckpt.max_num": "as configured",
}
SCALED = ("--rollout.batch_size", "--train.batch_size", "--rollout.max_new_tokens", "--data.max_len")
MICRO = ("--rollout.micro_batch_size", "--train.micro_batch_size")
TOKENS = "--train.max_tokens_per_gpu"
RUN = (
    "--actor.model_name_or_path",
    "--data.prompt_dataset",
    "--eval.dataset",
    "--train.num_episodes",
    "--ckpt.path",
    "--ckpt.output_dir",
    "--logger.tensorboard_dir",
    "--logger.wandb.run_name",
)
ADDED = {"--vllm.enforce_eager": ([], "no CUDA graphs on the CPU (vLLM's CPU build compiles with inductor otherwise)")}


def parse(argv: list[str]) -> dict[str, list[str]]:
    """``--flag value ...`` groups in order (a later flag replaces an earlier one, as OpenRLHF's parser does)."""
    out: dict[str, list[str]] = {}
    flag = None
    for token in argv:
        if token.startswith("--"):
            flag = token
            out.pop(flag, None)
            out[flag] = []
        elif flag is None:
            raise ValueError(f"OpenRLHF command: {token!r} comes before any --flag")
        else:
            out[flag].append(token)
    return out


def unparse(flags: dict[str, list[str]]) -> list[str]:
    return [token for flag, values in flags.items() for token in (flag, *values)]


def is_algorithm(flag: str) -> bool:
    return flag in ALGORITHM or flag.startswith(ALGORITHM_PREFIXES)


def value(flags: dict[str, list[str]], flag: str) -> str | None:
    """The one value of ``flag`` (None when absent or a switch)."""
    values = flags.get(flag)
    return values[0] if values else None


@dataclass(frozen=True)
class Result:
    """The flags to run and the table's rows; ``unclassified``: flags kept without a class."""

    flags: dict[str, list[str]]
    rows: list[Row]
    unclassified: list[str]


def transform(flags: dict[str, list[str]], factor: int, run: dict[str, list[str]], whys: dict[str, str]) -> Result:
    """The command this machine runs: machine flags substituted, sizes divided by ``factor``, the preflight's own
    ``run`` flags set (``whys``: why each), :data:`ADDED` flags added."""
    out = dict(flags)
    rows: list[Row] = []

    def put(flag: str, new: list[str], why: str) -> None:
        old = flags.get(flag, ABSENT)
        if old != new:
            rows.append(Row(flag, " ".join(old) if isinstance(old, list) else old, " ".join(new) or "(on)", why))
        out[flag] = new

    for flag, (new, why) in MACHINE.items():
        if flag in flags:
            put(flag, [new], why)
    ring = int(value(flags, "--ds.ring_attn_size") or 1)
    for flag in SCALED:
        if flag in flags:
            put(flag, [str(int(value(flags, flag)) // factor)], f"scaled down by the run's one factor ({factor})")
    for flag in MICRO:
        if flag in flags:
            put(flag, [str(max(1, int(value(flags, flag)) // factor))], f"scaled by {factor}, at least 1")
    if TOKENS in flags:
        tokens = int(value(flags, TOKENS)) * ring // factor
        put(TOKENS, [str(tokens)], f"scaled by {factor}, times the ring attention's size {ring} it replaces")
    for flag, new in run.items():
        put(flag, new, whys[flag])
    for flag, (new, why) in ADDED.items():
        put(flag, new, why)
    for flag in set(flags) | set(out):
        if is_algorithm(flag) and out.get(flag) != flags.get(flag):
            raise RuntimeError(f"sat_ext preflight changed the algorithm flag {flag} (a bug)")
    known = set(ALGORITHM) | set(MACHINE) | set(KEPT) | set(SCALED) | set(MICRO) | set(RUN) | {TOKENS}
    unclassified = [f for f in flags if f not in known and not is_algorithm(f)]
    return Result(out, rows, unclassified)
