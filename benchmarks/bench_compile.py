"""Would torch.compile make SAT's fast path faster? Eager against compiled, side by side, same tensors.

``sat_token_loss`` and ``sat_gspo_loss`` (the paper's defaults, radii 0.2 / 0.2), forward + backward of a
token-mean, eager and wrapped in ``torch.compile`` (default inductor backend, ``dynamic=True`` so that new
micro-batch shapes do not recompile); the first compiled call's time (compilation) is reported on its own,
then the median of ``--reps`` calls of each, interleaved. ``torch._dynamo.explain`` on one call reports how
many graphs dynamo splits the loss into and the first reason: the dense path has no data-dependent shape and
no host sync, but it writes into ``out=`` tensors of another shape (resized), which dynamo does not trace.

    python benchmarks/bench_compile.py                 # 2K, 32K and 1M tokens, 1 thread
    python benchmarks/bench_compile.py --sizes 4M
"""

from __future__ import annotations

import argparse
import getpass
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from bench_loss import make_inputs  # noqa: E402

from sat_ext.core import SATConfig, sat_gspo_loss, sat_token_loss  # noqa: E402


def job(fn, cfg: SATConfig, x: dict[str, torch.Tensor]):
    lp0, old, adv, mask = x["lp"], x["old"], x["adv"], x["mask"]
    n = float(mask.sum())

    def run():
        lp = lp0.clone().requires_grad_(True)
        out = fn(lp, old, adv, mask, cfg)
        (torch.where(mask, out.loss_mat, 0.0).sum() / n).backward()

    return run


def inductor_cache() -> str:
    """Where inductor caches compiled code, and whether it was empty when the run began (a warm cache shortens
    the first compiled call)."""
    path = Path(
        os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
    )
    state = "empty" if not path.exists() or not any(path.iterdir()) else "not empty"
    return f"{path} ({state} at the start)"


def split(fn, cfg: SATConfig, x: dict[str, torch.Tensor]) -> tuple[int, str]:
    """(graphs, the first graph break's reason) of one call as dynamo traces it (``torch._dynamo.explain``)."""
    import torch._dynamo

    lp = x["lp"].clone().requires_grad_(True)
    ex = torch._dynamo.explain(fn)(lp, x["old"], x["adv"], x["mask"], cfg)
    first = str(ex.break_reasons[0].reason).splitlines()[0] if ex.break_reasons else "-"
    torch._dynamo.reset()
    return ex.graph_count, first


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2K,32K,1M")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stem", default="bench_compile_cpu")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    env = C.environment(torch.device("cpu"))
    env["command"] = C.command_line(__file__, argv)
    env["inductor_cache"] = inductor_cache()
    rows = []
    for size in args.sizes.split(","):
        n = C.parse_size(size)
        x = make_inputs(n, 4096, torch.device("cpu"))
        for name, fn, cfg in (
            ("sat", sat_token_loss, SATConfig()),
            ("sat_gspo", sat_gspo_loss, SATConfig(dual_clip=None)),
        ):
            eager = job(fn, cfg, x)
            graphs = split(fn, cfg, x)
            compiled = job(torch.compile(fn, dynamic=True), cfg, x)
            t0 = time.perf_counter()
            compiled()
            first = time.perf_counter() - t0
            times = {"eager": [], "compiled": []}
            for i in range(args.reps):
                for label, f in (("eager", eager), ("compiled", compiled))[:: 1 if i % 2 == 0 else -1]:
                    t0 = time.perf_counter()
                    f()
                    times[label].append(time.perf_counter() - t0)
            e, c = statistics.median(times["eager"]) * 1e3, statistics.median(times["compiled"]) * 1e3
            rows.append(
                {
                    "tokens": n,
                    "loss": name,
                    "eager_ms": e,
                    "compiled_ms": c,
                    "compiled_over_eager": c / e,
                    "first_compiled_call_s": first,
                    "graphs": graphs[0],
                    "first_break": graphs[1],
                }
            )
            print(
                f"{size:>5} {name:9s} eager {e:9.2f} ms  compiled {c:9.2f} ms  x{c / e:.3f}"
                f"  (first call {first:.1f} s; {graphs[0]} graphs)",
                flush=True,
            )
    C.write_csv(C.RESULTS / f"{args.stem}.csv", rows, env)
    table = C.md_table(
        ["tokens", "loss", "eager ms", "compiled ms", "compiled / eager", "first compiled call s", "graphs"],
        [
            [
                C.fmt_size(r["tokens"]),
                r["loss"],
                f"{r['eager_ms']:.2f}",
                f"{r['compiled_ms']:.2f}",
                f"{r['compiled_over_eager']:.3f}",
                f"{r['first_compiled_call_s']:.1f}",
                str(r["graphs"]),
            ]
            for r in rows
        ],
    )
    C.write_md(
        C.RESULTS / f"{args.stem}.md",
        "bench_compile: SAT's fast path, eager vs torch.compile",
        env,
        [
            ("Forward + backward (medians)", table),
            (
                "First graph break (torch._dynamo.explain)",
                "\n".join(sorted({f"* {r['loss']}: {r['first_break']}" for r in rows})),
            ),
        ],
    )
    print(f"wrote {C.RESULTS / args.stem}.md")


if __name__ == "__main__":
    main()
