"""Agent RL in OpenRLHF's own loop, live on this CPU: ``sat-ext smoke openrlhf --variants agent-bounded1``.

OpenRLHF 0.11.2's agent path (``--train.agent_func_path`` sat_ext.smoke.openrlhf_calc: its ``MultiTurnAgentExecutor``,
every turn read as a calculator call), the real vLLM CPU engine, SAT against vLLM's rollout log-probs, bounded lag 1,
for 4 global steps; the run's own checks (tool calls executed and seen, the agent's counters, observations out of the
action mask, per-token lags within the bound, one version per batch) must all pass.
"""

from __future__ import annotations

import pytest
from _smoke_live import assert_passed, metrics

pytest.importorskip("openrlhf")
pytest.importorskip("deepspeed")
pytest.importorskip("vllm")

FRAMEWORK = "openrlhf"
VARIANTS = ["agent-bounded1"]
STEPS = 4
ROWS = ("tool calls", "agent counters", "observations masked", "token lags", "one version per batch", "bound")


def test_the_agent_variant_passes_with_tools_called_and_observations_masked(smoke):
    assert_passed(smoke, VARIANTS)
    _, summary, out = smoke
    rows = {c["name"]: c["result"] for c in summary["variants"]["agent-bounded1"]["checks"]}
    assert all(rows[name] == "PASS" for name in ROWS), rows
    steps = [r["data"] for r in metrics(out, "agent-bounded1")]
    assert len(steps) == STEPS and all(d["agent/tool_calls"] == 3.0 for d in steps)
    assert all(d["lag/token_unrecorded"] == 0.0 and d["lag/token_lag/max"] == d["lag/max"] <= 1 for d in steps)
