"""c == 1 everywhere (sat_c_min=1.0): verl's registry ``sat`` == ``vanilla`` and ``sat_gspo`` == ``gspo``, bit for bit.

Values and gradients are compared with ``torch.equal``, for every loss_agg_mode verl accepts, without global
batch info, with dp_size=1 and with dp_size=2 global info, with and without rollout IS weights, symmetric and
asymmetric clip radii, on random and adversarial inputs. verl's own three metric keys must also agree.
The second half checks that with default knobs SAT is *not* vanilla on the newly intercepted band.
"""

from __future__ import annotations

import math

import pytest
import torch
from _verl_helpers import LOSS_AGG_MODES
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig

from sat_ext.verl.config import SATPolicyLossConfig
from sat_ext.verl.loss import compute_policy_loss_sat, compute_policy_loss_sat_gspo

PAIRS = {"sat": "vanilla", "sat_gspo": "gspo"}
VERL_KEYS = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")


def make_config(loss: str, low: float, high: float, c_min: float = 1.0, clip_c: float = 3.0, agg="token-mean"):
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=low,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=clip_c,
        loss_agg_mode=agg,
        policy_loss=SATPolicyLossConfig(loss_mode=loss, sat_c_min=c_min),
    )


def global_info(kind: str, mask: torch.Tensor) -> dict:
    n_tok, n_seq = int(mask.sum()), mask.shape[0]
    if kind == "none":
        return {}
    if kind == "dp1":  # this micro-batch is part of a larger mini-batch on one rank
        return {"dp_size": 1, "batch_num_tokens": n_tok + 5, "global_batch_size": n_seq + 3, "loss_scale_factor": None}
    if kind == "dp2":
        return {
            "dp_size": 2,
            "batch_num_tokens": 2 * n_tok + 3,
            "global_batch_size": 2 * n_seq + 1,
            "loss_scale_factor": 16,
        }
    raise AssertionError(kind)


def random_inputs(seed: int, bs: int = 6, t: int = 9, scale: float = 0.4):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand((bs, t), generator=g) * 4 - 0.01
    lp = old + torch.randn((bs, t), generator=g) * scale
    adv = torch.randn((bs, t), generator=g)
    if seed % 2:  # sequence-level (GRPO-like) advantages
        adv = adv[:, :1].expand(bs, t).contiguous()
    lens = torch.randint(1, t + 1, (bs,), generator=g)
    mask = torch.arange(t).unsqueeze(0) < lens.unsqueeze(1)
    mask[0] = False  # a fully masked row
    mask[-1, :] = True
    return old, lp, adv, mask


def adversarial_inputs(kind: str):
    """Hand-made extremes: ties, exact bound hits, clamp saturation, A == 0, dual clip, lone tokens."""
    t = 8
    if kind == "extremes":
        d = torch.tensor(
            [
                [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # on-policy row, all ratios 1
                [25.0, -25.0, 20.0, -20.0, 19.99, -19.99, 30.0, -40.0],  # log-ratio clamp saturation
                [math.log(1.2), math.log(0.8), math.log(1.28), math.log(0.72), 0.1823, -0.2231, 1e-7, -1e-7],
                [2.0, -2.0, 3.0, -3.0, 5.0, -5.0, 0.5, -0.5],  # far outside, dual clip for A < 0
                [1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3],  # ties
                [-8.0, -8.0, -8.0, -8.0, 8.0, 8.0, 8.0, 8.0],  # GSPO: sequence means far out
            ]
        )
        adv = torch.tensor(
            [
                [1.0, -1.0, 0.0, 2.0, -2.0, 0.5, -0.5, 1.0],
                [1.0, 1.0, -1.0, -1.0, 1.0, -1.0, -3.0, 3.0],
                [1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0],
                [-1.0, -1.0, -10.0, -10.0, 1.0, 1.0, -100.0, 100.0],
                [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # A == 0 everywhere
                [2.0, 2.0, 2.0, 2.0, -2.0, -2.0, -2.0, -2.0],
            ]
        )
        mask = torch.ones_like(d, dtype=torch.bool)
        mask[0, 5:] = False
        mask[4, 1:] = False  # a lone active token
    elif kind == "sparse":
        g = torch.Generator().manual_seed(123)
        d = torch.randn((5, t), generator=g) * 3
        adv = torch.randn((5, t), generator=g) * 5
        mask = torch.rand((5, t), generator=g) < 0.3  # holes inside rows, not only right padding
        mask[2] = False
        mask[3, 0] = True
    else:
        raise AssertionError(kind)
    old = -torch.linspace(0.05, 6.0, d.numel()).reshape(d.shape)
    return old, old + d, adv, mask


INPUTS = [("random", s) for s in range(4)] + [("adversarial", k) for k in ("extremes", "sparse")]


def _inputs(kind, arg):
    return random_inputs(arg) if kind == "random" else adversarial_inputs(arg)


def _run(name: str, cfg, old, lp, adv, mask, agg, weights):
    x = lp.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn(name)(
        old_log_prob=old,
        log_prob=x,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=agg,
        config=cfg,
        rollout_is_weights=weights,
    )
    (grad,) = torch.autograd.grad(loss, x)
    return loss.detach(), grad, metrics


def test_registry_resolves_sat_ext_functions():
    assert get_policy_loss_fn("sat") is compute_policy_loss_sat
    assert get_policy_loss_fn("sat_gspo") is compute_policy_loss_sat_gspo


@pytest.mark.parametrize("gbi", ["none", "dp1", "dp2"])
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@pytest.mark.parametrize("loss", sorted(PAIRS))
def test_c_equal_one_is_verl_bit_for_bit(loss, agg, gbi):
    # (clip_ratio_low, clip_ratio_high, clip_ratio_c): the paper's, DAPO-style asymmetric + dual clip 10, GSPO's.
    radii = [(0.2, 0.2, 3.0), (0.2, 0.28, 10.0)] if loss == "sat" else [(3e-4, 4e-4, 10.0), (0.2, 0.2, 3.0)]
    checked = 0
    for low, high, clip_c in radii:
        cfg = make_config(loss, low, high, c_min=1.0, clip_c=clip_c, agg=agg)
        for kind, arg in INPUTS:
            old, lp, adv, mask = _inputs(kind, arg)
            g = torch.Generator().manual_seed(7)
            for weights in (None, torch.rand(old.shape, generator=g) * 2):
                cfg.global_batch_info.clear()
                cfg.global_batch_info.update(global_info(gbi, mask))
                where = (
                    f"{loss} vs {PAIRS[loss]}, agg={agg}, gbi={gbi}, radii=({low},{high},{clip_c}), "
                    f"input={kind}:{arg}, weights={weights is not None}"
                )
                ref_loss, ref_grad, ref_m = _run(PAIRS[loss], cfg, old, lp, adv, mask, agg, weights)
                sat_loss, sat_grad, sat_m = _run(loss, cfg, old, lp, adv, mask, agg, weights)
                assert torch.isfinite(ref_loss), where
                assert torch.equal(sat_loss, ref_loss), f"loss differs: {where}: {sat_loss} vs {ref_loss}"
                assert torch.equal(sat_grad, ref_grad), f"gradient differs: {where}"
                for k in VERL_KEYS:
                    assert sat_m[k] == ref_m[k], f"{k}: {sat_m[k]} vs {ref_m[k]} ({where})"
                assert sat_m["actor/sat/gate_rate"] >= 0 and sat_m["actor/sat/contraction_min"] == 1.0, where
                assert sat_m["actor/sat/newly_clipped_frac"] == 0.0, where
                checked += 1
    assert checked == len(radii) * len(INPUTS) * 2


@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@pytest.mark.parametrize("loss", sorted(PAIRS))
def test_empty_tail_is_verl_bit_for_bit(loss, agg):
    """Default knobs (c_min = 0), but every |d| ties at the threshold, so nothing is gated: SAT's contraction
    path (not the c_min shortcut) must still give verl's values and gradients exactly. Dyadic log-probs make
    every log-ratio exactly +-v; for the sequence gate each row has one sign, so sequence means tie too."""
    g = torch.Generator().manual_seed(17)
    bs, t = 6, 7
    old = -torch.randint(1, 60, (bs, t), generator=g).float() / 8
    lens = torch.tensor([7, 3, 5, 1, 7, 6])
    mask = torch.arange(t).unsqueeze(0) < lens.unsqueeze(1)
    row_sign = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0]).unsqueeze(1)
    tok_sign = torch.where(torch.rand((bs, t), generator=g) < 0.5, -1.0, 1.0)
    sign = row_sign.expand(bs, t) if loss == "sat_gspo" else tok_sign
    adv = torch.randn((bs, t), generator=g) * 2
    for low, high in ((0.2, 0.2), (0.2, 0.28), (3e-4, 4e-4)):
        cfg = make_config(loss, low, high, c_min=0.0, agg=agg)
        for v in (1 / 64, 1 / 4, 2.0):  # inside, just outside and far outside the nominal interval
            lp = old + sign * v
            ref_loss, ref_grad, ref_m = _run(PAIRS[loss], cfg, old, lp, adv, mask, agg, None)
            sat_loss, sat_grad, sat_m = _run(loss, cfg, old, lp, adv, mask, agg, None)
            where = f"{loss} {agg} radii=({low},{high}) v={v}"
            assert sat_m["actor/sat/threshold_q"] == v and sat_m["actor/sat/gate_rate"] == 0.0, where
            assert torch.equal(sat_loss, ref_loss), where
            assert torch.equal(sat_grad, ref_grad), where
            assert all(sat_m[k] == ref_m[k] for k in VERL_KEYS), where


def band_inputs(bs: int = 4, t: int = 5):
    """18 tokens at |d| = 0.01 and 2 tokens at d = +0.15 with A > 0: exp(0.15) = 1.16 < 1 + 0.2, so PPO leaves
    them unclipped, but they are above the 0.9 quantile, so SAT contracts their upper endpoint below 1.16."""
    g = torch.Generator().manual_seed(3)
    old = -torch.rand((bs, t), generator=g) * 2 - 0.5
    d = torch.full((bs, t), 0.01) * torch.where(torch.rand((bs, t), generator=g) < 0.5, -1.0, 1.0)
    band = torch.zeros((bs, t), dtype=torch.bool)
    band[1, 2] = band[3, 4] = True
    d[band] = 0.15
    adv = torch.rand((bs, t), generator=g) + 0.5  # A > 0: d > 0 tail tokens are outward updates
    mask = torch.ones((bs, t), dtype=torch.bool)
    return old, old + d, adv, mask, band


@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
def test_default_sat_differs_from_vanilla_on_the_new_band_only(agg):
    old, lp, adv, mask, band = band_inputs()
    cfg = make_config("sat", 0.2, 0.2, c_min=0.0, agg=agg)  # SAT's defaults otherwise (the paper's)
    cfg.global_batch_info.clear()
    v_loss, v_grad, _ = _run("vanilla", cfg, old, lp, adv, mask, agg, None)
    s_loss, s_grad, s_m = _run("sat", cfg, old, lp, adv, mask, agg, None)
    assert s_loss > v_loss, "SAT must be more pessimistic than PPO on the intercepted band"
    assert s_m["actor/sat/newly_clipped_frac"] == pytest.approx(band.sum().item() / mask.sum().item())
    assert s_m["actor/sat/gate_rate"] == pytest.approx(band.sum().item() / mask.sum().item())
    assert s_m["actor/sat/contraction_min"] < 1.0
    assert torch.all(s_grad[band] == 0) and torch.all(v_grad[band] != 0), "band tokens: clipped by SAT only"
    assert torch.equal(s_grad[~band], v_grad[~band]), "ungated tokens keep PPO's exact gradient"


def test_default_sat_gspo_differs_from_gspo_on_the_new_band():
    """Sequence gating: one sequence above the 0.9 quantile of |d_i| but inside the nominal interval (radii 0.2
    here, so that the band is wide enough to show) is clipped by SAT-GSPO only; the other sequences are untouched."""
    bs, t = 10, 4
    g = torch.Generator().manual_seed(5)
    old = -torch.rand((bs, t), generator=g) - 0.5
    d = torch.full((bs, t), 0.01)
    d[7] = 0.15  # sequence mean log-ratio 0.15 -> s = 1.16 < 1.2, the only gated sequence
    lp = old + d
    adv = torch.ones((bs, t))
    mask = torch.ones((bs, t), dtype=torch.bool)
    cfg = make_config("sat_gspo", 0.2, 0.2, c_min=0.0, agg="seq-mean-token-mean")
    cfg.global_batch_info.clear()
    v_loss, v_grad, _ = _run("gspo", cfg, old, lp, adv, mask, "seq-mean-token-mean", None)
    s_loss, s_grad, s_m = _run("sat_gspo", cfg, old, lp, adv, mask, "seq-mean-token-mean", None)
    assert s_loss > v_loss
    assert torch.all(s_grad[7] == 0) and torch.all(v_grad[7] != 0)
    rest = torch.arange(bs) != 7
    assert torch.equal(s_grad[rest], v_grad[rest])
    assert s_m["actor/sat/gate_rate"] == pytest.approx(0.1)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    loss=st.sampled_from(sorted(PAIRS)),
    agg=st.sampled_from(LOSS_AGG_MODES),
    bs=st.integers(1, 5),
    t=st.integers(1, 7),
    scale=st.sampled_from([1e-4, 0.05, 0.5, 3.0, 30.0]),
    seed=st.integers(0, 2**16),
    gbi=st.sampled_from(["none", "dp1", "dp2"]),
    weighted=st.booleans(),
)
def test_c_equal_one_property(loss, agg, bs, t, scale, seed, gbi, weighted):
    """Random shapes down to 1 x 1, log-ratio scales from tiny to clamp-saturating."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand((bs, t), generator=g) * 5 - 1e-3
    lp = old + torch.randn((bs, t), generator=g) * scale
    adv = torch.randn((bs, t), generator=g) * 3
    mask = torch.rand((bs, t), generator=g) < 0.7
    mask[0, 0] = True  # at least one active token (an all-padding micro-batch is not vanilla's domain: 0/0)
    weights = torch.rand((bs, t), generator=g) * 2 if weighted else None
    cfg = make_config(loss, 0.2, 0.28, c_min=1.0, agg=agg)
    cfg.global_batch_info.update(global_info(gbi, mask))
    ref_loss, ref_grad, ref_m = _run(PAIRS[loss], cfg, old, lp, adv, mask, agg, weights)
    sat_loss, sat_grad, sat_m = _run(loss, cfg, old, lp, adv, mask, agg, weights)
    assert torch.equal(sat_loss, ref_loss) and torch.equal(sat_grad, ref_grad)
    assert all(sat_m[k] == ref_m[k] for k in VERL_KEYS)


def _tie_tokens(bound: float, above: bool, sign: float, n: int = 6):
    """(log-ratios, advantages) whose ratio r = exp(l) is the float32 nearest ``bound`` on the given side and
    whose product with A rounds to the same float as ``A * bound``: a tie between the clipped and the
    unclipped branch that torch.maximum / torch.minimum split in half."""
    b = torch.tensor(bound, dtype=torch.float32)
    base = torch.log(b)
    ls = base + torch.arange(-256, 257, dtype=torch.float32) * torch.finfo(torch.float32).eps * base.abs()
    rs = torch.exp(ls)
    side = rs > b if above else rs < b
    j = int(torch.argmin(torch.where(side, (rs - b).abs(), float("inf"))))  # the nearest r beyond the bound
    a = sign * (1 + torch.arange(4096, dtype=torch.float32) / 4096) * 1e-3  # every mantissa step of a binade
    tie = (a * rs[j]) == (a * b)
    return [float(ls[j])] * int(tie[:n].numel() and min(n, int(tie.sum()))), a[tie][:n].tolist()


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "token-sum"])
def test_float_ties_between_the_branches_are_verl_bit_for_bit(agg):
    """Ratios one float32 step beyond an endpoint (or C) whose products with A round together, and subnormal
    advantages at the dual clip: SAT at c == 1 gives verl's value and gradient, halves included."""
    cases = [
        (1.2, True, 1.0),
        (0.8, False, 1.0),  # A > 0: just clipped above; a pull-back just below lo
        (0.8, False, -1.0),
        (1.2, True, -1.0),  # A < 0: just clipped below; a pull-back just above hi
        (3.0, True, -1.0),
        (3.0, False, -1.0),  # A < 0 at the dual clip C = 3 (where exp reaches one step)
    ]
    ls, advs = [], []
    for k, (bound, above, sign) in enumerate(cases):
        tokens, a = _tie_tokens(bound, above, sign)
        assert len(tokens) == 6 or k >= 4, (bound, above, sign)  # the four endpoint cases must be constructible
        ls += tokens
        advs += a
    ls += [0.05, -0.05, 0.9555, 1.0296]  # r = 2.6 and 2.8 < C with a subnormal A < 0: -A r and -A C round together
    advs += [0.3, -0.2, -1.4e-45, -2.8e-45]
    n = len(ls)
    old = -torch.linspace(0.5, 3.0, n).reshape(1, n)
    lp = old + torch.tensor(ls).reshape(1, n)
    adv = torch.tensor(advs).reshape(1, n)
    mask = torch.ones_like(adv, dtype=torch.bool)
    # (0.2, 3.0): 1 + eps_high = 4 > C, so r = 2.6 and 2.8 are inside the nominal interval and only the
    # subnormal advantage makes them tie with the dual clip
    for low, high in ((0.2, 0.2), (0.2, 3.0)):
        cfg = make_config("sat", low, high, c_min=1.0, clip_c=3.0, agg=agg)
        cfg.global_batch_info.update(global_info("dp1", mask))
        if agg == "token-sum":  # an upstream gradient of 2^100 per token: g * A stays normal for subnormal A
            cfg.global_batch_info.update(dp_size=2.0**100)
        ref_loss, ref_grad, _ = _run("vanilla", cfg, old, lp, adv, mask, agg, None)
        sat_loss, sat_grad, _ = _run("sat", cfg, old, lp, adv, mask, agg, None)
        assert torch.equal(sat_loss, ref_loss)
        assert torch.equal(sat_grad, ref_grad), (sat_grad - ref_grad).abs().max()
    # not vacuous: the subnormal tokens tie with the dual clip (-A r == -A C although r < C)
    r, a = torch.exp(lp - old)[0, -2:], adv[0, -2:]
    assert bool(((-a * r) == (-a * 3.0)).all()) and bool((r < 2.9).all())


@pytest.mark.parametrize("gbi", ["none", "dp2"])
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@pytest.mark.parametrize("loss", sorted(PAIRS))
def test_sat_through_verl_equals_the_reference_in_every_aggregation_mode(loss, agg, gbi):
    """With SAT's defaults (c < 1 on the gated tail): verl's registry loss and gradient equal the plain-torch
    reference aggregated by verl's own agg_loss, to float32 rounding."""
    from verl.trainer.ppo.core_algos import agg_loss

    from sat_ext.core.reference import reference_gspo_loss, reference_token_loss
    from sat_ext.verl.config import sat_config_for

    cfg = make_config(loss, 0.2, 0.28, c_min=0.0, agg=agg)
    ref_fn = reference_token_loss if loss == "sat" else reference_gspo_loss
    for kind, arg in INPUTS:
        old, lp, adv, mask = _inputs(kind, arg)
        cfg.global_batch_info.clear()
        cfg.global_batch_info.update(global_info(gbi, mask))
        if not bool(mask.any()):
            continue
        sat_loss, sat_grad, metrics = _run(loss, cfg, old, lp, adv, mask, agg, None)
        x = lp.clone().requires_grad_(True)
        ref_mat = ref_fn(x, old, adv, mask, sat_config_for(cfg, loss))
        ref_loss = agg_loss(loss_mat=ref_mat, loss_mask=mask, loss_agg_mode=agg, **cfg.global_batch_info)
        (ref_grad,) = torch.autograd.grad(ref_loss, x)
        where = f"{loss} {agg} {gbi} {kind}:{arg}"
        assert float(sat_loss) == pytest.approx(float(ref_loss), rel=1e-5, abs=1e-7), where
        assert torch.allclose(sat_grad, ref_grad, rtol=1e-5, atol=1e-8), where
