"""sat_ext's lag modes on OpenRLHF 0.11.2's asynchronous trainer (sat_ext.openrlhf.lag), on CPU.

Everything runs in one subprocess, _openrlhf_lag_harness.py (what is real there and what stands in for vLLM
and the DeepSpeed actors: its docstring), the ``background`` job (tests/conftest.py starts it when collection
ends, so that it overlaps the other tests); its JSON result is the ``lag_harness`` fixture. Three parts:
- OpenRLHF's real CLI parser and validation through the launcher: flags accepted, refused with messages;
- the real ``GenerateSamplesActor`` / ``TrainingActor`` loops of the lag subclasses, in threads, per mode;
- one run started the way OpenRLHF's ``train()`` starts it, each actor in its own Ray worker process.
"""

import json
import os
import sys

import pytest
from _background import Background
from _openrlhf_cli import refused, trained

from sat_ext.lag.schedule import scheduled_lag

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_openrlhf_lag_harness.py")
N_SAMPLES = 2  # --rollout.n_samples_per_prompt in the harness


def start_background() -> Background:
    return Background([sys.executable, HARNESS, "result.json"])


@pytest.fixture(scope="module")
def lag_harness(background):
    # about 70 s quiet, 7 min beside four busy processes on the 2-core machine
    assert background.wait(timeout=900) == 0, background.tail()
    result = json.loads((background.workdir / "result.json").read_text())
    assert "error" not in result, result["error"]
    return result


@pytest.fixture(scope="module")
def cli(lag_harness):
    return lag_harness["cli"]


@pytest.fixture(scope="module")
def loops(lag_harness):
    for name, run in lag_harness["loops"].items():
        assert not run["errors"], f"{name}: {run['errors'][0]}"
    return lag_harness["loops"]


@pytest.fixture(scope="module")
def ray_run(lag_harness):
    assert "error" not in lag_harness["ray"], lag_harness["ray"]["error"]
    return lag_harness["ray"]


def _samples(run):
    """Every trained sample: (trainer version at training, its policy_version tag, the engine's weights)."""
    return [(step["broadcasts"], tag, weights) for step in run["trained"] for tag, weights, _ in step["samples"]]


# ------------------------------------------------------------------------------------------------ CLI


def test_without_lag_flags_the_run_is_plain_openrlhf(cli):
    args = trained(cli, "no_lag")
    assert "lag" not in args and args["train"]["async_queue_size"] == 1  # OpenRLHF's default, restored
    assert args == trained(cli, "no_lag_vanilla")  # the launcher without extensions: OpenRLHF's CLI alone
    assert "[sat_ext] --lag" not in cli["no_lag"]["stdout"]


@pytest.mark.parametrize(
    "case,lag,queue_size",
    [
        ("off", {"mode": "off"}, 1),
        ("off_hist", {"hist_edges": [0, 1, 4]}, 1),
        ("bounded2", {"mode": "bounded", "max_lag": 2}, 2),  # the launcher maps L onto OpenRLHF's queue
        ("bounded2_q1", {"mode": "bounded", "max_lag": 2}, 1),  # a smaller queue keeps the bound
        ("bounded1_regen", {"mode": "bounded", "max_lag": 1, "over_bound": "regenerate"}, 1),
        # oversampling's leftovers are checked at consumption: over the bound they are dropped (sat-ext smoke openrlhf)
        ("bounded1_drop_oversampling", {"mode": "bounded", "max_lag": 1, "over_bound": "drop"}, 1),
        ("interval3", {"mode": "interval", "interval": 3}, 1),
        ("interval2_p1_eval", {"mode": "interval", "interval": 2, "prefetch": 1}, 2),  # + one slot per eval payload
        ("interval2_p2", {"mode": "interval", "interval": 2, "prefetch": 2}, 2),
        ("interval_partial_p0", {"mode": "interval", "interval": 2}, 1),
    ],
)
def test_lag_flags_are_accepted_and_set_the_queue_size(cli, case, lag, queue_size):
    args = trained(cli, case)
    assert args["lag"] == lag
    assert args["train"]["async_queue_size"] == queue_size and args["train"]["async_enable"]
    assert cli[case]["trainer_class"] == "LagPPOTrainerAsync"


def test_the_launcher_says_what_each_mode_does(cli):
    bounded = (
        "[sat_ext] --lag.mode bounded: --train.async_queue_size 2 (OpenRLHF's queue and token pool: a batch "
        "is generated at most 2 weight syncs before it is trained)"
    )
    assert bounded in cli["bounded2"]["stdout"]
    interval = "[sat_ext] --lag.mode interval: weights broadcast to vLLM every 3 trainer steps"
    assert interval in cli["interval3"]["stdout"]


def test_sat_and_a_lag_mode_combine(cli):
    args = trained(cli, "sat_and_bounded")
    assert args["actor"]["policy_loss_type"] == "sat_gspo" and args["lag"] == {"mode": "bounded", "max_lag": 1}


@pytest.mark.parametrize(
    "case,expected",
    [
        ("bad_mode", "argument --lag.mode: invalid choice: 'fast'"),
        ("bad_max_lag", "--lag.max_lag must be an integer >= 0 when --lag.mode=bounded, got -1"),
        ("bounded_without_max_lag", "--lag.max_lag must be an integer >= 0 when --lag.mode=bounded, got None"),
        ("max_lag_without_mode", "--lag.max_lag applies only to --lag.mode=bounded (mode is 'off'), got 2"),
        ("bad_interval", "--lag.interval must be an integer >= 1 when --lag.mode=interval, got 0"),
        ("interval_with_max_lag", "--lag.max_lag applies only to --lag.mode=bounded (mode is 'interval'), got 1"),
        (
            "over_bound_in_interval",
            "--lag.over_bound applies only to --lag.mode=bounded (mode is 'interval'), got 'drop'",
        ),
        ("bad_hist_edges", "--lag.hist_edges must be a non-empty, strictly increasing list of integers from 0"),
        ("bounded_without_async", "--lag.mode bounded needs --train.async_enable"),
        ("interval_without_async", "--lag.mode interval needs --train.async_enable"),
        ("off_without_async", "--lag.mode off needs --train.async_enable"),
        ("without_vllm", "--lag.mode off needs vLLM engines (--vllm.num_engines > 0, got 0)"),
        ("bounded0", "--lag.max_lag 0 is below what OpenRLHF's asynchronous trainer can deliver"),
        ("bounded_partial", "--train.partial_rollout_enable breaks --lag.mode bounded"),
        (
            "bounded_oversampling",
            "--rollout.vllm_generate_batch_size 4 > --rollout.batch_size 2 breaks --lag.mode=bounded with "
            "--lag.over_bound=wait",
        ),
        (
            "bounded_queue_over_bound",
            "--train.async_queue_size lets a batch be generated up to 3 weight syncs before "
            "it is trained, over --lag.max_lag=2; set it to at most 2, got 3",
        ),
        (
            "interval_oversampling",
            "--rollout.vllm_generate_batch_size 4 > --rollout.batch_size 2 breaks --lag.mode=interval",
        ),
        ("interval_partial_p1", "--train.partial_rollout_enable breaks --lag.mode=interval with --lag.prefetch=1"),
        ("interval_queue_too_small", "--train.async_queue_size 1 is too small for --lag.prefetch 1 with evaluation on"),
    ],
)
def test_bad_settings_are_refused_at_launch_naming_the_flags(cli, case, expected):
    msg = refused(cli, case)
    assert msg.startswith("train_ppo_ray.py: error: ") and expected in msg, msg


def test_the_docs_commands_pass_openrlhfs_and_the_launchers_checks(cli):
    docs = {name: trained(cli, name) for name in sorted(cli) if name.startswith("docs_")}
    assert [(a["lag"], a["train"]["async_queue_size"]) for a in docs.values()] == [
        ({"mode": "bounded", "max_lag": 2, "over_bound": "drop"}, 2),
        ({"mode": "interval", "interval": 8, "prefetch": 1}, 2),  # p = 1 with evaluation on
        ({"mode": "off"}, 2),
    ]
    bounded, interval, off = docs.values()
    assert bounded["actor"]["policy_loss_type"] == interval["actor"]["policy_loss_type"] == "sat_gspo"
    assert interval["eval"]["steps"] == 8 and off["train"]["partial_rollout_enable"]
    for a in docs.values():  # one optimizer step per trainer step
        assert a["rollout"]["batch_size"] * a["rollout"]["n_samples_per_prompt"] == a["train"]["batch_size"]


def test_help_lists_the_lag_flags(cli):
    assert (cli["help"]["outcome"], cli["help"]["code"]) == ("exit", 0)
    out = cli["help"]["stdout"]
    for flag in (
        "--lag.mode {off,bounded,interval}",
        "--lag.max_lag",
        "--lag.interval",
        "--lag.prefetch",
        "--lag.over_bound {wait,drop,regenerate}",
        "--lag.hist_edges",
    ):
        assert flag in out


# ------------------------------------------------------------------------------------------------ loops


def test_every_sample_is_tagged_with_the_weights_that_generated_it(loops, ray_run):
    for name, run in {**loops, "ray": ray_run}.items():
        samples = _samples(run)
        assert samples, name
        assert all(tag == weights for _, tag, weights in samples), name  # the engine's own count of syncs


def test_every_step_logs_the_same_lag_keys(loops, ray_run):
    for name, run in {**loops, "ray": ray_run}.items():
        keys = {tuple(log["keys"]) for log in run["logs"]}
        assert len(keys) == 1, name
        (keys,) = keys
        assert {
            "lag/min",
            "lag/mean",
            "lag/max",
            "lag/hist/0",
            "lag/hist/32+",
            "lag/dropped",
            "lag/regenerated",
            "lag/producer_idle_s",
            "lag/consumer_idle_s",
            "lag/broadcast",
            "lag/version",
        } <= set(keys)
        assert ("lag/off_schedule" in keys) == (name in ("interval3", "ray"))
        for log in run["logs"]:
            assert sum(log[k] for k in keys if k.startswith("lag/hist/")) == log["lag/consumed"]


def test_logged_lags_are_the_true_lags(loops):
    for name, run in loops.items():
        trained = iter(run["trained"])
        for log in run["logs"]:
            if not log["lag/consumed"]:
                continue  # a step whose every group was over the bound trains nothing
            step = next(trained)
            true = [step["broadcasts"] - weights for _, weights, _ in step["samples"]]
            assert (log["lag/min"], log["lag/max"]) == (min(true), max(true)), name


def test_bounded_mode_uses_the_bound_and_never_exceeds_it(loops):
    run = loops["bounded2"]
    lags = [version - weights for version, _, weights in _samples(run)]
    assert (
        max(lags) == 2 and len(lags) == run["prompts"] * N_SAMPLES
    )  # the rollout runs 2 versions ahead, nothing is lost
    assert all(log["lag/max"] <= 2 and log["lag/dropped"] == log["lag/regenerated"] == 0 for log in run["logs"])
    # fast rollout, slow training: the bound holds the generator back (it waits for the token pool); how long,
    # against the trainer's waits, depends on the machine's load, so only that it waited is checked
    assert sum(x["lag/producer_idle_s"] for x in run["logs"][1:]) > 0


def test_a_queue_deeper_than_the_bound_drops_stale_groups(loops):
    run = loops["bounded1_drop_q3"]  # --train.async_queue_size 3 with --lag.max_lag 1, past the launcher's check
    lags = [version - weights for version, _, weights in _samples(run)]
    assert max(lags) <= 1
    dropped = sum(log["lag/dropped"] for log in run["logs"])
    assert dropped > 0 and dropped % N_SAMPLES == 0 and run["logs"][-1]["lag/dropped_total"] == dropped
    assert len(lags) + dropped == run["prompts"] * N_SAMPLES


def test_a_queue_deeper_than_the_bound_regenerates_stale_groups(loops):
    run = loops["bounded1_regenerate_q3"]
    samples = [s for step in run["trained"] for s in step["samples"]]
    assert max(step["broadcasts"] - w for step in run["trained"] for _, w, _ in step["samples"]) <= 1
    regenerated = sum(log["lag/regenerated"] for log in run["logs"])
    assert regenerated > 0 and run["logs"][-1]["lag/regenerated_total"] == regenerated
    prompts = [p for _, _, p in samples]
    assert all(prompts.count(p) == N_SAMPLES for p in prompts)  # each prompt trained once
    # groups sent back after the generator's last batch are not regenerated (the run ends)
    assert len(set(prompts)) + run["clock"]["requeued"] == run["prompts"]


@pytest.mark.parametrize(
    "name,total", [("bounded1_drop_q3", "dropped_total"), ("bounded1_regenerate_q3", "regenerated_total")]
)
def test_resume_keeps_the_lag_totals(loops, name, total):
    """The run saved LagMetrics.state_dict() in the client states of a checkpoint after every step (OpenRLHF's
    save_logs_and_checkpoints); a fresh trainer resuming from the last one (init_checkpoint_states) restores it."""
    run = loops[name]
    last, resumed = run["logs"][-1], run["resumed"]
    assert resumed["global_step"] == last["step"]  # OpenRLHF's own client state: the last checkpoint was read
    assert resumed["lag_state"][total] == last[f"lag/{total}"] > 0
    assert resumed["lag_state"] == run["lag_state"]  # every total, as the run ended


def test_interval_mode_broadcasts_every_k_steps_and_follows_the_schedule(loops):
    run = loops["interval3"]  # k = 3, prefetch 0: data 0, 1, 2 steps old, always on the current version
    logs = run["logs"]
    steps = run["prompts"] // 2  # --rollout.batch_size 2
    assert [log["step"] for log in logs] == list(range(1, steps + 1))
    assert [log["lag/broadcast"] for log in logs] == [float(s % 3 == 0) for s in range(1, steps + 1)]
    assert run["engine_weights"] == steps // 3 and logs[-1]["lag/version"] == steps // 3
    for s, log in enumerate(logs, start=1):
        assert (log["lag/max"], log["lag/steps/min"], log["lag/steps/max"]) == (0, (s - 1) % 3, (s - 1) % 3)
        assert (log["lag/scheduled/max"], log["lag/scheduled_steps/max"]) == scheduled_lag(s, 3, 0)
        assert log["lag/off_schedule"] == 0
    for s, step in enumerate(run["trained"], start=1):
        assert {weights for _, weights, _ in step["samples"]} == {(s - 1) // 3}


def test_off_mode_measures_a_slow_rollout(loops):
    run = loops["off_slow_rollout"]  # queue of 2, generation slower than training
    lags = [version - weights for version, _, weights in _samples(run)]
    assert set(lags) <= {0, 1, 2} and len(lags) == run["prompts"] * N_SAMPLES
    steady = run["logs"][1:]
    assert sum(x["lag/consumer_idle_s"] for x in steady) > sum(x["lag/producer_idle_s"] for x in steady)


# ------------------------------------------------------------------------------------------------ Ray workers


def test_openrlhfs_async_trainer_starts_the_lag_subclasses_in_their_own_workers(ray_run):
    assert ray_run["orchestrator_class"] == "LagPPOTrainerAsync"
    reports = [ray_run["orchestrator"], ray_run["generator"], ray_run["trainer"]]
    assert len({r["pid"] for r in reports} | {ray_run["driver_pid"]}) == 4
    for report, ours, openrlhf in zip(
        reports,
        ("LagPPOTrainerAsync", "LagGenerateSamplesActor", "LagTrainingActor"),
        ("PPOTrainerAsync", "GenerateSamplesActor", "TrainingActor"),
        strict=True,
    ):
        assert report["mro"][:3] == [f"sat_ext.openrlhf.lag.actors.{ours}"] * 2 + [
            f"openrlhf.trainer.ppo_trainer_async.{openrlhf}"
        ]
    assert ray_run["trainer"]["mro"][3:5] == [
        "sat_ext.openrlhf.lag.actors._LagSync",
        "openrlhf.trainer.ppo_trainer.BasePPOTrainer",
    ]


def test_in_the_workers_interval_mode_keeps_its_schedule_through_evaluations(ray_run):
    logs = ray_run["logs"]  # --lag.interval 2 --lag.prefetch 1 --eval.steps 2: queue of 2
    steps = ray_run["prompts"] // 2  # --rollout.batch_size 2
    assert ray_run["max_steps"] == len(logs) == steps
    assert [e["step"] for e in ray_run["evals"]] == list(range(2, steps, 2))
    for s, log in enumerate(logs, start=1):
        assert (log["lag/scheduled/max"], log["lag/scheduled_steps/max"]) == scheduled_lag(s, 2, 1)
        assert (log["lag/max"], log["lag/steps/max"]) == scheduled_lag(s, 2, 1) and log["lag/off_schedule"] == 0
        assert log["lag/broadcast"] == float(s % 2 == 0)
    assert ray_run["engine_weights"] == steps // 2
