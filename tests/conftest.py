"""One sys.path hook for the whole suite, under any pytest import mode: each test folder's helper modules
(``_core_ref``, ``_verl_helpers``, ...; their basenames are unique in the tree), tests/'s own (``_background``) and
the scripts under benchmarks/ and tools/ import by name. The test folders have no ``__init__.py`` on purpose:
``tests/verl`` as a package would be named ``verl`` and shadow the real one.

And one background-subprocess fixture, ``background``: a test module that defines ``start_background()`` gets what
it returns (a ``_background.Background`` or a dict of them), started as soon as collection ends when a selected test
uses the fixture, so that the slow subprocess overlaps the tests before it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests"
for folder in (ROOT / "benchmarks", ROOT / "tools", HERE, *sorted(p for p in HERE.iterdir() if p.is_dir())):
    if folder.name != "__pycache__" and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _background import Background  # noqa: E402

Jobs = Background | dict[str, Background]
_started: dict[ModuleType, Jobs] = {}


def _start(module: ModuleType) -> Jobs:
    """The module's jobs, started on the first call; ``start_background`` may skip (pytest.skip) instead."""
    if module not in _started:
        _started[module] = module.start_background()
    return _started[module]


def pytest_collection_finish(session: pytest.Session) -> None:
    users = [item for item in session.items if isinstance(item, pytest.Function) and "background" in item.fixturenames]
    for module in dict.fromkeys(item.module for item in users):
        try:
            _start(module)
        except pytest.skip.Exception:  # the fixture skips the module's tests with the reason
            pass


@pytest.fixture(scope="module")
def background(request: pytest.FixtureRequest) -> Iterator[Jobs]:
    """The test module's ``start_background()`` jobs (already running since collection ended, or started now), each
    stopped with its whole process tree when the module's tests are done."""
    jobs = _start(request.module)
    yield jobs
    for job in jobs.values() if isinstance(jobs, dict) else [jobs]:
        job.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop what is still running: jobs started for tests that never ran, and any a failed test left behind."""
    for job in list(Background.running):
        job.stop()
