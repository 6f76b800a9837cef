"""Which exact selection the local quantile (Eq. 14) should use at each size: measured inside SAT's loss.

The three selections of :mod:`sat_ext.core.quantile` are ``torch.topk`` of a static size, one ``torch.kthvalue``
at a static rank, and the radix selection on the float32 bit pattern. Timed on their own they mislead (a
selection's temporaries and the allocator's state in the middle of a loss call are part of its cost), so this
script times the whole loss: ``sat`` and ``sat_gspo`` forward+backward through verl's registry on
bench_loss's micro-batches, once with each selection forced, interleaved with the peers (``vanilla``,
``gspo``) in one process, and reports each SAT time over its peer's. SAT-GSPO's broadcast scores repeat each
response's value n_i times, a different input for the selections than token SAT's |d| (the loss takes its
token quantile up to ``losses.GSPO_TOKEN_QUANTILE_MAX`` entries, one score per response above).

Before timing, every selection is checked against ``torch.sort`` (Eq. 14's ceil(0.9 n)-th smallest) on four
distributions of |d| at each size: half-normal on about 62% active tokens, half-normal on every token, the
magnitude of a Cauchy variable clamped at 20, and values rounded to 1/8 (many ties).

    python benchmarks/bench_select.py                  # 2K .. 128K tokens (a few minutes)
"""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import bench_loss as BL  # noqa: E402

from sat_ext.core import losses, quantile  # noqa: E402

LEVEL = 0.9
PACKAGE = (quantile.TOPK_MAX_NUMEL, quantile.KTH_MAX_NUMEL, losses.GSPO_TOKEN_QUANTILE_MAX)
DEFAULT_SIZES = "2K,4K,8K,16K,32K,64K,128K"
SELECTIONS = {  # (TOPK_MAX_NUMEL, KTH_MAX_NUMEL) routing every size to one selection
    "topk": (1 << 62, 1 << 62),
    "kthvalue": (0, 1 << 62),
    "radix": (0, 0),
}
PEERS = {"sat[micro]": "vanilla", "sat_gspo[micro]": "gspo"}


def distributions(n: int, seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(values zeroed off the mask, the number selected) per distribution, n entries each."""
    g = torch.Generator().manual_seed(seed)
    rows = max(1, n // 4096)
    lens = torch.randint(n // rows // 4, n // rows + 1, (rows, 1), generator=g)
    ragged = (torch.arange(n // rows).unsqueeze(0) < lens).reshape(-1)
    half_normal = (0.1 * torch.randn(n, generator=g)).abs()
    cauchy = (torch.randn(n, generator=g) / torch.randn(n, generator=g)).abs().clamp_max(20.0)
    out = {
        "half-normal, ragged": (half_normal, ragged),
        "half-normal, every token": (half_normal, torch.ones(n, dtype=torch.bool)),
        "Cauchy magnitude <= 20, ragged": (cauchy, ragged),
        "rounded to 1/8, ragged": ((half_normal * 80).round() / 8, ragged),
    }
    return {k: (torch.where(m, v, 0.0), m.sum()) for k, (v, m) in out.items()}


def _force(selection: str) -> None:
    quantile.TOPK_MAX_NUMEL, quantile.KTH_MAX_NUMEL = SELECTIONS[selection]
    losses.GSPO_TOKEN_QUANTILE_MAX = 1 << 62  # SAT-GSPO: the token quantile at every size here


def _restore() -> None:
    quantile.TOPK_MAX_NUMEL, quantile.KTH_MAX_NUMEL, losses.GSPO_TOKEN_QUANTILE_MAX = PACKAGE


_quantile = quantile.quantile_of_zeroed


def _quantile_forced(y, n, level, rule="inverse_cdf", topk_max=None):
    """The loss's quantile with its topk bound ignored, so the forced selection applies to SAT-GSPO too."""
    return _quantile(y, n, level, rule)


def check(sizes: list[int]) -> int:
    """Every selection against the sort on every distribution and size; the number of cases (raises on any
    difference)."""
    cases = 0
    try:
        for n in sizes:
            for name, (y, count) in distributions(n).items():
                k = max(math.ceil(Fraction(repr(LEVEL)) * int(count)), 1)
                expected = torch.sort(y).values[n - int(count) + k - 1]
                for selection in SELECTIONS:
                    _force(selection)
                    if not torch.equal(_quantile(y, count, LEVEL), expected):
                        raise AssertionError(f"{selection} at {n} entries ({name}) differs from the sort")
                    cases += 1
    finally:
        _restore()
    return cases


def time_in_loss(sizes: list[int], reps: int) -> list[dict]:
    """SAT's forward+backward time over its peer's with each selection forced, interleaved, per size."""
    cases = [c for c in BL.CASES if c.key in ("vanilla", "gspo", *PEERS)]
    runner = BL.Runner(cases, torch.device("cpu"))
    by_key = {c.key: c for c in cases}
    jobs = [(p, None) for p in PEERS.values()] + [(k, s) for k in PEERS for s in SELECTIONS]
    rows = []
    losses.quantile_of_zeroed = _quantile_forced
    try:
        for n in sizes:
            runner.set_inputs(BL.make_inputs(n, BL.row_length(n), torch.device("cpu")))
            samples = {job: [] for job in jobs}
            for rep in range(reps):
                for key, selection in jobs[rep % len(jobs) :] + jobs[: rep % len(jobs)]:
                    if selection is not None:
                        _force(selection)
                    samples[(key, selection)].append(C.timed(runner.call(by_key[key], True), runner.device))
            med = {job: C.median(ts[2:]) for job, ts in samples.items()}
            for key, peer in PEERS.items():
                for selection in SELECTIONS:
                    row = {"device": "cpu", "loss": key, "peer": peer, "selection": selection, "tokens": n}
                    rows.append({**row, "metric": "time_ratio", "value": med[(key, selection)] / med[(peer, None)]})
    finally:
        losses.quantile_of_zeroed = _quantile
        _restore()
    return rows


def render(rows: list[dict], checked: int, env: dict, out: Path, stem: str) -> None:
    sizes = sorted({r["tokens"] for r in rows})
    get = {(r["loss"], r["selection"], r["tokens"]): r["value"] for r in rows}
    sections = []
    for key, peer in PEERS.items():
        table = []
        for n in sizes:
            t = {s: get[(key, s, n)] for s in SELECTIONS}
            table.append([C.fmt_size(n), *(f"{t[s]:.3f}" for s in SELECTIONS), min(t, key=t.get)])
        sections.append(
            (
                f"{key} / {peer} time (forward+backward), each selection forced",
                C.md_table(["tokens", *SELECTIONS, "fastest"], table),
            )
        )
    sections.append(
        (
            "The package's choice",
            f"`quantile.TOPK_MAX_NUMEL` = {C.fmt_size(PACKAGE[0])}, `quantile.KTH_MAX_NUMEL` = "
            f"{C.fmt_size(PACKAGE[1])} (radix above); SAT-GSPO's broadcast token quantile by topk up to "
            f"`losses.GSPO_TOKEN_QUANTILE_MAX` = {C.fmt_size(PACKAGE[2])}, one score per response above. Every "
            f"selection equals torch.sort's order statistic in all {checked} checked cases (4 distributions x "
            f"{len(sizes)} sizes x 3 selections).",
        )
    )
    C.write_md(out / f"{stem}.md", "bench_select: the local quantile's selection, inside the loss", env, sections)
    C.write_csv(out / f"{stem}.csv", rows, env)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--reps", type=int, default=151)
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--stem", default="bench_select_cpu")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [C.parse_size(s) for s in args.sizes.split(",")]
    env = C.environment(torch.device("cpu"), level=LEVEL)
    checked = check(sizes)
    rows = time_in_loss(sizes, args.reps)
    env["finished"] = C.environment(torch.device("cpu"))["date"]
    render(rows, checked, env, Path(args.out), args.stem)
    print(f"wrote {Path(args.out) / args.stem}.csv/.md")


if __name__ == "__main__":
    main()
