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

Every step is dense and branch-free: no host read, no data-dependent shape (non-finite inputs are zeroed and
masked out arithmetically, the quantile's rank is a tensor), so a call costs the same work whatever the
data and launches no host round-trip. Both return a :class:`SATLossOutput` whose ``loss_mat`` the framework
aggregates (verl ``agg_loss``, OpenRLHF ``aggregate_loss``; an empty micro-batch takes
:func:`empty_microbatch_loss` instead) and whose metrics have the same keys whatever the input. Only
``log_prob`` gets a gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import Callable

import torch
import torch.distributed as dist

from .config import GSPO_LOG_RATIO_MAX, LOG_RATIO_CLAMP, SATConfig
from .diagnostics import GATE_ROWS, GSPO_TOKEN_ROWS, METRIC_KEYS, TOKEN_ROWS, inert_radius, metric_dict, metric_vector
from .quantile import global_masked_quantile, quantile_of_zeroed, weighted_quantile
from .scalars import scalar
from .surrogate import SurrogateInput, attach, surrogate_part
from .trust_region import Gate, TrustRegion, gate, sat_clip

_ONE, _ZERO, _CLAMP = scalar(1.0), scalar(0.0), scalar(LOG_RATIO_CLAMP)

__all__ = ["METRIC_KEYS", "SATLossOutput", "empty_microbatch_loss", "sat_gspo_loss", "sat_token_loss"]


@dataclass
class Detail:
    """What a loss call computed per token, rebuilt on demand: the ratio, the gate scope's bounds and SAT's
    clip mask (-A clip(r, lo, hi) > -A r, verl's pg_clipfrac), in the loss's shape (the region in its scope's)."""

    ratio: torch.Tensor
    region: TrustRegion
    clipped: torch.Tensor


@dataclass
class SATLossOutput:
    """Per-token loss (to aggregate) and the diagnostics (:data:`METRIC_KEYS` in order in ``metric_vector``,
    as a dict in ``metrics``); the per-token details are recomputed when first asked for."""

    loss_mat: torch.Tensor
    metric_vector: torch.Tensor
    details: Callable[[], Detail]

    @cached_property
    def metrics(self) -> dict[str, torch.Tensor]:
        return metric_dict(self.metric_vector)

    @cached_property
    def _detail(self) -> Detail:
        with torch.no_grad():
            return self.details()

    @property
    def ratio(self) -> torch.Tensor:
        """The ratio's values (detached)."""
        return self._detail.ratio

    @property
    def region(self) -> TrustRegion:
        """The gate scope's bounds as dense tensors (SAT-GSPO's broadcast gate on its tokens)."""
        return self._detail.region

    @property
    def clipped(self) -> torch.Tensor:
        """SAT's clip mask, -A clip(r, lo, hi) > -A r (verl's pg_clipfrac), dense bool (False off the active
        tokens, whose advantage the loss takes as 0)."""
        return self._detail.clipped


def empty_microbatch_loss(loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The loss of a micro-batch with no active token: 0 with a zero gradient and the graph kept.

    (The paper skips such a step.) ``where`` rather than ``loss_mat * 0``: padding may hold any value,
    including an infinite product of finite inputs, and inf * 0 is NaN.
    """
    return torch.where(mask.bool(), loss_mat, 0.0).sum()


def aggregate(
    loss_mat: torch.Tensor, mask: torch.Tensor, empty: bool, framework_aggregate: Callable[[], torch.Tensor]
) -> torch.Tensor:
    """The one rule for a micro-batch, for every adapter: ``framework_aggregate()`` (the framework's own mean over
    active tokens), unless ``empty`` (no active token in ``mask``, where that mean divides 0 by 0), then
    :func:`empty_microbatch_loss`."""
    return empty_microbatch_loss(loss_mat, mask) if empty else framework_aggregate()


def _graph_off() -> bool:
    """Turns autograd off (the loss and its gradient share are computed without a graph) and returns the mode to
    restore: ``torch.no_grad()`` less its per-call context objects, a few us of a 2K-token call."""
    mode = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    return mode


# ------------------------------------------------------------------------------------------------- inputs


@dataclass(slots=True)
class _Inputs:
    """Float32 inputs of one loss call after the non-finite policy: every tensor finite, and a token with a
    non-finite input is padding (advantage 0, inactive)."""

    lp: torch.Tensor  # with its graph to log_prob
    raw: torch.Tensor  # sg(lp) - old, 0 where non-finite
    adv: torch.Tensor  # 0 where the token is inactive
    active: torch.Tensor  # 0/1 float32: the mask less the non-finite tokens
    n_input: torch.Tensor  # active tokens as given
    ref_raw: torch.Tensor | None  # sg(lp) - rollout, with proxy "rollout" only
    weights: torch.Tensor | None  # per-token loss weights (verl's rollout_is_weights)


def _raise_on_nonfinite(named: dict[str, torch.Tensor | None], mask: torch.Tensor) -> None:
    """Policy "raise" (not the default; it reads every tensor back to the host): a ValueError naming the first
    tensor with a non-finite value at an active token."""
    for name, v in named.items():
        if v is not None and bool((~torch.isfinite(v) & mask).any()):
            n = int((~torch.isfinite(v) & mask).sum())
            raise ValueError(
                f"SAT input '{name}' has {n} non-finite (NaN/Inf) values at active tokens "
                f"(sat nonfinite='raise'; 'mask' zeroes and counts them in nonfinite_frac)"
            )


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.float()


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 1 else t.reshape(-1)


def _inputs(cfg: SATConfig, log_prob, old_log_prob, advantages, mask, rollout_log_prob, rollout_is_weights) -> _Inputs:
    """Upcast to float32 and apply the non-finite policy, branch-free: ``x * 0`` is 0 for a finite x and NaN
    otherwise, so the mask plus such products marks every token with a non-finite input."""
    mask = mask if mask.dtype == torch.bool else mask.bool()
    rollout = rollout_log_prob if cfg.proxy == "rollout" else None
    if cfg.proxy == "rollout" and rollout is None:
        raise ValueError("SAT proxy='rollout' needs rollout_log_prob, which was not given")
    if cfg.nonfinite == "raise":
        _raise_on_nonfinite(
            {
                "log_prob": log_prob,
                "old_log_prob": old_log_prob,
                "advantages": advantages,
                "rollout_log_prob": rollout,
                "rollout_is_weights": rollout_is_weights,
            },
            mask,
        )
    lp = log_prob
    if lp.dtype != torch.float32:
        with torch.enable_grad():  # the upcast stays in the graph
            lp = lp.float()
    adv = _f32(advantages)
    raw = lp - _f32(old_log_prob)  # under no_grad: no graph
    ref_raw = None if rollout is None else lp - _f32(rollout)
    weights = None if rollout_is_weights is None else _f32(rollout_is_weights)
    mask_f = mask.view(torch.uint8).float()  # (a vectorised conversion; bool -> float is not)
    active = torch.addcmul(mask_f, raw, _ZERO)  # mask + x * 0: NaN where x is not finite
    for t in (adv, ref_raw, weights):
        if t is not None:
            active.addcmul_(t, _ZERO)
    active.nan_to_num_(nan=0.0)  # the mask less the tokens with a non-finite input
    adv = adv.nan_to_num(0.0, 0.0, 0.0).mul_(active)
    if weights is not None:
        weights = weights.nan_to_num(0.0, 0.0, 0.0)
    if ref_raw is not None:
        ref_raw.nan_to_num_(0.0, 0.0, 0.0)
    return _Inputs(
        lp=lp,
        raw=raw.nan_to_num_(0.0, 0.0, 0.0),
        adv=adv,
        active=active,
        n_input=mask_f.sum(),
        ref_raw=ref_raw,
        weights=weights,
    )


def _threshold(
    abs_active: torch.Tensor,
    active: torch.Tensor,
    n: torch.Tensor,
    cfg: SATConfig,
    group,
    counts: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 14's q from |d| on the active entries (0 elsewhere), the 0/1 ``active`` and their number n (each
    entry standing for ``counts`` entries when given: SAT-GSPO's responses)."""
    if cfg.gate_scope == "global" and dist.is_available() and dist.is_initialized():
        return global_masked_quantile(
            abs_active,
            active > 0,
            cfg.quantile,
            group=group,
            method=cfg.global_method,
            rule=cfg.quantile_rule,
            counts=counts,
        )
    if counts is not None:
        return weighted_quantile(abs_active, counts, cfg.quantile, cfg.quantile_rule)
    return quantile_of_zeroed(_flat(abs_active), n, cfg.quantile, cfg.quantile_rule)


def _c_min(g: Gate) -> torch.Tensor:
    """min c over (a part of) the gate scope, 1 off the gate (and for no entry at all)."""
    return g.c.amin() if g.c.numel() else g.c.new_ones(())


def _clip_nominal(ratio: torch.Tensor, cfg: SATConfig) -> torch.Tensor:
    return ratio.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high)


_ABS_D, _ABS_RAW = TOKEN_ROWS.index("score_abs_sum"), TOKEN_ROWS.index("abs_log_ratio_sum")
CHUNK = 1 << 15
GSPO_TOKEN_QUANTILE_MAX = 1 << 14
"""SAT-GSPO's broadcast gate takes the token quantile of the broadcast scores up to this many entries (fewer ops)
and, above, the quantile of one score per response counted n_i times (a sort of B values instead of a selection
over every token: less work; the same q)."""


def _chunks(t: torch.Tensor) -> list[slice] | None:
    """Static slices of the rows of ``t`` (its first dimension) the per-token pass walks through (None: all at
    once): on the CPU parts of about :data:`CHUNK` entries, whose temporaries stay in the cache and are reused by
    the allocator instead of being paged in afresh (the cost of a large call); on a GPU one part."""
    if t.numel() <= CHUNK or t.device.type != "cpu":
        return None
    n = t.shape[0]
    step = max(CHUNK // max(t.numel() // n, 1), 1)
    return None if n <= step else [slice(i, min(i + step, n)) for i in range(0, n, step)]


def _part(t: torch.Tensor | None, sl: slice) -> torch.Tensor | None:
    return None if t is None else t[sl]


def _surrogate_input(ratio, adv, g: Gate, act, dratio_dx, weights, cfg: SATConfig) -> SurrogateInput:
    clipped_nominal = _clip_nominal(ratio, cfg)
    return SurrogateInput(
        ratio=ratio,
        adv=adv,
        clipped=sat_clip(clipped_nominal, adv.sign(), g, cfg),
        clipped_nominal=clipped_nominal,
        active=act,
        dual_clip=cfg.dual_clip,
        dratio_dx=dratio_dx,
        weights=weights,
    )


def _result(loss_mat, sums: torch.Tensor, cfg: SATConfig, details, token_score_in_gspo: bool = False) -> SATLossOutput:
    """The loss's output; SAT can be certified inert only where its score is the clipped ratio's own log."""
    radius = inert_radius(cfg.eps_low, cfg.eps_high, cfg.proxy == "old" and not token_score_in_gspo)
    return SATLossOutput(
        loss_mat=loss_mat, metric_vector=metric_vector(sums, cfg.eps_low, cfg.eps_high, radius), details=details
    )


@dataclass(slots=True)
class _TokenPass:
    """The per-token tensors of a token-level SAT call (finite, detached): the score d and |d| on the active
    entries, the clamped log-ratio, the 0/1 active mask, |log-ratio| (unclamped), the advantages and the
    optional weights."""

    score: torch.Tensor
    abs_active: torch.Tensor
    d: torch.Tensor
    act: torch.Tensor
    abs_raw: torch.Tensor
    adv: torch.Tensor
    weights: torch.Tensor | None

    def part(self, sl: slice) -> "_TokenPass":
        """The same tensors sliced to the entries ``sl``."""
        return _TokenPass(*(None if (t := getattr(self, f.name)) is None else t[sl] for f in fields(self)))


def _token_part(
    t: _TokenPass,
    q: torch.Tensor,
    cfg: SATConfig,
    rows: tuple[torch.Tensor, tuple[torch.Tensor, ...]],
    loss: torch.Tensor | None = None,
    coef: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 15-19 on (a part of) the tokens: the loss and the gradient coefficient (into ``loss`` / ``coef`` when
    given), the active-token sums of :data:`TOKEN_ROWS` and min c. ``rows`` is the buffer of one float32 row per
    sum (the part's shape) and its rows' views; it holds |d| on the active tokens and |log-ratio| in its
    score_abs_sum and abs_log_ratio_sum rows, the other rows are written here."""
    buffer, (abs_active, gated, deficit, deficit_signed, unclamped, abs_raw, *clip_counts) = rows
    g = gate(t.score, abs_active, q, cfg, out=gated)
    ratio = t.d.exp()
    passes = torch.le(abs_raw, _CLAMP, out=unclamped)  # the clamp's gradient gate, as verl's vanilla
    s = _surrogate_input(ratio, t.adv, g, t.act, torch.mul(passes, ratio), t.weights, cfg)
    loss, coef, _ = surrogate_part(s, loss, coef, clip_counts)
    torch.copysign(torch.sub(_ONE, g.c, out=deficit), g.d, out=deficit_signed)  # (1 - c) sign(d)
    return loss, coef, torch.mv(buffer.view(len(buffer), -1), t.act.view(-1)), _c_min(g)


def _rows(names: tuple[str, ...], like: torch.Tensor, cfg: SATConfig) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """Uninitialised rows of the float32 ``like``'s shape, one per sum of ``names`` (less the dual-clip count
    without a dual clip), and their views: written in place by the per-token pass and then reduced at once (no
    stacking copy)."""
    n = len(names) - (cfg.dual_clip is None)
    buffer = like.new_empty((n, *like.shape))
    return buffer, buffer.unbind(0)


def _gspo_token_part(
    raw: torch.Tensor,
    s: SurrogateInput,
    cfg: SATConfig,
    loss: torch.Tensor | None = None,
    coef: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SAT-GSPO's surrogate on (a part of) the tokens (into ``loss`` / ``coef`` when given) and the active-token
    sums of :data:`GSPO_TOKEN_ROWS` from the part's log-ratio ``raw`` (the log-ratio clamp's gate made here)."""
    buffer, (unclamped, abs_raw, *clip_counts) = _rows(GSPO_TOKEN_ROWS, raw, cfg)
    torch.le(torch.abs(raw, out=abs_raw), _CLAMP, out=unclamped)
    loss, coef, _ = surrogate_part(s, loss, coef, clip_counts)
    return loss, coef, torch.mv(buffer.view(len(buffer), -1), s.active.view(-1))


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
    grad_mode = _graph_off()
    try:
        x = _inputs(cfg, log_prob, old_log_prob, advantages, mask, rollout_log_prob, rollout_is_weights)
        act = x.active
        chunks = _chunks(act)
        # one call's rows for the metric product, or the whole call's |d| and |log-ratio| copied into each part's
        rows = _rows(TOKEN_ROWS, act, cfg) if chunks is None else None
        abs_raw = torch.abs(x.raw, out=None if rows is None else rows[1][_ABS_RAW])
        n_active = act.sum()
        d = x.raw.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # Eq. 13 (x.raw is this call's own tensor)
        kl_sum = torch.mul(d, act).sum()  # clamped and summed as verl's vanilla does for ppo_kl, bit for bit
        abs_out = None if rows is None else rows[1][_ABS_D]
        if x.ref_raw is None:
            score, abs_active = d, torch.clamp_max(abs_raw, LOG_RATIO_CLAMP, out=abs_out).mul_(act)
        else:
            score = x.ref_raw.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            abs_active = torch.abs(score, out=abs_out).mul_(act)
        q = _threshold(abs_active, act, n_active, cfg, group)
        t = _TokenPass(score, abs_active, d, act, abs_raw, x.adv, x.weights)
        if chunks is None:
            loss, coef, part_sums, c_min = _token_part(t, q, cfg, rows)
        else:
            loss, coef = torch.empty_like(d), torch.empty_like(d)
            parts = []
            for sl in chunks:
                p = t.part(sl)
                rows = _rows(TOKEN_ROWS, p.d, cfg)
                rows[1][_ABS_D].copy_(p.abs_active)
                rows[1][_ABS_RAW].copy_(p.abs_raw)
                parts.append(_token_part(p, q, cfg, rows, loss[sl], coef[sl])[2:])
            part_sums = torch.stack([p[0] for p in parts]).sum(0)
            c_min = torch.stack([p[1] for p in parts]).amin()
        sums = torch.cat([torch.stack([n_active, x.n_input, kl_sum, n_active, c_min, q]), part_sums])
    finally:
        torch.set_grad_enabled(grad_mode)

    def details() -> Detail:
        g = gate(score, abs_active, q, cfg)
        ratio = d.exp()
        _, _, (clipped, *_) = surrogate_part(_surrogate_input(ratio, x.adv, g, act, None, None, cfg))
        return Detail(ratio=ratio, region=g.region(cfg), clipped=clipped)

    return _result(attach(x.lp, loss, coef, x.adv, x.weights), sums, cfg, details)


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
    grad_mode = _graph_off()
    try:
        x = _inputs(cfg, log_prob, old_log_prob, advantages, mask, rollout_log_prob, rollout_is_weights)
        act = x.active
        n_seq = act.sum(dim=-1, keepdim=True)  # = torch.sum(mask, dim=-1), as verl's gspo computes it; (B, 1)
        seq_len = n_seq.clamp(min=1.0)
        masked_raw = x.raw * act
        seq_log_ratio = masked_raw.sum(dim=-1, keepdim=True) / seq_len
        n_active = n_seq.sum()
        kl_sum = masked_raw.sum()  # ppo_kl on the unclamped log-ratio, summed as verl's gspo does
        ref = x.raw if x.ref_raw is None else x.ref_raw
        gate_weights, token_mask = None, None
        if cfg.gspo_gate_level == "token":
            score = ref.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            abs_active = score.abs().mul_(act)
            q = _threshold(abs_active, act, n_active, cfg, group)
            n_scope = n_active
        else:
            seq_ref = seq_log_ratio if x.ref_raw is None else (x.ref_raw * act).sum(dim=-1, keepdim=True) / seq_len
            score = seq_ref.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            abs_active = score.abs()  # 0 for a response without active tokens (a sum over none, over 1)
            if cfg.gspo_gate_level == "broadcast":  # Eq. 20: each response's score on its n_i tokens
                if cfg.gate_scope == "micro" and act.numel() <= GSPO_TOKEN_QUANTILE_MAX:  # the token quantile
                    scores = torch.mul(abs_active, act).view(-1)  # each response's n_i times: topk is the fastest
                    q = quantile_of_zeroed(scores, n_active, cfg.quantile, cfg.quantile_rule, GSPO_TOKEN_QUANTILE_MAX)
                else:  # less work: one score per response, counted n_i times (the same value)
                    q = _threshold(
                        abs_active, torch.gt(n_seq, _ZERO).float(), n_active, cfg, group, counts=n_seq.long()
                    )
                gate_weights, token_mask, n_scope = n_seq, act, n_active
            else:  # "sequence": one score per response, quantile over responses
                has_tokens = torch.gt(n_seq, _ZERO).float()
                n_scope = has_tokens.sum()
                q = _threshold(abs_active, has_tokens, n_scope, cfg, group)
        g = gate(score, abs_active, q, cfg)
        deficit = torch.sub(_ONE, g.c)
        # GATE_ROWS, one per response (a stack of (B, 1) tensors costs less than a buffer's views)
        gate_rows = torch.stack([abs_active, g.gated, deficit, torch.copysign(deficit, g.d)]).view(len(GATE_ROWS), -1)
        # each entry counted once or n_i times
        gate_sums = gate_rows.sum(1) if gate_weights is None else torch.mv(gate_rows, gate_weights.view(-1))
        if ratio_form == "token":
            ratio = torch.clamp(seq_log_ratio, max=GSPO_LOG_RATIO_MAX).exp_()
            dratio_dx = torch.where(seq_log_ratio <= GSPO_LOG_RATIO_MAX, ratio, _ZERO)
            target = x.lp
        else:  # OpenRLHF's form: the sequence mean with its full gradient; the surrogate differentiates the ratio
            torch.set_grad_enabled(grad_mode)
            seq_g = torch.where(act > 0, x.lp - _f32(old_log_prob), 0.0).sum(dim=-1, keepdim=True) / seq_len
            target = torch.exp(torch.clamp(seq_g, max=GSPO_LOG_RATIO_MAX)) * act
            torch.set_grad_enabled(False)
            ratio, dratio_dx = target.detach(), None
        chunks = _chunks(act)
        if chunks is None:
            s = _surrogate_input(ratio, x.adv, g, act, dratio_dx, x.weights, cfg)
            loss, coef, token_sums = _gspo_token_part(x.raw, s, cfg)
        else:
            loss, coef = torch.empty_like(x.adv), torch.empty_like(x.adv)
            token_sums = []
            for sl in chunks:
                gp = Gate(q=q, threshold=g.threshold, d=g.d[sl], gated=g.gated[sl], c=g.c[sl])
                s = _surrogate_input(ratio[sl], x.adv[sl], gp, act[sl], _part(dratio_dx, sl), _part(x.weights, sl), cfg)
                token_sums.append(_gspo_token_part(x.raw[sl], s, cfg, loss[sl], coef[sl])[2])
            token_sums = torch.stack(token_sums).sum(0)
        head = torch.stack([n_active, x.n_input, kl_sum, n_scope, _c_min(g), q])
        sums = torch.cat([head, gate_sums, token_sums])  # in SUM_NAMES order
    finally:
        torch.set_grad_enabled(grad_mode)

    def details() -> Detail:
        gg = g
        if token_mask is not None:  # the response gate on the response's active tokens
            gated = g.gated * token_mask
            gg = Gate(
                q=q,
                threshold=g.threshold,
                d=g.d.expand_as(gated),
                gated=gated,
                c=torch.addcmul(torch.sub(scalar(1.0), gated), g.c, gated),
            )
        region = gg.region(cfg)
        if cfg.gspo_gate_level == "sequence":  # one entry per response
            region = TrustRegion(
                lo=region.lo.squeeze(-1),
                hi=region.hi.squeeze(-1),
                c=region.c.squeeze(-1),
                gated=region.gated.squeeze(-1),
                q=q,
            )
        _, _, (clipped, *_) = surrogate_part(_surrogate_input(ratio, x.adv, g, act, None, None, cfg))
        return Detail(ratio=ratio.expand(act.shape), region=region, clipped=clipped)

    token_score = cfg.gspo_gate_level == "token"
    return _result(attach(target, loss, coef, x.adv, x.weights), sums, cfg, details, token_score_in_gspo=token_score)
