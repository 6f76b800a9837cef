"""``sat-ext smoke openrlhf``'s parts without a live loop: its commands pass OpenRLHF's real parser and sat_ext's
launch checks, the registry patch goes onto a copy only, OpenRLHF's own TensorBoard logger becomes
metrics.jsonl, the reward reads the response back, and the OpenRLHF checks fail where they should."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("openrlhf")

from sat_ext.metric_names import OPENRLHF_NAMES  # noqa: E402
from sat_ext.runlog import Expectation, Record, RunLogError, check_run  # noqa: E402
from sat_ext.smoke import checks  # noqa: E402
from sat_ext.smoke import openrlhf_variants as ov  # noqa: E402
from sat_ext.smoke.assets import prompt_rows, response_text, write_model  # noqa: E402
from sat_ext.smoke.reward import reward_func  # noqa: E402
from sat_ext.smoke.tensorboard import read_scalars, write_metrics  # noqa: E402

STUBS = Path(__file__).resolve().parents[1] / "openrlhf"
PARSE = textwrap.dedent("""
    import contextlib, io, json, sys
    sys.path.insert(0, sys.argv[1])
    import _openrlhf_stubs
    _openrlhf_stubs.install()  # flash_attn, imported by OpenRLHF's CLI module
    from sat_ext.openrlhf import train_ppo_ray as launcher

    class Stop(Exception):
        pass

    def stop(args):
        raise Stop(args)

    out = {}
    for name, argv in json.loads(sys.argv[2]).items():
        extensions = (*launcher.EXTENSIONS, launcher.Extension("stop", (), lambda p: None, stop, lambda: None))
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                launcher.main(argv, extensions=extensions if name.startswith("launcher") else extensions[-1:])
        except Stop as s:
            a = s.args[0]
            out[name] = {"loss": a.actor.policy_loss_type, "queue": a.train.async_queue_size,
                         "lag": vars(a.lag) if hasattr(a, "lag") else {},
                         "kwargs": getattr(a.actor, "policy_loss_kwargs", None)}
        except SystemExit as e:
            out[name] = {"exit": e.code, "error": err.getvalue().strip().splitlines()[-1]}
    print("RESULT " + json.dumps(out))
""")


def _parse(cases: dict[str, list[str]], pythonpath: str | None = None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", PARSE, str(STUBS), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


def _argv(cmd) -> list[str]:
    return cmd.argv[3:]  # python -m <module>


def test_each_variants_command_passes_openrlhfs_parser_and_the_launch_checks(tmp_path):
    launcher = {}
    for name, variant in ov.VARIANTS.items():
        for device in ("cpu", "cuda"):
            cmd = ov.prepare(variant, tmp_path / name, Path("/m"), 4, device, tmp_path / "scratch")
            assert cmd.env["RAY_ADDRESS"] == "local"  # a private Ray instance on either device
            assert (cmd.env.get("SAT_EXT_OPENRLHF_CPU") == "1") is (device == "cpu")
            assert cmd.argv[2] == (ov.CLI if variant.patched_cli else ov.LAUNCHER)
            if not variant.patched_cli:
                launcher[f"launcher:{name}:{device}"] = _argv(cmd)
    got = _parse(launcher)
    for key, result in got.items():
        name = key.split(":")[1]
        lag = ov.VARIANTS[name].lag or {}
        assert result["loss"] == ov.VARIANTS[name].loss and result["lag"] == lag, (key, result)
    assert got["launcher:bounded1-drop:cpu"]["queue"] == 1 and got["launcher:interval2:cpu"]["queue"] == 1


def test_agent_bounded1_runs_openrlhfs_agent_path_and_a_bad_agent_file_is_refused_at_launch(tmp_path):
    variant = ov.VARIANTS["agent-bounded1"]
    assert variant.name not in ov.DEFAULT  # opt-in: --variants agent-bounded1
    cmd = ov.prepare(variant, tmp_path / "agent", Path("/m"), 4, "cpu", tmp_path / "scratch")
    argv = _argv(cmd)
    agent = argv[argv.index("--train.agent_func_path") + 1]
    assert agent == str(Path(ov.__file__).with_name("openrlhf_calc.py")) and "--reward.remote_url" not in argv
    assert cmd.env["SAT_EXT_SMOKE_EPISODES"] == str((tmp_path / "agent" / "episodes.jsonl").resolve())
    no_executor = tmp_path / "agent.py"
    no_executor.write_text("x = 1\n")
    cases = {
        f"launcher:{name}": [str(path) if a == agent else a for a in argv]
        for name, path in (("missing", tmp_path / "missing.py"), ("no_executor", no_executor))
    }
    got = _parse(cases)
    assert got["launcher:missing"] == {
        "exit": 2,
        "error": f"train_ppo_ray.py: error: --train.agent_func_path {tmp_path / 'missing.py'}: no such file (the "
        "path is read by each vLLM actor, so give it absolute)",
    }
    assert got["launcher:no_executor"]["exit"] == 2
    assert (
        f"--train.agent_func_path {no_executor}: the file defines no AgentExecutor"
        in got["launcher:no_executor"]["error"]
    )


def test_sync_sat_runs_openrlhfs_plain_cli_on_a_patched_copy(tmp_path):
    import openrlhf

    cmd = ov.prepare(ov.VARIANTS["sync-sat"], tmp_path / "sync-sat", Path("/m"), 4, "cpu", tmp_path / "scratch")
    copy = Path(cmd.env["PYTHONPATH"].split(os.pathsep)[0])
    assert copy == tmp_path / "scratch" / "openrlhf_patched"
    assert "def register_policy_loss" in (copy / "openrlhf" / "models" / "loss.py").read_text()
    assert "def register_policy_loss" not in (Path(openrlhf.__file__).parent / "models" / "loss.py").read_text()
    got = _parse({"plain": _argv(cmd)}, pythonpath=str(copy))
    assert got["plain"]["loss"] == "sat" and got["plain"]["kwargs"] == ov.SAT_KWARGS  # unpatched, it is refused


def test_bounded1_drop_oversamples_one_prompt_and_keeps_every_step_non_empty():
    variant = ov.VARIANTS["bounded1-drop"]
    for steps in (1, 4, 7):
        batch = variant.batch(steps)
        flags = ov._flags(variant, Path("/f"), Path("/m"), Path("/d"), steps)
        assert flags[flags.index("--rollout.vllm_generate_batch_size") + 1] == str(batch + 1)
        assert batch >= steps  # a step's leftovers are fewer than its batch: one fresh group at least
    assert ov.VARIANTS["interval2"].batch(7) == ov.BATCH


def test_openrlhfs_tensorboard_logger_becomes_metrics_jsonl(tmp_path):
    from openrlhf.utils.logging_utils import TensorboardLogger

    args = SimpleNamespace(
        logger=SimpleNamespace(tensorboard_dir=str(tmp_path / "tb"), wandb=SimpleNamespace(run_name="run"))
    )
    logger = TensorboardLogger(args)
    logger.log_train(1, {"policy_loss": 0.25, "sat_gate_rate": 0.1, "lag/max": 1.0, "generated_samples": ["x", 0.5]})
    logger.log_train(2, {"policy_loss": float("nan"), "sat_gate_rate": 0.001, "lag/max": 2.0})
    logger.close()
    assert write_metrics(tmp_path / "tb", tmp_path / "metrics.jsonl") == 2
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [
        {"step": 1, "data": {"lag/max": 1.0, "policy_loss": 0.25, "sat_gate_rate": 0.1}},
        {"step": 2, "data": {"lag/max": 2.0, "policy_loss": None, "sat_gate_rate": 0.001}},
    ]
    logger = TensorboardLogger(args)  # a second run into the same folder: step 1 again
    logger.log_train(1, {"policy_loss": 0.5})
    logger.close()
    with pytest.raises(RunLogError, match="policy_loss logged twice at step 1"):
        read_scalars(tmp_path / "tb")


def test_the_reward_reads_the_response_out_of_openrlhfs_decoded_query(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(write_model(tmp_path / "model"))
    row = prompt_rows(1)[0]
    prompt = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    label = row["reward_model"]["ground_truth"]
    for response in (label, "a " + label + "\n", "  ", ""):
        ids = tokenizer(text=prompt + response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        query = tokenizer.decode(ids, skip_special_tokens=False)  # as OpenRLHF's SingleTurnAgentExecutor does
        assert response_text(query) == response
        want = sum(c in label for c in response) / len(response) if response else 0.0
        assert reward_func([query], [prompt], [label])["rewards"] == want


def _r(step, **values):
    return Record(step, {k.replace("__", "/"): v for k, v in values.items()})


def test_the_openrlhf_checks_fail_where_they_should():
    good = [
        _r(s, policy_version=float(max(0, s - 2) // 2), lag__consumed=16.0, rollout__num_samples=16.0)
        for s in (1, 2, 3, 4)
    ]
    assert checks.check_tags(good, 2, 1).passed is True
    assert checks.check_tags(good, 2, 0).passed is False  # without prefetch step 3's batch is version 1's
    partial = good[:3] + [_r(4, policy_version=1.0, lag__consumed=8.0, rollout__num_samples=16.0)]
    assert checks.check_tags(partial, 2, 1).passed is False
    assert checks.check_drops([_r(1, lag__dropped_total=0.0)], forced=True, failed_key=None).passed is False
    assert checks.check_drops([_r(1, lag__dropped_total=4.0)], forced=True, failed_key=None).passed is True
    assert checks.check_weight_sync([_r(1, sat_d_pi=0.002), _r(2, sat_d_pi=0.08)], key="sat_d_pi").passed is False


def test_run_checks_read_openrlhfs_names():
    steps = [
        _r(
            s,
            policy_loss=-0.1,
            actor_grad_norm=0.5,
            sat_active=1.0,
            sat_gate_rate=0.097,
            sat_d_pi=0.002,
            sat_nonfinite_frac=0.0,
        )
        for s in (1, 2)
    ]
    exp = Expectation(sat=True, rollout_denominator=True, names=OPENRLHF_NAMES, steps_per_record=1)
    assert all(r.passed is not False for r in check_run(steps, exp))
    assert "eval count" not in {r.name for r in check_run(steps, exp)}  # verl's val-core/ keys: not OpenRLHF's log
    assert "eval count" in {r.name for r in check_run(steps, Expectation(sat=True))}
    steps[1].values["policy_loss"] = math.nan
    results = {r.name: r for r in check_run(steps, exp)}
    assert results["finite losses"].passed is False and "policy_loss = nan at step 2" in results["finite losses"].detail
    assert check_run(steps, Expectation(sat=True))[0].passed is False  # verl's names: no training step found


def test_a_relative_out_folder_reaches_the_run_as_absolute_paths(tmp_path, monkeypatch):
    """The run's working directory is its variant folder, so every path it gets must be absolute."""
    from sat_ext.smoke import cli, runner
    from sat_ext.smoke.runner import RunResult

    seen = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "write_model", lambda folder: folder)
    monkeypatch.setattr(
        runner, "run", lambda argv, env, log, timeout_s, cwd: seen.append((argv, cwd)) or RunResult(1, 0.0)
    )
    assert cli.main(["openrlhf", "--variants", "interval2", "--out", "smoke_out", "--device", "cpu"]) == 1
    ((argv, cwd),) = seen
    model = Path(argv[argv.index("--actor.model_name_or_path") + 1])
    assert cwd == tmp_path / "smoke_out" / "interval2" and model == tmp_path / "smoke_out" / "model"
