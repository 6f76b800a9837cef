"""`sat-ext` command and `sat-ext doctor`, run as a user would, in fresh processes.

The cluster test starts a real Ray head (`ray start --head --block` in its own process group) and stops it by
ending that group, so no other Ray session on the machine is touched. The TransferQueue test runs the doctor
from a real second virtual environment that sees this one's packages except TransferQueue.
"""

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time

import pytest
from _background import Background

SAT_EXT = [sys.executable, "-m", "sat_ext.cli"]
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(args, env=None, timeout=600, python=sys.executable):
    return subprocess.run(
        [python, "-m", "sat_ext.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "RAY_ADDRESS": "", **(env or {})},
    )


def _checks(stdout: str) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(stdout)["checks"]}


def test_doctor_passes_with_a_local_ray_and_reports_json():
    p = _run(["doctor", "--json"], env={"RAY_ADDRESS": "local"})  # a private Ray, whatever else runs here
    assert p.returncode == 0, p.stdout + p.stderr
    checks = _checks(p.stdout)
    assert json.loads(p.stdout)["ok"] is True
    assert checks["verl"]["detail"] == "0.9.1" and checks["openrlhf"]["status"] == "ok"
    assert checks["sat, sat_gspo registered by `import verl` (fresh process)"]["detail"] == "yes"
    assert checks["SAT _target_ through verl's config conversion"]["status"] == "ok"
    assert "SATLagReplayBuffer" in checks["verl V1 + TransferQueue + sat_ext lag sampler/trainer"]["detail"]
    assert checks["shipped example configs compose"]["detail"].startswith("26 variants")
    assert checks["Ray (a local Ray started for this check)"]["detail"] == "1 alive node(s)"
    [node] = [c for name, c in checks.items() if name.startswith("node ")]
    assert node["status"] == "ok" and "sat, sat_gspo registered" in node["detail"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A real `ray start --head` cluster (no token auth), stopped with its whole process tree."""
    port = _free_port()
    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
    head = Background(
        [
            ray_cli,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--block",
        ],
        env={**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""},
    )
    try:
        deadline = time.time() + 120
        while "Ray runtime started" not in head.stdout + head.stderr:
            if time.time() > deadline or head.returncode is not None:
                raise RuntimeError(f"ray start --head did not come up: {head.tail()}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        head.stop()
        # `ray start` recorded this head as the machine's default cluster; a later ray.init() would try to join it
        current = pathlib.Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.exists() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


def test_doctor_uses_a_running_cluster_and_checks_every_node(ray_head):
    p = _run(["doctor", "--json"], env={"RAY_ADDRESS": ray_head, "RAY_AUTH_MODE": "disabled"})
    assert p.returncode == 0, p.stdout + p.stderr
    checks = _checks(p.stdout)
    assert checks[f"Ray (cluster at {ray_head})"]["detail"] == "1 alive node(s)"  # connected, nothing started
    nodes = [c for name, c in checks.items() if name.startswith("node ")]
    assert len(nodes) == 1 and nodes[0]["status"] == "ok"


def test_ray_address_local_never_joins_a_cluster_running_on_the_machine(ray_head, monkeypatch):
    """What keeps test_doctor_passes_with_a_local_ray_and_reports_json hermetic: with RAY_ADDRESS=local the
    doctor starts its own Ray even while another one runs here (without it, it would join that one)."""
    from sat_ext.doctor import _cluster_address

    monkeypatch.setenv("RAY_ADDRESS", "")
    assert _cluster_address() == "auto"  # the running head is found
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert _cluster_address() is None  # a private Ray is started


def test_doctor_names_what_to_set_when_the_cluster_is_unreachable():
    p = _run(["doctor"], env={"RAY_ADDRESS": f"127.0.0.1:{_free_port()}"}, timeout=600)
    assert p.returncode == 1
    assert "[FAIL] Ray (cluster at 127.0.0.1:" in p.stdout and "nothing answers at 127.0.0.1:" in p.stdout
    assert "-> check RAY_ADDRESS" in p.stdout


@pytest.fixture(scope="module")
def venv_without_transfer_queue(tmp_path_factory):
    """A real venv whose site-packages link to this environment's, TransferQueue left out."""
    root = tmp_path_factory.mktemp("no_tq")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    farm = root / "site"
    farm.mkdir()
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if entry.name.lower().startswith(("transfer_queue", "transferqueue")):
            continue
        (farm / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (pathlib.Path(target) / "zz_sat_ext_test.pth").write_text(f"import site; site.addsitedir({str(farm)!r})\n")
    return str(python)


def test_doctor_without_transfer_queue_fails_naming_it(venv_without_transfer_queue):
    p = _run(["doctor", "--no-ray"], python=venv_without_transfer_queue)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "[FAIL] TransferQueue (verl's V1 async trainers, sat_ext's lag modes)  not installed" in p.stdout
    assert "pip install 'sat-ext[verl-async]'" in p.stdout
    assert re.search(
        r"\[FAIL\] verl V1 \+ TransferQueue \+ sat_ext lag sampler/trainer +ModuleNotFoundError: "
        r"No module named 'transfer_queue'",
        p.stdout,
    )
    assert "[  ok] sat, sat_gspo registered by `import verl` (fresh process)" in p.stdout  # the losses still work


def test_doctor_fails_when_verl_plugins_are_disabled():
    # verl's own switch turns entry-point loading off: the doctor must notice that `import verl` no longer
    # registers the losses, and exit non-zero.
    p = _run(["doctor", "--no-ray"], env={"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert p.returncode == 1, p.stdout
    assert "[FAIL] sat, sat_gspo registered by `import verl` (fresh process)" in p.stdout
    assert "registered: []" in p.stdout and "-> verl's plugin loading is off" in p.stdout


def test_training_node_checks_name_the_missing_gpu_stack():
    p = _run(["doctor", "--no-ray", "--training-node", "--json"])
    checks = _checks(p.stdout)
    assert p.returncode == 1  # no CUDA, no Megatron here
    assert checks["CUDA"]["status"] == "FAIL" and "verl[megatron,sglang]==0.9.1" in checks["CUDA"]["fix"]
    assert checks["megatron-core"]["status"] == "FAIL"


def test_release_script_builds_and_twine_checks_the_wheel_with_the_examples(tmp_path):
    p = subprocess.run(
        ["bash", str(ROOT / "scripts" / "release.sh"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASSED" in p.stdout and "release 0.2.0:" in p.stdout
    assert sorted(f.name for f in tmp_path.iterdir() if f.suffix in (".whl", ".gz")) == [
        "sat_ext-0.2.0-py3-none-any.whl",
        "sat_ext-0.2.0.tar.gz",
    ]


def test_unknown_command_is_an_error():
    p = subprocess.run(SAT_EXT + ["frobnicate"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr
