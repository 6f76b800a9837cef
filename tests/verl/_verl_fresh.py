"""Fresh interpreters for test_verl_registration.py, its ``background`` jobs: tests/conftest.py starts them right
after collection when a registration test is selected, so that they overlap other tests (the verl import in each
fresh process costs seconds of CPU; the in-process tests mostly leave the second core idle).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

from _background import Background

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
    # the lag sampler as verl loads it from a config's path string, then the lag trainer as main_ppo's TaskRunner
    # registers it (verl's own TaskRunner.run, the loop, stood in for); each class's pickle names its module
    "lag_paths": textwrap.dedent(
        """
        import json, pickle, sys
        from ray import cloudpickle
        from verl.utils.import_utils import load_extern_object
        sampler = load_extern_object("pkg://sat_ext.verl.lag.sampler", "SATLagReplayBuffer")
        from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
        from verl.trainer.main_ppo import TaskRunnerV1
        TaskRunnerV1.__ray_actor_class__.run = lambda self, config: None
        from sat_ext.verl.main_ppo import SATTaskRunner
        before_run = "sat_ext.verl.lag.trainer" in sys.modules
        SATTaskRunner.__ray_actor_class__.run(object.__new__(SATTaskRunner.__ray_actor_class__), None)
        from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
        from sat_ext.verl.lag.kept_weights import KeptWeightsWorker
        classes = [sampler, get_trainer_cls("sat_separate_async"), KeptWeightsWorker]
        pickles = [pickle.dumps(c) + cloudpickle.dumps(c) for c in classes]
        print(json.dumps({"replay_buffer": issubclass(sampler, ReplayBufferAsync), "before_run": before_run,
                          "modules": [c.__module__ for c in classes],
                          "pickled_as": [[m for m in ("verl.lag.", "verl.lag_") if m.encode() in p] for p in pickles]}))
        """
    ),
}
ENVS = {
    "import_verl": {},
    "target_only": {"VERL_USE_EXTERNAL_PLUGINS": "none"},
    "broken_plugin": {},
    "sat_ext_first": {"VERL_USE_EXTERNAL_MODULES": "sat_ext.verl.plugin"},
    "lag_paths": {},
}


def start() -> dict[str, Background]:
    """Every script in its own fresh interpreter, all at once."""
    jobs = {}
    for name, script in SCRIPTS.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
        env.update(ENVS[name], OMP_NUM_THREADS="1")
        jobs[name] = Background([PY, "-c", script], env=env)
    return jobs


def results(jobs: dict[str, Background], timeout: float = 300) -> dict:
    """name -> (returncode, last JSON line of stdout or None, stderr)."""
    res = {}
    for name, job in jobs.items():
        rc = job.wait(timeout)
        last = [ln for ln in job.stdout.splitlines() if ln.startswith("{")]
        res[name] = (rc, json.loads(last[-1]) if last else None, job.stderr)
    return res
