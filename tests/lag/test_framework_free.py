"""The lag core imports only the standard library (the verl and OpenRLHF adapters live in sat_ext.verl /
sat_ext.openrlhf)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("ray", "verl", "torch", "omegaconf", "hydra", "transfer_queue", "openrlhf")


@pytest.mark.parametrize("module", ["sat_ext.lag"])
def test_core_imports_no_framework(module):
    code = (
        f"import sys, {module}\nloaded = sorted(m for m in {HEAVY!r} if m in sys.modules)\nassert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
