"""The post-import hook that patches a module the moment the script imports it, and the
wrapping of a class's methods (once each)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from ._base import _warn


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, puts it back in place, then patches the fresh module."""

    def __init__(self, real: Any, spec: Any, patch: Callable[[types.ModuleType], None]) -> None:
        self.real = real
        self.spec = spec
        self.patch = patch

    def create_module(self, spec: Any) -> types.ModuleType | None:
        module: types.ModuleType | None = self.real.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # Restore the real loader first so importlib.resources and pickling see it.
        self.spec.loader = self.real
        module.__loader__ = self.real
        self.real.exec_module(module)
        try:
            self.patch(module)
        except Exception as exc:
            _warn(f"could not hook into {module.__name__} ({exc}); steps may not be found")


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict[str, Callable[[types.ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = self.patches.pop(fullname, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, spec, patch)
                return spec
        return None


def _wrap_method(cls: type, name: str, make: Callable[[Any], Any]) -> None:
    original = cls.__dict__.get(name)
    if original is None or getattr(original, "__traceinspect_wrapped__", False):
        return
    wrapped = make(original)
    wrapped.__traceinspect_wrapped__ = True
    setattr(cls, name, wrapped)
