"""The lag core imports only the standard library (ray only in ray_actors, verl only in verl_sampler)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("ray", "verl", "torch", "omegaconf", "hydra", "transfer_queue", "openrlhf")


@pytest.mark.parametrize("module", ["sat_ext.lag", "sat_ext.lag.verl_overrides"])
def test_core_imports_no_framework(module):
    code = (
        f"import sys, {module}\nloaded = sorted(m for m in {HEAVY!r} if m in sys.modules)\nassert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
