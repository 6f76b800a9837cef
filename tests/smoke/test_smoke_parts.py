"""The smoke command's parts without a live loop: its verl commands compose with verl's real config and pass
sat_ext's launch checks, its checks fail where they should, and its runner kills and cleans up."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from sat_ext.runlog import Record  # noqa: E402
from sat_ext.shm import SHM  # noqa: E402
from sat_ext.smoke import checks  # noqa: E402
from sat_ext.smoke.cli import main  # noqa: E402
from sat_ext.smoke.runner import run  # noqa: E402
from sat_ext.smoke.verl_variants import (  # noqa: E402
    VARIANTS,
    Paths,
    command,
    data_rows,
    write_agent_loops,
    write_tools,
)
from sat_ext.verl.lag.overrides import PREPARED_KEY  # noqa: E402
from sat_ext.verl.lag.prepared import prepare_verl_config  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
PATHS = Paths(Path("/m"), Path("/t.parquet"), Path("/v.parquet"), Path("/r.py"), Path("/a.yaml"), Path("/k"))


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_each_variant_composes_with_verls_config_and_passes_the_launch_checks(name, device, tmp_path):
    variant = VARIANTS[name]
    paths = PATHS  # the launch checks read the agent-loop and tool files: real ones where the variant has them
    if variant.agent or variant.forced_evictions:
        paths = dataclasses.replace(PATHS, agent_loops=write_agent_loops(tmp_path / "agent_loops.yaml", variant))
    if variant.agent:
        paths = dataclasses.replace(paths, tools=write_tools(tmp_path / "tools.yaml"))
    cmd = command(variant, paths, steps=4, device=device)
    assert cmd.argv[:3] == [sys.executable, "-m", "sat_ext.verl.main_ppo" if variant.lag else "verl.trainer.main_ppo"]
    assert cmd.env == ({"SAT_EXT_VERL_CPU": "1"} if device == "cpu" else {})
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=cmd.argv[3:])
    prepared = prepare_verl_config(cfg)  # what sat_ext.verl.main_ppo runs before Ray starts
    assert (OmegaConf.select(prepared, f"trainer.v1.sampler.sampler_kwargs.{PREPARED_KEY}") is not None) is bool(
        variant.lag
    )
    policy = cfg.actor_rollout_ref.actor.policy_loss
    assert policy.loss_mode == variant.loss and cfg.trainer.total_training_steps == 4
    assert cfg.algorithm.rollout_correction.bypass_mode is (variant.denominator == "rollout")
    assert cfg.ray_kwargs.ray_init.address == "local"  # a private Ray instance
    backend = cfg.actor_rollout_ref.rollout.checkpoint_engine.backend
    if variant.lag:
        assert backend == ("sat_ext_shm" if device == "cpu" else "nccl")
    agent_loops = cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path
    assert (agent_loops is not None) is (variant.forced_evictions or variant.agent)
    assert (cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path is not None) is variant.agent
    spill = OmegaConf.select(cfg, "trainer.v1.sat_ext.kept_weights_dir")
    assert spill == ("/k" if variant.spill_kept_weights else None)


def test_only_bounded1_drop_gets_the_straggler_and_the_failure():
    assert [n for n, v in VARIANTS.items() if data_rows(v)] == ["bounded1-drop"]


def _r(step, **values):
    return Record(step, {k.replace("__", "/"): v for k, v in values.items()})


def test_kept_weights_check_fails_when_the_denominator_is_the_live_policy():
    good = [
        _r(1, lag__steps__min=0.0, lag__kept_weights_identical=0.0, lag__kept_weights_restored=0.5),
        _r(
            2,
            lag__steps__min=1.0,
            lag__kept_weights_identical=0.0,
            lag__kept_weights_restored=1.0,
            actor__sat__d_pi=0.05,
        ),
    ]
    assert checks.check_kept_weights(good).passed is True
    aliased = [
        good[0],
        _r(
            2,
            lag__steps__min=1.0,
            lag__kept_weights_identical=1.0,
            lag__kept_weights_restored=1.0,
            actor__sat__d_pi=0.0,
        ),
    ]
    result = checks.check_kept_weights(aliased)
    assert result.passed is False and "kept_weights_identical = 1.0" in result.detail
    assert checks.check_kept_weights(good[:1]).passed is False  # no lagged step at all


def test_bound_drop_and_sync_checks():
    assert checks.check_bound([_r(1, lag__max=1.0), _r(2, lag__max=2.0)], 1).passed is False
    assert checks.check_bound([_r(1, lag__max=1.0)], 1).passed is True
    forced = [_r(1, lag__dropped_total=0.0), _r(2, lag__dropped_total=1.0), _r(3, lag__dropped_total=1.0)]
    assert checks.check_drops(forced, forced=True).passed is False  # no failed group counted
    forced[0].values["training/rollout_failure/evicted_samples"] = 4.0
    assert checks.check_drops(forced, forced=True).passed is True
    assert checks.check_drops(forced, forced=False).passed is False
    assert checks.check_weight_sync([_r(1, training__rollout_probs_diff_mean=0.06)]).passed is False
    assert checks.check_weight_sync([_r(1)]).passed is None
    assert checks.check_steps([_r(1), _r(3)], 3).passed is False


def test_the_spill_check_wants_the_kept_files(tmp_path):
    assert checks.check_spilled(tmp_path).passed is False
    (tmp_path / "sat_ext_v3.rank0.pt").write_bytes(b"")
    assert checks.check_spilled(tmp_path).passed is True


def test_runner_kills_the_process_group_at_the_time_limit_and_keeps_shm_in_use(tmp_path):
    """The run leaves a shared-memory file behind and a child that outlives the time limit; meanwhile another
    job (outside the run's process group) creates one it keeps open: only the run's leftover is removed."""
    import subprocess

    if not SHM.is_dir():
        pytest.skip("no /dev/shm")
    left, other = SHM / f"psm_smoke_left_{os.getpid()}", SHM / f"psm_smoke_other_{os.getpid()}"
    script = (
        f"import pathlib, subprocess, sys, time; pathlib.Path('{left}').write_text('x'); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", f"import time; f = open('{other}', 'w'); time.sleep(30)"])
    try:
        result = run([sys.executable, "-c", script], {}, tmp_path / "log.txt", timeout_s=3, cwd=tmp_path)
        assert result.timed_out and result.seconds < 30
        assert not left.exists() and other.exists()
    finally:
        holder.kill()
        holder.wait()
        for path in (left, other):
            path.unlink(missing_ok=True)


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as err:
        main(["verl", "--variants", "interval3"])
    assert err.value.code == 2 and "unknown ['interval3']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["nemo"])
