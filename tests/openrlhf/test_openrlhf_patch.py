"""patches/openrlhf-0.11.2-policy-loss-registry.diff applies to the pristine 0.11.2 sources and resolves `sat`.

The pristine sources are the installed wheel's files, checked against the wheel's own RECORD hashes. The
patched tree is then imported in a fresh process (it shadows the installed package there), through
sat_ext's loader, with sat_ext's entry points declared by a throw-away dist-info.
"""

import base64
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PATCH = Path(__file__).resolve().parents[2] / "patches" / "openrlhf-0.11.2-policy-loss-registry.diff"
GROUP = "openrlhf.policy_losses"
# The lines sat_ext's pyproject.toml is to carry (patches/README.md).
ENTRY_POINTS = {"sat": "sat_ext.openrlhf.loss:SATPolicyLoss", "sat_gspo": "sat_ext.openrlhf.loss:SATPolicyLoss"}


def _patched_files():
    return [line[6:].strip() for line in PATCH.read_text().splitlines() if line.startswith("+++ b/openrlhf/")]


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory):
    dist = importlib.metadata.distribution("openrlhf")
    assert dist.version == "0.11.2"
    package = Path(dist.locate_file("openrlhf"))
    record = {f.as_posix(): f.hash for f in dist.files if f.hash}
    for rel in _patched_files():
        digest = base64.urlsafe_b64encode(hashlib.sha256(Path(dist.locate_file(rel)).read_bytes()).digest())
        assert record[rel].value == digest.rstrip(b"=").decode(), f"installed {rel} differs from the 0.11.2 wheel"
    root = tmp_path_factory.mktemp("openrlhf_0.11.2")
    shutil.copytree(package, root / "openrlhf", ignore=shutil.ignore_patterns("__pycache__"))
    for args in (["git", "apply", "--check", "-v"], ["git", "apply"]):
        proc = subprocess.run([*args, str(PATCH)], cwd=root, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    return root


def test_patch_touches_exactly_the_loss_call_site_and_cli(patched_tree):
    assert _patched_files() == [
        "openrlhf/cli/train_ppo_ray.py",
        "openrlhf/models/loss.py",
        "openrlhf/trainer/ray/ppo_actor.py",
    ]
    assert (patched_tree / "tests" / "test_policy_loss_registry.py").is_file()
    for rel in _patched_files():
        compile((patched_tree / rel).read_text(), rel, "exec")


def test_patched_registry_resolves_sat(patched_tree, tmp_path):
    eps = tmp_path / "sat_ext_entry_points-0.dist-info"
    eps.mkdir()
    (eps / "METADATA").write_text("Metadata-Version: 2.1\nName: sat-ext-entry-points\nVersion: 0\n")
    (eps / "entry_points.txt").write_text(f"[{GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in ENTRY_POINTS.items()))
    script = textwrap.dedent("""
        import json, sys
        from types import SimpleNamespace as NS
        from sat_ext.openrlhf.compat import openrlhf_loss
        loss = openrlhf_loss()
        from sat_ext.openrlhf.loss import SATPolicyLoss
        args = NS(actor=NS(policy_loss_type="sat", eps_clip_low_high=(0.2, 0.28), dual_clip=None,
                           policy_loss_kwargs={"quantile": 1.5}),
                  vllm=NS(num_engines=1), algo=NS(advantage=NS(is_correction_level="token")))
        try:
            loss.get_policy_loss_cls("sat").check_args(args)
        except ValueError as e:
            refused = str(e)
        built = loss.get_policy_loss_cls("sat_gspo")(policy_loss_type="sat_gspo", quantile=0.8)
        json.dump({
            "loss_file": loss.__file__,
            "available": loss.available_policy_losses(),
            "sat_is_sat_ext": loss.get_policy_loss_cls("sat") is SATPolicyLoss,
            "subclass_of_patched_policy_loss": issubclass(SATPolicyLoss, loss.PolicyLoss),
            "refused": refused,
            "built_quantile": built.sat_config.quantile,
        }, sys.stdout)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(patched_tree), str(tmp_path)])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.splitlines()[-1])  # after DeepSpeed's own start-up lines, where it is installed
    assert out["loss_file"].startswith(str(patched_tree))
    assert {"ppo", "gspo", "sat", "sat_gspo"} <= set(out["available"])
    assert out["sat_is_sat_ext"] and out["subclass_of_patched_policy_loss"]
    assert "--actor.policy_loss_kwargs key 'quantile' must be a number strictly between 0 and 1" in out["refused"]
    assert out["built_quantile"] == 0.8


_CLI_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import _openrlhf_stubs
    _openrlhf_stubs.install()  # flash_attn, which OpenRLHF's CLI imports at module level
    from sat_ext.openrlhf import train_ppo_ray as launcher

    class Stop(Exception):
        pass

    def stop(args):
        raise Stop(args)

    base = ["--actor.model_name_or_path", "/m", "--reward.remote_url", "/r.py", "--vllm.num_engines", "1",
            "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2",
            "--algo.advantage.is_correction_level", "token", "--actor.num_gpus_per_node", "1"]
    cases = {
        "sat": [
            "--actor.policy_loss_type", "sat",
            "--actor.policy_loss_kwargs", '{"quantile": 0.8, "kernel": "power"}',
        ],
        "ppo": ["--actor.policy_loss_type", "ppo"],
        "not_an_object": ["--actor.policy_loss_type", "ppo", "--actor.policy_loss_kwargs", "[0.8]"],
        "bad_sat_option": ["--actor.policy_loss_type", "sat", "--actor.policy_loss_kwargs", '{"quantile": 1.5}'],
    }
    out = {}
    for name, argv in cases.items():
        try:  # OpenRLHF's own CLI module, unextended, stopped where it calls train(args)
            launcher.main(base + argv, extensions=(launcher.Extension("stop", (), lambda p: None, stop, lambda: None),))
        except Stop as s:
            args = s.args[0]
            kwargs = args.actor.policy_loss_kwargs
            from openrlhf.models.loss import get_policy_loss_cls
            loss = get_policy_loss_cls(args.actor.policy_loss_type)(  # as ActorPPOTrainer builds it
                clip_eps_low=args.actor.eps_clip_low_high[0], clip_eps_high=args.actor.eps_clip_low_high[1],
                dual_clip=args.actor.dual_clip, policy_loss_type=args.actor.policy_loss_type, **kwargs)
            out[name] = {"kwargs": kwargs, "type": type(kwargs).__name__, "loss": type(loss).__name__,
                         "quantile": getattr(getattr(loss, "sat_config", None), "quantile", None)}
        except SystemExit as e:
            out[name] = {"exit": e.code}
    print("RESULT " + json.dumps(out))
""")


def test_patched_cli_parses_policy_loss_kwargs_into_a_dict(patched_tree):
    """Through the patched parser and OpenRLHF's ``hierarchize`` (which turns dict values into namespaces): the
    kwargs stay a dict, a SAT loss and plain ``ppo`` both build from them, and bad JSON is refused."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(patched_tree), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", _CLI_SCRIPT, str(Path(__file__).parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["sat"] == {
        "kwargs": {"quantile": 0.8, "kernel": "power"},
        "type": "dict",
        "loss": "SATPolicyLoss",
        "quantile": 0.8,
    }
    assert out["ppo"] == {"kwargs": {}, "type": "dict", "loss": "PolicyLoss", "quantile": None}
    assert out["not_an_object"] == {"exit": 2} and out["bad_sat_option"] == {"exit": 2}
    assert "--actor.policy_loss_kwargs: expected a JSON object, got '[0.8]'" in proc.stderr
    assert "--actor.policy_loss_kwargs key 'quantile' must be a number strictly between 0 and 1" in proc.stderr


def test_installed_sat_ext_declares_the_same_entry_points():
    declared = {
        ep.name: ep.value for ep in importlib.metadata.entry_points(group=GROUP) if ep.value.startswith("sat_ext.")
    }
    assert declared == ENTRY_POINTS  # none declared (a pyproject or install that lost them) fails here
