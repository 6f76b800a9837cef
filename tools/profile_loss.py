"""torch.profiler breakdown of one loss call (forward+backward) per case, through verl's registry.

Writes ``results/<stem>.md``: for each case the number of ATen ops one call dispatches, how many torch calls it
makes from Python (functions and tensor methods, through a TorchFunctionMode) and which function made them, the
aten ops by self CPU time (the forward's and the backward's ops together), averaged over ``--reps`` calls, and
the Python-level split (cProfile) of SAT's call.

    python tools/profile_loss.py --size 4M --cases vanilla,sat[micro]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _common as C  # noqa: E402
import bench_loss as B  # noqa: E402


class _OpCount(TorchDispatchMode):
    """Counts the ATen ops one call dispatches below autograd (forward, backward, the metrics' copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


_OWN_CODE = ("/sat_ext/", "/verl/", "/benchmarks/")


def _caller() -> str:
    """The innermost frame that made the current torch call from a file under a ``sat_ext/``, ``verl/`` or
    ``benchmarks/`` folder (torch's, the standard library's and this tool's frames are skipped), as
    ``path:function`` with the path from the folder named last in it (so a checkout's own folder name does not
    count), or ``other``."""
    f = sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename.replace("\\", "/")
        root = max(_OWN_CODE, key=path.rfind)
        if root in path:
            return f"{root.strip('/')}/{path.rsplit(root, 1)[1]}:{f.f_code.co_name}"
        f = f.f_back
    return "other"


class _PythonCalls(TorchFunctionMode):
    """Counts the torch functions and tensor methods one call makes from Python (the loss's code, verl's, and
    ``backward()``; not the ops autograd's engine dispatches), attribute reads such as ``.shape`` included, and
    which function made each (:func:`_caller`)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.by_caller: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        self.by_caller[_caller()] += 1
        return func(*args, **(kwargs or {}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4M")
    ap.add_argument("--cases", default="vanilla,sat[micro],gspo,sat_gspo[micro]")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=18)
    ap.add_argument("--stem", default="profile_loss_cpu")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    B.init_one_rank_group(device)
    wanted = args.cases.split(",")
    cases = [c for c in B.CASES if c.key in wanted]
    runner = B.Runner(cases, device)
    n = C.parse_size(args.size)
    runner.set_inputs(B.make_inputs(n, B.row_length(n), device))  # bench_loss's micro-batch of n tokens
    sections = []
    for c in cases:
        runner.call(c, True)()
        with _OpCount() as ops:
            runner.call(c, True)()
        call = runner.call(c, True)
        with _PythonCalls() as py:
            call()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.reps):
                runner.call(c, True)()
        ka = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in ka) / args.reps / 1e3
        top = sorted(ka, key=lambda e: -e.self_cpu_time_total)[: args.rows]
        body = C.md_table(
            ["op", "calls / call", "self CPU ms / call", "share"],
            [
                [
                    e.key,
                    f"{e.count / args.reps:.0f}",
                    f"{e.self_cpu_time_total / args.reps / 1e3:.2f}",
                    f"{e.self_cpu_time_total / args.reps / 1e3 / total:.1%}",
                ]
                for e in top
            ],
        )
        title = f"{c.key}: {total:.2f} ms self CPU, {ops.n} ATen ops, {py.n} torch calls from Python per fwd+bwd"
        sections.append((title, body))
        sections.append(
            (
                f"{c.key}: torch calls from Python by the function that made them",
                C.md_table(["function", "torch calls / call"], [[k, str(v)] for k, v in py.by_caller.most_common()]),
            )
        )
        if c.loss.startswith("sat"):
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(args.reps):
                runner.call(c, True)()
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(r"sat_ext|backward|agg_loss", 14)
            lines = [ln for ln in s.getvalue().splitlines() if ln.strip()][-16:]
            sections.append(
                (f"{c.key}: Python-level split (cProfile, {args.reps} calls)", "```\n" + "\n".join(lines) + "\n```")
            )
        print(title, flush=True)
    env = C.environment(device, tokens=n)
    C.write_md(C.RESULTS / f"{args.stem}.md", f"profile_loss at {args.size} tokens", env, sections)
    print(f"wrote {C.RESULTS / args.stem}.md")


if __name__ == "__main__":
    main()
