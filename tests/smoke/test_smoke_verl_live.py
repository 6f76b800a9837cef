"""verl's own training loop with sat_ext inside it, live on this CPU: ``sat-ext smoke verl`` as a user runs it.

One invocation of the real command runs ``interval2`` (the paper's batch-wise lag, checkpoint denominator) and
``sync-sat`` (verl's plain ``main_ppo`` with the README's bypass-mode setting) for 4 global steps each; the
other variants are kept runs (benchmarks/results/smoke/). Cost: about 5-6 minutes on a 2-core machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("verl")
pytest.importorskip("vllm")

STEPS = 4


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    proc = subprocess.run([sys.executable, "-m", "sat_ext.cli", "smoke", "verl", "--variants", "interval2,sync-sat",
                           "--steps", str(STEPS), "--out", str(out), "--device", "cpu"],
                          capture_output=True, text=True, timeout=2400)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    return proc, summary, out


def _records(out, variant):
    return [json.loads(line) for line in (out / variant / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_the_smoke_command_passes_and_writes_its_outputs(smoke):
    proc, summary, out = smoke
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert summary["passed"] is True and list(summary["variants"]) == ["interval2", "sync-sat"]
    for variant in summary["variants"]:
        assert (out / variant / "console.log").stat().st_size > 0
        rows = {c["name"]: c["result"] for c in summary["variants"][variant]["checks"]}
        assert "FAIL" not in rows.values() and rows["exit"] == rows["sat active"] == "PASS"


def test_interval2_trains_lags_1_and_2_on_restored_generating_weights(smoke):
    _, _, out = smoke
    records = [r["data"] for r in _records(out, "interval2") if any(k.startswith("actor/") for k in r["data"])]
    assert len(records) == STEPS
    for step, data in enumerate(records, 1):
        assert data["actor/sat/active"] == 1.0
        assert data["lag/off_schedule"] == 0.0 and data["lag/kept_weights_identical"] == 0.0
        if step > 1:  # after the first window: every batch 1 or 2 optimizer steps old, scored on kept weights
            assert (data["lag/steps/min"], data["lag/steps/max"]) == (1.0, 2.0)
            assert data["lag/kept_weights_restored"] == 1.0 and data["actor/sat/d_pi"] > 0.0
            assert 0.0 < data["actor/sat/gate_rate"] <= 0.1


def test_sync_sat_runs_through_verls_own_entry_point(smoke):
    _, _, out = smoke
    console = (out / "sync-sat" / "console.log").read_text()
    assert console.splitlines()[0].split()[2:4] == ["-m", "verl.trainer.main_ppo"]
    records = [r["data"] for r in _records(out, "sync-sat") if any(k.startswith("actor/") for k in r["data"])]
    assert [d["actor/sat/active"] for d in records] == [1.0] * STEPS
