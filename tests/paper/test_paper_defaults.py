"""With no SAT knob set, ``sat`` / ``sat_gspo`` (radii 0.2 / 0.2) are the paper's Eq. 13-20.

The oracle (_paper_eq.py) is written from the PDF. Compared: q bit for bit, the gate set exactly, the per-token
loss (relative 1e-5), Table 10's diagnostics and Eq. 52's d_pi, on random and adversarial batches (ties at
q, one to three active tokens, all-equal |d|, mostly on-policy tokens so that q = 0, responses of very
different lengths for SAT-GSPO's length weighting); through the core, verl's registry (a plain
``PolicyLossConfig(loss_mode="sat")`` and ``SATPolicyLossConfig()``, every aggregation mode verl has a
closed form for here) and OpenRLHF's ``PolicyLoss`` aggregation.
"""

from __future__ import annotations

import math

import pytest
import torch
from _paper_eq import PaperSAT, paper_sat, seq_mean_token_mean, token_mean
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sat_ext.core import SATConfig, sat_gspo_loss, sat_token_loss

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODES = ("normal", "ties", "tiny_n", "equal", "mostly_zero", "lengths", "stale_tail")


def make_batch(mode: str, seed: int, scale: float):
    """(logp, denom, adv, mask) of shape (B, T) for one adversarial ``mode``."""
    g = torch.Generator().manual_seed(seed)
    B, T = int(torch.randint(1, 7, (1,), generator=g)), int(torch.randint(1, 17, (1,), generator=g))
    sign = torch.where(torch.rand(B, T, generator=g) < 0.5, -1.0, 1.0)
    d = torch.randn(B, T, generator=g) * scale
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lens[:, None]
    if mode == "ties":  # three distinct magnitudes: many tokens sit exactly at q
        d = sign * torch.tensor([0.0, scale, 2 * scale])[torch.randint(0, 3, (B, T), generator=g)]
    elif mode == "tiny_n":  # one to three active tokens
        mask = torch.zeros(B, T, dtype=torch.bool)
        idx = torch.randperm(B * T, generator=g)[: int(torch.randint(1, 4, (1,), generator=g))]
        mask.view(-1)[idx] = True
    elif mode == "equal":  # every |d| equal: q = |d|, nothing gated
        d = sign * scale
    elif mode == "mostly_zero":  # more than 90% on-policy: q = 0
        d = torch.where(torch.rand(B, T, generator=g) < 0.95, 0.0, d)
        mask = torch.ones(B, T, dtype=torch.bool)
    elif mode == "lengths":  # one long stale response among short fresh ones (SAT-GSPO's length weighting)
        mask = torch.zeros(B, T, dtype=torch.bool)
        mask[:, :2] = True
        mask[0, :] = True
        d[0] += 5 * scale
    elif mode == "stale_tail":  # a bulk near on-policy and a tail ten times more stale
        d = torch.where(torch.rand(B, T, generator=g) < 0.15, d * 10, d)
    # |d| < 9: inside verl's log-ratio clamps (20 for the token ratio, 10 for GSPO's), which are the base
    # recipes' extras, not the paper's (tested against verl's own losses in tests/verl)
    d = d.clamp(-9.0, 9.0)
    denom = -torch.rand(B, T, generator=g) * 4
    logp = denom + d
    adv = torch.randn(B, 1, generator=g).expand(B, T).contiguous()
    if seed % 3 == 0:
        adv = torch.randn(B, T, generator=g)
    return logp.requires_grad_(True), denom, adv, mask


batch_args = dict(
    mode=st.sampled_from(MODES), seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([1e-3, 0.01, 0.05, 0.2, 1.0])
)


def _flat(x) -> list:
    return [v for row in x for v in row]


def check_against_paper(out, ref: PaperSAT, mask: torch.Tensor, *, sequence_level: bool = False) -> None:
    """The core's output against the oracle: q bit for bit, the gate set, the per-token loss, Table 10."""
    m = out.metrics
    assert float(m["threshold_q"]) == ref.q
    gated = out.region.gated.expand_as(mask) if sequence_level else out.region.gated
    assert (gated & mask).tolist() == ref.gated
    got = out.loss_mat.detach().double()
    want = torch.tensor(ref.loss, dtype=torch.float64).reshape(got.shape)
    scale = 1.0 + want.abs()
    assert bool(((got - want).abs() <= 1e-5 * scale)[mask].all()), (got - want)[mask].abs().max()
    assert float(m["gate_rate"]) == pytest.approx(ref.gate_rate, abs=1e-7)
    assert float(m["radius_low_mean"]) == pytest.approx(ref.radius_low_mean, rel=1e-5, abs=1e-7)
    assert float(m["radius_high_mean"]) == pytest.approx(ref.radius_high_mean, rel=1e-5, abs=1e-7)
    assert float(m["contraction_min"]) == pytest.approx(ref.contraction_min, rel=1e-5)
    assert float(m["d_pi"]) == pytest.approx(ref.d_pi, rel=1e-5, abs=1e-9)
    if ref.gated and any(_flat(ref.gated)):
        assert float(m["contraction_min"]) < 0.5  # psi(q; q) = 1/2 and the gate is strict


@SETTINGS
@given(**batch_args)
def test_core_token_sat_is_eq_13_19(mode, seed, scale):
    logp, denom, adv, mask = make_batch(mode, seed, scale)
    out = sat_token_loss(logp, denom, adv, mask, SATConfig(dual_clip=None))
    check_against_paper(out, paper_sat(logp, denom, adv, mask), mask)


@SETTINGS
@given(**batch_args, ratio_form=st.sampled_from(["token", "sequence"]))
def test_core_sat_gspo_is_eq_20(mode, seed, scale, ratio_form):
    logp, denom, adv, mask = make_batch(mode, seed, scale)
    out = sat_gspo_loss(logp, denom, adv, mask, SATConfig(dual_clip=None), ratio_form=ratio_form)
    check_against_paper(out, paper_sat(logp, denom, adv, mask, sequence=True), mask)


def test_hand_worked_eq_14_15():
    """|d| = 0.1 .. 1.0 on ten tokens: q = the 9th smallest = 0.9; only |d| = 1.0 is gated, with
    c = 1 / (1 + (1 / 0.9)^2) = 0.4475 < 1/2 on its side."""
    d = torch.tensor([[0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8, 0.9, 1.0]])
    mask = torch.ones_like(d, dtype=torch.bool)
    out = sat_token_loss(d.clone().requires_grad_(True), torch.zeros_like(d), torch.ones_like(d), mask, SATConfig())
    assert float(out.region.q) == float(torch.tensor(0.9))
    assert out.region.gated.tolist() == [[False] * 9 + [True]]
    c = 1 / (1 + (1.0 / float(torch.tensor(0.9))) ** 2)
    assert float(out.region.c[0, 9]) == pytest.approx(c, rel=1e-6)
    assert float(out.region.hi[0, 9]) == pytest.approx(1 + 0.2 * c, rel=1e-6)


# ------------------------------------------------------------------------------------------------------
# verl: the registry with no SAT knob set
# ------------------------------------------------------------------------------------------------------

VERL_AGG = {"token-mean": token_mean, "seq-mean-token-mean": seq_mean_token_mean}


def _verl_config(loss: str, plain: bool, agg: str):
    from verl.workers.config import ActorConfig, PolicyLossConfig

    import sat_ext.verl.config  # noqa: F401
    from sat_ext.verl.config import SATPolicyLossConfig

    policy_loss = PolicyLossConfig(loss_mode=loss) if plain else SATPolicyLossConfig(loss_mode=loss)
    return ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=agg, policy_loss=policy_loss
    )


def test_verl_defaults_are_the_papers():
    """verl's own defaults give the paper's radii 0.2 / 0.2; SAT's knobs default to the paper's."""
    from sat_ext.verl.config import sat_config_for

    for plain in (True, False):
        for loss in ("sat", "sat_gspo"):
            cfg = sat_config_for(_verl_config(loss, plain, "token-mean"), loss)
            assert cfg == SATConfig(dual_clip=3.0 if loss == "sat" else None), (plain, loss, cfg)


@settings(SETTINGS, max_examples=60)
@given(
    **batch_args, loss=st.sampled_from(["sat", "sat_gspo"]), plain=st.booleans(), agg=st.sampled_from(sorted(VERL_AGG))
)
def test_verl_registry_is_the_paper(mode, seed, scale, loss, plain, agg):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    logp, denom, adv, mask = make_batch(mode, seed, scale)
    config = _verl_config(loss, plain, agg)
    config.global_batch_info.update(
        dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=int(mask.any(-1).sum()), loss_scale_factor=None
    )
    value, metrics = get_policy_loss_fn(loss)(
        old_log_prob=denom, log_prob=logp, advantages=adv, response_mask=mask, loss_agg_mode=agg, config=config
    )
    ref = paper_sat(logp, denom, adv, mask, sequence=loss == "sat_gspo", dual_clip=3.0 if loss == "sat" else None)
    want = VERL_AGG[agg](ref, mask)
    assert float(value.detach()) == pytest.approx(want, rel=1e-5, abs=1e-6 * (1 + abs(want)))
    assert metrics["actor/sat/threshold_q"] == ref.q
    assert metrics["actor/sat/gate_rate"] == pytest.approx(ref.gate_rate, abs=1e-7)
    assert metrics["actor/sat/d_pi"] == pytest.approx(ref.d_pi, rel=1e-5, abs=1e-9)


# ------------------------------------------------------------------------------------------------------
# OpenRLHF: SATPolicyLoss with its defaults, through OpenRLHF's aggregate_loss
# ------------------------------------------------------------------------------------------------------


@settings(SETTINGS, max_examples=60)
@given(**batch_args, loss=st.sampled_from(["sat", "sat_gspo"]))
def test_openrlhf_policy_loss_is_the_paper(mode, seed, scale, loss):
    from sat_ext.openrlhf.loss import SATPolicyLoss

    logp, denom, adv, mask = make_batch(mode, seed, scale)
    fn = SATPolicyLoss(policy_loss_type=loss)  # OpenRLHF's defaults: 0.2 / 0.2, no dual clip
    assert fn.sat_config == SATConfig(dual_clip=None)
    old = denom + 0.01  # the DeepSpeed recompute: only the vllm_kl diagnostic reads it
    value, *_ = fn(logp, old, adv, action_mask=mask, rollout_log_probs=denom)
    ref = paper_sat(logp, denom, adv, mask, sequence=loss == "sat_gspo")
    want = token_mean(ref, mask) if loss == "sat" else seq_mean_token_mean(ref, mask)
    assert float(value.detach()) == pytest.approx(want, rel=1e-5, abs=1e-6 * (1 + abs(want)))
    assert float(fn.extra_metrics["sat_threshold_q"]) == ref.q
    assert float(fn.extra_metrics["sat_d_pi"]) == pytest.approx(ref.d_pi, rel=1e-5, abs=1e-9)
    assert not math.isnan(float(value.detach()))
