"""A subprocess started early by conftest.py's collection hook; see conftest.py."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class Background:
    proc: subprocess.Popen
    workdir: Path

    def wait(self, timeout: float) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            return -9, out, err + f"\n[timed out after {timeout} s]"
        return self.proc.returncode, out, err


def start(build: Callable[[Path], list[str]], **kwargs) -> Background:
    """Run ``build(workdir)`` (the command; it may write its inputs into the fresh ``workdir``) in ``workdir``."""
    workdir = Path(tempfile.mkdtemp(prefix="sat_examples_"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    proc = subprocess.Popen(
        build(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir, **kwargs
    )
    atexit.register(lambda: proc.poll() is None and proc.kill())
    return Background(proc, workdir)
