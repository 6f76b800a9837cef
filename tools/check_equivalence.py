"""The working tree's ``sat_ext.core`` against an oracle: the plain-torch reference, or a git revision's core.

* ``--ref reference`` (default): the fast path against :mod:`sat_ext.core.reference` (Eq. 13-20 in plain
  torch) on finite inputs: per-token loss and the gradient of a weighted sum with respect to the log-probs to
  float32 rounding (relative 1e-6), q and the gate set exactly, the trust region's bounds to 1e-6.
* ``--ref REV``: exactly (every value equal; NaN where the other has NaN; the sign of a zero is not compared)
  against ``sat_ext/core`` of git revision REV loaded into a throw-away package: loss matrix and clip mask at
  active tokens, gradient of their loss, ratio, trust region lo/hi/c/gated/q, every metric both cores
  report, and the quantile functions (a guard for performance edits that must not change behaviour; inputs
  also with NaN/Inf).

Over a seeded sample of configurations and inputs: random and adversarial (ties, zeros, empty and
single-token masks, |log-ratio| beyond the 20 clamp), every kernel, quantile rule, c_min, quantile level,
dual clip on/off, gate scope micro/global (a 1-rank gloo group; revision mode) with both global methods,
proxy old/rollout, every SAT-GSPO gate level and ratio form.

    python tools/check_equivalence.py                 # working tree vs the reference
    python tools/check_equivalence.py --ref HEAD      # working tree vs the last commit's core, bit for bit
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parent.parent


def load_ref_core(ref: str, name: str = "sat_ref"):
    """``sat_ext/core`` of git revision ``ref`` imported as the package ``<name>.core``."""
    tmp = Path(tempfile.mkdtemp(prefix="sat_ref_core_"))
    pkg = tmp / name / "core"
    pkg.mkdir(parents=True)
    (tmp / name / "__init__.py").write_text("")
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{ref}:sat_ext/core"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for fname in names:
        if fname.endswith(".py"):
            src = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{ref}:sat_ext/core/{fname}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            (pkg / fname).write_text(src)
    sys.path.insert(0, str(tmp))
    return importlib.import_module(f"{name}.core")


def bits_equal(a, b) -> bool:
    """Equal values (NaN where the other has NaN; -0.0 == 0.0: the sign of a zero loss or gradient is noise)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.is_floating_point:
            return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        return torch.equal(a, b)
    return a == b


def make_inputs(rng: random.Random, kind: str):
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    b, t = rng.choice([(1, 1), (1, 5), (3, 7), (8, 64), (4, 513), (16, 4096)]) if kind != "big" else (256, 4096)
    scale = rng.choice([0.0, 1e-3, 0.05, 0.3, 3.0, 30.0])
    old = -(torch.rand(b, t, generator=g) * 3 + 0.05)
    d = torch.randn(b, t, generator=g) * scale
    if kind == "ties":
        d = torch.round(d * 4) / 4
    lp = old + d
    adv = torch.randn(b, t, generator=g)
    if rng.random() < 0.5:
        adv = adv[:, :1].expand(b, t).contiguous()
    lens = torch.randint(0, t + 1, (b, 1), generator=g)
    mask = torch.arange(t).unsqueeze(0) < lens
    if kind == "empty":
        mask = torch.zeros(b, t, dtype=torch.bool)
    elif kind == "full":
        mask = torch.ones(b, t, dtype=torch.bool)
    elif kind == "single":
        mask = torch.zeros(b, t, dtype=torch.bool)
        mask[rng.randrange(b), rng.randrange(t)] = True
    rollout = old + torch.randn(b, t, generator=g) * 0.05
    if kind in ("nan_pad", "nan_active"):
        pick = ~mask if kind == "nan_pad" else mask
        idx = pick.nonzero()
        if len(idx):
            for _ in range(min(3, len(idx))):
                i, j = idx[rng.randrange(len(idx))].tolist()
                which = rng.choice([lp, old, adv, rollout])
                which[i, j] = rng.choice([float("nan"), float("inf"), -float("inf")])
    return old, lp, adv, mask, rollout


def random_cfg(rng: random.Random, core, global_ok: bool):
    scope = rng.choice(["micro", "global"]) if global_ok else "micro"
    fields = core.SATConfig.__dataclass_fields__
    extra = {"quantile_rule": rng.choice(["inverse_cdf", "linear"])} if "quantile_rule" in fields else {}
    levels = [lvl for lvl in ("broadcast", "sequence", "token") if lvl in core.config.GSPO_GATE_LEVELS]
    return core.SATConfig(
        **extra,
        eps_low=rng.choice([0.2, 0.1, 3e-4, 0.999]),
        eps_high=rng.choice([0.2, 0.28, 4e-4, 0.999]),
        dual_clip=rng.choice([None, 3.0]),
        quantile=rng.choice([0.5, 0.9, 0.9, 0.999, 0.01]),
        gate_scope=scope,
        global_method=rng.choice(["exact", "hist"]),
        kernel=rng.choice(list(core.config.KERNELS)),
        exponent=rng.choice([2.0, 2.0, 1.0, 3.5]),
        c_min=rng.choice([0.0, 0.0, 0.3, 1.0]),
        proxy=rng.choice(["old", "old", "rollout"]),
        gspo_gate_level=rng.choice(levels),
        nonfinite=rng.choice(["mask", "mask", "raise"]),
    )


def run_loss(core, which: str, cfg_dict: dict, inputs, ratio_form: str, w: torch.Tensor):
    cfg = core.SATConfig(**cfg_dict)
    old, lp, adv, mask, rollout = (x.clone() for x in inputs)
    lp = lp.requires_grad_(True)
    try:
        if which == "token":
            out = core.sat_token_loss(lp, old, adv, mask, cfg, rollout_log_prob=rollout)
        else:
            out = core.sat_gspo_loss(lp, old, adv, mask, cfg, rollout_log_prob=rollout, ratio_form=ratio_form)
    except ValueError as e:
        return ("raised", str(e))
    (out.loss_mat * w).sum().backward()
    r = out.region
    return {
        "loss_mat": torch.where(mask, out.loss_mat.detach(), 0.0),
        "grad": lp.grad,
        "ratio": out.ratio.detach(),
        "clipped": out.clipped & mask,  # at padding the framework masks it (the loss is 0 there)
        "lo": r.lo,
        "hi": r.hi,
        "c": r.c,
        "gated": r.gated,
        "q": r.q,
        **{f"m:{k}": v for k, v in out.metrics.items()},
    }


def run_reference(which: str, cfg, inputs, ratio_form: str, w: torch.Tensor):
    """The reference's loss matrix, gradient and gate on the same inputs (micro scope, finite inputs)."""
    from sat_ext.core import reference as R

    old, lp, adv, mask, rollout = (x.clone() for x in inputs)
    lp = lp.requires_grad_(True)
    if which == "token":
        loss = R.reference_token_loss(lp, old, adv, mask, cfg, rollout_log_prob=rollout)
    else:
        loss = R.reference_gspo_loss(lp, old, adv, mask, cfg, rollout_log_prob=rollout, ratio_form=ratio_form)
    (loss * w).sum().backward()
    return {"loss_mat": loss.detach(), "grad": lp.grad}


def close(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None, rel: float = 1e-6) -> bool:
    ok = (a - b).abs() <= rel * (1 + b.abs())
    return bool((ok if mask is None else ok[mask]).all())


def check_reference(rng: random.Random, cases: int) -> tuple[int, list[str]]:
    """The fast path against the reference on finite inputs (micro scope)."""
    import sat_ext.core as new
    from sat_ext.core import reference as R

    failures = []
    finite = ["random", "random", "random", "ties", "empty", "full", "single"]
    for i in range(cases):
        kind = rng.choice(finite)
        inputs = make_inputs(rng, kind)
        cfg = new.SATConfig(**{**random_cfg(rng, new, global_ok=False).to_dict(), "nonfinite": "mask"})
        which, ratio_form = rng.choice(["token", "gspo"]), rng.choice(["token", "sequence"])
        # padding's loss is the framework's to mask: its gradient is compared on active tokens only
        w = torch.rand(inputs[0].shape, generator=torch.Generator().manual_seed(i)) * inputs[3]
        fast = run_loss(new, which, cfg.to_dict(), inputs, ratio_form, w)
        ref = run_reference(which, cfg, inputs, ratio_form, w)
        mask = inputs[3]
        bad = [k for k, m in (("loss_mat", mask), ("grad", None)) if not close(fast[k], ref[k], m)]
        old, lp, _, _, rollout = inputs
        d = torch.clamp(lp - (old if cfg.proxy == "old" else rollout), -20, 20)
        if which == "token" or cfg.gspo_gate_level == "token":
            _, _, gated, q = R.reference_bounds(d, mask, cfg)
            if not (bits_equal(fast["q"], q.float()) and torch.equal(fast["gated"], gated)):
                bad.append("gate")
        if bad:
            failures.append(f"case {i} ({which}, {kind}, shape {tuple(inputs[0].shape)}, {cfg}): {bad}")
    for i in range(200):  # the clip strategy on its own
        old, lp, adv, mask, _ = make_inputs(rng, rng.choice(finite))
        d = torch.clamp(lp - old, -20, 20)
        cfg = new.SATConfig(**random_cfg(rng, new, global_ok=False).to_dict())
        r = new.adaptive_trust_region(d, mask, cfg)
        lo, hi, gated, q = R.reference_bounds(d, mask, cfg)
        if not (bits_equal(r.q, q.float()) and torch.equal(r.gated, gated) and close(r.lo, lo) and close(r.hi, hi)):
            failures.append(f"adaptive_trust_region case {i} ({cfg})")
    return cases + 200, failures


def compare(a, b) -> list[str]:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return [] if a == b else [f"exception differs: {a} vs {b}"]
    return [k for k in a if k in b and not bits_equal(a[k], b[k])]  # the keys both cores report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="reference", help="'reference' (default) or a git revision")
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--big", type=int, default=6, help="extra cases of 1M tokens")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    if args.ref == "reference":
        n, failures = check_reference(rng, args.cases)
        for f in failures[: int(os.environ.get("SAT_EQ_SHOW", "20"))]:
            print("MISMATCH", f)
        print(f"checked {n} cases against the reference: {len(failures)} mismatches")
        return 1 if failures else 0
    ref = load_ref_core(args.ref)
    import sat_ext.core as new

    fd, path = tempfile.mkstemp(prefix="sat_eq_pg_")
    os.close(fd)
    os.unlink(path)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    kinds = ["random", "random", "random", "ties", "empty", "full", "single", "nan_pad", "nan_active"]
    failures, n = [], 0
    for i in range(args.cases):
        kind = rng.choice(kinds)
        inputs = make_inputs(rng, kind)
        cfg = random_cfg(rng, new, global_ok=True)
        which = rng.choice(["token", "gspo"])
        ratio_form = rng.choice(["token", "sequence"])
        w = torch.rand(inputs[0].shape, generator=torch.Generator().manual_seed(i)) * inputs[3]
        a = run_loss(new, which, cfg.to_dict(), inputs, ratio_form, w)
        b = run_loss(ref, which, cfg.to_dict(), inputs, ratio_form, w)
        bad = compare(a, b)
        n += 1
        if bad:
            failures.append(f"case {i} ({which}, {kind}, shape {tuple(inputs[0].shape)}, {cfg}): {bad}")
    # a few micro-batches of 1M tokens (bins with many elements, multi-chunk reductions)
    for i in range(args.big):
        inputs = make_inputs(rng, "big")
        cfg = random_cfg(rng, new, global_ok=True)
        which = ("token", "gspo")[i % 2]
        w = torch.rand(inputs[0].shape, generator=torch.Generator().manual_seed(i)) * inputs[3]
        bad = compare(
            run_loss(new, which, cfg.to_dict(), inputs, "token", w),
            run_loss(ref, which, cfg.to_dict(), inputs, "token", w),
        )
        n += 1
        if bad:
            failures.append(f"big case {i} ({which}, {cfg}): {bad}")
    # the clip strategy on its own, with a threshold given by the caller (none, 0-d, zero)
    for i in range(200):
        old, lp, adv, mask, _ = make_inputs(rng, rng.choice(kinds[:7]))
        d = torch.clamp(lp - old, -20, 20)
        cfg = random_cfg(rng, new, global_ok=False).to_dict()
        qk = rng.choice(["none", "scalar", "zero"])
        q = {"none": None, "scalar": torch.tensor(rng.choice([1e-3, 0.05, 0.3])), "zero": torch.tensor(0.0)}[qk]
        outs = []
        for core in (new, ref):
            r = core.adaptive_trust_region(d, mask, core.SATConfig(**cfg), q=q)
            outs.append(
                {
                    "lo": r.lo,
                    "hi": r.hi,
                    "c": r.c,
                    "gated": r.gated,
                    "q": r.q,
                    **{f"m:{k}": v for k, v in r.diagnostics(d, mask).items()},
                }
            )
        bad = compare(*outs)
        n += 1
        if bad:
            failures.append(f"adaptive_trust_region q={qk} case {i}: {bad}")
    # quantile functions on their own
    for i in range(300):
        g = torch.Generator().manual_seed(10_000 + i)
        size = rng.choice([1, 2, 3, 10, 1000, 65_537, 300_000])
        v = torch.randn(size, generator=g).abs() * rng.choice([1e-40, 1e-30, 1e-3, 1.0, 1e20])
        if rng.random() < 0.3:
            v = torch.round(v * 8) / 8
        if rng.random() < 0.1:
            v.zero_()
        # outside the contract: the local quantile's topk selection must still agree (the radix selection, above
        # TOPK_MAX_NUMEL entries, reads the bit patterns of non-negative floats only)
        negative = size <= 1000 and rng.random() < 0.1
        if negative:
            v = v * torch.where(torch.rand(size, generator=g) < 0.5, -1.0, 1.0)
        shape = (size,) if size % 5 else (5, size // 5)
        v = v.reshape(shape)
        m = (torch.rand(size, generator=g) < rng.choice([0.0, 0.01, 0.5, 1.0])).reshape(shape)
        level = rng.choice([0.01, 0.5, 0.9, 0.999, 0.9999])
        if not bits_equal(new.masked_quantile(v, m, level), ref.masked_quantile(v, m, level)):
            failures.append(f"masked_quantile size={size} level={level} negative={negative}")
        for method in ("exact", "hist"):
            if negative:
                continue
            if not bits_equal(
                new.global_masked_quantile(v, m, level, method=method),
                ref.global_masked_quantile(v, m, level, method=method),
            ):
                failures.append(f"global_masked_quantile {method} size={size} level={level}")
        n += 3
    dist.destroy_process_group()
    for f in failures[: int(os.environ.get("SAT_EQ_SHOW", "20"))]:
        print("MISMATCH", f)
    print(f"checked {n} cases against {args.ref}: {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
