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


def _all_finite(tensors) -> bool:
    """True when every element is finite, from one sum per tensor: a NaN or Inf makes the sum non-finite.

    A sum that overflows only sends the caller to the exact element-wise check, which then decides.
    """
    total = None
    for v in tensors:
        s = v.sum()
        total = s if total is None else total + s
    return total is None or bool(torch.isfinite(total))


def _newly_clipped(clipped: torch.Tensor, ppo_clipped: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``clipped & ~ppo_clipped & mask``, in ``ppo_clipped``'s storage (a temporary) when the shapes allow it."""
    if clipped.shape == ppo_clipped.shape == mask.shape:
        return ppo_clipped.logical_not_().bitwise_and_(clipped).bitwise_and_(mask)
    return clipped & ~ppo_clipped & mask


def _sanitize(
    cfg: SATConfig, mask: torch.Tensor, **tensors: torch.Tensor | None
) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """Upcast to float32; replace non-finite entries by 0 (policy "mask") or raise (policy "raise").

    Returns the cleaned tensors and the bad-entry mask (None when every entry is finite: the fast path).
    """
    out = {k: v.float() for k, v in tensors.items() if v is not None}
    if _all_finite(out.values()):
        return out, None
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


def _reachable_bounds(
    cfg: SATConfig, adv: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The nominal endpoint where the advantage's sign cannot reach the contracted one (pull-back tokens).

    For A > 0 the clipped surrogate depends on ``hi`` only, for A < 0 on ``lo`` only, so this changes no
    value. It keeps PPO's exact gradient on pull-back tokens (A > 0 with lo contracted, A < 0 with hi
    contracted): with r a float32 step beyond a contracted endpoint, ``-A * r`` and ``-A * lo`` can round to
    the same value, and ``torch.maximum`` then splits the gradient in half where PPO gives it whole.
    """
    lo = torch.where(adv > 0, 1.0 - cfg.eps_low, lo)
    hi = torch.where(adv < 0, 1.0 + cfg.eps_high, hi)
    return lo, hi


def _drop_nonfinite(mask: torch.Tensor, bad: torch.Tensor | None) -> torch.Tensor:
    """The active mask less the non-finite entries: a masked token is padding for the rest of the batch.

    Left active, its zeroed inputs would enter the gate quantile as a fake d = 0 and, in SAT-GSPO, the
    sequence mean log-ratio (and length) of its sequence, changing the other tokens' ratio and gradient.
    """
    return mask if bad is None else mask & ~bad


def _surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, dual_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate with per-entry bounds; op for op as verl's ``vanilla`` (bit-exact at c == 1).

    ``-adv`` and ``adv < 0`` are computed once (verl recomputes them; the values are the same). Returns the
    loss, the clip mask, the dual-clip mask (None without dual clip) and ``-adv * ratio`` (PPO's unclipped
    term, reused by the diagnostics).
    """
    neg_adv = -adv
    pg_losses1 = neg_adv * ratio
    pg_losses2 = neg_adv * torch.clamp(ratio, lo, hi)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    clipped = torch.gt(pg_losses2, pg_losses1)
    if dual_clip is None:
        return clip_pg_losses1, clipped, None, neg_adv, pg_losses1
    pg_losses3 = neg_adv * dual_clip
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    negative = adv < 0
    dual_clipped = torch.gt(clip_pg_losses1, pg_losses3) & negative
    return torch.where(negative, clip_pg_losses2, clip_pg_losses1), clipped, dual_clipped, neg_adv, pg_losses1


def _finish(
    cfg: SATConfig,
    loss_mat: torch.Tensor,
    ratio: torch.Tensor,
    neg_adv: torch.Tensor,
    pg_losses1: torch.Tensor,
    clipped: torch.Tensor,
    dual_clipped: torch.Tensor | None,
    region: TrustRegion,
    d: torch.Tensor,
    d_mask: torch.Tensor,
    mask: torch.Tensor,
    m: torch.Tensor,
    raw_log_ratio: torch.Tensor,
    bad: torch.Tensor | None,
    kl_log_ratio: torch.Tensor,
    input_mask: torch.Tensor | None = None,
) -> SATLossOutput:
    """Zero the loss at non-finite entries and collect the diagnostics (constant key set).

    ``kl_log_ratio`` is the log-ratio ``ppo_kl`` is reported on, as the matching verl loss does: clamped for
    the token loss (verl's ``vanilla``), unclamped for SAT-GSPO (verl's ``gspo``). ``m`` is ``mask.float()``.

    Fractions divide by max(n_active, 1) with n_active an exact count (as verl's ``mask.sum()``). verl's own
    keys (pg_clipfrac, pg_clipfrac_lower, ppo_kl) sum the same float32 0/1 (or log-ratio) tensor verl sums,
    so they equal verl's bit for bit; SAT's own fractions count exactly.

    ``mask`` is the active mask less the non-finite entries (which are padding for everything); the
    ``nonfinite_frac`` is counted over ``input_mask``, the active mask as given.
    """
    if bad is not None:
        loss_mat = torch.where(bad, torch.zeros_like(loss_mat), loss_mat)
    with torch.no_grad():
        dev = loss_mat.device
        n_active = torch.count_nonzero(mask)
        denom = n_active.float().clamp_min(1.0)
        ppo_pg2 = torch.clamp(ratio.detach(), 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
        ppo_pg2 = ppo_pg2.mul_(neg_adv) if ppo_pg2.shape == neg_adv.shape else neg_adv * ppo_pg2
        ppo_clipped = torch.gt(ppo_pg2, pg_losses1.detach())
        del ppo_pg2
        if d_mask is mask:
            metrics = region.diagnostics(d, d_mask, weights=m, count=n_active)
        else:
            metrics = region.diagnostics(d, d_mask)
        zero = torch.zeros((), device=dev)
        raw = raw_log_ratio
        if raw.numel():
            lo_raw, hi_raw = torch.aminmax(raw)
            any_clamped = bool(lo_raw < -LOG_RATIO_CLAMP) or bool(hi_raw > LOG_RATIO_CLAMP)
        else:
            any_clamped = False
        metrics.update(
            active=torch.ones((), device=dev),
            newly_clipped_frac=torch.count_nonzero(_newly_clipped(clipped, ppo_clipped, mask)).float() / denom,
            nonfinite_frac=(torch.count_nonzero(bad & input_mask).float()
                            / torch.count_nonzero(input_mask).float().clamp_min(1.0)) if bad is not None else zero,
            log_ratio_clamped_frac=(torch.count_nonzero((raw.abs() > LOG_RATIO_CLAMP) & mask).float() / denom
                                    if any_clamped else zero.clone()),
            empty_microbatch=(n_active == 0).float(),
            pg_clipfrac=(clipped & mask).float().sum() / denom,
            pg_clipfrac_lower=((dual_clipped & mask).float().sum() / denom if dual_clipped is not None
                               else zero.clone()),
            ppo_kl=(torch.neg(kl_log_ratio).mul_(m) if kl_log_ratio.shape == m.shape else -kl_log_ratio * m).sum()
            / denom,
        )
    return SATLossOutput(loss_mat=loss_mat, ratio=ratio, clipped=clipped, region=region, metrics=metrics)


def _inputs(
    cfg: SATConfig,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    rollout_log_prob: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor,
           torch.Tensor | None]:
    """Sanitised float32 ``(logp, old, adv, rollout or None)``, the mask as given, the mask without
    non-finite entries, and the bad-entry mask (None when all finite)."""
    mask = mask.bool()
    rollout = rollout_log_prob if cfg.proxy == "rollout" else None
    if cfg.proxy == "rollout" and rollout is None:
        raise ValueError("SAT proxy='rollout' needs rollout_log_prob, which was not given")
    t, bad = _sanitize(cfg, mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages,
                       rollout_log_prob=rollout)
    return (t["log_prob"], t["old_log_prob"], t["advantages"], t.get("rollout_log_prob"), mask,
            _drop_nonfinite(mask, bad), bad)


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
    lp, old, adv, rollout, input_mask, mask, bad = _inputs(cfg, log_prob, old_log_prob, advantages, mask,
                                                           rollout_log_prob)
    raw = lp - old
    log_ratio = torch.clamp(raw, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    if rollout is None:
        d = log_ratio.detach()
    else:
        d = torch.clamp(lp.detach() - rollout, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    region = adaptive_trust_region(d, mask, cfg, group)
    lo, hi = _reachable_bounds(cfg, adv, region.lo, region.hi)
    loss_mat, clipped, dual_clipped, neg_adv, pg1 = _surrogate(ratio, adv, lo, hi, cfg.dual_clip)
    return _finish(cfg, loss_mat, ratio, neg_adv, pg1, clipped, dual_clipped, region, d, mask, mask, mask.float(),
                   raw.detach(), bad, log_ratio.detach(), input_mask)


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
    lp, old, adv, rollout, input_mask, mask, bad = _inputs(cfg, log_prob, old_log_prob, advantages, mask,
                                                           rollout_log_prob)
    raw = lp - old
    m = mask.float()
    n_seq = torch.count_nonzero(mask, dim=-1)  # = torch.sum(mask, dim=-1), as verl's gspo computes it
    seq_len = n_seq.clamp(min=1)
    seq_log_ratio = torch.sum(raw * m, dim=-1) / seq_len
    if ratio_form == "token":
        log_s = lp - lp.detach() + seq_log_ratio.detach().unsqueeze(-1)
        ratio = torch.exp(torch.clamp(log_s, max=GSPO_LOG_RATIO_MAX))
    else:
        ratio = torch.exp(torch.clamp(seq_log_ratio, max=GSPO_LOG_RATIO_MAX)).unsqueeze(-1) * mask
    ref_raw = raw.detach() if rollout is None else lp.detach() - rollout
    if cfg.gspo_gate_level == "sequence":
        seq_mask = n_seq > 0
        # with proxy "old", the sequence mean of ref_raw is seq_log_ratio itself (the same operations)
        seq_ref = seq_log_ratio.detach() if rollout is None else torch.sum(ref_raw * m, dim=-1) / seq_len
        d = torch.clamp(seq_ref, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        seq_region = adaptive_trust_region(d, seq_mask, cfg, group)
        lo, hi = seq_region.lo.unsqueeze(-1), seq_region.hi.unsqueeze(-1)
        region, d_mask = seq_region, seq_mask
    else:
        d = torch.clamp(ref_raw, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        region = adaptive_trust_region(d, mask, cfg, group)
        lo, hi, d_mask = region.lo, region.hi, mask
    lo, hi = _reachable_bounds(cfg, adv, lo, hi)
    loss_mat, clipped, dual_clipped, neg_adv, pg1 = _surrogate(ratio, adv, lo, hi, cfg.dual_clip)
    return _finish(cfg, loss_mat, ratio, neg_adv, pg1, clipped, dual_clipped, region, d, d_mask, mask, m,
                   raw.detach(), bad, raw.detach(), input_mask)
