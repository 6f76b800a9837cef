"""tests/verl: make the helper modules importable under any pytest import mode.

There is deliberately no ``__init__.py`` in this folder: as a package it would be named ``verl`` and could
shadow the real verl. Test files are named ``test_verl_*`` so that their basenames are unique in the tree.
"""

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


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
