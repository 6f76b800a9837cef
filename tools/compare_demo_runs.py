"""Do two demo outputs agree on the runs they share? Every row of ``runs.csv`` and, where both outputs have one,
every record of ``history.jsonl`` (each step's metrics, the evaluations, the consumed lags, the totals), compared
exactly, except the timing fields (``wall_s``, ``cpu_s``), for each run id found in both. Where the per-step
history differs, the line names each metric that differs, in how many steps, and the largest relative difference
(e.g. ``history: actor/sat/d_pi (55 of 64 steps, max rel 1.3e-06)``): the difference between a change of the
training run and a change of how one diagnostic is summed.

    python tools/compare_demo_runs.py benchmarks/results/demo /tmp/fresh_out   # exit 1 on any difference
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
from pathlib import Path

TIMING = {"wall_s", "cpu_s"}


def _history(folder: Path) -> dict[str, dict]:
    """The history records by run id; none where the output has no history (``--quick`` writes none)."""
    for path, opener in ((folder / "history.jsonl", open), (folder / "history.jsonl.gz", gzip.open)):
        if path.exists():
            with opener(path, "rt") as f:
                return {rec["run"]: rec for rec in map(json.loads, f)}
    return {}


def _runs(folder: Path) -> dict[str, dict]:
    with open(folder / "runs.csv") as f:
        return {row["run"]: row for row in csv.DictReader(f)}


def _strip(x):
    """The record without its timing fields, at every depth."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _relative(a, b) -> float:
    """|a - b| / max(|a|, |b|) for two numbers (0 when both are 0; inf when either is not a number)."""
    if not all(isinstance(v, (int, float)) for v in (a, b)):
        return float("inf")
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else 0.0


def history_diff(kept: list[dict], other: list[dict]) -> str:
    """The per-step metrics that differ between two histories: name (steps differing of steps, max relative)."""
    if len(kept) != len(other):
        return f"history: {len(kept)} vs {len(other)} steps"
    worst: dict[str, list] = {}
    for a, b in zip(kept, other):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                entry = worst.setdefault(key, [0, 0.0])
                entry[0] += 1
                entry[1] = max(entry[1], _relative(a.get(key), b.get(key)))
    return "history: " + ", ".join(
        f"{k} ({n} of {len(kept)} steps, max rel {r:.2g})" for k, (n, r) in sorted(worst.items())
    )


def compare(kept: Path, other: Path) -> list[str]:
    """One line per shared run: 'same' or what differs."""
    hk, ho = _history(kept), _history(other)
    rk, ro = _runs(kept), _runs(other)
    lines = []
    for run in sorted(set(rk) & set(ro)):
        keys = sorted((set(hk.get(run, {})) | set(ho.get(run, {}))) - TIMING) if run in hk and run in ho else []
        diffs = [k for k in keys if _strip(hk[run].get(k)) != _strip(ho[run].get(k))]
        if "history" in diffs:
            diffs[diffs.index("history")] = history_diff(hk[run]["history"], ho[run]["history"])
        diffs += [f"runs.csv:{k}" for k in rk[run] if k not in TIMING and rk[run][k] != ro[run].get(k)]
        lines.append(f"{run}: " + ("same" if not diffs else "DIFFERS in " + ", ".join(diffs)))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kept", type=Path)
    ap.add_argument("other", type=Path)
    args = ap.parse_args(argv)
    lines = compare(args.kept, args.other)
    print("\n".join(lines) if lines else "no run in common")
    same = sum(line.endswith(": same") for line in lines)
    print(f"{same} of {len(lines)} shared runs identical (timing fields excepted)")
    return 0 if lines and same == len(lines) else 1


if __name__ == "__main__":
    sys.exit(main())
