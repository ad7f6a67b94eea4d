"""The one typed reader of user files: values of a parsed YAML or JSON mapping, each checked for its type, range
and choices, any problem a ``ConfigError`` naming the file and the dotted key path (``deployments[2].engine.tp``).

The fleet file, the load-test workload and the disaggregation plan's input read through it, so a wrong value reads
the same wherever it is; what to do with the values is theirs.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

from goodput.foundation.errors import ConfigError

__all__ = ["Reader"]


class Reader:
    """Typed access to a YAML mapping that reports the dotted path of any bad value."""

    def __init__(self, source: str, data: Any, path: str) -> None:
        self.source, self.path = source, path
        if not isinstance(data, dict):
            self.fail("", f"expected a mapping, got {type(data).__name__}")
        self.data = data

    def key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def fail(self, k: str, problem: str) -> NoReturn:
        raise ConfigError(self.source, self.key(k) if k else self.path, problem)

    def get(self, k: str, typ: type | tuple[type, ...], default: Any = ..., *, minimum: float | None = None,
            maximum: float | None = None, choices: tuple[str, ...] | None = None) -> Any:
        if k not in self.data or self.data[k] is None:
            if default is ...:
                self.fail(k, "is required")
            return default
        v = self.data[k]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, bool) and typ is not bool:
            self.fail(k, f"expected {_type_name(typ)}, got a boolean")
        if not isinstance(v, typ):
            self.fail(k, f"expected {_type_name(typ)}, got {v!r}")
        if isinstance(v, float) and not math.isfinite(v):  # YAML's .nan and .inf parse as floats
            self.fail(k, f"must be a finite number, got {v!r}")
        if isinstance(v, int | float):  # a range applies to numbers (``typ`` int or float)
            self._in_range(k, v, minimum, maximum)
        if choices is not None and v not in choices:
            self.fail(k, f"must be one of {', '.join(choices)}; got {v!r}")
        return v

    def _in_range(self, k: str, v: float, minimum: float | None, maximum: float | None) -> None:
        if minimum is not None and v < minimum:
            self.fail(k, f"must be >= {minimum:g}, got {v!r}")
        if maximum is not None and v > maximum:
            self.fail(k, f"must be <= {maximum:.15g}, got {v!r}")

    def child(self, k: str, default: Any = ...) -> Reader | None:
        if k not in self.data or self.data[k] is None:
            if default is ...:
                self.fail(k, "is required")
            return None
        return Reader(self.source, self.data[k], self.key(k))

    def items(self, k: str) -> list[Reader]:
        v = self.data.get(k) or []
        if not isinstance(v, list):
            self.fail(k, f"expected a list, got {type(v).__name__}")
        return [Reader(self.source, x, f"{self.key(k)}[{i}]") for i, x in enumerate(v)]

    def unknown(self, allowed: set[str]) -> None:
        extra = sorted(set(self.data) - allowed)
        if extra:
            self.fail(extra[0], f"unknown key; allowed: {', '.join(sorted(allowed))}")


def _type_name(t: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list", dict: "a mapping"}
    if isinstance(t, tuple):
        return " or ".join(names.get(x, x.__name__) for x in t)
    return names.get(t, t.__name__)
