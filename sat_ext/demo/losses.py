"""The demo's losses and advantages: verl's real registry and GRPO estimator when verl is installed.

With verl: every loss is ``verl.trainer.ppo.core_algos.get_policy_loss_fn(name)`` called with verl's exact
keywords and a real ``ActorConfig`` (``policy_loss=SATPolicyLossConfig(...)`` for ``sat``/``sat_gspo``,
``PolicyLossConfig`` otherwise), and the GRPO advantages come from ``compute_grpo_outcome_advantage``.
Without verl only ``sat`` and ``sat_gspo`` run, on :mod:`sat_ext.core` with a local aggregation, and the
GRPO advantage is the same formula written here; :func:`backend` says which one is in use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from .methods import LOSSES, SAT_LOSSES, Method


@dataclass(frozen=True)
class LossSetting:
    """Radii and aggregation of one loss (verl's actor keys: clip_ratio_low/high, clip_ratio_c, loss_agg_mode)."""

    eps_low: float
    eps_high: float
    clip_c: float
    agg_mode: str
    sat_knobs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        s = f"clip [{self.eps_low:g}, {self.eps_high:g}], c={self.clip_c:g}, {self.agg_mode}"
        if self.sat_knobs:
            s += ", " + ", ".join(f"sat_{k}={v}" for k, v in sorted(self.sat_knobs.items()))
        return s


PAPER_DPPO_DELTA = 1e-3
TOY_DPPO_DELTA = 0.03
TIS_CAP = 2.0


def default_settings(
    gspo_eps: tuple[float, float] = (0.2, 0.2), dppo_toy_delta: float = TOY_DPPO_DELTA
) -> dict[str, LossSetting]:
    """The paper's settings (Table 9, App. F) keyed by loss, plus ``dppo_tv+toy``.

    GRPO, GSPO and both SAT recipes: radii 0.2 / 0.2 (GSPO included), with verl's dual clip 3 (a no-op at
    these staleness levels, kept because it is verl's default). DPPO-TV: threshold delta = 1e-3 on
    |pi - mu| of the sampled token, and verl's truncation 20 of its IS weight. ``dppo_tv+toy`` (not the
    paper's): the toy's 15-token vocabulary gives its sampled tokens probabilities near 0.5, so a small
    log-ratio moves a token's probability by far more than it does for the near-certain tokens of an LLM,
    and delta = 1e-3 masks 28% of the tokens at lag 1 (reward falls from 0.40 to 0.32 in 60 steps);
    ``dppo_toy_delta`` = 0.03 masks 1.0%, about what SAT newly clips there (1.2%) (docs/demo.md)."""
    lo, hi = gspo_eps
    return {
        "vanilla": LossSetting(0.2, 0.2, 3.0, "token-mean"),
        "gspo": LossSetting(lo, hi, 3.0, "seq-mean-token-mean"),
        "dppo_tv": LossSetting(PAPER_DPPO_DELTA, PAPER_DPPO_DELTA, 20.0, "token-mean"),
        "dppo_tv+toy": LossSetting(dppo_toy_delta, dppo_toy_delta, 20.0, "token-mean"),
        "sat": LossSetting(0.2, 0.2, 3.0, "token-mean"),
        "sat_gspo": LossSetting(lo, hi, 3.0, "seq-mean-token-mean"),
    }


def setting_for(settings: dict[str, LossSetting], method: Method) -> LossSetting:
    return settings["dppo_tv+toy" if method.toy else method.loss]


def verl_available() -> bool:
    try:
        import verl  # noqa: F401
        from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: F401
    except Exception:
        return False
    return True


def backend(use_verl: bool | None = None) -> str:
    """ "verl" (the real registry) or "core" (sat_ext.core, SAT losses only)."""
    if use_verl is None:
        use_verl = verl_available()
    if use_verl and not verl_available():
        raise RuntimeError("--backend verl was asked for, but verl cannot be imported")
    return "verl" if use_verl else "core"


def available_losses(kind: str) -> tuple[str, ...]:
    return LOSSES if kind == "verl" else SAT_LOSSES


LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


def make_loss(name: str, setting: LossSetting, kind: str, group_size: int) -> LossFn:
    """``fn(old_log_prob, log_prob, advantages, response_mask, weights=None) -> (loss, metrics)`` for loss
    ``name``; ``weights`` are per-token loss weights (verl's ``rollout_is_weights``, TIS)."""
    if kind == "verl":
        return _verl_loss(name, setting, group_size)
    if name not in SAT_LOSSES:
        raise ValueError(f"loss {name!r} needs verl (only {list(SAT_LOSSES)} run without it)")
    return _core_loss(name, setting)


def _verl_loss(name: str, setting: LossSetting, group_size: int) -> LossFn:
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig, PolicyLossConfig

    import sat_ext.verl.config  # noqa: F401  (registers sat / sat_gspo even if the entry point did not run)
    from sat_ext.verl.config import SATPolicyLossConfig

    if name in SAT_LOSSES:
        policy_loss = SATPolicyLossConfig(loss_mode=name, **{f"sat_{k}": v for k, v in setting.sat_knobs.items()})
    else:
        policy_loss = PolicyLossConfig(loss_mode=name)
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=group_size,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=setting.eps_high,
        clip_ratio_low=setting.eps_low,
        clip_ratio_high=setting.eps_high,
        clip_ratio_c=setting.clip_c,
        loss_agg_mode=setting.agg_mode,
        policy_loss=policy_loss,
    )
    fn = get_policy_loss_fn(config.policy_loss.loss_mode)

    def loss_fn(old_log_prob, log_prob, advantages, mask, weights=None):
        mask = mask.bool()
        # What verl's ppo_loss sets on every micro-batch (one rank: dp_size 1, the whole mini-batch).
        config.global_batch_info.clear()
        config.global_batch_info.update(
            dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=int(mask.shape[0]), loss_scale_factor=None
        )
        loss, metrics = fn(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=mask,
            loss_agg_mode=config.loss_agg_mode,
            config=config,
            rollout_is_weights=weights,
        )
        return loss, {k: float(v) for k, v in metrics.items()}

    loss_fn.config = config  # type: ignore[attr-defined]
    loss_fn.verl_fn = fn  # type: ignore[attr-defined]
    return loss_fn


def _agg(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    m = mask.float()
    if mode == "token-mean":
        return (loss_mat * m).sum() / m.sum().clamp_min(1.0)
    if mode == "seq-mean-token-mean":
        per_seq = (loss_mat * m).sum(-1) / m.sum(-1).clamp_min(1.0)
        return per_seq.mean()
    raise ValueError(f"the core backend aggregates token-mean or seq-mean-token-mean, not {mode!r}")


def _core_loss(name: str, setting: LossSetting) -> LossFn:
    from sat_ext.core import SATConfig, aggregate, sat_gspo_loss, sat_token_loss
    from sat_ext.metric_names import VERL_METRIC_NAMES

    cfg = SATConfig(
        eps_low=setting.eps_low,
        eps_high=setting.eps_high,
        dual_clip=setting.clip_c if name == "sat" else None,
        **setting.sat_knobs,
    )
    core = sat_token_loss if name == "sat" else sat_gspo_loss

    def loss_fn(old_log_prob, log_prob, advantages, mask, weights=None):
        out = core(log_prob, old_log_prob, advantages, mask.bool(), cfg, rollout_is_weights=weights)
        metrics = dict(zip(VERL_METRIC_NAMES, out.metric_vector.tolist()))
        empty = bool(metrics["actor/sat/empty_microbatch"])
        return aggregate(out.loss_mat, mask, empty, lambda: _agg(out.loss_mat, mask.bool(), setting.agg_mode)), metrics

    return loss_fn


def grpo_advantages(rewards: torch.Tensor, mask: torch.Tensor, group_ids: np.ndarray, kind: str) -> torch.Tensor:
    """(n, R) GRPO outcome advantages: (reward - group mean) / (group std + 1e-6), on every response token.

    ``kind="verl"`` calls verl's ``compute_grpo_outcome_advantage``; "core" computes the same thing here.
    """
    token_rewards = torch.zeros(mask.shape, dtype=torch.float32)
    last = (mask.long().sum(-1) - 1).clamp_min(0)
    token_rewards[torch.arange(mask.shape[0]), last] = rewards.float()
    if kind == "verl":
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

        adv, _ = compute_grpo_outcome_advantage(
            token_level_rewards=token_rewards, response_mask=mask.float(), index=group_ids
        )
        return adv
    scores = token_rewards.sum(-1)
    out = torch.empty_like(scores)
    for gid in np.unique(group_ids):
        idx = torch.as_tensor(np.nonzero(group_ids == gid)[0])
        s = scores[idx]
        mean, std = (s.mean(), s.std()) if len(idx) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        out[idx] = (s - mean) / (std + 1e-6)
    return out.unsqueeze(-1) * mask.float()
