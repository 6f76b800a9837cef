"""SAT (token level) and SAT-GSPO (sequence ratio) per-token losses, before the framework's aggregation.

Token SAT, per active token t (the paper's Eq. 13-19; the clamp and the dual clip are verl's ``vanilla``):

    l_t    = clamp(logp_t - logp_old_t, -20, 20),   r_t = exp(l_t),   d_t = sg(l_t)        Eq. 13
    [lo_t, hi_t] = adaptive_trust_region(d)                                                Eq. 14-17
    loss_t = max(-A_t r_t, -A_t clip(r_t, lo_t, hi_t))                                     Eq. 18-19
    and, for A_t < 0 with dual clip C, loss_t = min(loss_t, -A_t C); then loss_t * w_t with the framework's
    optional per-token weights w (verl's ``rollout_is_weights``).

SAT-GSPO (Eq. 20): the sequence log-ratio m_i = mean_t (logp_it - logp_old_it) gives s_i = exp(m_i), used
token-wise as ``exp(logp - sg(logp) + sg(m_i))`` (verl's form, ``ratio_form="token"``) or as ``exp(m_i)``
with its full gradient (OpenRLHF's form, ``ratio_form="sequence"``); the log is clamped at 10 as verl's gspo
does. The score is d_it = sg(m_i) on every active token of sequence i, with the token quantile
(``gspo_gate_level="broadcast"``, the paper's); the options are one score per sequence with a per-sequence
quantile ("sequence") and each token's own log-ratio ("token").

Both return a :class:`SATLossOutput` whose ``loss_mat`` the framework aggregates (verl ``agg_loss``,
OpenRLHF ``aggregate_loss``; an empty micro-batch takes :func:`empty_microbatch_loss` instead) and whose
``metrics`` have the same keys whatever the input.
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
    "d_pi",
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
                raise ValueError(f"SAT input '{name}' has {n} non-finite (NaN/Inf) values at active tokens "
                                 f"(sat nonfinite='raise'; 'mask' zeroes and counts them in nonfinite_frac)")
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
    weights: torch.Tensor | None = None,
) -> SATLossOutput:
    """Zero the loss at non-finite entries, apply the per-token ``weights`` and collect the diagnostics
    (constant key set).

    ``d_pi`` is Eq. 52, mean |log r_tok| over the active tokens, from ``raw_log_ratio`` (the token log-ratio
    against the ratio's own denominator, for SAT-GSPO too).

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
    if weights is not None:
        loss_mat = loss_mat * weights
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
            d_pi=raw.abs().mul_(m).sum() / denom,
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


@dataclass
class _Inputs:
    """Sanitised float32 inputs of one loss call."""

    lp: torch.Tensor
    old: torch.Tensor
    adv: torch.Tensor
    rollout: torch.Tensor | None  # the rollout log-prob, with proxy "rollout" only
    weights: torch.Tensor | None  # per-token loss weights (verl's rollout_is_weights)
    input_mask: torch.Tensor  # the active mask as given
    mask: torch.Tensor  # the active mask less the non-finite entries
    bad: torch.Tensor | None  # the non-finite entries (None when all are finite)


def _inputs(
    cfg: SATConfig,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    rollout_log_prob: torch.Tensor | None,
    rollout_is_weights: torch.Tensor | None,
) -> _Inputs:
    """The inputs upcast to float32 with the non-finite policy applied to every tensor the loss reads."""
    mask = mask.bool()
    rollout = rollout_log_prob if cfg.proxy == "rollout" else None
    if cfg.proxy == "rollout" and rollout is None:
        raise ValueError("SAT proxy='rollout' needs rollout_log_prob, which was not given")
    t, bad = _sanitize(cfg, mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages,
                       rollout_log_prob=rollout, rollout_is_weights=rollout_is_weights)
    return _Inputs(lp=t["log_prob"], old=t["old_log_prob"], adv=t["advantages"], rollout=t.get("rollout_log_prob"),
                   weights=t.get("rollout_is_weights"), input_mask=mask, mask=_drop_nonfinite(mask, bad), bad=bad)


def empty_microbatch_loss(loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The loss of a micro-batch with no active token: 0 with a zero gradient and the graph kept.

    (The paper skips such a step.) ``where`` rather than ``loss_mat * 0``: padding may hold any value,
    including an infinite product of finite inputs, and inf * 0 is NaN.
    """
    return torch.where(mask.bool(), loss_mat, 0.0).sum()


def sat_token_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    rollout_log_prob: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> SATLossOutput:
    """Token-level SAT (SAT-GRPO with GRPO advantages); all tensors (batch, response_len)."""
    x = _inputs(cfg, log_prob, old_log_prob, advantages, mask, rollout_log_prob, rollout_is_weights)
    mask = x.mask
    raw = x.lp - x.old
    log_ratio = torch.clamp(raw, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    if x.rollout is None:
        d = log_ratio.detach()
    else:
        d = torch.clamp(x.lp.detach() - x.rollout, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    region = adaptive_trust_region(d, mask, cfg, group)
    lo, hi = _reachable_bounds(cfg, x.adv, region.lo, region.hi)
    loss_mat, clipped, dual_clipped, neg_adv, pg1 = _surrogate(ratio, x.adv, lo, hi, cfg.dual_clip)
    return _finish(cfg, loss_mat, ratio, neg_adv, pg1, clipped, dual_clipped, region, d, mask, mask, mask.float(),
                   raw.detach(), x.bad, log_ratio.detach(), x.input_mask, x.weights)


def sat_gspo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: SATConfig,
    rollout_log_prob: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
    ratio_form: str = "token",
    rollout_is_weights: torch.Tensor | None = None,
) -> SATLossOutput:
    """SAT-GSPO on GSPO's sequence ratio; ``cfg.dual_clip`` applies as in the token loss (None: GSPO's own)."""
    if ratio_form not in ("token", "sequence"):
        raise ValueError(f"SAT-GSPO ratio_form must be 'token' or 'sequence', got {ratio_form!r}")
    x = _inputs(cfg, log_prob, old_log_prob, advantages, mask, rollout_log_prob, rollout_is_weights)
    mask, lp = x.mask, x.lp
    raw = lp - x.old
    m = mask.float()
    n_seq = torch.count_nonzero(mask, dim=-1)  # = torch.sum(mask, dim=-1), as verl's gspo computes it
    seq_len = n_seq.clamp(min=1)
    seq_log_ratio = torch.sum(raw * m, dim=-1) / seq_len
    if ratio_form == "token":
        log_s = lp - lp.detach() + seq_log_ratio.detach().unsqueeze(-1)
        ratio = torch.exp(torch.clamp(log_s, max=GSPO_LOG_RATIO_MAX))
    else:
        ratio = torch.exp(torch.clamp(seq_log_ratio, max=GSPO_LOG_RATIO_MAX)).unsqueeze(-1) * mask
    ref_raw = raw.detach() if x.rollout is None else lp.detach() - x.rollout
    if cfg.gspo_gate_level == "token":
        d = torch.clamp(ref_raw, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        region = adaptive_trust_region(d, mask, cfg, group)
        lo, hi, d_mask = region.lo, region.hi, mask
    else:
        # with proxy "old", the sequence mean of ref_raw is seq_log_ratio itself (the same operations)
        seq_ref = seq_log_ratio.detach() if x.rollout is None else torch.sum(ref_raw * m, dim=-1) / seq_len
        d_seq = torch.clamp(seq_ref, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        if cfg.gspo_gate_level == "broadcast":  # Eq. 20: every active token carries its sequence's score
            d = d_seq.unsqueeze(-1).expand(raw.shape).contiguous()
            region = adaptive_trust_region(d, mask, cfg, group)
            lo, hi, d_mask = region.lo, region.hi, mask
        else:  # "sequence": one score per sequence, quantile over sequences
            d, d_mask = d_seq, n_seq > 0
            region = adaptive_trust_region(d, d_mask, cfg, group)
            lo, hi = region.lo.unsqueeze(-1), region.hi.unsqueeze(-1)
    lo, hi = _reachable_bounds(cfg, x.adv, lo, hi)
    loss_mat, clipped, dual_clipped, neg_adv, pg1 = _surrogate(ratio, x.adv, lo, hi, cfg.dual_clip)
    return _finish(cfg, loss_mat, ratio, neg_adv, pg1, clipped, dual_clipped, region, d, d_mask, mask, m,
                   raw.detach(), x.bad, raw.detach(), x.input_mask, x.weights)
