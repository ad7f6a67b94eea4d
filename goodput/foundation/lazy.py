"""Package re-exports that import on first use, so importing a package (or any module in it) costs nothing.

A command line that imports ``goodput.exporters.cli`` must not pay for pandas, DuckDB and the simulator because
``goodput/exporters/__init__.py`` re-exports everything; each package instead names where each export lives and
calls ``lazy_exports``. A module-level ``__getattr__`` (PEP 562) alone is not enough: where an export
shares its name with its submodule (``goodput.analyzer.decompose`` the function in ``goodput.analyzer.decompose`` the
module), importing the submodule binds the module to the package attribute and ``__getattr__`` is never
asked again. The package's class is swapped for one that binds the export instead, as the eager
``from goodput.analyzer.decompose import decompose`` did.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["lazy_exports"]


class _LazyPackage(types.ModuleType):
    _lazy_exports: dict[str, str]

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("_lazy_exports", {}).get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        self.__dict__[name] = value  # later lookups skip __getattr__
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        module = self.__dict__.get("_lazy_exports", {}).get(name)
        if module is not None and isinstance(value, types.ModuleType):
            value = getattr(importlib.import_module(module), name)  # the import system binding a submodule
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(self.__dict__) | set(self._lazy_exports))


def lazy_exports(package: str, exports: dict[str, str]) -> list[str]:
    """Make each ``name`` of ``exports`` an attribute of ``package`` imported from module ``exports[name]`` when
    first used; returns the sorted names, the package's ``__all__``."""
    module = sys.modules[package]
    module.__dict__["_lazy_exports"] = exports
    module.__class__ = _LazyPackage
    return sorted(exports)
