"""The launcher against OpenRLHF 0.11.2's real CLI parser, and the loss swap inside a real Ray actor process.

Both run in one subprocess, _openrlhf_harness.py (why, and exactly what is real there), the ``background`` job
(tests/conftest.py starts it when collection ends); its result is the ``openrlhf_harness`` fixture.
"""

import json
import os
import sys

import pytest
from _background import Background
from _openrlhf_cli import clockless, refused, trained

from sat_ext.core import METRIC_KEYS

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_openrlhf_harness.py")


def start_background() -> Background:
    return Background([sys.executable, HARNESS, "result.json"])


@pytest.fixture(scope="module")
def openrlhf_harness(background):
    """The harness's JSON result (the CLI cases and the Ray worker's report)."""
    assert background.wait(timeout=400) == 0, background.tail()
    return json.loads((background.workdir / "result.json").read_text())


@pytest.fixture(scope="module")
def cli(openrlhf_harness):
    return openrlhf_harness["cli"]


@pytest.fixture(scope="module")
def worker(openrlhf_harness):
    return openrlhf_harness["ray"]


def test_openrlhf_alone_rejects_sat(cli):
    assert "invalid choice: 'sat'" in refused(cli, "vanilla_sat")


def test_sat_and_sat_gspo_are_accepted_with_their_flags(cli):
    sat = trained(cli, "sat")
    assert sat["actor"]["policy_loss_type"] == "sat"
    assert sat["sat"] == {"quantile": 0.8, "kernel": "power", "gate_scope": "global", "c_min": 0.1}
    gspo = trained(cli, "sat_gspo")
    assert gspo["actor"]["policy_loss_type"] == "sat_gspo"
    assert gspo["actor"]["eps_clip_low_high"] == [3e-4, 4e-4]
    assert gspo["sat"] == {"gspo_gate_level": "token"}
    assert "ratio against vLLM's rollout log-probs" in cli["sat"]["stdout"]


def test_the_docs_example_command_passes_openrlhfs_and_sats_checks(cli):
    args = trained(cli, "docs_example")
    assert args["actor"]["policy_loss_type"] == "sat_gspo" and args["train"]["async_enable"]
    assert args["sat"] == {"quantile": 0.9, "kernel": "hill", "gate_scope": "micro"}
    assert args["actor"]["eps_clip_low_high"] == [0.2, 0.2]


def test_every_other_flag_reaches_openrlhf_untouched(cli):
    vanilla = clockless(trained(cli, "vanilla_ppo"))
    assert clockless(trained(cli, "ppo")) == vanilla  # a non-SAT run through the launcher is plain OpenRLHF
    sat = clockless(trained(cli, "sat"))
    sat.pop("sat")
    assert sat["actor"].pop("policy_loss_type") == "sat"
    vanilla["actor"].pop("policy_loss_type")
    assert sat == vanilla


@pytest.mark.parametrize(
    "case,expected",
    [
        ("bad_quantile", "error: --sat.quantile must be a number strictly between 0 and 1, got 1.5"),
        ("bad_c_min", "error: --sat.c_min must be a number in [0, 1], got -0.5"),
        ("bad_kernel", "error: argument --sat.kernel: invalid choice: 'gauss'"),
        ("bad_float", "error: argument --sat.exponent: invalid float value: 'two'"),
        ("bad_dual_clip", "error: --actor.dual_clip must be a finite number > 1 (or None to disable), got 0.5"),
        ("bad_eps", "error: --actor.eps_clip_low_high LOW (or --actor.eps_clip) must be < 1"),
        ("unknown_sat_flag", "error: unrecognized arguments: --sat.qantile 0.8"),
        ("sat_flag_without_sat", "error: --sat.quantile set, but --actor.policy_loss_type is 'gspo', not a SAT loss"),
    ],
)
def test_bad_values_are_refused_naming_flag_and_value(cli, case, expected):
    assert expected in refused(cli, case)


def test_runs_without_rollout_log_probs_arerefused(cli):
    msg = refused(cli, "no_rollout_log_probs")
    assert "needs vLLM's rollout log-probs" in msg and "--algo.advantage.is_correction_level token" in msg
    assert "set --vllm.num_engines > 0 (got 0)" in refused(cli, "no_vllm")


def test_help_lists_the_sat_flags(cli):
    assert (cli["help"]["outcome"], cli["help"]["code"]) == ("exit", 0)
    assert "--sat.quantile" in cli["help"]["stdout"] and "{hill,hill_shifted,power,exp}" in cli["help"]["stdout"]


def test_openrlhfs_train_would_start_the_sat_actor_class(cli):
    assert cli["vanilla_ppo"]["actor_class"] == "PolicyModelActor"
    assert {cli[c]["actor_class"] for c in ("ppo", "sat", "sat_gspo")} == {"SATPolicyModelActor"}


def test_the_worker_runs_the_launchers_class_in_its_own_process(worker):
    assert worker["pid"] != worker["driver_pid"]
    assert worker["mro"][:3] == ["sat_ext.openrlhf.actor.SATPolicyModelActor"] * 2 + [
        "openrlhf.trainer.ray.ppo_actor.PolicyModelActor"
    ]


def test_in_the_worker_ppo_keeps_openrlhfs_loss(worker):
    assert worker["ppo"] == {"loss_class": "openrlhf.models.loss.PolicyLoss", "training_step_wrapped": False}


def test_in_the_worker_the_trainers_loss_is_sat_with_the_flags(worker):
    sat = worker["sat"]
    assert sat["loss_class"] == "sat_ext.openrlhf.loss.SATPolicyLoss" and sat["training_step_wrapped"]
    cfg = sat["sat_config"]
    assert (cfg["eps_low"], cfg["eps_high"], cfg["dual_clip"]) == (0.2, 0.28, None)
    assert (cfg["quantile"], cfg["kernel"], cfg["gate_scope"], cfg["c_min"]) == (0.8, "power", "global", 0.1)
    assert sat["token_level_loss"] is True
    gspo = worker["sat_gspo"]
    assert (gspo["sat_config"]["eps_low"], gspo["sat_config"]["eps_high"]) == (3e-4, 4e-4)
    assert gspo["sat_config"]["gspo_gate_level"] == "token" and gspo["token_level_loss"] is False
    assert "needs the data-parallel group" in sat["dp_group_error"]


@pytest.mark.parametrize("case", ["sat", "sat_gspo"])
def test_training_step_uses_sat_and_reports_its_metrics(worker, case):
    step = worker[case]
    assert step["policy_loss"] == step["expected_loss"]
    names = [f"sat_{k}" for k in METRIC_KEYS]
    assert list(step["metrics"]) == names
    assert step["weights"] == dict.fromkeys(names, "token")
    assert step["metrics"]["sat_gate_rate"] > 0
    assert {"policy_loss", "ppo_clip_ratio", "ppo_kl", "vllm_kl", "is_filter_ratio"} <= set(step["other_metrics"])
