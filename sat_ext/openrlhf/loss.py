"""SAT and SAT-GSPO as an OpenRLHF 0.11.2 ``PolicyLoss``: same constructor, same call, same 5-tuple.

The math is :mod:`sat_ext.core`; this class only maps OpenRLHF's arguments onto it and aggregates the
per-token loss with OpenRLHF's own ``aggregate_loss``.

- Ratio reference: ``rollout_log_probs`` (vLLM's log-probs of the sampled tokens), old := rollout: the paper's App. E.6
  variant (its reported runs divide by the trainer-side log-prob at the rollout checkpoint, Table 9). ``old_log_probs``
  (the DeepSpeed actor's recompute, with the weights it holds when the batch arrives: the rollout checkpoint only at lag
  0) enters only the ``vllm_kl`` diagnostic. OpenRLHF hands the rollout log-probs over only when
  ``--algo.advantage.is_correction_level`` is not ``off`` (:func:`sat_ext.openrlhf.config.check_openrlhf_args` refuses a
  run without them).
- IS correction: none. The ratio already is new/behaviour, so OpenRLHF's decoupled-PPO reweighting by
  old/rollout would count the same mismatch twice; the ``is_correction_*`` arguments are accepted (and
  validated by ``PolicyLoss``) but unused, and ``is_filter_ratio`` is 0 (nothing is filtered).
- ``policy_loss_type``: ``"sat"`` (token ratio, clipped like ``ppo``) or ``"sat_gspo"`` (OpenRLHF's
  ``gspo`` sequence ratio with its full gradient; always sequence-mean aggregation, as ``gspo``).
- Returns ``(loss, clip_ratio, ppo_kl, vllm_kl, is_filter_ratio)`` as ``PolicyLoss``: ``clip_ratio`` is the
  fraction of tokens whose SAT clip is active, ``ppo_kl`` is -mean(logp - rollout_logp) on the unclamped
  log-ratio, ``vllm_kl`` is mean(rollout_logp - old_logp).
- Metrics: after each call :attr:`SATPolicyLoss.extra_metrics` holds the SAT diagnostics as 0-d tensors
  under ``sat_<name>`` for every name in :data:`sat_ext.core.METRIC_KEYS`: the same keys on every rank and
  micro-batch, including an empty one.

With ``c_min=1`` (no contraction) ``sat`` equals ``PolicyLoss("ppo")`` and ``sat_gspo`` equals
``PolicyLoss("gspo")`` on the same reference, bit for bit (tests/openrlhf). One deliberate difference:
SAT-GSPO clamps the sequence log-ratio at 10 before ``exp`` (as verl's gspo); OpenRLHF's ``gspo`` does not
and overflows to inf there.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.distributed as dist

from sat_ext.core import METRIC_KEYS, aggregate, sat_gspo_loss, sat_token_loss
from sat_ext.metric_names import OPENRLHF_METRIC_NAMES
from sat_ext.pinned import LOSS_NAMES

from .compat import openrlhf_loss
from .config import check_openrlhf_args, sat_config

_loss = openrlhf_loss()
PolicyLoss = _loss.PolicyLoss
aggregate_loss = _loss.aggregate_loss
masked_mean = _loss.masked_mean

METRIC_NAMES = OPENRLHF_METRIC_NAMES


class SATPolicyLoss(PolicyLoss):
    """OpenRLHF ``PolicyLoss`` whose clip interval is SAT's staleness-adaptive one.

    Keyword arguments beyond ``PolicyLoss``'s are SAT options (:data:`sat_ext.openrlhf.config.SAT_OPTIONS`:
    quantile, gate_scope, kernel, ...). ``process_group`` is the data-parallel group of the ``global`` gate
    scope (None: the default group, which is the DP group only without ring attention or tensor parallelism).
    """

    def __init__(
        self,
        clip_eps_low: float = 0.2,
        clip_eps_high: float = 0.2,
        dual_clip: float = None,
        token_level_loss: bool = True,
        policy_loss_type: str = "sat",
        is_correction_level: str = "off",
        is_correction_mode: str = "mask",
        is_correction_gating: str = "ratio",
        is_correction_threshold: list = (0.5, 5.0),
        process_group: Optional[dist.ProcessGroup] = None,
        **sat_options: Any,
    ) -> None:
        if policy_loss_type not in LOSS_NAMES:
            raise ValueError(f"SATPolicyLoss: policy_loss_type must be one of {LOSS_NAMES}, got {policy_loss_type!r}")
        super().__init__(
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            dual_clip=dual_clip,
            token_level_loss=token_level_loss and policy_loss_type == "sat",
            policy_loss_type=policy_loss_type,
            is_correction_level=is_correction_level,
            is_correction_mode=is_correction_mode,
            is_correction_gating=is_correction_gating,
            is_correction_threshold=is_correction_threshold,
        )
        self.sat_config = sat_config(clip_eps_low, clip_eps_high, dual_clip, sat_options)
        self.process_group = process_group
        self.extra_metrics: dict[str, torch.Tensor] = {}

    @classmethod
    def like(
        cls, policy_loss: PolicyLoss, process_group: Optional[dist.ProcessGroup] = None, **sat_options: Any
    ) -> "SATPolicyLoss":
        """A SAT loss with the settings OpenRLHF gave ``policy_loss`` (as ``ActorPPOTrainer`` builds it)."""
        return cls(
            clip_eps_low=policy_loss.clip_eps_low,
            clip_eps_high=policy_loss.clip_eps_high,
            dual_clip=policy_loss.dual_clip,
            token_level_loss=policy_loss.token_level_loss,
            policy_loss_type=policy_loss.policy_loss_type,
            is_correction_level=policy_loss.is_correction_level,
            is_correction_mode=policy_loss.is_correction_mode,
            is_correction_gating=policy_loss.is_correction_gating,
            is_correction_threshold=policy_loss.is_correction_threshold,
            process_group=process_group,
            **sat_options,
        )

    @classmethod
    def check_args(cls, args) -> None:
        """Launch-time check of OpenRLHF's final arguments (the registry patch's hook); raises ValueError.

        With the registry patch the SAT options are the keys of ``--actor.policy_loss_kwargs``.
        """
        options = getattr(args.actor, "policy_loss_kwargs", None) or {}
        check_openrlhf_args(args, options, key_of=lambda name: f"--actor.policy_loss_kwargs key {name!r}")

    def _gate_group(self, dp_size: int) -> Optional[dist.ProcessGroup]:
        if self.sat_config.gate_scope != "global" or self.process_group is not None or not dist.is_initialized():
            return self.process_group
        if dist.get_world_size() != dp_size:
            raise ValueError(
                f"SAT gate_scope='global' needs the data-parallel group, but none was given and the default group "
                f"({dist.get_world_size()} ranks) is not it (dp_size={dp_size}: ring attention or tensor "
                "parallelism is on). Launch with `python -m sat_ext.openrlhf.train_ppo_ray`, which passes it."
            )
        return None

    def forward(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        action_mask: Optional[torch.Tensor] = None,
        rollout_log_probs: Optional[torch.Tensor] = None,
        dp_size: int = 1,
        batch_num_tokens: Optional[float] = None,
        global_batch_size: Optional[float] = None,
    ):
        if rollout_log_probs is None:
            raise ValueError(
                f"policy_loss_type={self.policy_loss_type!r} takes its ratio against vLLM's rollout log-probs, but "
                "none reached the loss: OpenRLHF 0.11.2 fetches them only with --algo.advantage.is_correction_level "
                "token (or seq)."
            )
        if action_mask is None:
            action_mask = torch.ones_like(log_probs, dtype=torch.bool)
        group = self._gate_group(dp_size)
        if self.policy_loss_type == "sat":
            out = sat_token_loss(log_probs, rollout_log_probs, advantages, action_mask, self.sat_config, group=group)
        else:
            out = sat_gspo_loss(
                log_probs,
                rollout_log_probs,
                advantages,
                action_mask,
                self.sat_config,
                group=group,
                ratio_form="sequence",
            )
        loss = aggregate(
            out.loss_mat,
            action_mask,
            bool(out.metrics["empty_microbatch"]),
            lambda: aggregate_loss(
                out.loss_mat,
                action_mask,
                token_level_loss=self.token_level_loss,
                dp_size=dp_size,
                batch_num_tokens=batch_num_tokens,
                global_batch_size=global_batch_size,
            ),
        )
        with torch.no_grad():
            clip_ratio = masked_mean(out.clipped.float(), action_mask, dim=None)
            ppo_kl = masked_mean(-(log_probs - rollout_log_probs), action_mask, dim=None)
            vllm_kl = masked_mean(rollout_log_probs - old_log_probs, action_mask, dim=None)
            is_filter_ratio = torch.zeros((), device=log_probs.device)
        self.extra_metrics = {name: out.metrics[k].detach() for name, k in zip(METRIC_NAMES, METRIC_KEYS)}
        return loss, clip_ratio, ppo_kl, vllm_kl, is_filter_ratio


__all__ = ["METRIC_NAMES", "SATPolicyLoss"]
