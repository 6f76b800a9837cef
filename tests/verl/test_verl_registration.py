"""Registration of ``sat`` / ``sat_gspo`` in fresh processes, as verl's driver and Ray workers get it.

* ``import verl`` alone registers both (the ``verl.plugins`` entry point);
* with ``VERL_USE_EXTERNAL_PLUGINS=none`` the ``_target_`` import alone registers them (Hydra imports the
  target module when the ActorConfig is built);
* a plugin that cannot import is reported loudly on stderr (verl itself hides it at DEBUG);
* importing ``sat_ext.verl.config`` before verl (with ``VERL_USE_EXTERNAL_MODULES``) registers cleanly;
* the same inside a CPU Ray worker (one Ray session for this module), for both plugin settings.

The fresh subprocesses start together (each pays verl's import) and are checked one test each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from _verl_helpers import compose, sat_overrides

PY = sys.executable
PROBE = textwrap.dedent(
    """
    import json, sys
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R
    def state():
        return {n: (R[n].__module__ if n in R else None) for n in ("sat", "sat_gspo")}
    """
)

SCRIPTS = {
    "import_verl": PROBE.replace("from verl.trainer", "import verl\nfrom verl.trainer")
    + "print(json.dumps({'after_import': state()}))",
    "target_only": PROBE
    + textwrap.dedent(
        """
        before = state()
        from omegaconf import OmegaConf
        from verl.utils.config import omega_conf_to_dataclass
        node = OmegaConf.create({"_target_": "sat_ext.verl.config.SATPolicyLossConfig", "loss_mode": "sat",
                                 "sat_quantile": 0.8})
        cfg = omega_conf_to_dataclass(node)
        print(json.dumps({"before": before, "after_target": state(), "type": type(cfg).__name__,
                          "q": cfg.sat_quantile}))
        """
    ),
    "broken_plugin": "import sys\nsys.modules['sat_ext.verl.config'] = None\n"
    + PROBE.replace("from verl.trainer", "import verl\nfrom verl.trainer")
    + textwrap.dedent(
        """
        try:
            from verl.trainer.ppo.core_algos import get_policy_loss_fn
            get_policy_loss_fn("sat")
            err = None
        except ValueError as e:
            err = str(e)
        print(json.dumps({"after_import": state(), "error": err}))
        """
    ),
    "sat_ext_first": "import sat_ext.verl.config\n" + PROBE + "print(json.dumps({'after_import': state()}))",
}
ENVS = {
    "import_verl": {},
    "target_only": {"VERL_USE_EXTERNAL_PLUGINS": "none"},
    "broken_plugin": {},
    "sat_ext_first": {"VERL_USE_EXTERNAL_MODULES": "sat_ext.verl.plugin"},
}
SAT_MODULE = "sat_ext.verl.losses"


@pytest.fixture(scope="module")
def fresh():
    """Run every script in its own fresh interpreter, concurrently; name -> (rc, json, stderr)."""
    procs = {}
    for name, script in SCRIPTS.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
        env.update(ENVS[name])
        env["OMP_NUM_THREADS"] = "1"
        procs[name] = subprocess.Popen([PY, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, cwd="/")
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=300)
        last = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        out[name] = (p.returncode, json.loads(last[-1]) if last else None, stderr)
    return out


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


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    import _verl_ray_tasks
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(_verl_ray_tasks)  # the worker cannot import tests/verl modules
    env = {k: v for k, v in os.environ.items() if k.startswith("VERL_USE_EXTERNAL")}
    for k in env:
        os.environ.pop(k)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
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
    res_auto, res_none = ray.get([
        task.remote(actor_cfg),
        task.options(runtime_env={"env_vars": {"VERL_USE_EXTERNAL_PLUGINS": "none", "OMP_NUM_THREADS": "1"}}).remote(
            actor_cfg),
    ], timeout=300)
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
