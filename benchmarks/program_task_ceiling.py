"""What the program task's examples allow: the partial credit of a policy that knows the task's generator exactly.

For each held-out problem of ``sat-ext demo --task program`` (the 256 the runs are scored on), every program of
the generator's family that reproduces the four shown examples is enumerated with its prior weight. Two ideal
policies are scored on the problem's hidden tests:

- ``posterior``: samples a program from that posterior (a calibrated policy at temperature 1);
- ``map``: writes the single most probable program (a sharp policy).

The gap between the warm start's reward and these figures is the room RL has. CPU only, a few seconds::

    python benchmarks/program_task_ceiling.py [--n 256]
"""

from __future__ import annotations

import argparse
from itertools import product

import torch

from sat_ext.demo.tasks.prog import INPUTS
from sat_ext.demo.tasks.program import CONDITIONS, PROBES, Arm, ProgramProblem, ProgramTask
from sat_ext.demo.warm import eval_problems


def arm_priors(w: int) -> list[tuple[Arm, float]]:
    """Every arm on input ``w`` with its probability given its kind (affine: k uniform, c = 0 at 1/10 and each
    signed nonzero c at 1/20; loop: k and c uniform)."""
    ks, cs = range(1, 10), range(-9, 10)
    affine = [(Arm(False, w, k, c), 1 / 9 * (1 / 10 if c == 0 else 1 / 20)) for k in ks for c in cs]
    loop = [(Arm(True, w, k, c), 1 / 90) for k in range(1, 10) for c in range(10)]
    return affine + loop


def posterior(problem: ProgramProblem, loop_prob: float) -> list[tuple[float, int, Arm, Arm]]:
    """(weight, condition index, then-arm, else-arm) of every family program that reproduces the examples."""
    out = []
    for ci, (u, v) in enumerate(CONDITIONS):
        iu, iv = INPUTS.index(u), INPUTS.index(v)
        on = [j for j, p in enumerate(PROBES) if p[iu] < p[iv]]
        off = [j for j in range(len(PROBES)) if j not in on]
        fits = lambda arm, js: all(arm.value(PROBES[j]) == problem.examples[j] for j in js)  # noqa: E731
        then = [(a, p) for a, p in arm_priors(iu) if fits(a, on)]
        other = [(b, q) for b, q in arm_priors(iv) if fits(b, off)]
        for (a, p), (b, q) in product(then, other):
            if a.loop and b.loop:
                continue
            kind = (1 - loop_prob) if not (a.loop or b.loop) else loop_prob / 2
            out.append((p * q * kind / len(CONDITIONS), ci, a, b))
    return out


def credit(problem: ProgramProblem, ci: int, a: Arm, b: Arm) -> float:
    iu, iv = (INPUTS.index(s) for s in CONDITIONS[ci])
    got = [a.value(t) if t[iu] < t[iv] else b.value(t) for t in problem.tests]
    return sum(g == e for g, e in zip(got, problem.expected)) / len(problem.expected)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="held-out problems (the runs' evaluation set)")
    args = ap.parse_args()
    task = ProgramTask()
    _, problems = eval_problems(task, args.n)
    sampled, sharp, sizes = 0.0, 0.0, []
    for p in problems:
        post = posterior(p, task.loop_prob)
        total = sum(w for w, *_ in post)
        sampled += sum(w * credit(p, ci, a, b) for w, ci, a, b in post) / total
        sharp += credit(p, *max(post, key=lambda r: r[0])[1:])
        sizes.append(len(post))
    n = len(problems)
    print(f"program task, {n} held-out problems: posterior sample {sampled / n:.3f}, MAP {sharp / n:.3f}")
    print(f"consistent programs per problem: median {sorted(sizes)[n // 2]}, max {max(sizes)}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
