"""``python -m sat_ext.check_run LOG``: check a verl run's log for SAT's, the lag schedule's and the evaluation's
signals.

Prints a PASS / WARN / FAIL / SKIP table (:mod:`sat_ext.runlog`) and exits 1 if any check fails, 2 if the log
or the expectation is unusable. What to expect comes from ``--variant`` (an example variant name such as
``sat_grpo_lag8``), by default the log's file name (verl's file logger writes
``<root>/<project_name>/<experiment_name>.jsonl``, and the examples name experiments after their variants);
``--sat/--baseline``, ``--interval`` and ``--prefetch`` override it. The evaluation's documented samples per
problem is the example config's ``val_kwargs.n`` for that variant; the example is ``--example``, by default the
one whose ``trainer.project_name`` is the log's folder name; ``--eval-n`` overrides it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from sat_ext.example_configs import ExampleError, example_for_project, variant_setting
from sat_ext.runlog import (
    ALPHA_TAIL,
    DEFAULT_GATE_RATE_MIN,
    VARIANT_RE,
    Expectation,
    RunLogError,
    check_run,
    format_table,
    read_log,
)

EVAL_N_KEY = "actor_rollout_ref.rollout.val_kwargs.n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sat_ext.check_run", description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="verl's file-logger .jsonl (trainer.logger=[...,file]) or a saved console log")
    p.add_argument("--variant", help="example variant name, e.g. sat_gspo_lag8 (default: the log's file name)")
    sat = p.add_mutually_exclusive_group()
    sat.add_argument("--sat", dest="sat", action="store_true", default=None, help="expect SAT on")
    sat.add_argument("--baseline", dest="sat", action="store_false", help="expect SAT off")
    p.add_argument(
        "--sequence-gate",
        action="store_true",
        default=None,
        help="SAT-GSPO: per-response scores (the gate rate's floor is not checked)",
    )
    p.add_argument("--interval", type=int, help="interval-mode lag: trainer steps per weight broadcast")
    p.add_argument("--prefetch", type=int, default=None, help="interval-mode prefetch (default 1, the examples')")
    p.add_argument(
        "--example",
        help="the example the run is from, e.g. verl_aime_qwen3_30b (default: the one whose "
        "project name is the log's folder)",
    )
    p.add_argument(
        "--eval-n",
        type=int,
        help="expected samples per problem in each evaluation (default: the example "
        "config's val_kwargs.n for the variant)",
    )
    p.add_argument(
        "--gate-rate-min",
        type=float,
        default=DEFAULT_GATE_RATE_MIN,
        help=f"median gate rate below which a token-SAT run warns of ties at q (default {DEFAULT_GATE_RATE_MIN}; "
        f"fails instead where q is not logged; the ceiling is 1 - alpha = {ALPHA_TAIL})",
    )
    return p


def expectation(args: argparse.Namespace) -> Expectation:
    """The Expectation from ``--variant`` (or the file name) and the explicit flags."""
    overrides = {"gate_rate_min": args.gate_rate_min}
    if args.sat is not None:
        overrides["sat"] = args.sat
    if args.sequence_gate:
        overrides["sequence_gate"] = True
    if args.interval is not None:
        if args.interval < 1:
            raise RunLogError(f"--interval must be >= 1, got {args.interval}")
        overrides["interval"] = args.interval
    if args.prefetch is not None:
        if args.prefetch < 0:
            raise RunLogError(f"--prefetch must be >= 0, got {args.prefetch}")
        overrides["prefetch"] = args.prefetch
    name = args.variant or Path(args.log).stem
    eval_n = documented_eval_n(args, name)
    if eval_n is not None:
        overrides["eval_n"] = eval_n
    if args.variant or VARIANT_RE.search(name):
        return Expectation.for_variant(name, **overrides)
    if "sat" not in overrides:
        raise RunLogError(
            f"cannot tell from the file name {Path(args.log).name!r} what the run is: pass --variant "
            "NAME (e.g. sat_grpo_lag8), or --sat / --baseline (and --interval N)"
        )
    return Expectation(**overrides)


def documented_eval_n(args: argparse.Namespace, name: str) -> int | None:
    """``--eval-n``, else the example config's val_kwargs.n for the variant (None when neither is known)."""
    if args.eval_n is not None:
        if args.eval_n < 1:
            raise RunLogError(f"--eval-n must be >= 1, got {args.eval_n}")
        return args.eval_n
    example = args.example or example_for_project(Path(args.log).resolve().parent.name)
    m = VARIANT_RE.search(name)
    if example is None or m is None:
        return None
    try:
        value = variant_setting(example, m["variant"], EVAL_N_KEY)
    except ExampleError as e:
        raise RunLogError(f"--example {example}: {e}") from e
    return None if value is None else int(value)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        exp = expectation(args)
        results = check_run(read_log(args.log), exp)
    except RunLogError as e:
        print(f"check_run: error: {e}", file=sys.stderr)
        return 2
    print(
        f"{args.log}: SAT {'on' if exp.sat else 'off'}, lag interval {exp.interval}, prefetch {exp.prefetch}, "
        f"eval samples per problem {exp.eval_n or 'not documented'}"
    )
    print(format_table(results))
    failed = [r.name for r in results if r.passed is False]
    print(f"FAIL: {', '.join(failed)}" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
