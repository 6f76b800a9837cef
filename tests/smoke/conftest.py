"""The ``smoke`` fixture of the live tests: one ``sat-ext smoke`` invocation per test module, with the module's
``FRAMEWORK``, ``VARIANTS`` and ``STEPS``."""

from __future__ import annotations

import pytest
from _smoke_live import run_smoke


@pytest.fixture(scope="module")
def smoke(request, tmp_path_factory):
    """(the finished process, summary.json's content or None, the output folder)."""
    module = request.module
    out = tmp_path_factory.mktemp("smoke")
    return (*run_smoke(module.FRAMEWORK, module.VARIANTS, module.STEPS, out), out)
