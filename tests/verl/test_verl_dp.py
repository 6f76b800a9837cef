"""Data parallelism: the SAT loss is invariant to how verl splits a mini-batch over DP ranks.

Emulated ranks: the batch is split into two halves, each run through verl's ``ppo_loss`` with dp_size=2 and the
global token / sequence counts the engines attach; then ``(L0 + L1) / 2 == L_full`` and the DDP-averaged gradient
``(g0 + g1) / 2`` equals the full-batch gradient. With gate_scope=micro the gate quantile is per micro-batch,
so the batch is built so that the quantile is the same on each half and on the whole (ties at the quantile,
exact dyadic log-ratios; the test checks that the three thresholds agree, so it cannot pass vacuously).

Real ranks: gate_scope=global on a 2-process gloo group (spawned, tcp://127.0.0.1): each rank's threshold,
bounds, loss and gradient match the single-process full-batch run.
"""

from __future__ import annotations

import socket
import time

import pytest
import torch
import torch.multiprocessing as mp
from _verl_helpers import (
    ACTOR,
    LOSS_AGG_MODES,
    actor_config,
    batch_from_log_ratios,
    compose,
    leaves,
    model_log_probs,
    sat_overrides,
    split_batch,
    tag_rows,
    to_verl_td,
)
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.losses import ppo_loss

from sat_ext.core import adaptive_trust_region
from sat_ext.verl.config import sat_config_for

HALVES = (list(range(0, 4)), list(range(4, 8)))


def tie_batch(seed: int = 0):
    """8 x 6 tokens, 21 + 20 active; |d| = 1/8 everywhere except 3 tail tokens per half, so the 0.8 quantile
    is exactly 1/8 on each half and on the whole. Tails include newly intercepted tokens (d = 11/64 with A > 0:
    exp(d) = 1.19 < 1.2 but SAT's contracted upper bound is 1.175)."""
    g = torch.Generator().manual_seed(seed)
    bs, t = 8, 6
    resp_lens = torch.tensor([6, 5, 6, 4, 6, 6, 3, 5])
    old = -torch.randint(1, 40, (bs, t), generator=g).float() / 8  # dyadic: old + d is exact in float32
    sign = torch.where(torch.rand((bs, t), generator=g) < 0.5, -1.0, 1.0)
    d = sign / 8
    adv = torch.randn((bs, 1), generator=g).expand(bs, t).contiguous()
    for r, k, v in [(0, 1, 11 / 64), (2, 3, -0.75), (3, 0, 11 / 64), (5, 0, 0.625), (6, 2, 11 / 64), (7, 4, -0.5)]:
        d[r, k] = v
        if v == 11 / 64:
            adv[r, k] = abs(adv[r, k]) + 0.5  # an outward update in the new band
    batch = batch_from_log_ratios(old, d, adv, resp_lens, seed=seed)
    tag_rows(batch)
    return batch


def _ppo(actor, b, dp_size, n_tok, n_seq, theta, junk):
    td = to_verl_td(b, dp_size=dp_size, batch_num_tokens=n_tok, global_batch_size=n_seq)
    return ppo_loss(actor, {"log_probs": model_log_probs(td, theta, junk)}, td)


@pytest.mark.parametrize("loss_mode", ["sat", "sat_gspo"])
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
def test_two_emulated_ranks_equal_the_full_batch(agg, loss_mode):
    extra = (f"{ACTOR}loss_agg_mode={agg}",)
    knobs = dict(quantile=0.8) if loss_mode == "sat" else dict(quantile=0.8, gspo_gate_level="token")
    actor = actor_config(loss_mode, extra=extra, **knobs)
    batch = tie_batch()
    n_tok, n_seq = int(batch.padded["response_mask"].sum()), 8
    assert n_tok == 41

    theta, junk = leaves(batch)
    full, full_m = _ppo(actor, batch, 1, n_tok, n_seq, theta, junk)
    full.backward()
    g_full = theta.grad.clone()

    theta, junk = leaves(batch)
    parts = [_ppo(actor, split_batch(batch, rows), 2, n_tok, n_seq, theta, junk) for rows in HALVES]
    (parts[0][0] + parts[1][0]).div(2).backward()  # DDP averages the two ranks' gradients

    qs = [m["actor/sat/threshold_q"].values[0] for m in (full_m, parts[0][1], parts[1][1])]
    assert qs == [0.125, 0.125, 0.125], qs  # the setting where a per-micro-batch quantile does not matter
    assert full_m["actor/sat/gate_rate"].values[0] > 0
    if loss_mode == "sat":
        assert full_m["actor/sat/newly_clipped_frac"].values[0] > 0  # SAT is not PPO on this batch
    torch.testing.assert_close((parts[0][0] + parts[1][0]).detach() / 2, full.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(theta.grad, g_full, rtol=1e-6, atol=1e-8)


def test_micro_scope_quantile_is_per_micro_batch():
    """With gate_scope=micro and a generic batch the halves see different thresholds (so the global scope
    exists for a reason): documents the layout dependence the paper's micro-batch scope has."""
    actor = actor_config("sat", quantile=0.8)
    batch = tie_batch()
    batch.extra["theta0"] = (
        batch.extra["theta0"] + torch.linspace(0, 0.05, 48).reshape(8, 6) * (batch.padded["response_mask"])
    )
    n_tok = int(batch.padded["response_mask"].sum())
    theta, junk = leaves(batch)
    q = [
        _ppo(actor, split_batch(batch, rows), 2, n_tok, 8, theta, junk)[1]["actor/sat/threshold_q"].values[0]
        for rows in HALVES
    ]
    assert q[0] != q[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_global_scope_on_a_real_two_process_gloo_group(tmp_path):
    from _verl_dp_worker import run_rank

    batch = tie_batch(seed=1)
    # A generic batch (no ties): a per-rank quantile would differ from the full-batch one.
    batch.extra["theta0"] = (
        batch.extra["theta0"] + torch.linspace(-0.08, 0.1, 48).reshape(8, 6) * (batch.padded["response_mask"])
    )
    cfgs = {
        m: compose(sat_overrides("sat", quantile=0.8, gate_scope="global", global_method=m)).actor_rollout_ref.actor
        for m in ("exact", "hist")
    }
    ctx = mp.spawn(run_rank, args=(_free_port(), cfgs, batch, HALVES, str(tmp_path)), nprocs=2, join=False)
    deadline = time.monotonic() + 240  # generous: two fresh processes import torch + verl on a shared machine
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the 2-process gloo run did not finish (hung collective?)")
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]

    # Single process, no process group: the global scope is the whole batch (the quantile of every token).
    actor = omega_conf_to_dataclass(cfgs["exact"])
    n_tok = int(batch.padded["response_mask"].sum())
    theta, junk = leaves(batch)
    full, full_m = _ppo(actor, batch, 1, n_tok, 8, theta, junk)
    full.backward()
    mask = batch.padded["response_mask"].bool()
    d = (batch.extra["theta0"] - batch.padded["old_log_probs"]).clamp(-20, 20)
    full_region = adaptive_trust_region(d, mask, sat_config_for(actor, "sat"))
    q_full = full_m["actor/sat/threshold_q"].values[0]
    assert q_full == full_region.q.item()

    ex = [r["exact"] for r in ranks]
    local_q = [adaptive_trust_region(d[h], mask[h], sat_config_for(actor, "sat")).q.item() for h in HALVES]
    assert local_q[0] != local_q[1] and q_full not in local_q, "the batch must make the scope matter"
    for r, h in zip(ex, HALVES):
        assert r["metrics"]["actor/sat/threshold_q"] == [q_full]  # exact method: bit for bit
        assert torch.equal(r["lo"], full_region.lo[h]) and torch.equal(r["hi"], full_region.hi[h])
    torch.testing.assert_close((ex[0]["loss"] + ex[1]["loss"]) / 2, full.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close((ex[0]["grad"] + ex[1]["grad"]) / 2, theta.grad, rtol=1e-6, atol=1e-8)

    hist = [r["hist"] for r in ranks]
    q_hist = [r["metrics"]["actor/sat/threshold_q"][0] for r in hist]
    assert q_hist[0] == q_hist[1]
    assert 0 <= q_hist[0] - q_full <= 2**-7 * q_full

    # The all-padding micro-batch on rank 1: same keys on both ranks, finite zero loss, rank 0's tokens only.
    for name in ("exact", "hist"):
        m0, m1 = ranks[0][name]["metrics2"], ranks[1][name]["metrics2"]
        assert m0.keys() == m1.keys()
        assert m1["actor/sat/empty_microbatch"] == [1.0] and m0["actor/sat/empty_microbatch"] == [0.0]
        assert m0["actor/sat/threshold_q"] == m1["actor/sat/threshold_q"]
        assert ranks[1][name]["loss2"].item() == 0.0 and torch.count_nonzero(ranks[1][name]["grad2"]) == 0
    q0_local = adaptive_trust_region(d[HALVES[0]], mask[HALVES[0]], sat_config_for(actor, "sat")).q.item()
    assert ranks[0]["exact"]["metrics2"]["actor/sat/threshold_q"] == [q0_local]


def test_the_global_scope_looks_for_megatron_once(monkeypatch):
    # a failed import is not cached by Python: looked up on every call it cost 0.1-0.3 ms per global-scope loss
    import builtins

    from sat_ext.verl import loss as verl_loss

    tries = []
    real_import = builtins.__import__

    def counting_import(name, globals=None, *args, **kwargs):
        if name.startswith("megatron") and (globals or {}).get("__name__") == verl_loss.__name__:
            tries.append(name)
        return real_import(name, globals, *args, **kwargs)

    verl_loss._megatron_parallel_state.cache_clear()
    monkeypatch.setattr(builtins, "__import__", counting_import)
    groups = [verl_loss.data_parallel_group() for _ in range(3)]
    assert tries == ["megatron.core"], tries
    if verl_loss._megatron_parallel_state() is None:  # no Megatron here: WORLD (None) on every call, as before
        assert groups == [None] * 3
