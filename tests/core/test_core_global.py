"""Global gate scope on a real 2-process gloo group (one torch.multiprocessing spawn runs every check).

* ``global_masked_quantile(method="exact")`` equals, bit for bit, ``masked_quantile`` of the concatenated
  selections (uneven sizes, an empty selection, a zero-size tensor, ties, 2-D padded masks, > 65,536 values);
* ``method="hist"``: 0 <= q_hist - q_exact <= 2^-7 * q_exact (and q_hist == 0 when q_exact == 0);
* ``sat_token_loss`` / ``sat_gspo_loss`` with ``gate_scope="global"`` on two ranks give the per-token bounds,
  loss and gradient of one process on the concatenated batch.
"""

from __future__ import annotations

import functools
import time

import _core_dist_worker as W
import pytest
import torch
import torch.multiprocessing as mp
from _core_ref import check_metrics

from sat_ext.core import SATConfig, adaptive_trust_region, masked_quantile, sat_gspo_loss, sat_token_loss
from sat_ext.core.reference import reference_gspo_loss, reference_token_loss

SPAWN_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    d = tmp_path_factory.mktemp("gloo")
    init_file, prefix = str(d / "init"), str(d / "res")
    ctx = mp.spawn(W.worker, args=(2, init_file, prefix), nprocs=2, join=False)
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    while not ctx.join(timeout=2):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the 2-process gloo group did not finish in {SPAWN_TIMEOUT_S} s")
    return [torch.load(f"{prefix}.{r}", weights_only=False) for r in range(2)]


def _cat(parts):
    return torch.cat([p.reshape(-1) for p in parts])


@pytest.mark.parametrize("name", list(W.quantile_scenarios()))
def test_exact_equals_single_process_concatenation(ranks, name):
    vals, masks = W.quantile_scenarios()[name]
    for level in W.LEVELS:
        expect = masked_quantile(_cat(vals), _cat(masks), level)
        for r in range(2):
            got = ranks[r]["quantile"][(name, level, "exact")]
            assert got.dtype == torch.float32 and got.dim() == 0
            assert torch.equal(got, expect), (name, level, r, got, expect)


@pytest.mark.parametrize("name", list(W.quantile_scenarios()))
def test_hist_within_two_to_minus_seven(ranks, name):
    vals, masks = W.quantile_scenarios()[name]
    for level in W.LEVELS:
        q_exact = float(masked_quantile(_cat(vals), _cat(masks), level))
        q0 = ranks[0]["quantile"][(name, level, "hist")]
        assert torch.equal(q0, ranks[1]["quantile"][(name, level, "hist")])
        assert W.hist_bound_ok(float(q0), q_exact), (name, level, float(q0), q_exact)


def test_scenarios_are_not_degenerate(ranks):
    """The scenarios exercise what they claim (an empty rank, q == 0, several bins, interpolation)."""
    qs = W.quantile_scenarios()
    assert int(qs["rank1_empty_selection"][1][1].sum()) == 0
    assert float(masked_quantile(_cat(qs["on_policy_zeros"][0]), _cat(qs["on_policy_zeros"][1]), 0.9)) == 0.0
    assert float(masked_quantile(_cat(qs["both_empty"][0]), _cat(qs["both_empty"][1]), 0.9)) == 0.0
    big = _cat(qs["large"][0])[_cat(qs["large"][1])]
    assert big.numel() > 65_536 and len(torch.unique(big.view(torch.int32) >> 16)) > 100


def _single_process(kind, form, cfg, batches):
    cat = [torch.cat([b[i] for b in batches]) for i in range(4)]
    local = SATConfig(**{**cfg.to_dict(), "gate_scope": "micro"})
    return W.run_loss(kind, form, local, *cat), cat


def _rows(batches):
    sizes = [b[0].shape[0] for b in batches]
    return [slice(sum(sizes[:r]), sum(sizes[: r + 1])) for r in range(2)]


EXACT_LOSSES = [n for n, s in W.loss_scenarios().items() if s[2].global_method == "exact"]
HIST_LOSSES = [n for n, s in W.loss_scenarios().items() if s[2].global_method == "hist"]


@pytest.mark.parametrize("name", EXACT_LOSSES)
def test_global_loss_equals_single_process_on_concatenation(ranks, name):
    kind, form, cfg, batches = W.loss_scenarios()[name]
    ref, _ = _single_process(kind, form, cfg, batches)
    for r, rows in enumerate(_rows(batches)):
        got = ranks[r]["loss"][name]
        check_metrics(got["metrics"])
        assert torch.equal(got["q"], ref["q"]), (name, r)
        assert float(got["metrics"]["threshold_q"]) == float(ref["q"])
        for k in ("lo", "hi", "gated", "c", "loss", "grad"):
            assert torch.equal(got[k], ref[k][rows]), (name, r, k)
    # and the plain-torch reference on the concatenation, with that q: the same loss to float32 rounding
    cat = [torch.cat([b[i] for b in batches]) for i in range(4)]
    ref_fn = reference_token_loss if kind == "token" else functools.partial(reference_gspo_loss, ratio_form=form)
    want = ref_fn(cat[0], cat[1], cat[2], cat[3], cfg, q=ref["q"])
    got = torch.cat([ranks[r]["loss"][name]["loss"] for r in range(2)])
    m = cat[3]
    assert torch.allclose(got[m], want[m], rtol=1e-6, atol=1e-7), name
    if name == "token_rank1_all_gated":
        m1 = batches[1][3]
        assert bool(ranks[1]["loss"][name]["gated"][m1].all())
        assert float(ranks[1]["loss"][name]["metrics"]["gate_rate"]) == 1.0
        assert not bool(ranks[0]["loss"][name]["gated"].any())
    if name == "token_rank1_all_padding":
        assert float(ranks[1]["loss"][name]["metrics"]["empty_microbatch"]) == 1.0
        assert bool(ranks[0]["loss"][name]["gated"].any())


@pytest.mark.parametrize("name", HIST_LOSSES)
def test_global_hist_loss(ranks, name):
    kind, form, cfg, batches = W.loss_scenarios()[name]
    cat = [torch.cat([b[i] for b in batches]) for i in range(4)]
    d = torch.clamp(cat[0] - cat[1], -20, 20)
    q_exact = float(masked_quantile(d.abs(), cat[3], cfg.quantile))
    q = ranks[0]["loss"][name]["q"]
    assert torch.equal(q, ranks[1]["loss"][name]["q"])
    assert W.hist_bound_ok(float(q), q_exact), (float(q), q_exact)
    ref = adaptive_trust_region(d, cat[3], cfg, q=q)
    for r, rows in enumerate(_rows(batches)):
        got = ranks[r]["loss"][name]
        check_metrics(got["metrics"])
        for k in ("lo", "hi", "gated"):
            assert torch.equal(got[k], getattr(ref, k)[rows]), (name, r, k)
    if name == "token_hist_on_policy":
        assert q_exact == 0.0
        assert float(q) == 0.0, "hist threshold must be 0 when the exact one is (q == 0: nothing gated)"
        for r in range(2):
            assert not bool(ranks[r]["loss"][name]["gated"].any())


@pytest.mark.parametrize("name", list(W.weighted_scenarios()))
def test_weighted_global_quantile_is_the_expanded_one(ranks, name):
    """counts: each value stands for that many entries; exact equals the quantile of the expanded
    concatenation, hist stays within its bound, for both rules."""
    vals, masks, counts = W.weighted_scenarios()[name]
    expanded = torch.cat([v[m].repeat_interleave(c[m]) for v, m, c in zip(vals, masks, counts)])
    everything = torch.ones_like(expanded, dtype=torch.bool)
    for level in W.LEVELS:
        for rule in ("inverse_cdf", "linear"):
            expect = masked_quantile(expanded, everything, level, rule=rule)
            for r in range(2):
                assert torch.equal(ranks[r]["weighted"][(name, level, "exact", rule)], expect), (name, level, rule)
                assert W.hist_bound_ok(float(ranks[r]["weighted"][(name, level, "hist", rule)]), float(expect))


def test_global_scope_without_process_group_is_local():
    """Without an initialised group the global scope is a world of one: the local quantile."""
    assert not torch.distributed.is_initialized()
    lp, old, adv, mask = W._batch(30, 3, 8, 0.3)
    a = sat_token_loss(lp, old, adv, mask, SATConfig(gate_scope="global"))
    b = sat_token_loss(lp, old, adv, mask, SATConfig())
    assert torch.equal(a.loss_mat, b.loss_mat) and torch.equal(a.region.q, b.region.q)
    a = sat_gspo_loss(lp, old, adv, mask, SATConfig(gate_scope="global", global_method="hist"))
    b = sat_gspo_loss(lp, old, adv, mask, SATConfig())
    assert torch.equal(a.loss_mat, b.loss_mat)
