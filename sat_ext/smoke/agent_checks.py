"""What the agent smoke runs must show beyond the lag variants' rows (:mod:`sat_ext.smoke.checks`): verl's
``agent-bounded2`` and OpenRLHF's ``agent-bounded1``.

Read from the framework's step log and from the episodes file the agent writes (:mod:`sat_ext.smoke.verl_calc`,
:mod:`sat_ext.smoke.openrlhf_calc`, one JSON line per episode):

- ``tool calls``: every episode made one calculator call per turn but the last, each executed by the tool
  (noted by the tool itself) and each result found among the tokens of the next turn's prompt, and there were at
  least as many episodes as the run trained on;
- ``turns`` (verl): verl's ``training/num_turns/min`` and ``/max`` are the episode's turn count on every step;
- ``token lags``: the per-token lag metrics (:mod:`sat_ext.lag.turns`) on every step, every loss token's lag known
  (``lag/token_unrecorded`` = 0), the turn records agree with the version tags (``lag/turn_tag_mismatch`` = 0),
  and no token lag over the bound or over the step's ``lag/max``; the detail is the run's token-lag histogram;
- ``episodes across versions`` (verl): the episodes whose turns came from more than one weight version (SKIP when
  a sync never landed inside an episode: the run cannot force one);
- ``observations masked`` (OpenRLHF): every episode has tool-observation tokens between its turns, and on every
  step the trained samples' action-mask ones are exactly the tokens the agent generated (``lag/token_unrecorded``
  = 0): no observation token is in the loss or in SAT's quantile;
- ``agent counters`` (OpenRLHF): the agent's own counters, which OpenRLHF logs from its ``extra_logs``: one
  executed call per turn but the last in every sample (``agent/tool_calls``), and the format failures;
- ``one version per batch`` (OpenRLHF): every loss token of a step has the same lag
  (``lag/token_lag_spread/max`` = 0): OpenRLHF generates a batch, all its turns, on one version.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sat_ext.runlog import CheckResult, Record

TURN_HIST = "lag/token_hist/"


def read_episodes(path: Path) -> list[dict]:
    """The episodes file's lines ([] when it is missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_tool_calls(episodes: list[dict], turns: int, trained: int) -> CheckResult:
    """``turns`` assistant turns per episode, ``trained`` episodes trained on."""
    calls = turns - 1
    bad = [
        e
        for e in episodes
        if len(e.get("tool_calls", [])) != calls
        or e.get("observations_seen") != calls
        or len(e.get("turns", [])) != turns
    ]
    executed = sum(len(e.get("tool_calls", [])) for e in episodes)
    seen = sum(e.get("observations_seen", 0) for e in episodes)
    detail = (
        f"{len(episodes)} episodes (want >= {trained}): {executed} calculator calls executed, {seen} results found in "
        f"the next turn's prompt (want {calls} each)"
    )
    if bad:
        detail += f"; {len(bad)} episodes short, e.g. {bad[0]}"
    return CheckResult("tool calls", not bad and len(episodes) >= trained, detail)


def check_num_turns(records: list[Record], want: int) -> CheckResult:
    got = [(r.step, r.values.get("training/num_turns/min"), r.values.get("training/num_turns/max")) for r in records]
    bad = [g for g in got if g[1] != want or g[2] != want]
    return CheckResult(
        "turns",
        not bad,
        f"training/num_turns min = max = {want} on every step"
        if not bad
        else f"training/num_turns (step, min, max) not {want}: {bad[:3]}",
    )


def check_token_lags(records: list[Record], max_lag: int) -> CheckResult:
    bad, hist = [], {}
    for r in records:
        v = r.values
        bins = {k[len(TURN_HIST) :]: n for k, n in v.items() if k.startswith(TURN_HIST)}
        if not bins or not sum(bins.values()) > 0:
            bad.append(f"step {r.step}: no lag/token_hist/*")
            continue
        for name, n in bins.items():
            hist[name] = hist.get(name, 0.0) + n
        top = v.get("lag/token_lag/max", math.nan)
        if not top <= min(max_lag, v.get("lag/max", math.nan)):
            bad.append(f"step {r.step}: lag/token_lag/max {top} over lag/max {v.get('lag/max')} or {max_lag}")
        for key in ("lag/token_unrecorded", "lag/turn_tag_mismatch"):
            if v.get(key) != 0.0:
                bad.append(f"step {r.step}: {key} = {v.get(key)}")
    shown = ", ".join(f"{k}: {n:g}" for k, n in hist.items() if n)
    spread = max((r.values.get("lag/token_lag_spread/max", 0.0) for r in records), default=0.0)
    split = sum(r.values.get("lag/split_turn_tokens", 0.0) for r in records)
    return CheckResult(
        "token lags",
        not bad,
        "; ".join(bad[:3])
        if bad
        else f"loss tokens per lag over the run {{{shown}}}, widest lag range in a batch {spread:g}, {split:g} "
        f"tokens from turns split by a sync; every token's lag recorded, records = the version tags",
    )


def check_spanning(episodes: list[dict]) -> CheckResult:
    spanning = [e for e in episodes if e.get("turns") and min(t[1] for t in e["turns"]) < max(t[2] for t in e["turns"])]
    if not spanning:
        return CheckResult("episodes across versions", None, "no weight sync landed inside an episode in this run")
    return CheckResult(
        "episodes across versions",
        True,
        f"{len(spanning)}/{len(episodes)} episodes' turns came from more than one version, e.g. turns "
        f"[tokens, oldest, newest] {spanning[0]['turns']}",
    )


def check_observations_masked(episodes: list[dict], records: list[Record]) -> CheckResult:
    """Every episode has observation tokens, and no trained sample has a loss token its agent did not generate."""
    unmasked = [e for e in episodes if not e.get("observation_tokens", 0) > 0]
    leaked = [(r.step, r.values.get("lag/token_unrecorded")) for r in records]
    leaked = [(step, v) for step, v in leaked if v != 0.0]
    observed = sum(e.get("observation_tokens", 0) for e in episodes)
    detail = (
        f"{observed} tool-observation tokens between the turns of {len(episodes)} episodes; action-mask ones = the "
        "agent's generated tokens in every trained sample (lag/token_unrecorded 0 on every step)"
    )
    if unmasked:
        detail = f"{len(unmasked)} episodes with no observation tokens, e.g. {unmasked[0]}"
    elif leaked:
        detail = f"loss tokens that the agent did not generate (step, lag/token_unrecorded): {leaked[:3]}"
    return CheckResult("observations masked", bool(episodes) and not unmasked and not leaked, detail)


def check_agent_counters(records: list[Record], calls: int) -> CheckResult:
    """OpenRLHF's per-step means of the agent's ``agent/tool_calls`` (want ``calls``) and
    ``agent/format_failures``."""
    got = [(r.step, r.values.get("agent/tool_calls")) for r in records]
    bad = [g for g in got if g[1] != float(calls)]
    failures = [r.values.get("agent/format_failures", math.nan) for r in records]
    return CheckResult(
        "agent counters",
        not bad and all(math.isfinite(f) for f in failures),
        f"agent/tool_calls {calls} per sample on every step; agent/format_failures per sample "
        f"{', '.join(f'{f:g}' for f in failures)}"
        if not bad
        else f"agent/tool_calls (step, mean) not {calls}: {bad[:3]}",
    )


def check_one_version_per_batch(records: list[Record]) -> CheckResult:
    spread = [(r.step, r.values.get("lag/token_lag_spread/max")) for r in records]
    bad = [s for s in spread if s[1] != 0.0]
    return CheckResult(
        "one version per batch",
        not bad,
        "lag/token_lag_spread/max 0 on every step: every token of a batch has the batch's lag"
        if not bad
        else f"token lags differ inside a batch (step, spread): {bad[:3]}",
    )
