"""Before/after timing of a core edit: the working tree's ``sat_ext.core`` against the core of a git revision.

Both cores run in one process on the same tensors, interleaved (A B B A ...), forward and forward+backward of
``sat_token_loss`` / ``sat_gspo_loss`` followed by a token-mean aggregation, and of the two quantiles on their
own; the table reports medians and the new/old ratio. The equality of the outputs is checked separately by
``tools/check_equivalence.py`` (bit for bit).

    python tools/ab_core.py --ref <rev> --sizes 1M,4M [--stem ab_core_<name>]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _common as C  # noqa: E402
from bench_loss import make_inputs  # noqa: E402
from check_equivalence import load_ref_core  # noqa: E402


def inputs(n: int, seq_len: int = 4096, seed: int = 0):
    """bench_loss's rollout-like micro-batch as (old, lp, adv, mask)."""
    x = make_inputs(n, seq_len, torch.device("cpu"), seed)
    return x["old"], x["lp"], x["adv"], x["mask"]


def job(core, what: str, scope: str, x, backward: bool):
    old, lp0, adv, mask = x
    n_tok = float(mask.sum())
    if what in ("sat", "sat_gspo"):
        cfg = core.SATConfig(gate_scope=scope, dual_clip=3.0 if what == "sat" else None)
        fn = core.sat_token_loss if what == "sat" else core.sat_gspo_loss
        lp = lp0.clone().requires_grad_(backward)

        def run():
            out = fn(lp, old, adv, mask, cfg)
            torch.stack([out.metrics[k].float() for k in core.METRIC_KEYS]).tolist()
            loss = (out.loss_mat * mask).sum() / n_tok
            if backward:
                loss.backward()

        return run
    absd = (lp0 - old).abs()
    if what == "quantile":
        return lambda: core.masked_quantile(absd, mask, 0.9)
    if what.startswith("global_"):
        return lambda: core.global_masked_quantile(absd, mask, 0.9, method=what[7:])
    raise ValueError(what)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", required=True, help="the 'old' core: a git revision")
    ap.add_argument("--new", default="worktree", help="the 'new' core: 'worktree' (default) or a git revision")
    ap.add_argument("--sizes", default="1M,4M")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", default="sat:micro,sat:global,sat_gspo:micro,quantile:-,global_exact:-")
    ap.add_argument("--memory", action="store_true", help="also the torch CPU-allocator peak of each job")
    ap.add_argument("--stem", default=None, help="write results/<stem>.csv/.md (default: print only)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ref = load_ref_core(args.ref)
    if args.new == "worktree":
        import sat_ext.core as new
    else:
        new = load_ref_core(args.new, name="sat_new")

    fd, path = tempfile.mkstemp(prefix="sat_ab_pg_")
    os.close(fd)
    os.unlink(path)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    jobs = [tuple(j.split(":")) for j in args.jobs.split(",")]
    rows = []
    for n in [C.parse_size(s) for s in args.sizes.split(",")]:
        x = inputs(n)
        for what, scope in jobs:
            modes = (False, True) if what.startswith("sat") else (False,)
            for backward in modes:
                ts = {"old": [], "new": []}
                cs = {"old": [], "new": []}
                for rep in range(args.reps + 1):
                    for tag in ("old", "new") if rep % 2 == 0 else ("new", "old"):
                        core = ref if tag == "old" else new
                        t, c = C.timed2(job(core, what, scope, x, backward), torch.device("cpu"))
                        if rep:  # repetition 0 is the warm-up
                            ts[tag].append(t)
                            cs[tag].append(c)
                mo, mn = C.median(ts["old"]), C.median(ts["new"])
                co, cn = C.median(cs["old"]), C.median(cs["new"])
                row = {
                    "tokens": n,
                    "job": what,
                    "scope": scope,
                    "mode": "fwd+bwd" if backward else "fwd",
                    "old_ms": mo * 1e3,
                    "new_ms": mn * 1e3,
                    "new_over_old": mn / mo,
                    "paired_ratio_median": C.median([b / a for a, b in zip(ts["old"], ts["new"])]),
                    "old_min_ms": min(ts["old"]) * 1e3,
                    "new_min_ms": min(ts["new"]) * 1e3,
                    "min_ratio": min(ts["new"]) / min(ts["old"]),
                    "old_cpu_ms": co * 1e3,
                    "new_cpu_ms": cn * 1e3,
                    "cpu_ratio": cn / co,
                }
                if args.memory:
                    for tag, core in (("old", ref), ("new", new)):
                        row[f"{tag}_peak_mib"] = (
                            C.torch_alloc_peak_bytes(job(core, what, scope, x, backward))[0] / 2**20
                        )
                    row["peak_ratio"] = (
                        row["new_peak_mib"] / row["old_peak_mib"] if row["old_peak_mib"] else float("nan")
                    )
                rows.append(row)
                print(
                    f"{C.fmt_size(n):>4} {what:13s} {scope:6s} {row['mode']:8s} wall old {mo * 1e3:8.2f} new "
                    f"{mn * 1e3:8.2f} x{mn / mo:.3f} (min x{row['min_ratio']:.3f}) | cpu old {co * 1e3:8.2f} "
                    f"new {cn * 1e3:8.2f} x{cn / co:.3f}",
                    flush=True,
                )
    dist.destroy_process_group()
    if args.stem:
        env = C.environment(torch.device("cpu"), old_core=args.ref, new_core=args.new)
        C.write_csv(C.RESULTS / f"{args.stem}.csv", rows, env)
        head = [
            "tokens",
            "job",
            "scope",
            "mode",
            "old ms",
            "new ms",
            "new/old",
            "paired",
            "min new/min old",
            "old CPU ms",
            "new CPU ms",
            "CPU new/old",
        ] + (["old peak MiB", "new peak MiB", "peak new/old"] if args.memory else [])
        body = [
            [
                C.fmt_size(r["tokens"]),
                r["job"],
                r["scope"],
                r["mode"],
                f"{r['old_ms']:.2f}",
                f"{r['new_ms']:.2f}",
                f"{r['new_over_old']:.3f}",
                f"{r['paired_ratio_median']:.3f}",
                f"{r['min_ratio']:.3f}",
                f"{r['old_cpu_ms']:.2f}",
                f"{r['new_cpu_ms']:.2f}",
                f"{r['cpu_ratio']:.3f}",
            ]
            + (
                [f"{r['old_peak_mib']:.1f}", f"{r['new_peak_mib']:.1f}", f"{r['peak_ratio']:.3f}"]
                if args.memory
                else []
            )
            for r in rows
        ]
        C.write_md(
            C.RESULTS / f"{args.stem}.md",
            f"ab_core: core {args.new} vs core {args.ref}",
            env,
            [("Medians (interleaved, same process)", C.md_table(head, body))],
        )


if __name__ == "__main__":
    main()
