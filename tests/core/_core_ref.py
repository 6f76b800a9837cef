"""Independent references of SPEC §1 and the input strategies shared by the tests of sat_ext.core.

Two kinds of reference, both written from SPEC §1 and not from the core's code:

* ``ref_*`` (pure Python, float64, one token at a time): threshold q, gate, contraction factor, bounds
  and the clipped surrogate. They are compared with the core up to float32 rounding.
* ``ppo_token_loss`` / ``gspo_loss`` (torch, float32): the *nominal* clipped surrogate (PPO, GSPO) with the
  textbook operations -A*r, clamp, maximum, minimum. The SAT properties "PPO's exact value and gradient"
  are checked bit for bit against them.

The staleness proxy d is computed here in float32 torch (``proxy_token`` / ``proxy_sequence``, the SPEC
formulas), so that the Python references see the very same d values as the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch
from hypothesis import strategies as st

from sat_ext.core import METRIC_KEYS, SATConfig
from sat_ext.core.config import GSPO_GATE_LEVELS, KERNELS, QUANTILE_RULES

CLAMP = 20.0
GSPO_MAX = 10.0


def f32(x: float) -> float:
    """x rounded to float32, back as a Python float."""
    return float(torch.tensor(x, dtype=torch.float32))


# --------------------------------------------------------------------------------------------------------
# Pure-Python references (float64)
# --------------------------------------------------------------------------------------------------------


C_FLOOR = 2.0**-126  # the smallest normal float32: the floor of c (sat_ext.core.kernels)


def ref_quantile(values: list[float], level: float, rule: str = "inverse_cdf") -> float:
    """By sorting; 0 for an empty selection. "inverse_cdf": the smallest x with #{v <= x} >= level * n, level
    read as its decimal; "linear": torch.quantile's interpolation."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return 0.0
    if rule == "inverse_cdf":
        a = Fraction(repr(level))
        return next(x for x in xs if sum(v <= x for v in xs) >= a * n)
    pos = level * (n - 1)
    k = math.floor(pos)
    k2 = min(k + 1, n - 1)
    return xs[k] + (pos - k) * (xs[k2] - xs[k])


def ref_kernel(x: float, q: float, kernel: str, n: float) -> float:
    """SPEC §1 kernels, x = |d| > q > 0, floored at the smallest normal float32 (c > 0)."""
    u = (x - q) / q
    try:
        if kernel == "hill_shifted":
            c = 1.0 / (1.0 + u**n)
        elif kernel == "hill":
            c = 1.0 / (1.0 + (x / q) ** n)
        elif kernel == "power":
            c = (q / x) ** n
        elif kernel == "exp":
            c = math.exp(-(u**n))
        else:
            raise AssertionError(kernel)
    except OverflowError:
        c = 0.0
    return max(c, C_FLOOR)


@dataclass
class RefBound:
    gated: bool
    c: float
    lo: float
    hi: float


def ref_bound(d: float, active: bool, q: float, cfg: SATConfig) -> RefBound:
    x = abs(d)
    gated = active and q > 0 and x > q
    c = max(ref_kernel(x, q, cfg.kernel, cfg.exponent), cfg.c_min) if gated else 1.0
    hi = 1.0 + cfg.eps_high * c if (gated and d > 0) else 1.0 + cfg.eps_high
    lo = 1.0 - cfg.eps_low * c if (gated and d < 0) else 1.0 - cfg.eps_low
    return RefBound(gated, c, lo, hi)


def ref_surrogate(r: float, a: float, lo: float, hi: float, dual: float | None) -> float:
    """loss = -min(r*A, clip(r, lo, hi)*A); for A < 0 with dual clip C: min(loss, -A*C)."""
    clipped = min(max(r, lo), hi)
    v = max(-a * r, -a * clipped)
    if dual is not None and a < 0:
        v = min(v, -a * dual)
    return v


# --------------------------------------------------------------------------------------------------------
# float32 torch: the proxy d as SPEC §1 defines it, and the nominal (PPO / GSPO) surrogates
# --------------------------------------------------------------------------------------------------------


def proxy_token(lp: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    return torch.clamp(lp.detach().float() - old.float(), -CLAMP, CLAMP)


def seq_mean_log_ratio(lp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    n = mask.sum(dim=-1).clamp(min=1)
    return ((lp.float() - old.float()) * mask.float()).sum(dim=-1) / n


def proxy_sequence(lp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.clamp(seq_mean_log_ratio(lp.detach(), old, mask), -CLAMP, CLAMP)


def _nominal_surrogate(ratio, adv, eps_low, eps_high, dual):
    surr = -adv * ratio
    surr_clip = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(surr, surr_clip)
    if dual is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual), loss)
    return loss


def ppo_token_loss(lp, old, adv, cfg: SATConfig) -> torch.Tensor:
    """Token PPO with the nominal interval (and cfg's dual clip): the loss SAT must equal off the band."""
    ratio = torch.exp(torch.clamp(lp - old, -CLAMP, CLAMP))
    return _nominal_surrogate(ratio, adv, cfg.eps_low, cfg.eps_high, cfg.dual_clip)


def gspo_ratio(lp, old, mask, ratio_form: str) -> torch.Tensor:
    m = seq_mean_log_ratio(lp, old, mask)
    if ratio_form == "token":  # exp(logp - sg(logp) + sg(m)): value s, gradient s per own token
        return torch.exp(torch.clamp(lp - lp.detach() + m.detach()[:, None], max=GSPO_MAX))
    return torch.exp(torch.clamp(m, max=GSPO_MAX))[:, None] * mask.float()


def gspo_loss(lp, old, adv, mask, cfg: SATConfig, ratio_form: str) -> torch.Tensor:
    """GSPO with the nominal interval (and cfg's dual clip)."""
    return _nominal_surrogate(gspo_ratio(lp, old, mask, ratio_form), adv, cfg.eps_low, cfg.eps_high, cfg.dual_clip)


# --------------------------------------------------------------------------------------------------------
# Full per-token Python references of the two SAT losses
# --------------------------------------------------------------------------------------------------------


@dataclass
class RefLoss:
    q: float
    bounds: list[list[RefBound]]  # [b][t], the bound that applies to token (b, t)
    loss: list[list[float]]  # [b][t] (active tokens only meaningful)
    gate_d: list[list[float]]  # [b][t], the proxy value that gates token (b, t)
    boundary: list[list[bool]]  # [b][t]: |d| within rounding of q: the gate decision is not compared


def _near(x: float, q: float, rel: float = 1e-4) -> bool:
    return q > 0 and abs(x - q) <= rel * q


def ref_sat_token(lp, old, adv, mask, cfg: SATConfig) -> RefLoss:
    d = proxy_token(lp, old).tolist()
    A, M = adv.float().tolist(), mask.bool().tolist()
    B, T = len(M), (len(M[0]) if M else 0)
    q = ref_quantile([abs(d[b][t]) for b in range(B) for t in range(T) if M[b][t]], cfg.quantile, cfg.quantile_rule)
    bounds = [[ref_bound(d[b][t], M[b][t], q, cfg) for t in range(T)] for b in range(B)]
    loss = [
        [ref_surrogate(math.exp(d[b][t]), A[b][t], bounds[b][t].lo, bounds[b][t].hi, cfg.dual_clip) for t in range(T)]
        for b in range(B)
    ]
    boundary = [[_near(abs(d[b][t]), q) for t in range(T)] for b in range(B)]
    return RefLoss(q, bounds, loss, d, boundary)


def ref_sat_gspo(lp, old, adv, mask, cfg: SATConfig, ratio_form: str) -> RefLoss:
    M = mask.bool().tolist()
    A = adv.float().tolist()
    B, T = len(M), (len(M[0]) if M else 0)
    mseq = seq_mean_log_ratio(lp.detach(), old, mask).tolist()
    if cfg.gspo_gate_level == "sequence":
        ds = proxy_sequence(lp, old, mask).tolist()
        seq_active = [any(row) for row in M]
        q = ref_quantile([abs(ds[b]) for b in range(B) if seq_active[b]], cfg.quantile, cfg.quantile_rule)
        sb = [ref_bound(ds[b], seq_active[b], q, cfg) for b in range(B)]
        bounds = [[sb[b]] * T for b in range(B)]
        gate_d = [[ds[b]] * T for b in range(B)]
    else:
        if cfg.gspo_gate_level == "broadcast":  # the sequence score on every token, token quantile
            ds = proxy_sequence(lp, old, mask).tolist()
            dt = [[ds[b]] * T for b in range(B)]
        else:
            dt = proxy_token(lp, old).tolist()
        q = ref_quantile(
            [abs(dt[b][t]) for b in range(B) for t in range(T) if M[b][t]], cfg.quantile, cfg.quantile_rule
        )
        bounds = [[ref_bound(dt[b][t], M[b][t], q, cfg) for t in range(T)] for b in range(B)]
        gate_d = dt
    loss = []
    for b in range(B):
        s = math.exp(min(mseq[b], GSPO_MAX))
        loss.append(
            [
                ref_surrogate(
                    s if (ratio_form == "token" or M[b][t]) else 0.0,
                    A[b][t],
                    bounds[b][t].lo,
                    bounds[b][t].hi,
                    cfg.dual_clip,
                )
                for t in range(T)
            ]
        )
    boundary = [[_near(abs(gate_d[b][t]), q) for t in range(T)] for b in range(B)]
    return RefLoss(q, bounds, loss, gate_d, boundary)


# --------------------------------------------------------------------------------------------------------
# Checks shared by several test files
# --------------------------------------------------------------------------------------------------------


def check_metrics(metrics: dict) -> None:
    """The constant key set, every value a finite 0-d tensor."""
    assert tuple(sorted(metrics)) == tuple(sorted(METRIC_KEYS)), sorted(set(metrics) ^ set(METRIC_KEYS))
    assert len(metrics) == len(METRIC_KEYS)
    for k, v in metrics.items():
        assert isinstance(v, torch.Tensor), k
        assert v.dim() == 0, (k, v.shape)
        assert bool(torch.isfinite(v)), (k, v)


def jacobian_rows(loss_mat: torch.Tensor, wrt: torch.Tensor, idx: list[tuple[int, int]]) -> dict:
    """{(b, t): d loss_mat[b, t] / d wrt} (one torch.autograd.grad per token)."""
    rows = {}
    for b, t in idx:
        (g,) = torch.autograd.grad(loss_mat[b, t], wrt, retain_graph=True, allow_unused=True)
        rows[(b, t)] = torch.zeros_like(wrt) if g is None else g
    return rows


# --------------------------------------------------------------------------------------------------------
# Hypothesis strategies: random and adversarial inputs
# --------------------------------------------------------------------------------------------------------

D_MODES = ("floats", "normal", "equal", "ties", "zero", "tiny", "huge", "sparse", "scales")
ADV_MODES = ("normal", "pos", "neg", "zero", "floats", "seq_const", "large")
MASK_MODES = ("all", "random", "single", "none", "right_pad", "left_pad")
OLD_MODES = ("const", "random", "zero")

_f32 = dict(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@dataclass
class Batch:
    lp: torch.Tensor  # float32 leaf, requires grad
    old: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    desc: str

    def fresh_lp(self) -> torch.Tensor:
        return self.lp.detach().clone().requires_grad_(True)


@st.composite
def batches(draw, max_b: int = 4, max_t: int = 6, d_modes=D_MODES, adv_modes=ADV_MODES, mask_modes=MASK_MODES):
    B = draw(st.integers(1, max_b))
    T = draw(st.integers(1, max_t))
    n = B * T
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    d_mode = draw(st.sampled_from(d_modes))
    signs = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    if d_mode == "floats":
        l = torch.tensor(draw(st.lists(st.floats(-40, 40, **_f32), min_size=n, max_size=n)))
    elif d_mode == "normal":
        scale = draw(st.sampled_from([1e-3, 0.05, 0.3, 2.0]))
        l = torch.randn(n, generator=g) * scale
    elif d_mode == "equal":  # all |d| equal: q = |d|, nothing gated (ties at the threshold)
        l = signs * draw(st.floats(f32(1e-6), 30, **_f32))
    elif d_mode == "ties":  # a few distinct |d|, with zeros: ties at the threshold
        vals = draw(st.lists(st.floats(0, 5, **_f32), min_size=1, max_size=3))
        idx = torch.randint(0, len(vals), (n,), generator=g)
        l = signs * torch.tensor(vals)[idx]
    elif d_mode == "zero":  # q == 0
        l = torch.zeros(n)
    elif d_mode == "tiny":
        l = signs * torch.exp(torch.empty(n).uniform_(math.log(1e-30), math.log(1e-20), generator=g))
    elif d_mode == "huge":  # |log-ratio| > 20 (clamped) next to ordinary ones
        big = torch.rand(n, generator=g) < 0.5
        l = torch.where(big, signs * torch.empty(n).uniform_(20.5, 60, generator=g), torch.randn(n, generator=g))
    elif d_mode == "sparse":  # mostly on-policy (d == 0) with a few stale tokens
        stale = torch.rand(n, generator=g) < 0.15
        l = torch.where(stale, torch.randn(n, generator=g), torch.zeros(n))
    else:  # "scales": many magnitudes at once
        l = signs * torch.exp(torch.empty(n).uniform_(-25, 3.5, generator=g))
    old_mode = draw(st.sampled_from(OLD_MODES))
    if old_mode == "const":
        old = torch.full((n,), -float(torch.empty(()).uniform_(0, 8, generator=g)))
    elif old_mode == "random":
        old = -torch.empty(n).uniform_(0, 8, generator=g)
    else:
        old = torch.zeros(n)
    lp = old + l.float()
    adv_mode = draw(st.sampled_from(adv_modes))
    if adv_mode == "normal":
        adv = torch.randn(n, generator=g)
    elif adv_mode == "pos":
        adv = torch.rand(n, generator=g) + 1e-3
    elif adv_mode == "neg":
        adv = -(torch.rand(n, generator=g) + 1e-3)
    elif adv_mode == "zero":
        adv = torch.zeros(n)
    elif adv_mode == "floats":
        adv = torch.tensor(draw(st.lists(st.floats(-100, 100, **_f32), min_size=n, max_size=n)))
    elif adv_mode == "seq_const":  # GRPO-like: one advantage per sequence
        adv = torch.randn(B, generator=g).repeat_interleave(T)
    else:
        adv = torch.randn(n, generator=g) * 1e3
    mask_mode = draw(st.sampled_from(mask_modes))
    if mask_mode == "all":
        mask = torch.ones(B, T, dtype=torch.bool)
    elif mask_mode == "random":
        mask = torch.rand(B, T, generator=g) < 0.6
    elif mask_mode == "single":
        mask = torch.zeros(n, dtype=torch.bool)
        mask[int(torch.randint(0, n, (1,), generator=g))] = True
        mask = mask.view(B, T)
    elif mask_mode == "none":
        mask = torch.zeros(B, T, dtype=torch.bool)
    else:
        lens = torch.randint(0, T + 1, (B,), generator=g)
        ar = torch.arange(T)[None, :]
        mask = ar < lens[:, None] if mask_mode == "right_pad" else ar >= (T - lens)[:, None]
    desc = f"d={d_mode} old={old_mode} adv={adv_mode} mask={mask_mode} seed={seed}"
    return Batch(lp.view(B, T).float().requires_grad_(True), old.view(B, T).float(), adv.view(B, T).float(), mask, desc)


@st.composite
def configs(draw, c_min=None, dual_clip="any", **fixed):
    eps_low = draw(st.sampled_from([0.2, 0.0, 0.28, 3e-4, 0.5, 0.99]) | st.floats(0, 0.95))
    eps_high = draw(st.sampled_from([0.2, 0.0, 0.28, 4e-4, 1.0, 3.0]) | st.floats(0, 3))
    if dual_clip == "any":
        dual_clip = draw(st.sampled_from([None, 3.0, 1.0001, 10.0]) | st.floats(1.01, 20))
    kw = dict(
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip,
        quantile=draw(st.sampled_from([0.9, 0.5, 0.99, 0.01]) | st.floats(0.01, 0.99)),
        quantile_rule=draw(st.sampled_from(QUANTILE_RULES)),
        kernel=draw(st.sampled_from(KERNELS)),
        exponent=draw(st.sampled_from([2.0, 1.0, 0.5, 3.0]) | st.floats(0.5, 4)),
        c_min=draw(st.sampled_from([0.0, 0.0, 0.3, 0.9]) | st.floats(0, 1)) if c_min is None else c_min,
        gspo_gate_level=draw(st.sampled_from(GSPO_GATE_LEVELS)),
    )
    kw.update(fixed)
    return SATConfig(**kw)
