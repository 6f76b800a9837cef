"""tests/verl: fixtures shared by the verl tests (tests/conftest.py puts this folder's helpers on sys.path)."""

import os
import sys

import pytest


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: start them only if a registration test will run
def pytest_collection_modifyitems(session, config, items):
    """Start the registration tests' fresh interpreters now, so their verl imports overlap other tests."""
    if any(os.path.basename(str(item.fspath)) == "test_verl_registration.py" for item in items):
        import _verl_fresh

        _verl_fresh.launch()


def pytest_sessionfinish(session, exitstatus):
    mod = sys.modules.get("_verl_fresh")
    if mod is not None:
        mod.kill_leftovers()
