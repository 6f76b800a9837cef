"""The core is framework-free: importing sat_ext.core (in a fresh interpreter) imports no framework."""

from __future__ import annotations

import json
import os
import subprocess
import sys

FRAMEWORKS = ("verl", "openrlhf", "ray", "transformers", "vllm", "sglang", "deepspeed", "hydra", "omegaconf")

_PROBE = """
import json, sys
import sat_ext.core
from sat_ext.core import SATConfig, sat_token_loss, sat_gspo_loss, global_masked_quantile
import torch
out = sat_token_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool),
                     SATConfig())
roots = sorted({m.split('.')[0] for m in sys.modules})
print(json.dumps(roots))
"""


def test_import_core_pulls_in_no_framework():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONSTARTUP",))}
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    roots = set(json.loads(res.stdout.strip().splitlines()[-1]))
    assert "torch" in roots and "sat_ext" in roots  # the probe did import the core
    leaked = sorted(roots & set(FRAMEWORKS))
    assert not leaked, f"sat_ext.core imported {leaked}"
