"""`sat-ext` command and `sat-ext doctor`, run as a user would, in fresh processes."""

import os
import subprocess
import sys

SAT_EXT = [sys.executable, "-m", "sat_ext.cli"]


def _run(args, env=None, timeout=240):
    return subprocess.run(SAT_EXT + args, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_doctor_passes_with_ray_worker_check():
    p = _run(["doctor"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[  ok] sat, sat_gspo registered by `import verl` (fresh process)  yes" in p.stdout
    assert "registered in a Ray worker" in p.stdout and "all checks passed" in p.stdout
    assert "verl " in p.stdout and "0.9.1" in p.stdout


def test_doctor_fails_when_verl_plugins_are_disabled():
    # verl's own switch turns entry-point loading off: the doctor must notice that `import verl` no longer
    # registers the losses, and exit non-zero.
    p = _run(["doctor", "--no-ray"], env={"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert p.returncode == 1, p.stdout
    assert "[FAIL] sat, sat_gspo registered by `import verl` (fresh process)" in p.stdout
    assert "registered: []" in p.stdout


def test_unknown_command_is_an_error():
    p = _run(["frobnicate"])
    assert p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr
