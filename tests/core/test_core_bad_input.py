"""Bad input: non-finite values, padding, empty micro-batches, low precision, huge log-ratios, zero advantages."""

from __future__ import annotations

import math

import pytest
import torch
from _core_ref import check_metrics, gspo_loss, ppo_token_loss

from sat_ext.core import SATConfig, sat_gspo_loss, sat_token_loss

# (kind, ratio_form, gspo_gate_level)
KINDS = [
    ("token", None, "sequence"),
    ("gspo", "token", "sequence"),
    ("gspo", "sequence", "sequence"),
    ("gspo", "token", "token"),
    ("gspo", "sequence", "token"),
]
KIND_IDS = ["sat", "gspo-tokratio-seqgate", "gspo-seqratio-seqgate", "gspo-tokratio-tokgate", "gspo-seqratio-tokgate"]


def _loss(kind, ratio_form, lp, old, adv, mask, cfg, **kw):
    if kind == "token":
        return sat_token_loss(lp, old, adv, mask, cfg, **kw)
    return sat_gspo_loss(lp, old, adv, mask, cfg, ratio_form=ratio_form, **kw)


def _batch(B=4, T=10, seed=0, scale=0.2):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 4
    lp = old + torch.randn(B, T, generator=g) * scale
    adv = torch.randn(B, T, generator=g)
    lens = torch.tensor([T, T - 3, T - 1, 2][:B])
    mask = torch.arange(T)[None, :] < lens[:, None]
    return lp, old, adv, mask


def _grad(out, lp):
    (g,) = torch.autograd.grad(out.loss_mat.sum(), lp, allow_unused=True)
    return torch.zeros_like(lp) if g is None else g


BAD_AT = [(0, 1), (1, 4), (2, 0)]  # active tokens (row lengths 10, 7, 9)


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("tensor", ["log_prob", "old_log_prob", "advantages"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_nonfinite_masked_at_active_tokens(kind, ratio_form, level, tensor, value):
    lp, old, adv, mask = _batch()
    t = {"log_prob": lp, "old_log_prob": old, "advantages": adv}
    for b, j in BAD_AT:
        t[tensor][b, j] = value
    lp = lp.requires_grad_(True)
    cfg = SATConfig(gspo_gate_level=level, nonfinite="mask")
    out = _loss(kind, ratio_form, lp, old, adv, mask, cfg)
    assert bool(torch.isfinite(out.loss_mat).all())
    for b, j in BAD_AT:
        assert float(out.loss_mat[b, j].detach()) == 0.0
    g = _grad(out, lp)
    assert bool(torch.isfinite(g).all())
    for b, j in BAD_AT:
        assert float(g[b, j]) == 0.0
    check_metrics(out.metrics)
    n_active = int(mask.sum())
    assert float(out.metrics["nonfinite_frac"]) == pytest.approx(len(BAD_AT) / n_active, abs=1e-7)
    # the other active tokens still learn
    assert float(g[mask].abs().sum()) > 0


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("tensor", ["log_prob", "old_log_prob", "advantages"])
def test_nonfinite_token_is_padding_for_every_other_token(kind, ratio_form, level, tensor):
    """A masked non-finite token must not leak into the rest: the other tokens' loss and gradient (and the
    threshold) are those of the same batch with that token padded out. Otherwise one NaN would change the
    gate threshold (a fake d = 0 entry) and, for SAT-GSPO, the sequence ratio of its whole sequence."""
    lp, old, adv, mask = _batch(seed=3, scale=0.3)
    bad_lp, bad_old, bad_adv = lp.clone(), old.clone(), adv.clone()
    t = {"log_prob": bad_lp, "old_log_prob": bad_old, "advantages": bad_adv}
    padded = mask.clone()
    for b, j in BAD_AT:
        t[tensor][b, j] = float("nan")
        padded[b, j] = False
    cfg = SATConfig(gspo_gate_level=level, nonfinite="mask")
    lp1 = bad_lp.requires_grad_(True)
    out1 = _loss(kind, ratio_form, lp1, bad_old, bad_adv, mask, cfg)
    lp2 = lp.clone().requires_grad_(True)
    out2 = _loss(kind, ratio_form, lp2, old, adv, padded, cfg)
    assert torch.equal(out1.region.q, out2.region.q)
    assert torch.equal(out1.loss_mat[padded], out2.loss_mat[padded])
    assert torch.equal(out1.ratio[padded], out2.ratio[padded])
    g1, g2 = _grad(out1, lp1), _grad(out2, lp2)
    assert torch.equal(g1[padded], g2[padded])


@pytest.mark.parametrize("kind,ratio_form,level", KINDS[:2], ids=KIND_IDS[:2])
@pytest.mark.parametrize("tensor", ["log_prob", "old_log_prob", "advantages", "rollout_log_prob"])
def test_nonfinite_raise_names_the_tensor(kind, ratio_form, level, tensor):
    lp, old, adv, mask = _batch()
    rollout = old.clone()
    t = {"log_prob": lp, "old_log_prob": old, "advantages": adv, "rollout_log_prob": rollout}
    t[tensor][1, 2] = float("nan")
    cfg = SATConfig(gspo_gate_level=level, nonfinite="raise", proxy="rollout")
    with pytest.raises(ValueError, match=tensor):
        _loss(kind, ratio_form, lp, old, adv, mask, cfg, rollout_log_prob=rollout)


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("policy", ["mask", "raise"])
def test_nonfinite_only_at_padding_changes_nothing(kind, ratio_form, level, policy):
    lp, old, adv, mask = _batch(seed=1)
    pad = (~mask).nonzero().tolist()
    assert pad
    dirty = [x.clone() for x in (lp, old, adv)]
    for i, (b, j) in enumerate(pad):
        dirty[i % 3][b, j] = [float("nan"), float("inf"), -float("inf")][i % 3]
    cfg = SATConfig(gspo_gate_level=level, nonfinite=policy)
    lp1 = dirty[0].requires_grad_(True)
    out1 = _loss(kind, ratio_form, lp1, dirty[1], dirty[2], mask, cfg)
    lp2 = lp.clone().requires_grad_(True)
    out2 = _loss(kind, ratio_form, lp2, old, adv, mask, cfg)
    assert bool(torch.isfinite(out1.loss_mat).all())
    assert torch.equal(out1.loss_mat[mask], out2.loss_mat[mask])
    g1, g2 = _grad(out1, lp1), _grad(out2, lp2)
    assert bool(torch.isfinite(g1).all())
    assert torch.equal(g1[mask], g2[mask])
    check_metrics(out1.metrics)
    for k in out2.metrics:
        assert torch.equal(out1.metrics[k], out2.metrics[k]), k
    assert float(out1.metrics["nonfinite_frac"]) == 0.0


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("shape", [(3, 5), (1, 1), (0, 5), (3, 0)])
@pytest.mark.parametrize("scope", ["micro", "global"])
def test_empty_mask_all_padding_microbatch(kind, ratio_form, level, shape, scope):
    """Nothing active (padding may even hold NaN): no NaN anywhere, q = 0, empty_microbatch = 1."""
    lp = torch.randn(shape)
    old = torch.randn(shape)
    adv = torch.randn(shape)
    if lp.numel():
        lp.view(-1)[0] = float("nan")
        adv.view(-1)[-1] = float("inf")
    lp.requires_grad_(True)
    mask = torch.zeros(shape, dtype=torch.bool)
    cfg = SATConfig(gspo_gate_level=level, gate_scope=scope)  # global without a process group: local
    out = _loss(kind, ratio_form, lp, old, adv, mask, cfg)
    assert out.loss_mat.shape == shape
    assert bool(torch.isfinite(out.loss_mat).all())
    check_metrics(out.metrics)
    assert float(out.metrics["empty_microbatch"]) == 1.0
    assert float(out.metrics["gate_rate"]) == 0.0
    assert float(out.metrics["threshold_q"]) == 0.0
    assert float(out.metrics["contraction_min"]) == 1.0
    assert not bool(out.region.gated.any())
    g = _grad(out, lp)
    assert bool(torch.isfinite(g).all())


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
def test_nonempty_microbatch_flag_is_zero(kind, ratio_form, level):
    lp, old, adv, mask = _batch()
    out = _loss(kind, ratio_form, lp, old, adv, mask, SATConfig(gspo_gate_level=level))
    assert float(out.metrics["empty_microbatch"]) == 0.0


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs(kind, ratio_form, level, dtype):
    lp32, old32, adv32, mask = _batch(B=4, T=16, seed=5, scale=0.15)
    cfg = SATConfig(gspo_gate_level=level)
    lp = lp32.to(dtype).requires_grad_(True)
    old, adv = old32.to(dtype), adv32.to(dtype)
    out = _loss(kind, ratio_form, lp, old, adv, mask, cfg)
    assert bool(torch.isfinite(out.loss_mat).all())
    check_metrics(out.metrics)
    g = _grad(out, lp)
    assert g.dtype == dtype and bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0
    # exactly the float32 computation on the (rounded) inputs: the core upcasts first
    lpu = lp.detach().float().requires_grad_(True)
    ref = _loss(kind, ratio_form, lpu, old.float(), adv.float(), mask, cfg)
    assert torch.equal(out.loss_mat, ref.loss_mat)
    assert torch.equal(g, _grad(ref, lpu).to(dtype))
    # and close to the float32 result on the unrounded inputs (PPO-equivalent part: c_min = 1, so that a
    # gate decision flipped by rounding cannot make a large difference)
    cfg1 = SATConfig(gspo_gate_level=level, c_min=1.0)
    a = _loss(kind, ratio_form, lp.detach(), old, adv, mask, cfg1).loss_mat[mask]
    b = _loss(kind, ratio_form, lp32, old32, adv32, mask, cfg1).loss_mat[mask]
    tol = 0.05 if dtype is torch.bfloat16 else 0.01
    assert float((a - b).abs().max()) <= tol * float(b.abs().max() + 1)


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
def test_huge_log_ratio_clamped_and_counted(kind, ratio_form, level):
    lp, old, adv, mask = _batch(seed=2)
    huge = [(0, 0, 25.0), (0, 3, -25.0), (1, 1, 1e4), (2, 5, -1e4)]
    for b, j, v in huge:
        lp[b, j] = old[b, j] + v
    lp[3, 8] = old[3, 8] + 30.0  # padding: not counted
    lp.requires_grad_(True)
    cfg = SATConfig(gspo_gate_level=level)
    out = _loss(kind, ratio_form, lp, old, adv, mask, cfg)
    assert bool(torch.isfinite(out.loss_mat).all())
    check_metrics(out.metrics)
    assert float(out.metrics["log_ratio_clamped_frac"]) == pytest.approx(len(huge) / int(mask.sum()), abs=1e-7)
    g = _grad(out, lp)
    assert bool(torch.isfinite(g).all())
    if kind == "token":
        for b, j, v in huge:
            assert float(out.ratio[b, j].detach()) == float(torch.exp(torch.tensor(math.copysign(20.0, v))))
            assert float(g[b, j]) == 0.0  # clamped: no gradient, as verl's clamp of the log-ratio
        ppo = ppo_token_loss(lp, old, adv, cfg)
        assert bool((out.loss_mat[mask] >= ppo[mask]).all())
    else:
        ppo = gspo_loss(lp, old, adv, mask, cfg, ratio_form)
        assert bool((out.loss_mat[mask] >= ppo[mask]).all())
    assert float(out.region.q) <= 20.0


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_zero_advantages_zero_loss_and_gradient(kind, ratio_form, level, dual_clip):
    lp, old, _, mask = _batch(seed=4, scale=0.5)
    lp.requires_grad_(True)
    adv = torch.zeros_like(old)
    out = _loss(kind, ratio_form, lp, old, adv, mask, SATConfig(gspo_gate_level=level, dual_clip=dual_clip))
    assert bool((out.loss_mat == 0).all())
    assert bool((_grad(out, lp) == 0).all())
    check_metrics(out.metrics)


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
def test_rollout_proxy(kind, ratio_form, level):
    """proxy="rollout": d is measured against the rollout log-probs; the ratio still against old_log_prob."""
    lp, old, adv, mask = _batch(seed=6, scale=0.05)
    g = torch.Generator().manual_seed(7)
    rollout = old + torch.randn(old.shape, generator=g) * 0.5  # a larger, different staleness
    cfg = SATConfig(gspo_gate_level=level, proxy="rollout")
    out = _loss(kind, ratio_form, lp, old, adv, mask, cfg, rollout_log_prob=rollout)
    from sat_ext.core import adaptive_trust_region

    if kind == "token" or level == "token":
        d = torch.clamp(lp - rollout, -20, 20)
        ref = adaptive_trust_region(d, mask, cfg)
    else:
        n = mask.sum(-1).clamp(min=1)
        d = torch.clamp(((lp - rollout) * mask).sum(-1) / n, -20, 20)
        ref = adaptive_trust_region(d, mask.any(-1), cfg)
    assert torch.equal(out.region.lo, ref.lo) and torch.equal(out.region.hi, ref.hi)
    assert torch.equal(out.region.q, ref.q)
    # the rollout tensor is ignored under proxy="old"
    a = _loss(kind, ratio_form, lp, old, adv, mask, SATConfig(gspo_gate_level=level), rollout_log_prob=rollout)
    b = _loss(kind, ratio_form, lp, old, adv, mask, SATConfig(gspo_gate_level=level))
    assert torch.equal(a.loss_mat, b.loss_mat)
    with pytest.raises(ValueError, match="rollout_log_prob"):
        _loss(kind, ratio_form, lp, old, adv, mask, cfg)


def test_gspo_bad_ratio_form():
    lp, old, adv, mask = _batch()
    with pytest.raises(ValueError, match="ratio_form"):
        sat_gspo_loss(lp, old, adv, mask, SATConfig(), ratio_form="seq")


@pytest.mark.parametrize("kind,ratio_form,level", KINDS, ids=KIND_IDS)
def test_padding_takes_zero_advantage(kind, ratio_form, level):
    """Off the active tokens the advantage is taken as 0: loss 0, not clipped, no gradient (the frameworks mask
    these entries anyway), whatever advantages the caller left there."""
    lp, old, adv, mask = _batch(seed=2, scale=1.0)
    assert bool((adv[~mask] != 0).all())
    lp = lp.requires_grad_(True)
    out = _loss(kind, ratio_form, lp, old, adv, mask, SATConfig(gspo_gate_level=level))
    assert bool((out.loss_mat.detach()[~mask] == 0).all())
    assert not bool(out.clipped[~mask].any())
    assert bool((_grad(out, lp)[~mask] == 0).all())
    assert bool((out.loss_mat.detach()[mask] != 0).any())
