"""What a smoke run must show, as PASS / FAIL / SKIP rows (:class:`sat_ext.runlog.CheckResult`).

The run-log checker's rows (:func:`sat_ext.runlog.check_run`: SAT active, gate rate, d_pi, finite losses, the
interval schedule) plus what only a live loop can show:

- ``exit``: the command exited 0 within its time limit; ``steps``: one training record per global step 1..N;
- ``weight sync``: where verl logs ``training/rollout_probs_diff_mean`` (the trainer's old log-prob against the
  engine's, on what should be the same weights), it is at most :data:`SYNC_TOLERANCE`: weights that never
  reached the engine would show the policy's drift instead (OpenRLHF's synchronous runs: ``sat_d_pi``, the
  trainer's log-prob against the engine's at lag 0);
- ``kept weights`` (checkpoint denominator): every batch of a steady-state step was scored on kept weights
  restored from CPU (``lag/kept_weights_restored`` = 1) that differ from the live ones
  (``lag/kept_weights_identical`` = 0), and, for SAT's losses, ``actor/sat/d_pi`` > 0 on every such step;
- ``bound`` (bounded mode): ``lag/max`` <= max_lag on every step;
- ``drops``: bounded ``wait`` drops nothing; a run with a forced straggler counts at least one drop
  (``lag/dropped_total``) and at least one failed rollout group (verl's ``training/rollout_failure/evicted_samples``);
- ``kept weights in files`` (``trainer.v1.sat_ext.kept_weights_dir``): the kept versions the run ended with are
  files there (``sat_ext_v<k>.rank<r>.pt``), so the restores above read them from disk;
- ``tags`` (OpenRLHF, interval mode): OpenRLHF's own per-step mean of the samples' version tags
  (``policy_version``) is the version the schedule assigns the step's batch, and every sample of the step was
  counted (``lag/consumed`` = ``rollout/num_samples``).
"""

from __future__ import annotations

import math
from pathlib import Path

from sat_ext.lag.schedule import scheduled_version
from sat_ext.runlog import CheckResult, Record

SYNC_TOLERANCE = 0.01
VERL_SYNC_KEY = "training/rollout_probs_diff_mean"
VERL_FAILED_KEY = "training/rollout_failure/evicted_samples"


def check_exit(returncode: int | None, seconds: float, timeout_s: float) -> CheckResult:
    if returncode is None:
        return CheckResult("exit", False, f"killed at the {timeout_s:.0f} s limit")
    return CheckResult("exit", returncode == 0, f"exit code {returncode} after {seconds:.0f} s")


def check_steps(records: list[Record], steps: int) -> CheckResult:
    got = [r.step for r in records]
    return CheckResult("steps", got == list(range(1, steps + 1)), f"training steps logged {got}, want 1..{steps}")


def check_weight_sync(records: list[Record], key: str = VERL_SYNC_KEY) -> CheckResult:
    values = [(r.step, r.values[key]) for r in records if key in r.values]
    if not values:
        return CheckResult("weight sync", None, f"{key} not logged (bypass mode: the denominator is the engine's)")
    bad = [(s, v) for s, v in values if not v <= SYNC_TOLERANCE]
    worst = max(v for _, v in values)
    return CheckResult(
        "weight sync",
        not bad,
        f"{key} <= {SYNC_TOLERANCE} on {len(values) - len(bad)}/{len(values)} "
        f"steps (max {worst:.2g})" + (f"; over on {bad[:3]}" if bad else ""),
    )


def check_kept_weights(records: list[Record], sat: bool = True) -> CheckResult:
    """``sat``: the run's loss reports ``actor/sat/d_pi``, required > 0 on lagged steps (a baseline's ratio is not
    logged as such: the restore's fingerprint is the evidence)."""
    steady = [r for r in records if r.values.get("lag/steps/min", 0.0) >= 1]
    if not steady:
        return CheckResult("kept weights", False, "no step with every batch lagged (lag/steps/min >= 1)")
    bad = []
    for r in records:
        v = r.values
        if v.get("lag/kept_weights_identical", math.nan) != 0.0:
            bad.append(f"step {r.step}: lag/kept_weights_identical = {v.get('lag/kept_weights_identical')}")
    for r in steady:
        v = r.values
        if v.get("lag/kept_weights_restored") != 1.0:
            bad.append(f"step {r.step}: lag/kept_weights_restored = {v.get('lag/kept_weights_restored')}")
        if sat and not v.get("actor/sat/d_pi", 0.0) > 0.0:
            bad.append(f"step {r.step}: actor/sat/d_pi = {v.get('actor/sat/d_pi')}")
    d_pi = [r.values.get("actor/sat/d_pi", math.nan) for r in steady]
    moved = f", d_pi {min(d_pi):.3g}..{max(d_pi):.3g}" if sat else ""
    return CheckResult(
        "kept weights",
        not bad,
        "; ".join(bad[:3])
        if bad
        else f"{len(steady)} lagged steps: every batch on restored kept weights, none identical to the live "
        f"ones{moved}",
    )


def check_bound(records: list[Record], max_lag: int) -> CheckResult:
    lags = [r.values.get("lag/max", math.nan) for r in records]
    bad = [(r.step, v) for r, v in zip(records, lags) if not v <= max_lag]
    return CheckResult(
        "bound",
        not bad,
        f"lag/max <= {max_lag} on every step (max {max(lags):g})"
        if not bad
        else f"lag/max over {max_lag} (or missing) at {bad[:3]}",
    )


def check_drops(records: list[Record], forced: bool, failed_key: str | None = VERL_FAILED_KEY) -> CheckResult:
    """``failed_key`` None: no failed rollout is forced (OpenRLHF: the forced drops are stale leftovers)."""
    dropped = max((r.values.get("lag/dropped_total", 0.0) for r in records), default=0.0)
    if failed_key is None:
        detail = f"lag/dropped_total {dropped:g}"
        return CheckResult(
            "drops",
            dropped >= 1 if forced else dropped == 0,
            detail + (" (want >= 1: the stale leftovers over the bound)" if forced else " (want no drop)"),
        )
    failed = sum(r.values.get(failed_key, 0.0) for r in records)
    detail = f"lag/dropped_total {dropped:g}, {failed_key} {failed:g}"
    if forced:
        return CheckResult(
            "drops",
            dropped >= 1 and failed >= 1,
            detail + " (want >= 1 each: the straggler over the bound and the failed group)",
        )
    return CheckResult("drops", dropped == 0, detail + " (want no drop)")


def check_spilled(folder: Path) -> CheckResult:
    files = sorted(p.name for p in folder.glob("sat_ext_v*.rank*.pt"))
    return CheckResult("kept weights in files", bool(files), f"{folder.name}/: {', '.join(files) or 'no kept file'}")


def check_tags(records: list[Record], interval: int, prefetch: int) -> CheckResult:
    bad = []
    for r in records:
        v, want = r.values, scheduled_version(r.step, interval, prefetch)
        if v.get("policy_version") != want:
            bad.append(f"step {r.step}: policy_version {v.get('policy_version')}, scheduled {want}")
        if v.get("lag/consumed") != v.get("rollout/num_samples"):
            bad.append(f"step {r.step}: lag/consumed {v.get('lag/consumed')} of {v.get('rollout/num_samples')} samples")
    versions = [int(r.values["policy_version"]) for r in records if "policy_version" in r.values]
    return CheckResult(
        "tags",
        not bad,
        "; ".join(bad[:3])
        if bad
        else (
            f"every sample tagged, per-step versions {versions} as scheduled (interval {interval}, prefetch {prefetch})"
        ),
    )
