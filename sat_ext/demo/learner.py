"""The trainer side of a run: one trainer step on a batch of groups (GRPO advantages, the loss, AdamW).

The loss's ratio is pi / pi^(l) (``ratio_denominator == "checkpoint"``) or pi / mu ("rollout"). Logged
beside the loss's own metrics: ``abs_log_ratio/*`` and ``log_ratio/var`` of that ratio (Table 8),
``mismatch/d_pi`` = mean |log pi - log mu| (Eq. 52, the paper's d_pi), ``mismatch/engine`` = mean
|log pi^(l) - log mu| (the engine's numerics and routing at equal weights), and with TIS its weights.

``abs_log_ratio/p90`` is ``torch.quantile``'s (linear interpolation) over every active token of the step, of the
token log-ratio: not SAT's q, which is Eq. 14's inverse-CDF quantile (the ceil(0.9 n)-th smallest |d|) per loss
call, and for SAT-GSPO of the sequence log-ratio broadcast to the response's tokens (Eq. 20). With
``evaluation.base_q`` a run of GRPO or GSPO also logs ``base/sat_threshold_q``: the q that SAT-GRPO's or
SAT-GSPO's gate would take on the same batch and tokens, computed by that loss itself (sat_ext.core) and averaged
over the step's loss calls as the loss's own metrics are. With ``recipe.lr_warmup`` the step's learning rate is
logged as ``lr``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .losses import grpo_advantages, make_loss
from .methods import SAT_BASE
from .model import token_log_probs
from .producer import Group
from .spec import RunSpec


def tis_weights(checkpoint_lp: torch.Tensor, rollout_lp: torch.Tensor, mask: torch.Tensor, cap: float) -> torch.Tensor:
    """TIS (paper Eq. 41, verl's token-level rollout correction): w = min(pi^(l) / mu, C), 0 off the mask."""
    w = torch.exp((checkpoint_lp - rollout_lp).clamp(max=math.log(cap)))
    return torch.where(mask, w, torch.zeros_like(w))


def warmup_lr(lr: float, step: int, warmup: int) -> float:
    """The learning rate of trainer step ``step`` (1, 2, ...) under a linear warm-up of ``warmup`` steps:
    ``lr * min(1, step / warmup)`` (lr / W at step 1, the full lr from step W on); ``warmup`` 0: ``lr``."""
    if step < 1:
        raise ValueError(f"trainer steps count from 1, got {step}")
    return lr if warmup <= 0 or step >= warmup else lr * step / warmup


BASE_Q = "base/sat_threshold_q"
"""The q SAT's gate would take on a base run's batch (``Evaluation.base_q``)."""
_SAT_OF_BASE = {base: sat for sat, base in SAT_BASE.items()}


def _quantiles(x: torch.Tensor) -> dict[str, float]:
    if x.numel() == 0:
        return {"mean": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    q = torch.quantile(x.float(), torch.tensor([0.9, 0.99]))
    return {"mean": float(x.mean()), "p90": float(q[0]), "p99": float(q[1]), "max": float(x.max())}


def _masked_stats(x: torch.Tensor) -> dict[str, float]:
    return (
        {"mean": float(x.abs().mean()), "var": float(x.var(unbiased=False))} if x.numel() else {"mean": 0.0, "var": 0.0}
    )


class Learner:
    """The trainer's policy, its AdamW optimizer and the run's loss; :meth:`step` trains on one batch."""

    def __init__(self, spec: RunSpec, policy: torch.nn.Module):
        self.spec = spec
        self.policy = policy
        recipe = spec.recipe
        self.loss_fn = make_loss(spec.method.loss, spec.setting, recipe.backend, recipe.group_size)
        self.opt = torch.optim.AdamW(policy.parameters(), lr=recipe.lr, betas=(0.9, 0.99), weight_decay=0.0)
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.steps_done = 0
        # SAT's own loss on the base's batches, for q alone (the sat_ext.core path; its gradient is never used)
        sat_twin = _SAT_OF_BASE.get(spec.method.loss) if spec.evaluation.base_q else None
        self.sat_probe = make_loss(sat_twin, spec.setting, "core", recipe.group_size) if sat_twin else None

    def step(self, groups: list[Group]) -> dict[str, float]:
        """GRPO advantages over the batch, then ``mini_batches`` optimizer updates; returns the step's metrics."""
        spec, recipe = self.spec, self.spec.recipe
        self.steps_done += 1
        if recipe.lr_warmup > 0:
            lr = warmup_lr(recipe.lr, self.steps_done, recipe.lr_warmup)
            for pg in self.opt.param_groups:
                pg["lr"] = lr
        G = recipe.group_size
        prompts = torch.cat([g.prompt for g in groups])
        responses = torch.cat([g.responses for g in groups])
        mu = torch.cat([g.rollout_log_prob for g in groups])
        ckpt = torch.cat([g.checkpoint_log_prob for g in groups])
        mask = torch.cat([g.mask for g in groups])
        rewards = torch.cat([g.rewards for g in groups])
        routing = torch.cat([g.routing for g in groups], dim=1) if spec.method.r3 else None
        old_lp = ckpt if spec.ratio_denominator == "checkpoint" else mu
        weights = tis_weights(ckpt, mu, mask, recipe.tis_cap) if spec.method.tis else None
        group_ids = np.repeat(np.arange(len(groups)), G)
        adv = grpo_advantages(rewards, mask, group_ids, recipe.backend)
        per_mb = (len(groups) // recipe.mini_batches) * G
        sums: dict[str, float] = {}
        d_all, dmu_all = [], []
        loss_sum, n_mb, grad_norms = 0.0, 0, []
        for start in range(0, responses.shape[0], per_mb):
            sl = slice(start, start + per_mb)
            lp = token_log_probs(
                self.policy,
                prompts[sl],
                responses[sl],
                recipe.temperature,
                routing[:, sl] if routing is not None else None,
            )
            m = mask[sl]
            d_all.append((lp.detach() - old_lp[sl])[m])
            dmu_all.append((lp.detach() - mu[sl])[m])
            loss, metrics = self.loss_fn(old_lp[sl], lp, adv[sl], m, weights[sl] if weights is not None else None)
            if self.sat_probe is not None:
                with torch.no_grad():
                    probe = self.sat_probe(old_lp[sl], lp.detach(), adv[sl], m)[1]
                sums[BASE_Q] = sums.get(BASE_Q, 0.0) + probe["actor/sat/threshold_q"]
            self.opt.zero_grad(set_to_none=True)
            if torch.isfinite(loss):
                loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(self.params, recipe.grad_clip)
                if torch.isfinite(gn):
                    self.opt.step()
                grad_norms.append(float(gn))
            loss_sum += float(loss.detach())
            n_mb += 1
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        d = torch.cat(d_all)
        d_stats = _masked_stats(d)
        out = {
            "loss": loss_sum / n_mb,
            "train_reward": float(rewards.mean()),
            "grad_norm": float(np.mean(grad_norms)) if grad_norms else float("nan"),
            "response_len": float(mask.float().sum(-1).mean()),
            "log_ratio/var": d_stats["var"],
            "mismatch/d_pi": _masked_stats(torch.cat(dmu_all))["mean"],
            "mismatch/engine": _masked_stats((ckpt - mu)[mask])["mean"],
        }
        if recipe.lr_warmup > 0:
            out["lr"] = float(self.opt.param_groups[0]["lr"])
        if weights is not None:
            w = weights[mask]
            out["tis/weight_mean"] = float(w.mean())
            out["tis/capped_frac"] = float((w >= recipe.tis_cap * (1 - 1e-6)).float().mean())
        out.update({k: v / n_mb for k, v in sums.items()})
        out.update({f"abs_log_ratio/{k}": v for k, v in _quantiles(d.abs()).items()})
        return out
