"""One live ``sat-ext smoke <framework>`` invocation for the tests/smoke live tests, as a user runs it, and its
outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_smoke(framework: str, variants: list[str], steps: int, out: Path):
    """``python -m sat_ext.cli smoke <framework> --variants ... --steps ... --out out --device cpu``: (the
    finished process, the summary or None)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sat_ext.cli",
            "smoke",
            framework,
            "--variants",
            ",".join(variants),
            "--steps",
            str(steps),
            "--out",
            str(out),
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=2400,
    )
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    return proc, summary


def metrics(out: Path, variant: str) -> list[dict]:
    """The variant's ``metrics.jsonl`` lines."""
    return [json.loads(line) for line in (out / variant / "metrics.jsonl").read_text().splitlines() if line.strip()]


def assert_passed(smoke, variants: list[str]) -> None:
    """Exit 0, every variant passed with no FAIL row, exit and SAT active rows PASS, a console log each
    (``smoke``: the ``smoke`` fixture's (process, summary, out folder))."""
    proc, summary, out = smoke
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert summary["passed"] is True and list(summary["variants"]) == variants
    for variant in summary["variants"]:
        assert (out / variant / "console.log").stat().st_size > 0
        rows = {c["name"]: c["result"] for c in summary["variants"][variant]["checks"]}
        assert "FAIL" not in rows.values() and rows["exit"] == rows["sat active"] == "PASS"
