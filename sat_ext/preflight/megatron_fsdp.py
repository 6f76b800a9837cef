"""A verl Megatron config as FSDP2 runs it: every actor / ref key with an FSDP equivalent mapped, the rest listed.

verl 0.9.1's Megatron engine cannot run on a CPU (Megatron's data-parallel buffers and stream, its CUDA RNG
tracker, TransformerEngine attention and layers, Megatron-Bridge: docs/preflight.md, "Megatron"), so the preflight
runs the same config on verl's FSDP2 engine. The ``actor_rollout_ref.actor`` / ``ref`` / ``critic`` subtrees are
rebuilt from verl's own ``ppo_trainer`` (FSDP) defaults:

- a key outside the engine's own blocks is copied as the config has it (the loss with its own keys, the clip,
  KL, entropy, batch keys ...);
- a key in :data:`MAPPED` is written to its FSDP equivalent;
- every other key the config sets away from verl's Megatron default (TP, EP, PP, sequence parallel, the
  precision-aware optimizer, ...) is listed as not run, with :data:`REASONS`' why;
- R3 (``megatron.router_replay.mode``) is an algorithm key: see :mod:`sat_ext.preflight.verl_plan`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .substitution import ABSENT, NOT_RUN, Edits, Row, raw

SUBTREES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
ENGINE_ONLY = ("megatron", "optim", "checkpoint", "fsdp_config", "fsdp", "_target_", "strategy", "nccl_timeout")
R3_KEY = "megatron.router_replay.mode"
SAME = "the same setting in FSDP's schema"


@dataclass(frozen=True)
class Mapped:
    """Megatron's ``source`` (under a subtree) is FSDP's ``target``, its value through ``values`` (else as is)."""

    source: str
    target: str
    why: str
    values: tuple[tuple[Any, Any], ...] = ()

    def convert(self, value: Any) -> Any:
        return next((new for old, new in self.values if old == value), value)


MAPPED = (
    Mapped(
        "optim.optimizer",
        "optim.optimizer",
        "FSDP takes a torch.optim class name; Megatron's adam is decoupled AdamW (at weight decay 0, Adam)",
        (("adam", "AdamW"),),
    ),
    Mapped("optim.lr", "optim.lr", SAME),
    Mapped("optim.betas", "optim.betas", SAME + " (Megatron takes them from override_optimizer_config.adam_beta1/2)"),
    Mapped("optim.weight_decay", "optim.weight_decay", SAME),
    Mapped("optim.clip_grad", "optim.clip_grad", SAME + " (FSDP's engine clips with optim.clip_grad)"),
    Mapped("optim.lr_warmup_steps", "optim.lr_warmup_steps", SAME),
    Mapped("optim.lr_warmup_steps_ratio", "optim.lr_warmup_steps_ratio", SAME),
    Mapped("optim.lr_decay_style", "optim.lr_scheduler_type", "FSDP's name for the schedule (constant / cosine)"),
    Mapped("megatron.param_offload", "fsdp_config.param_offload", SAME),
    Mapped("megatron.optimizer_offload", "fsdp_config.optimizer_offload", SAME),
    Mapped("megatron.seed", "fsdp_config.seed", SAME),
    Mapped(
        "megatron.context_parallel_size",
        "fsdp_config.ulysses_sequence_parallel_size",
        "FSDP's sequence parallelism (Ulysses) in place of Megatron's context parallelism",
    ),
)

REASONS = {
    "megatron.tensor_model_parallel_size": "FSDP shards parameters over data-parallel ranks: no tensor parallelism",
    "megatron.expert_model_parallel_size": "FSDP shards the experts like any weight: no expert parallelism",
    "megatron.expert_tensor_parallel_size": "no expert parallelism in FSDP",
    "megatron.pipeline_model_parallel_size": "no pipeline parallelism in FSDP",
    "megatron.sequence_parallel": "Megatron's sequence parallelism pairs with tensor parallelism",
    "megatron.dtype": "FSDP's default mixed precision computes in bf16 (param bf16, reduce fp32, fp32 master)",
    "megatron.use_mbridge": "FSDP loads the Hugging Face checkpoint directly",
    "megatron.override_ddp_config.grad_reduce_in_fp32": "FSDP reduces gradients in fp32 by default",
    "megatron.override_transformer_config.attention_softmax_in_fp32": "no such key; PyTorch's attention keeps the "
    "softmax in fp32",
    "megatron.override_transformer_config.attention_backend": "model.override_config.attn_implementation chooses "
    "the attention (sdpa on the CPU)",
    "megatron.override_transformer_config.recompute_granularity": "model.enable_gradient_checkpointing recomputes "
    "each layer (full recompute)",
    "megatron.override_transformer_config.recompute_method": "model.enable_gradient_checkpointing",
    "megatron.override_transformer_config.recompute_num_layers": "model.enable_gradient_checkpointing",
    "megatron.override_transformer_config.moe_router_dtype": "no such key: the router runs in the compute dtype",
    "optim.use_precision_aware_optimizer": "a TransformerEngine optimizer; FSDP's fp32 master weights keep fp32 "
    "gradients and moments",
    "optim.main_grads_dtype": "FSDP's master weights and gradients are fp32",
    "optim.exp_avg_dtype": "FSDP's Adam moments are in the master weights' fp32",
    "optim.exp_avg_sq_dtype": "FSDP's Adam moments are in the master weights' fp32",
    "optim.override_optimizer_config.optimizer_cpu_offload": "Megatron's hybrid CPU optimizer; FSDP's offload is "
    "fsdp_config.optimizer_offload",
    "optim.override_optimizer_config.optimizer_offload_fraction": "Megatron's hybrid CPU optimizer",
    "optim.override_optimizer_config.overlap_cpu_optimizer_d2h_h2d": "Megatron's hybrid CPU optimizer",
    "optim.override_optimizer_config.adam_beta1": "Megatron's spelling of optim.betas[0] (mapped from optim.betas)",
    "optim.override_optimizer_config.adam_beta2": "Megatron's spelling of optim.betas[1] (mapped from optim.betas)",
}
OTHER = "a Megatron setting with no FSDP equivalent"
FUSED_WHY = (
    "Megatron's fused forward; verl 0.9.1's FSDP2 one multiplies by lm_head's sharded weight outside its forward "
    '("aten.mm.default got mixed torch.Tensor and DTensor", seen here), so the FSDP2 run uses the plain forward'
)


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> value of every leaf of a nested dict (lists are leaves)."""
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _verl_defaults(name: str) -> DictConfig:
    import os

    import verl
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None
    ):
        return compose(config_name=name)


def is_megatron(config: DictConfig) -> bool:
    """Whether the config trains with verl's Megatron engine."""
    return raw(config, "actor_rollout_ref.actor.strategy", None) == "megatron"


def to_fsdp(edits: Edits) -> None:
    """Rebuild the Megatron subtrees of ``edits.config`` on verl's FSDP2 defaults (the module doc), with rows."""
    fsdp, megatron = _verl_defaults("ppo_trainer"), _verl_defaults("ppo_megatron_trainer")
    original = copy.deepcopy(edits.config)

    def shown(subtree: str, path: str, value: Any) -> Any:  # an interpolation as the config resolves it
        return OmegaConf.select(original, f"{subtree}.{path}") if isinstance(value, str) and "${" in value else value

    edits.set("model_engine", "dp", "verl's FSDP engine group in place of Megatron's")
    if edits.get("actor_rollout_ref.model.use_fused_kernels") is True:
        edits.set("actor_rollout_ref.model.use_fused_kernels", False, FUSED_WHY)
    for subtree in SUBTREES:
        given = edits.get(subtree)
        if given == ABSENT:
            continue
        rebuilt, given_leaves = raw(fsdp, subtree), leaves(given)
        defaults = leaves(raw(megatron, subtree))
        for path, value in given_leaves.items():
            if path.split(".", 1)[0] not in ENGINE_ONLY:  # the loss (its own keys too), clip, KL, batch keys ...
                _put(rebuilt, path, value)
        rows = []
        for mapping in MAPPED:
            value = shown(subtree, mapping.source, given_leaves.get(mapping.source, ABSENT))
            if value != ABSENT:
                _put(rebuilt, mapping.target, mapping.convert(value))
                key = mapping.source if mapping.source == mapping.target else f"{mapping.source} -> {mapping.target}"
                rows.append(Row(f"{subtree}.{key}", value, mapping.convert(value), mapping.why))
        mapped = {m.source for m in MAPPED} | {R3_KEY, "strategy", "_target_", "optim._target_"}
        for path, value in given_leaves.items():
            listed = path in REASONS or value != defaults.get(path, ABSENT)  # named here, or set by the config
            if path.split(".", 1)[0] in ENGINE_ONLY and path not in mapped and listed:
                rows.append(Row(f"{subtree}.{path}", shown(subtree, path, value), NOT_RUN, REASONS.get(path, OTHER)))
        if subtree == "actor_rollout_ref.actor":
            rebuilt["strategy"] = "fsdp2"
            rows.append(Row(f"{subtree}.strategy", given.get("strategy"), "fsdp2", "Megatron cannot run on a CPU"))
        OmegaConf.update(edits.config, subtree, rebuilt, merge=False, force_add=True)
        if subtree == "critic" and not _needs_critic(edits.config):
            rows = [Row("critic", "Megatron critic", "FSDP critic", "not built: the advantage estimator uses none")]
        edits.rows.extend(rows)


def _needs_critic(config: DictConfig) -> bool:
    from verl.trainer.ppo.utils import need_critic

    return need_critic(config)


def _put(tree: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        tree = tree.setdefault(part, {})
    tree[parts[-1]] = value
