"""verl's own training loop with sat_ext inside it, live on this CPU: ``sat-ext smoke verl`` as a user runs it.

One invocation of the real command runs ``sync-sat`` (verl's plain ``main_ppo`` with docs/verl.md's bypass-mode
setting) for 4 global steps. The lag trainer with the paper's batch-wise lag and the checkpoint denominator runs in
CI through ``sat-ext preflight`` on the shipped R3 lag-8 example (tests/preflight/test_preflight_live.py); the
other smoke variants are kept runs (benchmarks/results/smoke/). Cost: about 2-3 minutes on a 2-core machine.
"""

from __future__ import annotations

import pytest
from _smoke_live import assert_passed, metrics

pytest.importorskip("verl")
pytest.importorskip("vllm")

FRAMEWORK = "verl"
VARIANTS = ["sync-sat"]
STEPS = 4


def test_the_smoke_command_passes_and_writes_its_outputs(smoke):
    assert_passed(smoke, VARIANTS)


def test_sync_sat_runs_through_verls_own_entry_point(smoke):
    _, _, out = smoke
    console = (out / "sync-sat" / "console.log").read_text()
    assert console.splitlines()[0].split()[2:4] == ["-m", "verl.trainer.main_ppo"]
    records = [r["data"] for r in metrics(out, "sync-sat") if any(k.startswith("actor/") for k in r["data"])]
    assert [d["actor/sat/active"] for d in records] == [1.0] * STEPS
    # the run-time signal for an inert SAT (docs/sat.md, "When SAT is inert"): at lag 0 q is far under the radius
    assert [d["actor/sat/inert_frac"] for d in records] == [0.0] * STEPS
