"""The 2-process gloo worker of test_core_global.py and the scenarios both sides build (deterministically).

Each rank computes every global quantile and every global-scope loss of the scenarios below on its own
share and saves the results; the test process recomputes them on one process from the concatenation.
One spawn runs every check.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from sat_ext.core import SATConfig, global_masked_quantile, sat_gspo_loss, sat_token_loss

LEVELS = (0.9, 0.5, 0.01, 0.99, 1 / 3)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def quantile_scenarios():
    """name -> ([values rank 0, values rank 1], [mask rank 0, mask rank 1]); non-negative finite values."""
    s = {}
    g = _g(1)
    v0, v1 = torch.rand(1000, generator=g) * 2, torch.rand(37, generator=g) * 2
    s["uneven"] = ([v0, v1], [torch.rand(1000, generator=g) < 0.7, torch.ones(37, dtype=torch.bool)])
    v0, v1 = torch.rand(500, generator=g), torch.rand(64, generator=g) * 100
    s["rank1_empty_selection"] = ([v0, v1], [torch.ones(500, dtype=torch.bool), torch.zeros(64, dtype=torch.bool)])
    s["rank0_zero_size"] = ([torch.zeros(0), v0], [torch.zeros(0, dtype=torch.bool), torch.ones(500, dtype=torch.bool)])
    s["both_empty"] = ([v0, v1], [torch.zeros(500, dtype=torch.bool), torch.zeros(64, dtype=torch.bool)])
    vals = torch.tensor([0.1, 0.2, 0.3])
    s["ties"] = (
        [vals[torch.randint(0, 3, (301,), generator=g)], vals[torch.randint(0, 3, (99,), generator=g)]],
        [torch.ones(301, dtype=torch.bool), torch.ones(99, dtype=torch.bool)],
    )
    z0, z1 = torch.zeros(400), torch.zeros(300)
    z0[:7] = torch.rand(7, generator=g)
    z1[-9:] = torch.rand(9, generator=g) * 3
    s["on_policy_zeros"] = ([z0, z1], [torch.ones(400, dtype=torch.bool), torch.ones(300, dtype=torch.bool)])
    p2 = torch.tensor([0.25, 0.5, 1.0, 2.0, 4.0])
    s["powers_of_two"] = (
        [p2[torch.randint(0, 5, (50,), generator=g)], p2[torch.randint(0, 5, (31,), generator=g)]],
        [torch.ones(50, dtype=torch.bool), torch.ones(31, dtype=torch.bool)],
    )
    sc0 = torch.exp(torch.empty(700).uniform_(-60, 3, generator=g))
    sc1 = torch.exp(torch.empty(333).uniform_(-60, 3, generator=g))
    s["many_scales"] = ([sc0, sc1], [torch.rand(700, generator=g) < 0.5, torch.rand(333, generator=g) < 0.5])
    s["single_element"] = ([torch.tensor([0.7]), torch.tensor([3.0])], [torch.tensor([False]), torch.tensor([True])])
    b0, b1 = torch.rand(200_000, generator=g) * 5, torch.rand(150_000, generator=g) ** 4 * 5
    s["large"] = ([b0, b1], [torch.rand(200_000, generator=g) < 0.9, torch.rand(150_000, generator=g) < 0.9])
    m0 = torch.arange(50)[None, :] < torch.tensor([50, 10, 0, 33])[:, None]
    s["2d_padded"] = (
        [torch.rand(4, 50, generator=g), torch.rand(2, 50, generator=g) * 0.1],
        [m0, torch.ones(2, 50, dtype=torch.bool)],
    )
    return s


def weighted_scenarios():
    """name -> ([values], [masks], [counts]) per rank: one score per response counted once per token (Eq. 20)."""
    g = _g(5)
    s = {}
    v0, v1 = torch.rand(40, generator=g), torch.rand(9, generator=g) * 3
    c0, c1 = torch.randint(0, 300, (40,), generator=g), torch.randint(1, 5, (9,), generator=g)
    s["lengths"] = ([v0, v1], [c0 > 0, c1 > 0], [c0, c1])
    vals = torch.tensor([0.0, 0.1, 0.2])
    t0, t1 = vals[torch.randint(0, 3, (30,), generator=g)], vals[torch.randint(0, 3, (12,), generator=g)]
    k0, k1 = torch.randint(1, 64, (30,), generator=g), torch.randint(1, 64, (12,), generator=g)
    s["ties_and_zeros"] = ([t0, t1], [torch.ones(30, dtype=torch.bool), k1 > 30], [k0, k1])
    return s


def _batch(seed, B, T, scale, lens=None):
    g = _g(seed)
    old = -torch.rand(B, T, generator=g) * 4
    lp = old + torch.randn(B, T, generator=g) * scale
    adv = torch.randn(B, T, generator=g)
    if lens is None:
        lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < torch.as_tensor(lens)[:, None]
    return lp, old, adv, mask


def loss_scenarios():
    """name -> (kind, ratio_form, cfg, [batch rank 0, batch rank 1]); every cfg has gate_scope='global'."""
    s = {}
    ex = dict(gate_scope="global", global_method="exact")
    s["token_uneven"] = ("token", None, SATConfig(**ex), [_batch(10, 3, 7, 0.2), _batch(11, 2, 7, 0.3)])
    r1 = _batch(13, 2, 7, 0.3)
    r1 = (r1[0], r1[1], r1[2], torch.zeros_like(r1[3]))
    s["token_rank1_all_padding"] = ("token", None, SATConfig(**ex), [_batch(12, 4, 7, 0.2), r1])
    # rank 1's tokens are all far above rank 0's: every active token of rank 1 is gated, none of rank 0's
    # (41 active tokens: pos = 0.9 * 40 = 36, q = rank 0's largest |d|)
    r1 = _batch(15, 1, 8, 0.0, lens=[4])
    r1 = (r1[1] + torch.tensor([[0.5, -0.6, 0.8, -1.0, 0.0, 0.0, 0.0, 0.0]]), r1[1], r1[2], r1[3])
    s["token_rank1_all_gated"] = (
        "token",
        None,
        SATConfig(**ex, kernel="power", c_min=0.1),
        [_batch(14, 5, 8, 0.01, lens=[8, 8, 8, 8, 5]), r1],
    )
    s["gspo_seq_uneven"] = ("gspo", "token", SATConfig(**ex), [_batch(16, 5, 6, 0.3), _batch(17, 3, 6, 0.2)])
    s["gspo_seqratio_seq"] = (
        "gspo",
        "sequence",
        SATConfig(**ex, dual_clip=None),
        [_batch(18, 4, 6, 0.3), _batch(19, 6, 6, 0.2)],
    )
    s["gspo_linear_uneven"] = (
        "gspo",
        "token",
        SATConfig(**ex, quantile_rule="linear"),
        [_batch(26, 4, 11, 0.3), _batch(27, 2, 11, 0.2)],
    )
    s["gspo_tok_uneven"] = (
        "gspo",
        "token",
        SATConfig(**ex, gspo_gate_level="token", kernel="exp"),
        [_batch(20, 2, 9, 0.3), _batch(21, 3, 9, 0.1)],
    )
    hist = dict(gate_scope="global", global_method="hist")
    s["token_hist"] = ("token", None, SATConfig(**hist), [_batch(22, 3, 7, 0.2), _batch(23, 2, 7, 0.3)])
    # on-policy: more than 90% of the tokens have d == 0 exactly, so q = 0 and SAT must gate nothing
    a, b = _batch(24, 4, 10, 0.0, lens=[10] * 4), _batch(25, 3, 10, 0.0, lens=[10] * 3)
    a[0][0, 3] = a[1][0, 3] + 0.4
    b[0][2, 7] = b[1][2, 7] - 0.3
    s["token_hist_on_policy"] = ("token", None, SATConfig(**hist), [a, b])
    return s


def run_loss(kind, ratio_form, cfg, lp, old, adv, mask):
    lp = lp.clone().requires_grad_(True)
    if kind == "token":
        out = sat_token_loss(lp, old, adv, mask, cfg)
    else:
        out = sat_gspo_loss(lp, old, adv, mask, cfg, ratio_form=ratio_form)
    (g,) = torch.autograd.grad(out.loss_mat.sum(), lp)
    return {
        "lo": out.region.lo,
        "hi": out.region.hi,
        "gated": out.region.gated,
        "q": out.region.q,
        "c": out.region.c,
        "loss": out.loss_mat.detach(),
        "grad": g,
        "metrics": {k: v.clone() for k, v in out.metrics.items()},
    }


def worker(rank: int, world: int, init_file: str, out_prefix: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        res = {"quantile": {}, "loss": {}, "weighted": {}}
        for name, (vals, masks) in quantile_scenarios().items():
            for level in LEVELS:
                for method in ("exact", "hist"):
                    q = global_masked_quantile(vals[rank], masks[rank], level, method=method)
                    res["quantile"][(name, level, method)] = q
        for name, (vals, masks, counts) in weighted_scenarios().items():
            for level in LEVELS:
                for method in ("exact", "hist"):
                    for rule in ("inverse_cdf", "linear"):
                        q = global_masked_quantile(
                            vals[rank], masks[rank], level, method=method, rule=rule, counts=counts[rank]
                        )
                        res["weighted"][(name, level, method, rule)] = q
        for name, (kind, form, cfg, batches) in loss_scenarios().items():
            res["loss"][name] = run_loss(kind, form, cfg, *batches[rank])
        torch.save(res, f"{out_prefix}.{rank}")
    finally:
        dist.destroy_process_group()


def hist_bound_ok(q_hist: float, q_exact: float) -> bool:
    """0 <= q_hist - q_exact <= 2^-7 * q_exact (in exact arithmetic on the float32 results)."""
    diff = q_hist - q_exact
    return 0.0 <= diff <= math.ldexp(q_exact, -7)
