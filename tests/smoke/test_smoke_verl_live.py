"""verl's own training loop with sat_ext inside it, live on this CPU: ``sat-ext smoke verl`` as a user runs it.

One invocation of the real command runs ``interval2`` (the paper's batch-wise lag, checkpoint denominator) and
``sync-sat`` (verl's plain ``main_ppo`` with the README's bypass-mode setting) for 4 global steps each; the
other variants are kept runs (benchmarks/results/smoke/). Cost: about 5-6 minutes on a 2-core machine.
"""

from __future__ import annotations

import pytest
from _smoke_live import assert_passed, metrics

pytest.importorskip("verl")
pytest.importorskip("vllm")

FRAMEWORK = "verl"
VARIANTS = ["interval2", "sync-sat"]
STEPS = 4


def test_the_smoke_command_passes_and_writes_its_outputs(smoke):
    assert_passed(smoke, VARIANTS)


def test_interval2_trains_lags_1_and_2_on_restored_generating_weights(smoke):
    _, _, out = smoke
    records = [r["data"] for r in metrics(out, "interval2") if any(k.startswith("actor/") for k in r["data"])]
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
    records = [r["data"] for r in metrics(out, "sync-sat") if any(k.startswith("actor/") for k in r["data"])]
    assert [d["actor/sat/active"] for d in records] == [1.0] * STEPS
