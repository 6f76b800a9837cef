"""Agent RL in verl's own loop, live on this CPU: ``sat-ext smoke verl --variants agent-bounded2``.

verl 0.9.1's multi-turn ``ToolAgentLoop`` (sat_ext's calculator subclass: every turn read as a calculator call), SAT
with the rollout denominator, bounded lag 2, for 4 global steps; the run's own checks (tool calls executed and seen,
8 turns, observations out of the loss, per-token lags within the bound) must all pass. Cost: about 2-3 minutes on a
2-core machine.
"""

from __future__ import annotations

import pytest
from _smoke_live import assert_passed, metrics

pytest.importorskip("verl")
pytest.importorskip("vllm")

FRAMEWORK = "verl"
VARIANTS = ["agent-bounded2"]
STEPS = 4


def test_the_agent_variant_passes_with_tools_called_and_token_lags_logged(smoke):
    assert_passed(smoke, VARIANTS)
    _, summary, out = smoke
    rows = {c["name"]: c["result"] for c in summary["variants"]["agent-bounded2"]["checks"]}
    assert rows["tool calls"] == rows["turns"] == rows["token lags"] == rows["bound"] == "PASS", rows
    steps = [r["data"] for r in metrics(out, "agent-bounded2") if "lag/token_lag/max" in r["data"]]
    assert len(steps) == STEPS and max(d["lag/token_lag/max"] for d in steps) <= 2
    assert all(d["training/num_turns/min"] == 8 for d in steps)
