"""Registration of ``sat`` / ``sat_gspo`` in fresh processes, as verl's driver and Ray workers get it.

* ``import verl`` alone registers both (the ``verl.plugins`` entry point);
* with ``VERL_USE_EXTERNAL_PLUGINS=none`` the ``_target_`` import alone registers them (Hydra imports the
  target module when the ActorConfig is built);
* a plugin that cannot import is reported loudly on stderr (verl itself hides it at DEBUG);
* importing ``sat_ext.verl.config`` before verl (with ``VERL_USE_EXTERNAL_MODULES``) registers cleanly;
* the same inside a CPU Ray worker (one Ray session for this module), for both plugin settings.
* the lag sampler loads from its ``pkg://`` path alone, main_ppo's TaskRunner registers the lag trainer, and the
  lag classes pickle under ``sat_ext.verl.lag``; their former module paths are the moved modules.

The fresh subprocesses start together (each pays verl's import) and are checked one test each.
"""

from __future__ import annotations

import importlib
import os

import _verl_fresh
import pytest
from _verl_helpers import compose, sat_overrides

SAT_MODULE = "sat_ext.verl.loss"


start_background = _verl_fresh.start


@pytest.fixture(scope="module")
def fresh(background):
    """Every script of _verl_fresh in its own fresh interpreter (started together when collection ended);
    name -> (returncode, json, stderr)."""
    return _verl_fresh.results(background)


def test_import_verl_registers_both_losses(fresh):
    rc, res, err = fresh["import_verl"]
    assert rc == 0, err
    assert res["after_import"] == {"sat": SAT_MODULE, "sat_gspo": SAT_MODULE}
    assert "FAILED" not in err


def test_target_import_alone_registers_without_plugins(fresh):
    rc, res, err = fresh["target_only"]
    assert rc == 0, err
    assert res["before"] == {"sat": None, "sat_gspo": None}, "VERL_USE_EXTERNAL_PLUGINS=none must load no plugin"
    assert res["after_target"] == {"sat": SAT_MODULE, "sat_gspo": SAT_MODULE}
    assert res["type"] == "SATPolicyLossConfig" and res["q"] == 0.8


def test_failed_plugin_import_is_loud(fresh):
    rc, res, err = fresh["broken_plugin"]
    assert rc == 0, "verl swallows plugin errors; the process goes on"
    assert "sat_ext: FAILED to register the SAT policy losses with verl" in err, err
    assert "Traceback" in err and "sat_ext.verl.config" in err
    assert res["after_import"] == {"sat": None, "sat_gspo": None}
    assert "Unsupported loss mode" in res["error"]


def test_importing_sat_ext_before_verl_registers_cleanly(fresh):
    """Regression: this order used to run the plugin on a half-initialised sat_ext.verl.config (a false FAILED,
    and an ImportError with VERL_USE_EXTERNAL_MODULES=sat_ext.verl.plugin)."""
    rc, res, err = fresh["sat_ext_first"]
    assert rc == 0, err
    assert "FAILED" not in err, err
    assert res["after_import"] == {"sat": SAT_MODULE, "sat_gspo": SAT_MODULE}


def test_the_lag_sampler_path_alone_loads_and_the_task_runner_registers_the_trainer(fresh):
    pytest.importorskip("transfer_queue")
    rc, res, err = fresh["lag_paths"]
    assert rc == 0, err
    assert res["replay_buffer"] and not res["before_run"]
    assert res["modules"] == ["sat_ext.verl.lag.sampler", "sat_ext.verl.lag.trainer", "sat_ext.verl.lag.kept_weights"]
    assert res["pickled_as"] == [["verl.lag."]] * 3


@pytest.mark.parametrize(
    "former, moved",
    [("lag_overrides", "overrides"), ("lag_sampler", "sampler"), ("lag_trainer", "trainer")]
    + [(m, m) for m in ("prepared", "kept_weights")],
)
def test_a_former_lag_module_path_is_the_moved_module(former, moved):
    pytest.importorskip("transfer_queue")
    module = importlib.import_module(f"sat_ext.verl.lag.{moved}")
    assert importlib.import_module(f"sat_ext.verl.{former}") is module
    assert getattr(importlib.import_module("sat_ext.verl"), former) is module


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    import _verl_ray_tasks
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(_verl_ray_tasks)  # the worker cannot import tests/verl modules
    env = {k: v for k, v in os.environ.items() if k.startswith("VERL_USE_EXTERNAL")}
    for k in env:
        os.environ.pop(k)
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    try:
        yield ray, _verl_ray_tasks
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(_verl_ray_tasks)
        os.environ.update(env)


def test_ray_worker_registers_and_runs_sat(ray_session):
    ray, tasks = ray_session
    actor_cfg = compose(sat_overrides("sat_gspo", quantile=0.8)).actor_rollout_ref.actor
    task = ray.remote(num_cpus=1)(tasks.worker_registration_and_loss)
    res_auto, res_none = ray.get(
        [
            task.remote(actor_cfg),
            task.options(
                runtime_env={"env_vars": {"VERL_USE_EXTERNAL_PLUGINS": "none", "OMP_NUM_THREADS": "1"}}
            ).remote(actor_cfg),
        ],
        timeout=300,
    )
    assert res_auto["pid"] != os.getpid() and res_none["pid"] != os.getpid()

    # Default plugin loading: import verl in the worker registered both, via the entry point.
    assert res_auto["plugins_env"] == "auto"
    assert res_auto["after_import_verl"] == ["sat", "sat_gspo"] and res_auto["plugin_module_loaded"]
    # No plugins: nothing after import verl; the worker's ActorConfig build (the _target_) registered them.
    assert res_none["plugins_env"] == "none"
    assert res_none["after_import_verl"] == [] and not res_none["plugin_module_loaded"]
    for res in (res_auto, res_none):
        assert res["after_actor_config"] == ["sat", "sat_gspo"]
        assert res["policy_loss_type"] == "sat_ext.verl.config.SATPolicyLossConfig"
        assert res["fn_module"] == SAT_MODULE and res["grad_finite"]
        assert "actor/sat/active" in res["metric_keys"]
    assert res_auto["loss"] == res_none["loss"]
