"""Importing OpenRLHF's real ``openrlhf.models.loss`` with or without its GPU-only dependencies.

``openrlhf/models/__init__.py`` imports the HF actor, which pulls in ``flash_attn`` (CUDA only), and
``openrlhf/models/utils.py`` imports ``deepspeed`` at module level although ``masked_mean`` needs none of
it. Where both are installed (a GPU training machine) this is a plain import. Where they are not (CPU CI,
a laptop) :func:`openrlhf_loss` loads the same two files, ``models/utils.py`` and ``models/loss.py``, under
their real module names without running ``models/__init__.py``, with an empty ``deepspeed`` module
standing in only while ``models/utils.py`` executes its ``import deepspeed``. The loss code that runs is
OpenRLHF's own either way.

This is the one place sat_ext does that; the tests use it too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

_PACKAGE = "openrlhf.models"
_GPU_ONLY = ("flash_attn", "deepspeed")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a __spec__
        return False


def openrlhf_loss() -> types.ModuleType:
    """The real ``openrlhf.models.loss`` module (``PolicyLoss``, ``aggregate_loss``)."""
    name = f"{_PACKAGE}.loss"
    if name in sys.modules or _PACKAGE in sys.modules or all(_installed(n) for n in _GPU_ONLY):
        return importlib.import_module(name)
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sat_ext.openrlhf needs OpenRLHF: pip install openrlhf==0.11.2 (--no-deps on CPU)")
    package = types.ModuleType(_PACKAGE)
    package.__path__ = [str(Path(next(iter(spec.submodule_search_locations))) / "models")]
    sys.modules[_PACKAGE] = package
    stub_deepspeed = not _installed("deepspeed")
    if stub_deepspeed:
        sys.modules["deepspeed"] = types.ModuleType("deepspeed")
    try:
        return importlib.import_module(name)
    finally:
        # Neither stand-in may outlive the import: a later real ``import openrlhf.models`` must run its own
        # __init__ (it then reuses the loss and utils modules loaded here), and an empty ``deepspeed`` in
        # sys.modules breaks ``transformers``' availability check.
        del sys.modules[_PACKAGE]
        if stub_deepspeed:
            del sys.modules["deepspeed"]
