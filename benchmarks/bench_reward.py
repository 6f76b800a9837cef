"""Throughput of the examples' math verifier (``sat_ext.examples.math_reward``) in answers per second.

Responses: synthetic reasoning text (``--chars`` characters of prose and inline LaTeX, default 6,000) ending
in a final answer, drawn round-robin from a set of forms (integers, fractions vs decimals, ``x = 3``,
intervals, radicals, a ``\\boxed{}`` answer, a wrong answer, no answer); each is scored against its reference.

Measured in one run, on the same responses:
  * ``compute_score`` as verl calls it (from ``--threads`` threads at once, default 8, like verl's executor)
    with 1 and 2 worker processes (``SAT_EXT_MATH_WORKERS``; started and warmed on 100 other responses first);
  * ``judge`` inline in this process (no worker, no time limit): the cost of the IPC and the timer;
  * verl's ``math_dapo.compute_score`` (the examples' earlier reward, string equality), the peer.
The verdicts' agreement with the expected ones is reported too (math_dapo misses fractions vs decimals and radicals).

    python benchmarks/bench_reward.py              # ~1 min on 2 cores
    python benchmarks/bench_reward.py --quick
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

# (final answer line, reference, expected verdict)
FORMS = [
    ("Answer: 210", "210", True),
    ("Answer: $\\frac{1}{2}$", "0.5", True),
    ("Answer: 0.75", "\\frac{3}{4}", True),
    ("Answer: x = 3", "3", True),
    ("Answer: [1, 2)", "[1,2)", True),
    ("Answer: 2\\sqrt{2}", "\\sqrt{8}", True),
    ("so the answer is $\\boxed{\\frac{\\sqrt{3}}{2}}$.", "\\frac{\\sqrt3}{2}", True),
    ("Answer: 17", "71", False),
    ("Answer: \\frac{2}{3}", "0.6", False),
    ("I am not sure.", "12", False),
]
_PROSE = (
    "We expand the expression and collect terms, so that $a^2 + 2ab + b^2 = (a+b)^2$ holds; then the "
    "constraint $x_{n+1} = \\frac{x_n}{2} + 1$ gives a fixed point at $x = 2$. "
)


def responses(n: int, chars: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        line, ref, ok = FORMS[i % len(FORMS)]
        body = (_PROSE * (chars // len(_PROSE) + 1))[: max(0, chars - rng.randrange(200))]
        out.append((f"{body}\n\n{line}", ref, ok))
    return out


def rate(fn, items, threads: int) -> tuple[float, list[bool]]:
    start = time.perf_counter()
    if threads > 1:
        with ThreadPoolExecutor(threads) as ex:
            got = list(ex.map(fn, items))
    else:
        got = [fn(it) for it in items]
    return len(items) / (time.perf_counter() - start), got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=600, help="responses per measurement")
    p.add_argument("--chars", type=int, default=6000, help="characters per response")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="--n 100")
    p.add_argument("--out", type=Path, default=C.RESULTS)
    args = p.parse_args(argv)
    n = 100 if args.quick else args.n

    from verl.utils.reward_score import math_dapo

    from sat_ext.examples import math_reward as mr

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # inline judge: "timeout disabled" notes
    items = responses(n, args.chars)
    expected = [ok for _, _, ok in items]
    env = C.environment(torch.device("cpu"), responses=str(n), chars=str(args.chars), threads=str(args.threads))
    rows = []

    def record(case: str, workers: int | str, threads: int, per_s: float, got: list[bool]) -> None:
        agree = sum(g == e for g, e in zip(got, expected)) / len(expected)
        rows.append(
            {"case": case, "workers": workers, "threads": threads, "answers_per_s": per_s, "agree_with_expected": agree}
        )
        print(
            f"{case:>22} workers={workers!s:>2} threads={threads}: {per_s:8.1f} answers/s, agree {agree:.2f}",
            flush=True,
        )

    for workers in (1, 2):
        pool = mr.VerifierPool(workers)
        score = lambda it: pool.verdict(mr.response_tail(it[0]), (it[1],)) == mr.RIGHT  # noqa: E731
        rate(score, responses(10 * len(FORMS), args.chars, seed=1), args.threads)  # start and warm every worker
        per_s, got = rate(score, items, args.threads)
        pool.close()
        record("compute_score (pool)", workers, args.threads, per_s, got)
    rate(lambda it: mr.judge(it[0], (it[1],)), responses(10 * len(FORMS), args.chars, seed=1), 1)  # warm
    per_s, got = rate(lambda it: mr.judge(it[0], (it[1],)), items, 1)
    record("judge inline", "-", 1, per_s, got)
    per_s, got = rate(lambda it: bool(math_dapo.compute_score(it[0], it[1])["acc"]), items, 1)
    record("verl math_dapo (peer)", "-", 1, per_s, got)

    base = next(r["answers_per_s"] for r in rows if r["case"].startswith("verl"))
    for r in rows:
        r["ratio_to_math_dapo"] = r["answers_per_s"] / base
    C.write_csv(args.out / "bench_reward.csv", rows, env)
    table = C.md_table(
        ["case", "worker processes", "calling threads", "answers/s", "x math_dapo", "verdicts as expected"],
        [
            [
                r["case"],
                r["workers"],
                r["threads"],
                f"{r['answers_per_s']:.1f}",
                f"{r['ratio_to_math_dapo']:.3f}",
                f"{r['agree_with_expected']:.2f}",
            ]
            for r in rows
        ],
    )
    C.write_md(
        args.out / "bench_reward.md",
        "Math verifier throughput (sat_ext.examples.math_reward)",
        env,
        [
            ("Answers per second", table),
            (
                "Reading",
                f"{n} responses of ~{args.chars} characters, {len(FORMS)} answer forms round-robin "
                "(3 of them wrong or missing). math_dapo compares normalised strings: it scores the right "
                "fraction-vs-decimal (both ways) and radical forms as wrong (4 of the 10 forms); its "
                "normalisation does handle `x = 3` and spaces in intervals. A pool's rate is bounded by its "
                "worker processes (one core each).",
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
