"""sat_ext.shm: a segment whose creator was killed before unlinking it (as vLLM's engine processes are at shutdown)
leaks, and Python's resource tracker says so at exit, unless :func:`sat_ext.shm.release` frees it."""

import subprocess
import sys

import pytest

from sat_ext import shm

SCRIPT = """
import multiprocessing as mp, os, signal, sys, time
from multiprocessing import shared_memory
from sat_ext import shm

def make(prefix):
    seg = shared_memory.SharedMemory(name=f"{prefix}{os.getpid()}", create=True, size=4096)
    os.kill(os.getpid(), signal.SIGKILL)  # dies holding it, as an engine process killed at shutdown

if __name__ == "__main__":
    prefix = sys.argv[1]
    before = shm.names((prefix,))
    child = mp.get_context("spawn").Process(target=make, args=(prefix,))
    child.start()
    child.join()
    left = shm.leftovers(before, (prefix,))
    print("left", len(left), flush=True)
    if sys.argv[2] == "release":
        shm.release(left)
"""


@pytest.mark.skipif(not shm.SHM.is_dir(), reason="no /dev/shm")
@pytest.mark.parametrize("release", [True, False])
def test_a_killed_creators_segment_is_released_and_the_tracker_has_nothing_to_report(release, tmp_path):
    prefix = f"sat_ext_test_{tmp_path.name[-12:]}_"
    mode = "release" if release else "keep"
    script = tmp_path / "probe.py"  # a file: spawn re-imports the child's target from it
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script), prefix, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "left 1" in out.stdout
    leaked = "leaked shared_memory" in out.stderr
    assert leaked is not release, out.stderr  # the control (keep) shows the warning the release prevents
    assert not shm.names((prefix,))  # gone either way: released, or unlinked by the tracker at exit
