"""The installed versions a piece of sat_ext is written against: one check for the CPU setups that change
framework internals (:mod:`sat_ext.openrlhf.cpu`; :mod:`sat_ext.verl.cpu` keeps its own copy for now)."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping


def check_pinned(pinned: Mapping[str, str], what: str, where: str) -> None:
    """Raise naming the first distribution in ``pinned`` whose installed version differs (or is missing);
    ``what`` names the piece of sat_ext, ``where`` the file that lists what it changes."""
    for dist, version in pinned.items():
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            raise RuntimeError(f"{what} is written against {dist}=={version}, found {installed}: it changes internals "
                               f"of that version ({where})")
