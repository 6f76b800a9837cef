"""SAT costs no more host-sync points per call than the loss it replaces, through verl's registry.

A host-sync point is a value the host must read back from the device (``.item()``, ``bool(tensor)``,
``.tolist()``...) or an op whose output shape depends on the data (``nonzero``, boolean indexing,
``masked_select``, ``unique``, ``bincount``); on a GPU each one blocks the host until the queued work has run.
They are counted with the profiler and a TorchFunctionMode (``benchmarks/_common.host_syncs``, the counter the
benchmark reports) on CPU tensors: the code path is the same on a GPU. verl's ``vanilla`` and ``gspo`` make 3
(their three ``.item()`` metrics); SAT's fast path makes 1 (its metric vector's ``tolist``) at every size, the
chunked per-token pass above 32K tokens and the radix quantile above 32K entries included.
"""

from __future__ import annotations

import _common as C
import bench_loss as B
import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn

PAIRS = [
    (B.Case("sat", "micro", "token-mean"), B.Case("vanilla", "-", "token-mean")),
    (B.Case("sat_gspo", "micro", "seq-mean-token-mean"), B.Case("gspo", "-", "seq-mean-token-mean")),
]


def _call(case: B.Case, x: dict, cfg):
    def run():
        lp = x["lp"].clone().requires_grad_(True)
        loss, _ = get_policy_loss_fn(case.loss)(
            old_log_prob=x["old"],
            log_prob=lp,
            advantages=x["adv"],
            response_mask=x["mask"],
            loss_agg_mode=case.agg,
            config=cfg,
        )
        loss.backward()

    return run


def test_the_counter_sees_host_syncs():
    """Each kind of sync point the counter knows is counted (else the comparison below could not fail)."""
    x = torch.rand(8)
    assert C.host_syncs(lambda: x.sum().item()) == {"aten::_local_scalar_dense": 1}
    assert C.host_syncs(lambda: bool(x.sum() > 0)) == {"aten::_local_scalar_dense": 1}
    assert C.host_syncs(lambda: x[x > 0.5]) == {"aten::nonzero": 1}
    assert C.host_syncs(lambda: torch.masked_select(x, x > 0.5)) == {"aten::masked_select": 1}
    assert C.host_syncs(x.tolist) == {"Tensor.tolist": 1}
    assert C.host_syncs(lambda: x[torch.tensor(3)]) == {"aten::_local_scalar_dense": 1}  # a 0-d index is read back
    assert C.host_syncs(lambda: x * 2) == {}


@pytest.mark.parametrize("tokens", [2048, 1 << 16], ids=["2K", "64K"])
@pytest.mark.parametrize("sat,peer", PAIRS, ids=["sat-vs-vanilla", "sat_gspo-vs-gspo"])
def test_sat_makes_no_more_host_syncs_than_its_peer(sat, peer, tokens):
    x = B.make_inputs(tokens, min(4096, tokens // 4), torch.device("cpu"))
    counts = {}
    for case in (sat, peer):
        cfg = B.actor_config(case)
        cfg.global_batch_info.update(B.global_batch_info(x))
        _call(case, x, cfg)()  # warm: lazy first-call work is not per-call work
        counts[case.loss] = C.host_syncs(_call(case, x, cfg))
    n_sat, n_peer = sum(counts[sat.loss].values()), sum(counts[peer.loss].values())
    assert n_peer == 3, counts[peer.loss]  # verl's three .item() metrics: the counter sees the peer's syncs
    assert n_sat <= n_peer, f"{sat.loss}: {counts[sat.loss]} vs {peer.loss}: {counts[peer.loss]}"
    assert counts[sat.loss] == {"Tensor.tolist": 1}, counts[sat.loss]  # the metric vector's one copy, nothing else


def test_an_unknown_case_is_named_before_anything_runs():
    assert [c.key for c in B.selected_cases("vanilla,sat[micro]")] == ["vanilla", "sat[micro]"]
    with pytest.raises(SystemExit, match=r"unknown case \['sat:micro'\]"):
        B.selected_cases("vanilla,sat:micro")
