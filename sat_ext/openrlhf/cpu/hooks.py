"""Post-import hooks: run a function on a module right after it is first imported (or now, if it already is).

A :class:`sys.meta_path` finder that wraps the loader of the named modules only; every other import is
untouched. Used by :func:`sat_ext.openrlhf.cpu.activate` to change OpenRLHF internals in whichever process
imports them (the CLI, each Ray worker), without editing any installed file.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType

Hook = Callable[[ModuleType], None]


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, hooks: list[Hook]):
        self._loader, self._hooks = loader, hooks

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for hook in self._hooks:
            hook(module)

    def __getattr__(self, name: str):  # get_source, get_filename, ... (tracebacks, inspect)
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.hooks: dict[str, list[Hook]] = {}
        self._busy = threading.local()

    def find_spec(self, name, path, target=None):
        if name not in self.hooks or getattr(self._busy, "name", None) == name:
            return None
        self._busy.name = name  # the other finders below must not come back here for the same module
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is None:
                for finder in sys.meta_path:
                    if finder is not self and hasattr(finder, "find_spec"):
                        spec = finder.find_spec(name, path, target)
                        if spec is not None:
                            break
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, self.hooks[name])
        return spec


_finder = _Finder()


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once module ``name`` has been executed; at once if it is already imported."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    _finder.hooks.setdefault(name, []).append(hook)
