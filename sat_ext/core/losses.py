"""SAT (token level) and SAT-GSPO (sequence ratio) per-token losses, before the framework's aggregation: the
fast path. :mod:`sat_ext.core.reference` is the same math in plain torch, the oracle these are tested against.

Token SAT, per active token t (the paper's Eq. 13-19; the clamp and the dual clip are verl's ``vanilla``):

    l_t    = clamp(logp_t - logp_old_t, -20, 20),   r_t = exp(l_t),   d_t = sg(l_t)        Eq. 13
    [lo_t, hi_t] = the adaptive interval of d                                              Eq. 14-17
    loss_t = max(-A_t r_t, -A_t clip(r_t, lo_t, hi_t))                                     Eq. 18-19
    and, for A_t < 0 with dual clip C, loss_t = min(loss_t, -A_t C); then loss_t * w_t with the framework's
    optional per-token weights w (verl's ``rollout_is_weights``).

SAT-GSPO (Eq. 20): the sequence log-ratio m_i = mean_t (logp_it - logp_old_it) gives s_i = exp(m_i), used
token-wise as ``exp(logp - sg(logp) + sg(m_i))`` (verl's form, ``ratio_form="token"``) or as ``exp(m_i)``
with its full gradient (OpenRLHF's form, ``ratio_form="sequence"``); the log is clamped at 10 as verl's gspo
does. The score is d_it = sg(m_i) on every active token of response i, with the token quantile
(``gspo_gate_level="broadcast"``, the paper's); the options are one score per response with a quantile over
responses ("sequence") and each token's own log-ratio ("token").

Both return a :class:`SATLossOutput` whose ``loss_mat`` the framework aggregates (verl ``agg_loss``,
OpenRLHF ``aggregate_loss``; an empty micro-batch takes :func:`empty_microbatch_loss` instead) and whose
``metrics`` have the same keys whatever the input. Only ``log_prob`` gets a gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.distributed as dist

from .config import GSPO_LOG_RATIO_MAX, LOG_RATIO_CLAMP, SATConfig
from .diagnostics import METRIC_KEYS, Measured, metrics
from .surrogate import SurrogateInput, clipped_surrogate
from .trust_region import SparseRegion, TrustRegion, gate_threshold, gated_bounds, sparse_trust_region

__all__ = ["METRIC_KEYS", "SATLossOutput", "empty_microbatch_loss", "sat_gspo_loss", "sat_token_loss"]


@dataclass
class SATLossOutput:
    """Per-token loss (to aggregate), the ratio's values, SAT's clip mask, the gate and the diagnostics."""

    loss_mat: torch.Tensor
    ratio: torch.Tensor  # detached
    clipped: torch.Tensor
    gate: SparseRegion  # the gated entries of the gate scope (tokens; responses for the "sequence" option)
    metrics: dict[str, torch.Tensor]

    @cached_property
    def region(self) -> TrustRegion:
        """The gate scope's bounds as dense tensors (built on demand)."""
        return self.gate.dense()


# ------------------------------------------------------------------------------------------------- inputs


@dataclass
class _Inputs:
    """Float32 inputs of one loss call, after the non-finite policy."""

    lp: torch.Tensor  # with its graph to log_prob
    old: torch.Tensor
    adv: torch.Tensor
    rollout: torch.Tensor | None  # the rollout log-prob, with proxy "rollout" only
    weights: torch.Tensor | None  # per-token loss weights (verl's rollout_is_weights)
    input_mask: torch.Tensor  # the active mask as given
    mask: torch.Tensor  # the active mask less the non-finite entries
    bad: torch.Tensor | None  # the non-finite entries (None when all are finite)
    raw: torch.Tensor  # sg(lp) - old


def _finite(*tensors: torch.Tensor | None) -> bool:
    """One reduction per tensor: a NaN or Inf (or an overflowing sum) makes the total non-finite."""
    total = sum(t.sum() for t in tensors if t is not None and t.numel())
    return bool(torch.isfinite(torch.as_tensor(total)))


def _inputs(cfg: SATConfig, log_prob, old_log_prob, advantages, mask, rollout_log_prob, rollout_is_weights):
    """Upcast to float32; non-finite entries (NaN/Inf in any tensor the loss reads) are zeroed and masked out
    (policy "mask") or raise a ValueError naming the tensor (policy "raise", active tokens only)."""
    mask = mask.bool()
    rollout = rollout_log_prob if cfg.proxy == "rollout" else None
    if cfg.proxy == "rollout" and rollout is None:
        raise ValueError("SAT proxy='rollout' needs rollout_log_prob, which was not given")
    named = {"log_prob": log_prob, "old_log_prob": old_log_prob, "advantages": advantages,
             "rollout_log_prob": rollout, "rollout_is_weights": rollout_is_weights}
    t = {k: v.float() for k, v in named.items() if v is not None}
    raw = t["log_prob"].detach() - t["old_log_prob"]
    bad = None
    if not _finite(raw, t["advantages"], t.get("rollout_log_prob"), t.get("rollout_is_weights")):
        finite = torch.ones_like(mask)
        for name, v in t.items():
            f = torch.isfinite(v)
            if cfg.nonfinite == "raise" and bool((~f & mask).any()):
                n = int((~f & mask).sum())
                raise ValueError(f"SAT input '{name}' has {n} non-finite (NaN/Inf) values at active tokens "
                                 f"(sat nonfinite='raise'; 'mask' zeroes and counts them in nonfinite_frac)")
            finite &= f
        if not bool(finite.all()):  # (else: finite values whose sum overflowed)
            bad = ~finite
            t = {k: torch.where(bad, torch.zeros_like(v), v) for k, v in t.items()}
            raw = t["log_prob"].detach() - t["old_log_prob"]
    # A masked non-finite token is padding for everything (the gate's quantile and SAT-GSPO's means too).
    return _Inputs(lp=t["log_prob"], old=t["old_log_prob"], adv=t["advantages"], rollout=t.get("rollout_log_prob"),
                   weights=t.get("rollout_is_weights"), input_mask=mask, mask=mask if bad is None else mask & ~bad,
                   bad=bad, raw=raw)


def _masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, x, 0.0).sum()


def empty_microbatch_loss(loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The loss of a micro-batch with no active token: 0 with a zero gradient and the graph kept.

    (The paper skips such a step.) ``where`` rather than ``loss_mat * 0``: padding may hold any value,
    including an infinite product of finite inputs, and inf * 0 is NaN.
    """
    return torch.where(mask.bool(), loss_mat, 0.0).sum()


def _surrogate_input(x: _Inputs, ratio, gated: SparseRegion, cfg: SATConfig, dratio_dx) -> SurrogateInput:
    return SurrogateInput(ratio=ratio.reshape(-1), adv=x.adv.reshape(-1), mask=x.mask.reshape(-1),
                          gated_index=gated.index, gated_lo=gated.lo, gated_hi=gated.hi, eps_low=cfg.eps_low,
                          eps_high=cfg.eps_high, dual_clip=cfg.dual_clip,
                          dratio_dx=None if dratio_dx is None else dratio_dx.reshape(-1),
                          weights=None if x.weights is None else x.weights.reshape(-1),
                          bad=None if x.bad is None else x.bad.reshape(-1))


def _counts(x: _Inputs) -> dict[str, torch.Tensor]:
    n_input = torch.count_nonzero(x.input_mask)
    n_active = n_input if x.bad is None else torch.count_nonzero(x.mask)
    return {"n_active": n_active, "n_input": n_input, "n_nonfinite": n_input - n_active}


# ----------------------------------------------------------------------------------------------- the losses


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
    with torch.no_grad():
        raw = x.raw
        abs_raw = raw.abs()
        abs_log_ratio_sum = _masked_sum(abs_raw, mask)
        beyond = bool(raw.numel()) and bool(torch.amax(abs_raw) > LOG_RATIO_CLAMP)
        passes = None
        if beyond:  # |log-ratio| > 20: clamped as verl's vanilla does, no gradient through the clamp
            passes = abs_raw <= LOG_RATIO_CLAMP
            n_clamped = torch.count_nonzero(~passes & mask)
            raw = raw.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            abs_raw = abs_raw.clamp_max_(LOG_RATIO_CLAMP)
        else:
            n_clamped = torch.zeros((), dtype=torch.long, device=raw.device)
        kl_sum = _masked_sum(raw, mask)  # on the clamped log-ratio, as verl's vanilla reports ppo_kl
        if x.rollout is None:
            d, abs_d, score_abs_sum = raw, abs_raw, abs_log_ratio_sum if not beyond else _masked_sum(abs_raw, mask)
        else:
            d = torch.clamp(x.lp.detach() - x.rollout, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            abs_d = d.abs()
            score_abs_sum = _masked_sum(abs_d, mask)
        gate = sparse_trust_region(d, mask, cfg, group, abs_d=abs_d)
        del abs_raw, abs_d
        ratio = raw.exp_()  # raw is this call's own tensor; d's gated entries are already gathered
        dratio_dx = ratio if passes is None else torch.where(passes, ratio, 0.0)
    sur = clipped_surrogate(x.lp, _surrogate_input(x, ratio, gate, cfg, dratio_dx))
    measured = Measured(**_counts(x), n_clamped=n_clamped, abs_log_ratio_sum=abs_log_ratio_sum,
                        kl_log_ratio_sum=kl_sum, region=gate, n_scope=torch.count_nonzero(mask),
                        score_abs_sum=score_abs_sum, surrogate=sur)
    return SATLossOutput(loss_mat=sur.loss_mat, ratio=ratio, clipped=sur.clipped, gate=gate,
                         metrics=metrics(measured))


def _broadcast_gate(d_seq, n_seq, mask, cfg: SATConfig, group) -> SparseRegion:
    """Eq. 20's gate: the score of response i on each of its n_i active tokens, the quantile over tokens."""
    abs_seq, has_tokens = d_seq.abs(), n_seq > 0
    q = gate_threshold(abs_seq, has_tokens, cfg, group, counts=n_seq)  # one value per response, n_i times
    return _tokens_of(sparse_trust_region(d_seq, has_tokens, cfg, q=q, abs_d=abs_seq), mask)


def _tokens_of(seq_gate: SparseRegion, mask: torch.Tensor) -> SparseRegion:
    """A response-level gate on the active tokens of the gated responses (each token gets its response's)."""
    B, T = mask.shape
    gated_rows = torch.zeros(B, dtype=torch.bool, device=mask.device)
    gated_rows[seq_gate.index] = True
    index = (mask & gated_rows.unsqueeze(-1)).view(-1).nonzero().view(-1)
    at = torch.searchsorted(seq_gate.index, torch.div(index, T, rounding_mode="floor"))
    return SparseRegion(q=seq_gate.q, shape=mask.shape, index=index, d=seq_gate.d[at], c=seq_gate.c[at],
                        lo=seq_gate.lo[at], hi=seq_gate.hi[at], eps_low=seq_gate.eps_low,
                        eps_high=seq_gate.eps_high)


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
    mask = x.mask
    n_seq = torch.count_nonzero(mask, dim=-1)  # = torch.sum(mask, dim=-1), as verl's gspo computes it
    seq_len = n_seq.clamp(min=1)
    with torch.no_grad():
        raw = x.raw
        masked_raw = torch.where(mask, raw, 0.0)
        seq_log_ratio = masked_raw.sum(dim=-1) / seq_len
        kl_sum = masked_raw.sum()  # unclamped, as verl's gspo reports ppo_kl
        del masked_raw
        abs_raw = raw.abs()
        abs_log_ratio_sum = _masked_sum(abs_raw, mask)
        n_clamped = torch.count_nonzero((abs_raw > LOG_RATIO_CLAMP) & mask)
        del abs_raw
        if x.rollout is None:
            seq_ref = seq_log_ratio
        else:
            ref_raw = x.lp.detach() - x.rollout
            seq_ref = torch.where(mask, ref_raw, 0.0).sum(dim=-1) / seq_len
        if cfg.gspo_gate_level == "token":
            d = torch.clamp(raw if x.rollout is None else ref_raw, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            gate = region = sparse_trust_region(d, mask, cfg, group)
            n_scope, score_abs_sum = torch.count_nonzero(mask), _masked_sum(d.abs(), mask)
        else:
            d_seq = torch.clamp(seq_ref, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            if cfg.gspo_gate_level == "broadcast":
                gate = region = _broadcast_gate(d_seq, n_seq, mask, cfg, group)
                n_scope, score_abs_sum = n_seq.sum(), (d_seq.abs() * n_seq).sum()
            else:  # "sequence": one score per response, quantile over responses
                region = sparse_trust_region(d_seq, n_seq > 0, cfg, group)
                gate = _tokens_of(region, mask)
                n_scope, score_abs_sum = torch.count_nonzero(n_seq), _masked_sum(d_seq.abs(), n_seq > 0)
        if ratio_form == "token":
            log_s = torch.clamp(seq_log_ratio, max=GSPO_LOG_RATIO_MAX)
            rho = torch.exp(log_s).unsqueeze(-1)
            ratio = rho.expand(mask.shape).contiguous()
            passes = (seq_log_ratio <= GSPO_LOG_RATIO_MAX).unsqueeze(-1)
            dratio_dx = ratio if bool(passes.all()) else torch.where(passes, rho, 0.0).expand(mask.shape)
    if ratio_form == "token":
        target = x.lp
    else:  # OpenRLHF's form: the sequence mean with its full gradient; the surrogate differentiates the ratio
        seq_g = torch.where(mask, x.lp - x.old, 0.0).sum(dim=-1) / seq_len
        target = torch.exp(torch.clamp(seq_g, max=GSPO_LOG_RATIO_MAX)).unsqueeze(-1) * mask
        ratio, dratio_dx = target.detach(), None
    sur = clipped_surrogate(target, _surrogate_input(x, ratio, gate, cfg, dratio_dx))
    measured = Measured(**_counts(x), n_clamped=n_clamped, abs_log_ratio_sum=abs_log_ratio_sum,
                        kl_log_ratio_sum=kl_sum, region=region, n_scope=n_scope, score_abs_sum=score_abs_sum,
                        surrogate=sur)
    return SATLossOutput(loss_mat=sur.loss_mat, ratio=ratio, clipped=sur.clipped, gate=region,
                         metrics=metrics(measured))
