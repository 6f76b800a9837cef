"""Starts _openrlhf_harness.py (OpenRLHF's CLI and a Ray policy actor, in a subprocess) as soon as collection
ends, so that it runs while the in-process tests do; test_openrlhf_train_ppo_ray.py reads its result."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_openrlhf_harness.py")
_USER = "test_openrlhf_train_ppo_ray.py"
_run = {}


def pytest_collection_finish(session):
    if any(item.path.name == _USER for item in session.items):
        workdir = tempfile.mkdtemp(prefix="openrlhf_harness_")
        log = open(os.path.join(workdir, "log.txt"), "w")
        _run.update(
            workdir=workdir,
            log=log,
            proc=subprocess.Popen(
                [sys.executable, HARNESS, os.path.join(workdir, "result.json")], stdout=log, stderr=subprocess.STDOUT
            ),
        )


def pytest_sessionfinish(session):
    if _run:
        if _run["proc"].poll() is None:
            _run["proc"].kill()
        _run["proc"].wait()
        _run["log"].close()
        shutil.rmtree(_run["workdir"], ignore_errors=True)


@pytest.fixture(scope="session")
def openrlhf_harness():
    """The harness's JSON result (the CLI cases and the Ray worker's report)."""
    assert _run, f"the harness starts only when {_USER} is collected"
    rc = _run["proc"].wait(timeout=400)
    _run["log"].flush()
    with open(os.path.join(_run["workdir"], "log.txt")) as f:
        log = f.read()
    assert rc == 0, log[-8000:]
    with open(os.path.join(_run["workdir"], "result.json")) as f:
        return json.load(f)
