"""The fast path's size-dependent choices give the same results as the small-size ones.

* The per-token pass in parts (``losses.CHUNK`` entries at a time on the CPU, above 32K tokens), with the
  large-call quantiles (kth-value or radix selection; SAT-GSPO's from one score per response): loss and gradient equal,
  bit for bit, the small-call pass on the same batch, the metrics to float32 rounding (their sums add up per
  part), the details (ratio, region, clip mask) equal.
* The quantile's kth-value and radix selections (above ``quantile.TOPK_MAX_NUMEL`` entries) equal
  ``torch.topk``'s, bit for bit, for both rules, ties, zeros and every scale; and the rank arithmetic of a
  level with many digits (the remainder-corrected path) is exact.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from _core_ref import batches, configs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sat_ext.core import losses, quantile, sat_gspo_loss, sat_token_loss
from sat_ext.core.quantile import masked_quantile, weighted_quantile


def _run(kind: str, form: str | None, batch, cfg, weights):
    lp = batch.fresh_lp()
    if kind == "token":
        out = sat_token_loss(lp, batch.old, batch.adv, batch.mask, cfg, rollout_is_weights=weights)
    else:
        out = sat_gspo_loss(lp, batch.old, batch.adv, batch.mask, cfg, ratio_form=form, rollout_is_weights=weights)
    (g,) = torch.autograd.grad(torch.where(batch.mask, out.loss_mat, 0.0).sum(), lp)
    return out, g


def _select(m: pytest.MonkeyPatch, selection: str) -> None:
    """Route every local quantile (any size) to the kth-value selection (the linear rule's two ranks: radix) or
    to the radix selection."""
    m.setattr(quantile, "TOPK_MAX_NUMEL", 0)
    m.setattr(quantile, "KTH_MAX_NUMEL", 1 << 62 if selection == "kth" else 0)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    batch=batches(max_b=5, max_t=9),
    cfg=configs(),
    chunk=st.integers(1, 12),
    kind=st.sampled_from(["token", "gspo-token", "gspo-sequence"]),
    weighted=st.booleans(),
    selection=st.sampled_from(["kth", "radix"]),
)
def test_parts_equal_one_part(monkeypatch, batch, cfg, chunk, kind, weighted, selection):
    w = torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(2)) * 2 if weighted else None
    k, form = (kind, None) if kind == "token" else ("gspo", kind.split("-")[1])
    one, g_one = _run(k, form, batch, cfg, w)
    with monkeypatch.context() as m:  # parts, and the large-call quantiles (kth or radix; SAT-GSPO's per response)
        m.setattr(losses, "CHUNK", chunk)
        m.setattr(losses, "GSPO_TOKEN_QUANTILE_MAX", 0)
        _select(m, selection)
        parts, g_parts = _run(k, form, batch, cfg, w)
    assert torch.equal(one.loss_mat, parts.loss_mat) and torch.equal(g_one, g_parts)
    assert torch.allclose(one.metric_vector, parts.metric_vector, rtol=1e-6, atol=1e-6)
    assert torch.equal(one.ratio, parts.ratio) and torch.equal(one.clipped, parts.clipped)
    for f in ("lo", "hi", "c", "gated", "q"):
        assert torch.equal(getattr(one.region, f), getattr(parts.region, f)), f


_vals = st.floats(0, 1e4, width=32, allow_subnormal=False)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    n=st.integers(1, 300),
    level=st.floats(0.001, 0.999),
    rule=st.sampled_from(["inverse_cdf", "linear"]),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e30]),
    selection=st.sampled_from(["kth", "radix"]),
)
def test_selections_equal_topk(monkeypatch, data, n, level, rule, scale, selection):
    values = torch.tensor(data.draw(st.lists(_vals, min_size=n, max_size=n)), dtype=torch.float32) * scale
    if data.draw(st.booleans()):  # duplicates and exact zeros
        values = values[torch.randint(0, n, (n,), generator=torch.Generator().manual_seed(n))]
        values[: n // 4] = 0.0
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    by_topk = masked_quantile(values, mask, level, rule)
    with monkeypatch.context() as m:
        _select(m, selection)
        other = masked_quantile(values, mask, level, rule)
    assert torch.equal(by_topk, other), (by_topk, other)


@pytest.mark.parametrize("level", [0.1 + 0.2, 0.9000000000000001, 1 / 3, 0.0032759136178932367])
def test_ranks_of_a_level_with_many_digits(level):
    """(b - a) n overflows int64 for these levels read as decimals: the remainder-corrected path, and the host
    path of the last (its denominator b = 10^19 is past 2^61)."""
    a = Fraction(repr(level))
    assert (a.denominator - a.numerator) * 20000 > 2**63
    g = torch.Generator().manual_seed(0)
    values = torch.rand(20000, generator=g)
    mask = torch.rand(20000, generator=g) < 0.7
    sel = torch.sort(values[mask]).values
    k = max(math.ceil(a * sel.numel()), 1)
    assert torch.equal(masked_quantile(values, mask, level), sel[k - 1])
    counts = torch.randint(0, 4, (20000,), generator=g)
    expanded = torch.sort(values.repeat_interleave(counts)).values
    k = max(math.ceil(a * expanded.numel()), 1)
    assert torch.equal(weighted_quantile(values, counts, level), expanded[k - 1])
