"""SAT (token level) and SAT-GSPO (sequence ratio) per-token losses, before the framework's aggregation.

Token SAT, per active token t (SPEC §1):

    l_t    = clamp(logp_t - logp_old_t, -20, 20),   r_t = exp(l_t),   d_t = sg(l_t)
    [lo_t, hi_t] = adaptive_trust_region(d)
    loss_t = max(-A_t r_t, -A_t clip(r_t, lo_t, hi_t))          and, for A_t < 0 with dual clip C,
    loss_t = min(loss_t, -A_t C)

SAT-GSPO: the sequence log-ratio m_i = mean_t (logp_it - logp_old_it) gives s_i = exp(m_i), used token-wise
as ``exp(logp - sg(logp) + sg(m_i))`` (verl's form, ``ratio_form="token"``) or as ``exp(m_i)`` with its full
gradient (OpenRLHF's form, ``ratio_form="sequence"``); the log is clamped at 10 as verl's gspo does. The
proxy is d_i = sg(m_i) per sequence (``gspo_gate_level="sequence"``) or the token log-ratio ("token").

Both return a :class:`SATLossOutput` whose ``loss_mat`` the framework aggregates (verl ``agg_loss``,
OpenRLHF ``aggregate_loss``) and whose ``metrics`` have the same keys whatever the input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import SATConfig
from .trust_region import TrustRegion, adaptive_trust_region

LOG_RATIO_CLAMP = 20.0
GSPO_LOG_RATIO_MAX = 10.0

METRIC_KEYS = (
    "active",
    "gate_rate",
    "threshold_q",
    "radius_low_mean",
    "radius_high_mean",
    "contraction_min",
    "abs_log_ratio_mean",
    "newly_clipped_frac",
    "nonfinite_frac",
    "log_ratio_clamped_frac",
    "empty_microbatch",
    "pg_clipfrac",
    "pg_clipfrac_lower",
    "ppo_kl",
)


@dataclass
class SATLossOutput:
    """Per-token loss (to aggregate), the ratio used, the clip-active mask and the step's diagnostics."""

    loss_mat: torch.Tensor
    ratio: torch.Tensor
    clipped: torch.Tensor
    region: TrustRegion
    metrics: dict[str, torch.Tensor]


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.float()
    return (x.float() * m).sum() / m.sum().clamp_min(1.0)


def _sanitize(
    cfg: SATConfig, mask: torch.Tensor, **tensors: torch.Tensor | None
) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """Upcast to float32; replace non-finite entries by 0 (policy "mask") or raise (policy "raise").

    Returns the cleaned tensors and the bad-entry mask (None when every entry is finite: the fast path).
    """
    out = {k: v.float() for k, v in tensors.items() if v is not None}
    finite = None
    for v in out.values():
        f = torch.isfinite(v)
        finite = f if finite is None else finite & f
    if finite is None or bool(finite.all()):
        return out, None
    bad = ~finite
    if cfg.nonfinite == "raise":
        for name, v in out.items():
            n = int((~torch.isfinite(v) & mask).sum())
            if n:
                raise ValueError(f"SAT input '{name}' has {n} non-finite (NaN/Inf) values at active tokens")
        # Non-finite values only at padding: drop them silently, they never reach the loss.
    out = {k: torch.where(bad, torch.zeros_like(v), v) for k, v in out.items()}
    return out, bad


def _surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, dual_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate with per-entry bounds; op for op as verl's ``vanilla`` (bit-exact at c == 1)."""
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, lo, hi)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    clipped = torch.gt(pg_losses2, pg_losses1)
    if dual_clip is None:
        return clip_pg_losses1, clipped, torch.zeros_like(clipped)
    pg_losses3 = -adv * dual_clip
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    dual_clipped = torch.gt(clip_pg_losses1, pg_losses3) & (adv < 0)
    return torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1), clipped, dual_clipped


def _finish(
    cfg: SATConfig,
    loss_mat: torch.Tensor,
    ratio: torch.Tensor,
    adv: torch.Tensor,
    clipped: torch.Tensor,
    dual_clipped: torch.Tensor,
    region: TrustRegion,
    d: torch.Tensor,
    d_mask: torch.Tensor,
    mask: torch.Tensor,
    raw_log_ratio: torch.Tensor,
    bad: torch.Tensor | None,
    kl_log_ratio: torch.Tensor,
) -> SATLossOutput:
    """Zero the loss at non-finite entries and collect the diagnostics (constant key set).

    ``kl_log_ratio`` is the log-ratio ``ppo_kl`` is reported on, as the matching verl loss does: clamped for
    the token loss (verl's ``vanilla``), unclamped for SAT-GSPO (verl's ``gspo``).
    """
    if bad is not None:
        loss_mat = torch.where(bad, torch.zeros_like(loss_mat), loss_mat)
    with torch.no_grad():
        r = ratio.detach()
        ppo_clipped = torch.gt(-adv * torch.clamp(r, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high), -adv * r)
        n_active = mask.sum()
        metrics = region.diagnostics(d, d_mask)
        metrics.update(
            active=torch.ones((), device=loss_mat.device),
            newly_clipped_frac=_masked_mean(clipped & ~ppo_clipped, mask),
            nonfinite_frac=_masked_mean(bad, mask) if bad is not None else torch.zeros((), device=loss_mat.device),
            log_ratio_clamped_frac=_masked_mean(raw_log_ratio.abs() > LOG_RATIO_CLAMP, mask),
            empty_microbatch=(n_active == 0).float(),
            pg_clipfrac=_masked_mean(clipped, mask),
            pg_clipfrac_lower=_masked_mean(dual_clipped, mask),
            ppo_kl=_masked_mean(-kl_log_ratio, mask),
        )
    return SATLossOutput(loss_mat=loss_mat, ratio=ratio, clipped=clipped, region=region, metrics=metrics)


def sat_token_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    rollout_log_prob: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> SATLossOutput:
    """Token-level SAT (SAT-GRPO with GRPO advantages); all tensors (batch, response_len)."""
    mask = mask.bool()
    rollout = rollout_log_prob if cfg.proxy == "rollout" else None
    if cfg.proxy == "rollout" and rollout is None:
        raise ValueError("SAT proxy='rollout' needs rollout_log_prob, which was not given")
    t, bad = _sanitize(cfg, mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages,
                       rollout_log_prob=rollout)
    lp, old, adv = t["log_prob"], t["old_log_prob"], t["advantages"]
    raw = lp - old
    log_ratio = torch.clamp(raw, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    if rollout is None:
        d = log_ratio.detach()
    else:
        d = torch.clamp(lp.detach() - t["rollout_log_prob"], min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    region = adaptive_trust_region(d, mask, cfg, group)
    loss_mat, clipped, dual_clipped = _surrogate(ratio, adv, region.lo, region.hi, cfg.dual_clip)
    return _finish(cfg, loss_mat, ratio, adv, clipped, dual_clipped, region, d, mask, mask, raw.detach(), bad,
                   log_ratio.detach())


def sat_gspo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    rollout_log_prob: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
    ratio_form: str = "token",
) -> SATLossOutput:
    """SAT-GSPO on GSPO's sequence ratio; ``cfg.dual_clip`` applies as in the token loss (None: GSPO's own)."""
    if ratio_form not in ("token", "sequence"):
        raise ValueError(f"SAT-GSPO ratio_form must be 'token' or 'sequence', got {ratio_form!r}")
    mask = mask.bool()
    rollout = rollout_log_prob if cfg.proxy == "rollout" else None
    if cfg.proxy == "rollout" and rollout is None:
        raise ValueError("SAT proxy='rollout' needs rollout_log_prob, which was not given")
    t, bad = _sanitize(cfg, mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages,
                       rollout_log_prob=rollout)
    lp, old, adv = t["log_prob"], t["old_log_prob"], t["advantages"]
    raw = lp - old
    seq_len = torch.sum(mask, dim=-1).clamp(min=1)
    seq_log_ratio = torch.sum(raw * mask, dim=-1) / seq_len
    if ratio_form == "token":
        log_s = lp - lp.detach() + seq_log_ratio.detach().unsqueeze(-1)
        ratio = torch.exp(torch.clamp(log_s, max=GSPO_LOG_RATIO_MAX))
    else:
        ratio = torch.exp(torch.clamp(seq_log_ratio, max=GSPO_LOG_RATIO_MAX)).unsqueeze(-1) * mask
    ref_raw = raw.detach() if rollout is None else lp.detach() - t["rollout_log_prob"]
    if cfg.gspo_gate_level == "sequence":
        seq_mask = mask.any(dim=-1)
        d = torch.clamp(torch.sum(ref_raw * mask, dim=-1) / seq_len, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        seq_region = adaptive_trust_region(d, seq_mask, cfg, group)
        lo, hi = seq_region.lo.unsqueeze(-1), seq_region.hi.unsqueeze(-1)
        region, d_mask = seq_region, seq_mask
    else:
        d = torch.clamp(ref_raw, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        region = adaptive_trust_region(d, mask, cfg, group)
        lo, hi, d_mask = region.lo, region.hi, mask
    loss_mat, clipped, dual_clipped = _surrogate(ratio, adv, lo, hi, cfg.dual_clip)
    return _finish(cfg, loss_mat, ratio, adv, clipped, dual_clipped, region, d, d_mask, mask, raw.detach(), bad,
                   raw.detach())
