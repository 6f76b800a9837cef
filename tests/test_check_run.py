"""``python -m sat_ext.check_run`` on run logs made by the real code paths a verl run goes through.

Each synthetic run: per verl global step, the small recipe's actor config (composed and converted as verl's
workers do) drives verl's registered policy loss (``sat``, ``sat_gspo``, ``vanilla`` via
``get_policy_loss_fn``) on a few micro-batches whose log-ratio grows with the batch's scheduled lag
(``sat_ext.lag.schedule``), the micro-batch metrics are reduced by verl's ``reduce_metrics``, the lag metrics
come from ``sat_ext.lag.LagMetrics`` fed as the sampler feeds it, and the step is written by verl's own
``FileLogger``. What is synthetic: the log-probs (no model) and the sampler's TransferQueue
(tests/verl/test_verl_sampler.py checks the real sampler's metrics with the same checker).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from sat_ext.check_run import main as check_run_main  # noqa: E402
from sat_ext.lag import LagMetrics, VersionSpan, lag_in_steps, sample_lag  # noqa: E402
from sat_ext.lag.config import DEFAULT_HIST_EDGES  # noqa: E402
from sat_ext.lag.schedule import scheduled_lag, scheduled_version  # noqa: E402
from sat_ext.metric_names import OPENRLHF_NAMES  # noqa: E402
from sat_ext.runlog import (  # noqa: E402
    CheckResult,
    Expectation,
    Record,
    check_gate_rate,
    check_run,
    read_log,
)

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "examples" / "verl_small_qwen3_1p7b" / "config"
GROUPS, SAMPLES, TOKENS, MICRO = 2, 4, 24, 2  # per optimizer step: 2 prompts x 4 samples, 2 micro-batches


def _actor(variant: str):
    from verl.utils.config import omega_conf_to_dataclass

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(variant)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def _loss_metrics(
    actor, lag_steps: int, gen: torch.Generator, drift: float, nan: bool, bf16: bool = False
) -> dict[str, list]:
    """One optimizer step's micro-batches through verl's registered loss; metrics as lists, as workers append
    (``bf16``: both log-probs rounded to bfloat16, as a bf16 forward gives them)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    out: dict[str, list] = {}
    rows = GROUPS * SAMPLES // MICRO
    for _ in range(MICRO):
        log_prob = -torch.rand(rows, TOKENS, generator=gen) * 3
        old = log_prob - drift * lag_steps * torch.randn(rows, TOKENS, generator=gen)  # d grows with the lag
        if bf16:
            log_prob, old = log_prob.bfloat16().float(), old.bfloat16().float()
        if nan:
            log_prob[0, 0] = math.nan
        adv = torch.randn(rows, 1, generator=gen).expand(rows, TOKENS)
        mask = torch.ones(rows, TOKENS)
        mask[:, TOKENS - 4 :] = 0
        loss, metrics = loss_fn(
            old_log_prob=old,
            log_prob=log_prob,
            advantages=adv,
            response_mask=mask,
            loss_agg_mode=actor.loss_agg_mode,
            config=actor,
        )
        metrics = {**metrics, "actor/pg_loss": float(loss), "actor/grad_norm": abs(float(loss)) * 3}
        for key, value in metrics.items():
            out.setdefault(key, []).append(float(value))
    return out


def write_run(
    path: Path,
    variant: str,
    global_steps: int,
    interval: int,
    prefetch: int = 1,
    drift: float = 0.02,
    log_interval: int | None = None,
    nan_step: int | None = None,
    eval_n: int | None = 8,
    bf16: bool = False,
) -> Path:
    """A run of ``variant`` at ``interval`` through the real loss, LagMetrics and verl's FileLogger.

    ``log_interval`` is the interval the lag metrics are scheduled with (default: ``interval``; a different
    value makes an off-schedule run); ``drift`` 0 makes the denominator the current policy (d = 0); ``eval_n``:
    the samples per problem of the evaluation before training (verl's key name; None: no evaluation); ``bf16``:
    the log-probs of a bf16 forward.
    """
    from verl.utils.metric import reduce_metrics
    from verl.utils.tracking import FileLogger

    actor = _actor(variant)
    gen = torch.Generator().manual_seed(0)
    real = log_interval or interval
    lag_metrics = LagMetrics(DEFAULT_HIST_EDGES, interval_schedule=True, track_producer_idle=False)
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    logger = FileLogger("sat_small_qwen3_1p7b", variant)
    os.environ.pop("VERL_FILE_LOGGER_PATH")
    if eval_n is not None:  # val_before_train: no actor/ keys
        logger.log(
            {f"val-core/aime2024/acc/mean@{eval_n}": 0.1, f"val-core/aime2024/acc/best@{eval_n}/mean": 0.3}, step=0
        )
    for t in range(1, global_steps + 1):
        step_metrics: dict[str, list] = {}
        for local in range(interval):
            steps_done = (t - 1) * interval + local
            version = scheduled_version(steps_done + 1, real, prefetch)  # who generated this batch
            span = VersionSpan.at(min(version, t - 1))
            for _ in range(GROUPS * SAMPLES):  # what SATLagReplayBuffer.sample records per trajectory
                lag_metrics.record_consumed(
                    sample_lag(t - 1, span),
                    lag_in_steps(steps_done, span, interval),
                    scheduled_lag(steps_done + 1, interval, prefetch),
                    response_tokens=TOKENS,
                )
            lag = lag_in_steps(steps_done, span, interval)
            for key, values in _loss_metrics(actor, lag, gen, drift, nan=t == nan_step, bf16=bf16).items():
                step_metrics.setdefault(key, []).extend(values)
        data = reduce_metrics(step_metrics)
        data.update(lag_metrics.flush(t - 1, t * interval))
        logger.log(data, step=t)
    logger.finish()
    return path


def _results(path: Path, variant: str | None = None, **exp) -> dict[str, bool | None]:
    expectation = Expectation.for_variant(variant, **exp) if variant else Expectation(**exp)
    return {r.name: r.passed for r in check_run(read_log(path), expectation)}


@pytest.mark.parametrize("variant,interval", [("sat_grpo_lag1", 1), ("sat_gspo_lag8", 8)])
def test_a_healthy_sat_run_passes(tmp_path, variant, interval):
    path = write_run(tmp_path / f"{variant}.jsonl", variant, global_steps=4 if interval == 8 else 10, interval=interval)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert set(lines[1]) == {"step", "data"} and lines[1]["data"]["actor/sat/active"] == 1.0  # verl's format
    results = _results(path, variant, eval_n=8)
    assert all(results.values()), results
    if variant.startswith("sat_gspo"):  # 4 equal-length responses per micro-batch: the tail ties, nothing gated
        assert {r.values["actor/sat/gate_rate"] for r in read_log(path)[1:]} == {0.0}
        assert _results(path, sat=True, interval=interval)["gate rate"] is False  # as a token gate it would fail
        gate = next(r for r in check_run(read_log(path), Expectation.for_variant(variant)) if r.name == "gate rate")
        assert gate.passed and "near 0" in gate.warning and "micro-batch" in gate.warning  # passes, with a warning
    assert check_run_main([str(path)]) == 0  # expectation from the file name (verl names it after the experiment)


def test_a_healthy_baseline_passes_and_skips_the_sat_rows(tmp_path):
    path = write_run(tmp_path / "gspo_lag8.jsonl", "gspo_lag8", global_steps=3, interval=8)
    results = _results(path, sat=False, interval=8)
    assert results == {
        "training steps": True,
        "sat active": True,
        "gate rate": None,
        "inert": None,
        "d_pi": None,
        "finite losses": True,
        "lag schedule": True,
        "eval count": None,
    }  # no documented count


def test_a_run_where_sat_was_inert_passes_with_a_warning_that_says_what_to_lower(tmp_path):
    """Stale enough that q passes the radius on every micro-batch: SAT is its base loss (a warning, not a fault);
    a healthy lag keeps inert_frac at 0."""
    stale = write_run(tmp_path / "sat_grpo_lag8.jsonl", "sat_grpo_lag8", global_steps=3, interval=8, drift=2.0)
    [inert] = [r for r in check_run(read_log(stale), Expectation.for_variant("sat_grpo_lag8")) if r.name == "inert"]
    assert inert.passed is True and "mean 1 " in inert.detail
    assert "SAT is behaving as its base: lower the lag" in inert.warning
    fresh = write_run(tmp_path / "sat_grpo_lag1.jsonl", "sat_grpo_lag1", global_steps=6, interval=1)
    [inert] = [r for r in check_run(read_log(fresh), Expectation.for_variant("sat_grpo_lag1")) if r.name == "inert"]
    assert inert.passed is True and inert.warning == "" and "mean 0 " in inert.detail


def test_gate_rate_zero_fails(tmp_path):
    # the denominator is the current policy (d = 0 everywhere): q = 0, nothing gated, d_pi = 0
    path = write_run(tmp_path / "sat_grpo_lag1.jsonl", "sat_grpo_lag1", global_steps=6, interval=1, drift=0.0)
    results = _results(path, sat=True, interval=1)
    assert results["gate rate"] is False and results["d_pi"] is False and results["lag schedule"] is True


def test_ties_at_q_pass_with_a_warning_and_without_q_the_floor_fails_them(tmp_path):
    # bf16 log-probs put |d| on a grid: many tokens tie at q, so the strict gate takes fewer than 10% of them
    path = tmp_path / "sat_grpo_lag1.jsonl"
    write_run(path, "sat_grpo_lag1", global_steps=6, interval=1, bf16=True, drift=0.005)
    steady = read_log(path)[2:]  # the evaluation record, then step 1 (lag 0)
    rates = sorted(r.values["actor/sat/gate_rate"] for r in steady)
    assert rates[len(rates) // 2] < 0.05 and min(r.values["actor/sat/threshold_q"] for r in steady) > 0
    gate = next(r for r in check_run(read_log(path), Expectation(sat=True, interval=1)) if r.name == "gate rate")
    assert gate.passed and "ties at q" in gate.warning and "bf16" in gate.warning, gate
    no_q = read_log(path)
    for r in no_q:
        r.values.pop("actor/sat/threshold_q", None)
    gate = next(r for r in check_run(no_q, Expectation(sat=True, interval=1)) if r.name == "gate rate")
    assert gate.passed is False and "median >= 0.05" in gate.detail and "missing or non-finite" in gate.detail, gate


def _gate(rates: list[float], qs: list[float | None], names=None) -> CheckResult:
    """The gate-rate row of a SAT run whose steps (after a first one at lag 0) log these rates and q's."""
    names = names or Expectation(sat=True).names
    records = [Record(1, {names.gate_rate: 0.0, names.threshold_q: 0.0, "lag/steps/min": 0.0})]
    for step, (rate, q) in enumerate(zip(rates, qs), 2):
        values = {names.gate_rate: rate, "lag/steps/min": 1.0}
        if q is not None:
            values[names.threshold_q] = q
        records.append(Record(step, values))
    return check_gate_rate(records, Expectation(sat=True, names=names))


def test_the_token_gate_floor():
    assert _gate([0.03, 0.04, 0.02], [0.1, 0.12, 0.1]).passed  # ties at q: a warning
    assert _gate([0.03, 0.04, 0.02], [0.1, 0.12, 0.1]).warning
    assert not _gate([0.08, 0.09, 0.1], [0.1, 0.12, 0.1]).warning
    zero_q = _gate([0.0, 0.0, 0.05], [0.0, 0.0, 0.1])  # the live weights as the denominator: d == 0, q == 0
    assert zero_q.passed is False and "q = 0" in zero_q.detail
    off = _gate([0.0, 0.005, 0.0], [0.1, 0.12, 0.1])  # q > 0 and (almost) nothing gated
    assert off.passed is False and "the gate is off" in off.detail
    partly = _gate([0.03, 0.04, 0.02], [0.1, None, math.nan])  # q not logged on two steps: the 0.05 floor
    assert partly.passed is False and "steps [3, 4]" in partly.detail
    assert _gate([0.06, 0.07, 0.08], [0.1, None, math.nan]).passed
    openrlhf = _gate([0.03, 0.04, 0.02], [0.1, 0.12, 0.1], OPENRLHF_NAMES)  # q read from sat_threshold_q
    assert openrlhf.passed and openrlhf.warning and "missing" not in openrlhf.detail


def test_off_schedule_lags_fail(tmp_path):
    # batches generated as at lag 4 but logged and checked as lag 8
    path = write_run(tmp_path / "sat_gspo_lag8.jsonl", "sat_gspo_lag8", global_steps=3, interval=8, log_interval=4)
    results = _results(path, sat=True, interval=8)
    assert results["lag schedule"] is False and results["sat active"] is True
    # and a lag-8 run checked as lag 1
    good = write_run(tmp_path / "good.jsonl", "sat_gspo_lag8", global_steps=3, interval=8)
    assert _results(good, sat=True, interval=1)["lag schedule"] is False


def test_sat_inactive_fails(tmp_path):
    # a baseline's log checked as a SAT run (e.g. the SAT loss never selected)
    path = write_run(tmp_path / "grpo_lag1.jsonl", "grpo_lag1", global_steps=4, interval=1)
    results = _results(path, sat=True, interval=1)
    assert results["sat active"] is False and results["gate rate"] is False and results["d_pi"] is False
    assert check_run_main([str(path), "--sat"]) == 1


def test_a_non_finite_loss_fails(tmp_path):
    path = write_run(tmp_path / "grpo_lag1.jsonl", "grpo_lag1", global_steps=4, interval=1, nan_step=3)
    assert "null" in path.read_text()  # verl's FileLogger (orjson) writes NaN as null
    assert _results(path, sat=False, interval=1)["finite losses"] is False


def test_console_log_and_cli(tmp_path, capsys):
    """verl's console logger lines (concat_dict_to_str), behind Ray's prefix, read like the file logger's."""
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    path = write_run(tmp_path / "run.jsonl", "sat_grpo_lag8", global_steps=3, interval=8)
    console = tmp_path / "console.log"
    console.write_text(
        "".join(
            f"(TaskRunner pid=1) {concat_dict_to_str(r['data'], step=r['step'])}\nnoise\n"
            for r in map(json.loads, path.read_text().splitlines())
        )
    )
    assert [r.values for r in read_log(console)] == [r.values for r in read_log(path)]
    assert check_run_main([str(console), "--variant", "sat_grpo_lag8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "PASS" and any(line.split()[:3] == ["lag", "schedule", "PASS"] for line in out)
    assert check_run_main([str(console)]) == 2  # no variant in the name and no --sat/--baseline
    assert check_run_main([str(tmp_path / "missing.jsonl"), "--sat"]) == 2
    proc = subprocess.run(
        [sys.executable, "-m", "sat_ext.check_run", str(console), "--variant", "grpo_lag8"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 1 and "FAIL: sat active" in proc.stdout  # a SAT log checked as a baseline


def test_sat_ext_check_run_dispatches(capsys):
    from sat_ext.cli import main

    with pytest.raises(SystemExit) as e:
        main(["check-run", "--help"])
    assert e.value.code == 0 and "check_run" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------- evaluation count


@pytest.mark.parametrize(
    "project,variant,documented",
    [("sat_small_qwen3_1p7b", "sat_grpo_lag1", 8), ("sat_aime_qwen3_30b", "sat_grpo_r3_lag1", 64)],
)
def test_eval_count_is_checked_against_the_examples_config(tmp_path, capsys, project, variant, documented):
    """verl's file logger writes <root>/<project>/<experiment>.jsonl: the folder names the example, the file the
    variant, and the example's config its evaluation count (val_kwargs.n)."""
    run_dir = tmp_path / project
    run_dir.mkdir()
    good = write_run(run_dir / f"{variant}.jsonl", "sat_grpo_lag1", global_steps=4, interval=1, eval_n=documented)
    assert check_run_main([str(good)]) == 0
    out = capsys.readouterr().out
    assert f"eval samples per problem {documented}" in out and f"mean@{documented} on aime2024 at steps [0]" in out
    other = 8 if documented == 64 else 64  # a data file's __rollout_n__ for the other recipe
    bad = write_run(run_dir / f"{variant}_rollout_lp.jsonl", "sat_grpo_lag1", global_steps=4, interval=1, eval_n=other)
    assert check_run_main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: eval count" in out and f"documented count is {documented}" in out and "__rollout_n__" in out
    assert check_run_main([str(bad), "--eval-n", str(other)]) == 0  # an explicit count wins
    none = write_run(run_dir / f"{variant}.jsonl", "sat_grpo_lag1", global_steps=4, interval=1, eval_n=None)
    assert _results(none, variant, eval_n=documented)["eval count"] is False  # expected, but nothing ran
    elsewhere = write_run(tmp_path / f"{variant}.jsonl", "sat_grpo_lag1", global_steps=4, interval=1, eval_n=other)
    assert check_run_main([str(elsewhere)]) == 0 and "documented count unknown" in capsys.readouterr().out
    assert check_run_main([str(elsewhere), "--example", run_dir.name.replace("sat_", "verl_")]) == 1


def test_variant_names_include_tis_r3_and_the_rollout_denominator_switch():
    from sat_ext.runlog import VARIANT_RE

    for name, variant, lag in [
        ("grpo_tis_r3_lag1", "grpo_tis_r3_lag1", 1),
        ("sat_gspo_r3_lag8", "sat_gspo_r3_lag8", 8),
        ("grpo_lag1_rollout_lp", "grpo_lag1", 1),
        ("dppo_tv_lag8", "dppo_tv_lag8", 8),
    ]:
        m = VARIANT_RE.search(name)
        assert (m["variant"], int(m["lag"])) == (variant, lag), name
    assert Expectation.for_variant("sat_gspo_r3_lag8_rollout_lp").sequence_gate is True
