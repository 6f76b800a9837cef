"""`sat-ext example`: the shipped example folders, listed, located and written out, from the checkout and from an
installed wheel.

The wheel test builds the wheel of this checkout, installs it (``pip install --no-deps``) into a real fresh venv
that sees this environment's packages except sat_ext, and from a directory outside the checkout writes the verl
example out, runs its data script on the sample rows, and composes a variant with Hydra from the written folder
and from the ``pkg://`` config path, then runs verl's ``validate_config`` and sat_ext's check on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from sat_ext.example_configs import ExampleError, example_names, examples_root, main, variants, write

REPO = Path(__file__).resolve().parents[2]
VERL_EXAMPLE = "verl_aime_qwen3_30b"


def test_the_checkout_is_found_first():
    # A source checkout reads its own examples/, whatever an installed sat_ext.examples holds.
    assert examples_root() == REPO / "examples"
    assert VERL_EXAMPLE in example_names()


def test_variants_are_the_config_files_that_are_not_bases(tmp_path):
    example = tmp_path / "my_recipe"
    (example / "config" / "method").mkdir(parents=True)
    (example / "run.sh").write_text("#!/usr/bin/env bash\n")
    (example / "config" / "base.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\n")
    for name in ("b_lag1", "a_lag8"):
        (example / "config" / f"{name}.yaml").write_text("defaults:\n  - base\n  - method: x\n  - _self_\n")
    (example / "config" / "method" / "x.yaml").write_text("{}\n")
    (tmp_path / "not_an_example").mkdir()  # no run.sh
    assert example_names(tmp_path) == ["my_recipe"]
    assert variants("my_recipe", tmp_path) == ["a_lag8", "b_lag1"]
    with pytest.raises(ExampleError, match="unknown example 'nope'.*known: my_recipe"):
        variants("nope", tmp_path)


def test_list_path_and_bad_input(capsys):
    assert main(["list"]) == 0
    assert f"{VERL_EXAMPLE}\t26 variants" in capsys.readouterr().out.splitlines()
    assert main(["list", VERL_EXAMPLE]) == 0
    listed = capsys.readouterr().out.split()
    run_sh = subprocess.run(
        ["bash", str(REPO / "examples" / VERL_EXAMPLE / "run.sh"), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == run_sh == variants(VERL_EXAMPLE) and len(listed) == 26
    assert main(["path", VERL_EXAMPLE]) == 0
    assert capsys.readouterr().out.strip() == str(REPO / "examples" / VERL_EXAMPLE / "config")
    assert main(["path", "no_such_example"]) == 2
    assert "unknown example 'no_such_example'" in capsys.readouterr().err


def test_write_refuses_a_non_empty_destination(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(ExampleError, match="exists and is not an empty directory"):
        write(VERL_EXAMPLE, tmp_path)


def test_written_folder_runs_on_its_own(tmp_path):
    dest = write(VERL_EXAMPLE, tmp_path / "out")
    assert os.access(dest / "run.sh", os.X_OK) and (dest / "data" / "prepare_aime_dapo.py").is_file()
    assert not list(dest.rglob("__init__.py")) and not list(dest.rglob("__pycache__"))
    listed = subprocess.run(["bash", str(dest / "run.sh"), "--list"], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == variants(VERL_EXAMPLE)
    cmd = subprocess.run(
        ["bash", str(dest / "run.sh"), "gspo_tis_lag8"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SAT_DRY_RUN": "1"},
    ).stdout.splitlines()
    assert cmd[3:7] == ["--config-path", str(dest / "config"), "--config-name", "gspo_tis_lag8"]


# ------------------------------------------------------------------------------------------- from a wheel

_IN_VENV = r"""
import json, sys
from pathlib import Path
from hydra import compose, initialize_config_dir, initialize_config_module
from verl.utils.config import validate_config
import sat_ext
from sat_ext.verl.lag.overrides import check_verl_config

written = Path(sys.argv[1])
with initialize_config_dir(config_dir=str(written / "config"), version_base=None):
    from_dir = compose("sat_gspo_r3_lag8")
with initialize_config_module("sat_ext.examples.verl_aime_qwen3_30b.config", version_base=None):
    from_pkg = compose("sat_gspo_r3_lag8")
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.utils.dataset.rl_dataset import get_dataset_class
validate_config(from_dir, use_reference_policy=True, use_critic=False)
check_verl_config(from_dir)
print(json.dumps({"sat_ext": sat_ext.__file__, "same": from_dir == from_pkg,
                  "loss": from_dir.actor_rollout_ref.actor.policy_loss.loss_mode,
                  "sync": from_dir.trainer.v1.separate_async.parameter_sync_step,
                  "reward": get_custom_reward_fn(from_dir).args[0].__module__,
                  "dataset": get_dataset_class(from_dir.data).__module__}))
"""


def _venv_without_sat_ext(root: Path) -> Path:
    """A real venv whose site-packages link to this environment's, every sat_ext install left out."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    farm = root / "site"
    farm.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "sat_ext" not in entry.name.lower().replace("-", "_"):  # the dist-info, an editable install's hooks
            (farm / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(target) / "zz_sat_ext_test.pth").write_text(f"import site; site.addsitedir({str(farm)!r})\n")
    return python


def test_every_package_folder_of_sat_ext_is_in_the_wheel():
    # pyproject.toml lists the packages by name: a folder left off it is left out of the wheel
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "sat_ext").rglob("__init__.py")}
    assert found - listed == set()


@pytest.mark.slow
def test_installed_wheel_writes_and_composes_an_example(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
        env=env,
    )
    [wheel] = (tmp_path / "dist").glob("sat_ext-*.whl")
    python = _venv_without_sat_ext(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
        env=env,
    )
    outside = tmp_path / "work"
    outside.mkdir()
    sat_ext_cli = python.parent / "sat-ext"
    p = subprocess.run(
        [str(sat_ext_cli), "example", "write", VERL_EXAMPLE, "recipe"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    written = outside / "recipe"
    assert sorted(p.name for p in (written / "config").glob("*_lag*.yaml")) == sorted(
        f"{v}.yaml" for v in variants(VERL_EXAMPLE)
    )
    data = subprocess.run(
        [
            str(python),
            str(written / "data" / "prepare_aime_dapo.py"),
            "--sample",
            "--out-dir",
            str(outside / "data"),
            "--no-openrlhf",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert data.returncode == 0, data.stderr
    assert json.loads((outside / "data" / "manifest.json").read_text())["paper_train_rows"] == 30712
    p = subprocess.run(
        [str(python), "-c", _IN_VENV, str(written)], cwd=outside, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["sat_ext"].startswith(str(tmp_path / "venv")), report  # the installed wheel, not the checkout
    assert report == {
        **report,
        "same": True,
        "loss": "sat_gspo",
        "sync": 8,
        "reward": "sat_ext.examples.math_reward",
        "dataset": "sat_ext.examples.verl_dataset",
    }  # the reward and the dataset class ship in the wheel
