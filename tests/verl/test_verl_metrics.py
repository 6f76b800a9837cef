"""Metric consistency under verl's own merging: the same keys on every micro-batch and every rank.

verl's worker appends each micro-batch's Metric dict (``append_to_dict``, as ``postprocess_batch_func`` does),
all-gathers the dicts over DP and reduces each key with ``Metric.aggregate_dp``, which raises when ranks report
different numbers of values. SAT must therefore emit every key on every micro-batch, including an all-padding
micro-batch and one with NaN log-probs at active tokens.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _verl_helpers import actor_config, leaves, make_padded_batch, model_log_probs, split_batch, tag_rows, to_verl_td
from verl.utils.metric import AggregationType, Metric
from verl.utils.py_functional import append_to_dict
from verl.workers.utils.losses import ppo_loss

from sat_ext.verl.loss import METRIC_NAMES

KEYS = set(METRIC_NAMES) | {"actor/pg_loss"}


def _micro(batch, rows, kind, actor, n_tok, n_seq, dp_size):
    """One micro-batch of ``kind``: 'normal', 'padding' (no active token) or 'nan' (NaN log-probs)."""
    b = split_batch(batch, rows)
    if kind == "padding":
        b.padded["response_mask"] = torch.zeros_like(b.padded["response_mask"])
    td = to_verl_td(b, dp_size=dp_size, batch_num_tokens=n_tok, global_batch_size=n_seq)
    theta, junk = leaves(batch)
    if kind == "nan":
        with torch.no_grad():
            theta0 = theta.detach().clone()
            theta0[rows[0], 0] = float("nan")  # active (every response has >= 1 token, response_mask[.,0] = 1)
            theta0[rows[-1], 1] = float("nan")
        theta = theta0.requires_grad_(True)
    loss, metrics = ppo_loss(actor, {"log_probs": model_log_probs(td, theta, junk)}, td)
    loss.backward()
    return loss.detach(), metrics, theta.grad


@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
@pytest.mark.parametrize("global_info", [True, False], ids=["global-info", "no-global-info"])
def test_same_keys_on_every_micro_batch_and_rank(loss_mode, global_info):
    actor = actor_config(loss_mode)
    batch = make_padded_batch(bs=12, seed=4, min_resp=2)
    tag_rows(batch)
    n_tok = int(batch.padded["response_mask"].sum()) if global_info else None
    n_seq = 12 if global_info else None
    dp_size = 2 if global_info else 1
    plan = {
        0: [([0, 1], "normal"), ([2, 3], "padding"), ([4, 5], "nan")],
        1: [([6, 7], "normal"), ([8, 9], "nan"), ([10, 11], "padding")],
    }
    per_rank = {}
    for rank, micro_batches in plan.items():
        merged: dict = {}
        for rows, kind in micro_batches:
            loss, metrics, grad = _micro(batch, rows, kind, actor, n_tok, n_seq, dp_size)
            assert set(metrics) == KEYS, set(metrics) ^ KEYS
            assert all(isinstance(v, Metric) and len(v.values) == 1 for v in metrics.values())
            values = {k: v.values[0] for k, v in metrics.items()}
            assert all(math.isfinite(v) for v in values.values()), (kind, values)
            assert torch.isfinite(loss) and torch.isfinite(grad).all(), kind
            assert values["actor/sat/active"] == 1.0
            assert values["actor/sat/empty_microbatch"] == (1.0 if kind == "padding" else 0.0)
            if kind == "padding":
                assert loss.item() == 0.0 and torch.count_nonzero(grad) == 0
            if kind == "nan":
                assert values["actor/sat/nonfinite_frac"] > 0
                assert grad[rows[0], 0] == 0 and grad[rows[-1], 1] == 0
            else:
                assert values["actor/sat/nonfinite_frac"] == 0.0
            append_to_dict(merged, metrics)  # the worker's per-micro-batch merge
        per_rank[rank] = merged

    # The DP all-gather gives key -> [Metric of rank 0, Metric of rank 1]; verl then calls aggregate_dp.
    assert per_rank[0].keys() == per_rank[1].keys()
    gathered = {k: [per_rank[0][k], per_rank[1][k]] for k in per_rank[0]}
    for key, metric_list in gathered.items():
        value = Metric.aggregate_dp(metric_list)
        arr = np.array([m.values for m in metric_list])  # [dp, micro]
        expect = arr.mean(axis=0).sum() if metric_list[0].aggregation == AggregationType.SUM else arr.mean()
        assert value == pytest.approx(expect), key
        assert math.isfinite(value), key
    assert gathered["actor/pg_loss"][0].aggregation == (AggregationType.SUM if global_info else AggregationType.MEAN)
    assert Metric.aggregate_dp(gathered["actor/sat/empty_microbatch"]) == pytest.approx(1 / 3)

    # Had one rank skipped a key or a micro-batch, verl's merge would have raised: the check is real.
    short = Metric(AggregationType.MEAN, value=1.0)
    with pytest.raises(ValueError, match="same number of values"):
        Metric.aggregate_dp([gathered["actor/sat/gate_rate"][0], short])
