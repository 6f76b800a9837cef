"""tests/_background.py's contract: the exit status, a failure that carries the output's tail, and a stop that
ends the whole process tree, also what outlives the command."""

import sys
import time

import pytest
from _background import Background

SPAWN = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print(child.pid, flush=True); sys.exit(int(sys.argv[1]))"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


def test_stop_ends_a_child_that_outlived_the_command():
    job = Background([sys.executable, "-c", SPAWN, "3"])
    assert job.wait(timeout=60) == 3 and job.returncode == 3
    child = int(job.stdout)
    assert _alive(child)
    job.stop()
    assert not _alive(child) and not job.workdir.exists() and job not in Background.running
    job.stop()  # a stopped job stays stopped


def test_a_job_past_its_time_is_stopped_and_fails_with_its_output():
    job = Background([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"])
    while "started" not in job.stdout:
        time.sleep(0.05)
    with pytest.raises(pytest.fail.Exception, match=r"still running after 0.5 s: .*started"):
        job.wait(timeout=0.5)
    assert job.returncode == -15 and not job.workdir.exists()


def test_inputs_are_written_in_the_working_directory_first():
    job = Background([sys.executable, "-c", "print(open('in.txt').read())"], inputs={"in.txt": "hello"})
    try:
        assert job.wait(timeout=60) == 0, job.tail()
        assert job.stdout == "hello\n"
    finally:
        job.stop()
