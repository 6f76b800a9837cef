"""The kept weights behind the paper's denominator are real copies (verl 0.9.1's FSDP2 save aliases CPU shards)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("verl")
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kept_weights_probe.py")


@pytest.fixture(scope="module")
def probe():
    env = {k: v for k, v in os.environ.items() if k != "SAT_EXT_VERL_CPU"}
    out = subprocess.run([sys.executable, PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_verls_fsdp2_save_aliases_parameters_on_the_cpu(probe):
    assert probe["params"] == 4 and probe["verl_aliased"] == 4  # the bug: every kept tensor is a live one


def test_kept_weights_worker_saves_copies_and_restores_them(probe):
    assert probe["kept_aliased"] == 0
    assert probe["updated"] != probe["before"]  # the fingerprint sees an update
    assert probe["restored"] == probe["before"]  # and the restore undoes it exactly


def test_restoring_a_key_never_saved_raises(probe):
    assert "no weights saved under 'v9'" in probe["missing"] and "v0" in probe["missing"]


def test_a_spilled_version_lives_in_a_file_and_restores_exactly(probe):
    assert probe["spill_files"] == ["v1.rank0.pt"] and probe["spill_tensors_in_memory"] == 0
    assert probe["spill_restored"] == probe["before"]  # v1 was saved at the restored v0 weights
    assert probe["spill_files_after_clear"] == []
