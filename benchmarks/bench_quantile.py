"""Cost and accuracy of SAT's global-scope quantile (methods ``exact`` and ``hist``) over real gloo ranks.

For each world size W (default 1, 2, 8) the script starts W real processes (``torch.multiprocessing``, gloo,
file rendezvous); for each total token count N (default 64K, 1M, 16M, 64M) rank r holds N / W tokens
(rows of 4096, right padding: about 62% active) of |d| with a rank-dependent spread (rank r's scale is
(1 + r / (W - 1)) x the first rank's: ranks see differently stale data, as in a real run) and a 2% heavy tail.

Each rank times, over ``--reps`` repetitions after a warm-up, each behind a barrier:
  * ``global_masked_quantile`` with method exact and hist (the group's time is the slowest rank's);
  * the collective alone: the all-reduce of the 32,768-bin int64 histogram (one for hist, two for exact:
    the second is 2 x 65,536 counts);
  * the micro-scope ``masked_quantile`` of its own shard (what SAT's default scope computes);
  * for N <= 16M, the naive global exact quantile: all_gather every rank's selected values + torch.sort.
The parent then rebuilds every shard, concatenates the selected values and takes the exact quantile with
torch.sort (timed, one process) as the reference; exact must equal it bit for bit, hist must satisfy
0 <= q_hist - q <= 2^-7 q. It also reports how far each rank's micro-scope quantile is from the global one.

On this machine (2 cores) W = 8 processes share 2 cores, so the group times at W = 8 include
oversubscription; the per-rank CPU times are given alongside.

    python benchmarks/bench_quantile.py                         # 64K..64M x W=1,2,8 (a few minutes)
    python benchmarks/bench_quantile.py --quick                 # 64K, 1M x W=1,2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

LEVEL = 0.9
SEQ = 4096
NAIVE_MAX = 1 << 24


def shard(n_total: int, world: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(1, n_total // world)
    rows, cols = (n // SEQ, SEQ) if n >= SEQ else (1, n)
    g = torch.Generator().manual_seed(1_000_003 * world + 7919 * rank + n_total % 1_000_000_007)
    scale = 0.05 * (1.0 + (rank / (world - 1) if world > 1 else 0.0))
    d = torch.randn(rows, cols, generator=g) * scale
    tail = torch.rand(rows, cols, generator=g) < 0.02
    d = torch.where(tail, d * 10.0, d).abs()
    lens = torch.randint(max(1, cols // 4), cols + 1, (rows, 1), generator=g)
    mask = torch.arange(cols).unsqueeze(0) < lens
    return d, mask


def sort_quantile(x: torch.Tensor, level: float) -> torch.Tensor:
    """Reference: the paper's inverse-CDF quantile (Eq. 14, SAT's default) by a full torch.sort."""
    from sat_ext.core.reference import reference_quantile

    return reference_quantile(x, torch.ones_like(x, dtype=torch.bool), level)


def _worker(rank: int, world: int, sizes: list[int], reps: int, init: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    from sat_ext.core import global_masked_quantile, masked_quantile

    out = []

    def measure(fn):
        dist.barrier()
        c0, t0 = time.process_time(), time.perf_counter()
        r = fn()
        t1, c1 = time.perf_counter(), time.process_time()
        return r, t1 - t0, c1 - c0

    for n_total in sizes:
        d, mask = shard(n_total, world, rank)
        jobs = {
            "exact": lambda: global_masked_quantile(d, mask, LEVEL, method="exact"),
            "hist": lambda: global_masked_quantile(d, mask, LEVEL, method="hist"),
            "micro (local)": lambda: masked_quantile(d, mask, LEVEL),
            "collective: 1 all-reduce (hist)": lambda: dist.all_reduce(torch.zeros(1 << 15, dtype=torch.int64)),
            "collective: 2 all-reduces (exact)": lambda: (
                dist.all_reduce(torch.zeros(1 << 15, dtype=torch.int64)),
                dist.all_reduce(torch.zeros(2, 1 << 16, dtype=torch.int64)),
            ),
        }
        if n_total <= NAIVE_MAX:

            def naive():
                x = d[mask]
                sizes_t = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
                dist.all_gather(sizes_t, torch.tensor([x.numel()]))
                m = max(int(s) for s in sizes_t)
                buf = torch.full((m,), float("inf"))
                buf[: x.numel()] = x
                parts = [torch.empty(m) for _ in range(world)]
                dist.all_gather(parts, buf)
                allx = torch.cat([p[: int(s)] for p, s in zip(parts, sizes_t)])
                return sort_quantile(allx, LEVEL)

            jobs["naive: all_gather + sort"] = naive
        for name, fn in jobs.items():
            res, _, _ = measure(fn)  # warm-up
            walls, cpus = [], []
            for _ in range(reps):
                res, w, c = measure(fn)
                walls.append(w)
                cpus.append(c)
            q = float(res) if isinstance(res, torch.Tensor) else None
            out.append(
                {
                    "tokens": n_total,
                    "world": world,
                    "rank": rank,
                    "job": name,
                    "q": q,
                    "q_bits": int(torch.tensor(q, dtype=torch.float32).view(torch.int32)) if q is not None else None,
                    "walls": walls,
                    "cpus": cpus,
                    "local_tokens": d.numel(),
                    "local_active": int(mask.sum()),
                }
            )
        del d, mask
    Path(out_dir, f"w{world}_r{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def run_world(world: int, sizes: list[int], reps: int) -> list[dict]:
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix="sat_bench_q_")
    init = os.path.join(tmp, "pg")
    mp.start_processes(_worker, args=(world, sizes, reps, init, tmp), nprocs=world, join=True, start_method="spawn")
    rows = []
    for r in range(world):
        rows += json.loads(Path(tmp, f"w{world}_r{r}.json").read_text())
    return rows


def reference(n_total: int, world: int) -> tuple[float, float, int, list[float]]:
    """(sort-based exact q, seconds of the sort in one process, selected count, each rank's local q)."""
    from sat_ext.core import masked_quantile

    parts, local = [], []
    for r in range(world):
        d, m = shard(n_total, world, r)
        parts.append(d[m])
        local.append(float(masked_quantile(d, m, LEVEL)))
        del d, m
    x = torch.cat(parts)
    del parts
    t0 = time.perf_counter()
    q = sort_quantile(x, LEVEL)
    return float(q), time.perf_counter() - t0, x.numel(), local


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None, help="total token counts (default 64K,1M,16M,64M)")
    ap.add_argument("--worlds", default=None, help="world sizes (default 1,2,8)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--stem", default="bench_quantile")
    args = ap.parse_args(argv)
    sizes = [C.parse_size(s) for s in (args.sizes or ("64K,1M" if args.quick else "64K,1M,16M,64M")).split(",")]
    worlds = [int(w) for w in (args.worlds or ("1,2" if args.quick else "1,2,8")).split(",")]
    torch.set_num_threads(1)
    raw = []
    for w in worlds:
        t0 = time.time()
        raw += run_world(w, sizes, args.reps)
        print(f"world {w}: {time.time() - t0:.0f} s", flush=True)
    rows = []
    for w in worlds:
        for n in sizes:
            q_ref, t_sort, n_sel, local = reference(n, w)
            ref_bits = int(torch.tensor(q_ref, dtype=torch.float32).view(torch.int32))
            for job in dict.fromkeys(r["job"] for r in raw if r["world"] == w and r["tokens"] == n):
                rs = [r for r in raw if r["world"] == w and r["tokens"] == n and r["job"] == job]
                group = [max(r["walls"][i] for r in rs) for i in range(len(rs[0]["walls"]))]
                row = {
                    "tokens": n,
                    "world": w,
                    "job": job,
                    "selected_total": n_sel,
                    "group_ms_median": C.median(group) * 1e3,
                    "rank_cpu_ms_median": C.median([c for r in rs for c in r["cpus"]]) * 1e3,
                    "sort_reference_ms_1proc": t_sort * 1e3,
                }
                if job in ("exact", "hist", "naive: all_gather + sort"):
                    qs = {r["q_bits"] for r in rs}
                    q = rs[0]["q"]
                    row.update(
                        q=q, q_ref=q_ref, same_on_all_ranks=len(qs) == 1, rel_err=(q - q_ref) / q_ref if q_ref else 0.0
                    )
                    if job == "hist":
                        row["within_2^-7_bound"] = 0.0 <= q - q_ref <= 2.0**-7 * q_ref
                    else:
                        row["bit_equal_to_sort"] = rs[0]["q_bits"] == ref_bits
                if job == "micro (local)":
                    rel = [(lq - q_ref) / q_ref for lq in local]
                    row.update(
                        q_local_min=min(local),
                        q_local_max=max(local),
                        q_ref=q_ref,
                        local_rel_dev_min=min(rel),
                        local_rel_dev_max=max(rel),
                    )
                rows.append(row)
                print(
                    f"N={C.fmt_size(n):>4} W={w} {job:34s} {row['group_ms_median']:9.2f} ms"
                    + (f"  rel_err {row['rel_err']:+.2e}" if "rel_err" in row else ""),
                    flush=True,
                )
    env = C.environment(
        torch.device("cpu"),
        ranks="real gloo processes (torch.multiprocessing spawn, file rendezvous), 1 torch thread each",
        level=LEVEL,
        reps=args.reps,
    )
    out = Path(args.out)
    C.write_csv(out / f"{args.stem}.csv", rows, env)
    render(rows, env, out, args.stem)
    print(f"wrote {out / args.stem}.csv/.md/.png")


def render(rows: list[dict], env: dict, out: Path, stem: str) -> None:
    acc_head = ["tokens", "world", "method", "q", "sort reference q", "relative error", "check", "same on all ranks"]
    acc = []
    for r in rows:
        if r["job"] in ("exact", "hist", "naive: all_gather + sort"):
            check = (
                f"bit-equal: {r['bit_equal_to_sort']}"
                if "bit_equal_to_sort" in r
                else f"0 <= err <= 2^-7: {r['within_2^-7_bound']}"
            )
            acc.append(
                [
                    C.fmt_size(r["tokens"]),
                    r["world"],
                    r["job"],
                    f"{r['q']:.9g}",
                    f"{r['q_ref']:.9g}",
                    f"{r['rel_err']:+.2e}",
                    check,
                    r["same_on_all_ranks"],
                ]
            )
    cost_head = [
        "tokens",
        "world",
        "job",
        "group ms (median, slowest rank)",
        "per-rank CPU ms",
        "1-process torch.sort reference ms",
    ]
    cost = [
        [
            C.fmt_size(r["tokens"]),
            r["world"],
            r["job"],
            f"{r['group_ms_median']:.2f}",
            f"{r['rank_cpu_ms_median']:.2f}",
            f"{r['sort_reference_ms_1proc']:.1f}",
        ]
        for r in rows
    ]
    loc_head = ["tokens", "world", "global q", "rank-local (micro) q min", "max", "rel. deviation min", "max"]
    loc = [
        [
            C.fmt_size(r["tokens"]),
            r["world"],
            f"{r['q_ref']:.6g}",
            f"{r['q_local_min']:.6g}",
            f"{r['q_local_max']:.6g}",
            f"{r['local_rel_dev_min']:+.3f}",
            f"{r['local_rel_dev_max']:+.3f}",
        ]
        for r in rows
        if r["job"] == "micro (local)"
    ]
    C.write_md(
        out / f"{stem}.md",
        "bench_quantile: global-scope quantile, real gloo ranks",
        env,
        [
            ("Accuracy against a torch.sort of every rank's selected values", C.md_table(acc_head, acc)),
            ("Cost", C.md_table(cost_head, cost)),
            ("Micro scope vs global scope (why the global scope exists)", C.md_table(loc_head, loc)),
        ],
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(13, 4.5))
    worlds = sorted({r["world"] for r in rows})
    for job, ls in (("exact", "-"), ("hist", "--"), ("micro (local)", ":"), ("naive: all_gather + sort", "-.")):
        for w in worlds:
            rs = sorted((r for r in rows if r["job"] == job and r["world"] == w), key=lambda r: r["tokens"])
            if rs:
                ax[0].loglog(
                    [r["tokens"] for r in rs],
                    [r["group_ms_median"] for r in rs],
                    ls=ls,
                    marker="o",
                    label=f"{job}, W={w}",
                )
    ax[0].set(title="group time (slowest rank), median", xlabel="total tokens", ylabel="ms")
    ax[0].legend(fontsize=7)
    ax[0].grid(True, which="both", alpha=0.3)
    for w in worlds:
        rs = sorted((r for r in rows if r["job"] == "hist" and r["world"] == w), key=lambda r: r["tokens"])
        ax[1].semilogx([r["tokens"] for r in rs], [r["rel_err"] for r in rs], marker="o", label=f"hist, W={w}")
    ax[1].axhline(2**-7, color="k", ls=":", lw=1, label="bound 2^-7")
    ax[1].set(title="hist: (q_hist - q) / q (exact: 0)", xlabel="total tokens")
    ax[1].legend(fontsize=7)
    ax[1].grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{env['device']} | torch {env['torch']} | {env['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / f"{stem}.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
