"""Run one framework training command as a smoke run: its own process group, a console log, a time limit, and
the shared-memory files it leaves behind removed.

vLLM's CPU engine keeps ring buffers in ``/dev/shm/psm_*`` that stay behind when Ray kills the engine at
shutdown; the runner removes those that appeared during the run and that no live process still has open or
mapped (another job's engine may have made one meanwhile), and ``sat_ext_weights_*`` from the CPU checkpoint
engine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sat_ext import shm
from sat_ext.runlog import CheckResult, Record, RunLogError, format_table

LEFTOVERS = ("psm_", "sat_ext_weights_")


@dataclass(frozen=True)
class Command:
    """A run's argv and the environment variables it adds."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    """How a run ended: exit code (None: killed at the time limit) and wall seconds."""

    returncode: int | None
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run(argv: list[str], env: dict[str, str], log: Path, timeout_s: float, cwd: Path) -> RunResult:
    """Run ``argv`` with ``env`` added to this environment, stdout and stderr to ``log``; kill the whole process
    group after ``timeout_s`` seconds."""
    before = shm.names(LEFTOVERS)
    start = time.monotonic()
    with open(log, "w") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=cwd, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _kill_group(proc)
    for name in shm.leftovers(before, LEFTOVERS):  # the run's own tracker died with it: plain unlink
        (shm.SHM / name).unlink(missing_ok=True)
    return RunResult(code, time.monotonic() - start)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, to everything still in the run's process group (Ray's and vLLM's processes)."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(0.5)  # the group may outlive its leader


RESULT = {True: "PASS", False: "FAIL", None: "SKIP"}


@dataclass(frozen=True)
class Checked:
    """A finished run and its check rows (the exit row first)."""

    result: RunResult
    rows: list[CheckResult]

    @property
    def passed(self) -> bool:
        return all(r.passed is not False for r in self.rows)

    def entry(self) -> dict:
        """The run's entry in a ``summary.json``."""
        return {
            "passed": self.passed,
            "seconds": round(self.result.seconds, 1),
            "returncode": self.result.returncode,
            "checks": [{"name": r.name, "result": RESULT[r.passed], "detail": r.detail} for r in self.rows],
        }


def run_and_check(
    label: str,
    cmd: Command,
    folder: Path,
    timeout_s: float,
    records: Callable[[Path], list[Record]],
    checks: Callable[[list[Record]], list[CheckResult]],
) -> Checked:
    """Run ``cmd`` in ``folder`` (console log there), read its ``records`` and check them; writes
    ``folder/checks.txt`` and prints the table under ``label`` (e.g. ``[smoke] interval2``)."""
    from .checks import check_exit

    result = run(cmd.argv, cmd.env, folder / "console.log", timeout_s, cwd=folder)
    try:
        logged = records(folder)
    except RunLogError as err:
        logged = []
        print(f"{label}: {err}", flush=True)
    checked = Checked(result, [check_exit(result.returncode, result.seconds, timeout_s), *checks(logged)])
    table = format_table(checked.rows)
    (folder / "checks.txt").write_text(table + "\n")
    print(f"{label}: {'PASS' if checked.passed else 'FAIL'} in {result.seconds:.0f} s\n{table}\n", flush=True)
    return checked
