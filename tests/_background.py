"""One way for the tests to run a command in the background: ``Background``. tests/conftest.py's ``background``
fixture starts a test module's jobs with it; a test may also start one itself.

The command runs in a session of its own, so that stopping it ends the whole process tree it started (Ray's
daemons and workers, vLLM, DeepSpeed): a leaked tree poisons the tests after it. Its stdout and stderr go to files,
so nothing blocks while nobody reads them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import ClassVar, Mapping, Sequence

import pytest

GRACE_S = 5  # from SIGTERM to SIGKILL
TAIL = 4000  # characters of each stream in a failure message


class Background:
    """``argv`` started at once in a session of its own and a fresh temporary ``workdir``: its working directory
    (relative paths in ``argv`` point there), holding the ``inputs`` (file name -> text) written before the start,
    and ``stdout.txt`` and ``stderr.txt``.

    ``wait(timeout)`` returns the exit status, or stops the job and fails the test with the output's tail.
    ``stop()`` ends every process left in the job's process group (SIGTERM, SIGKILL ``GRACE_S`` later) and removes
    ``workdir``; tests/conftest.py stops every job at the latest when the session ends. The command itself is
    reaped only by ``stop()``: until then its process id, the group's, cannot go to another process, so the signals
    reach this job's processes only.
    """

    running: ClassVar[list[Background]] = []  # started, not yet stopped

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, inputs: Mapping[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        self.workdir = Path(tempfile.mkdtemp(prefix="sat_background_"))
        for name, text in (inputs or {}).items():
            (self.workdir / name).write_text(text)
        with open(self.workdir / "stdout.txt", "w") as out, open(self.workdir / "stderr.txt", "w") as err:
            self._proc = subprocess.Popen(
                self.argv, stdout=out, stderr=err, cwd=self.workdir, env=env, start_new_session=True
            )
        Background.running.append(self)

    @property
    def stdout(self) -> str:
        return (self.workdir / "stdout.txt").read_text()

    @property
    def stderr(self) -> str:
        return (self.workdir / "stderr.txt").read_text()

    @property
    def returncode(self) -> int | None:
        """The command's exit status (minus the signal that ended it), None while it runs."""
        if self._proc.returncode is not None:  # reaped by stop()
            return self._proc.returncode
        info = os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def tail(self) -> str:
        """The end of both streams, for a failure message."""
        return f"{self.argv}\n--- stdout ---\n{self.stdout[-TAIL:]}\n--- stderr ---\n{self.stderr[-TAIL:]}"

    def wait(self, timeout: float) -> int:
        """The exit status; a job still running after ``timeout`` seconds is stopped and the test fails."""
        deadline = time.monotonic() + timeout
        while (rc := self.returncode) is None:
            if time.monotonic() > deadline:
                tail = self.tail()
                self.stop()
                pytest.fail(f"still running after {timeout} s: {tail}")
            time.sleep(0.1)
        return rc

    def stop(self) -> None:
        """End the job's whole process group, reap the command and remove ``workdir``; a stopped job stays stopped."""
        if self not in Background.running:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._alive():
                break
            os.killpg(self._proc.pid, sig)
            deadline = time.monotonic() + GRACE_S
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        self._proc.wait()
        Background.running.remove(self)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _alive(self) -> bool:
        """Whether a process of the job's group still lives (a zombie, such as the unreaped command, does not)."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
            except OSError:  # it ended while we looked
                continue
            if int(group) == self._proc.pid and state not in "ZX":
                return True
        return False
