"""Generated documents as templates: the configurable parts of a rule or dashboard are named placeholders.

A generator writes ``mark(name)`` where a configurable value goes (a threshold, a selector, a URL base);
``template`` turns the built document into one whose strings are Python/jsonnet format strings (``%(name)s``,
literal ``%`` doubled). ``fill`` with the defaults gives the committed files; the monitoring mixin
(mixin/, docs/mixin.md) fills the same templates from its ``_config`` with the same ``render`` rules
(mixin/lib/render.libsonnet), so both come from one build and never from two copies of the generator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "Knob", "fill", "mark", "params", "render", "template"]

# how a value is written into text; mixin/lib/render.libsonnet implements each the same way
KINDS = ("text", "url", "number", "float", "alternation", "selector")
_MARK = re.compile("\x00([A-Za-z][A-Za-z0-9_]*)\x01")


@dataclass(frozen=True)
class Knob:
    """One configurable value: its placeholder, its place in the mixin's ``_config``, how it is written, its default."""

    param: str
    path: tuple[str, ...]
    kind: str
    default: Any
    help: str


def mark(param: str) -> str:
    """The placeholder a generator writes where the knob ``param`` goes (survives f-strings and ``rstrip``)."""
    return f"\x00{param}\x01"


def _walk(doc: Any, f, seen: dict[int, Any] | None = None) -> Any:
    """``doc`` with ``f`` applied to every string; a mapping or list shared in ``doc`` stays shared (YAML anchors)."""
    seen = {} if seen is None else seen
    if isinstance(doc, (dict, list)):
        if id(doc) not in seen:
            seen[id(doc)] = ({k: _walk(v, f, seen) for k, v in doc.items()} if isinstance(doc, dict)
                             else [_walk(v, f, seen) for v in doc])
        return seen[id(doc)]
    return f(doc) if isinstance(doc, str) else doc


def template(doc: Any) -> Any:
    """Every string of ``doc`` as a format string: ``%`` doubled, each mark a ``%(param)s``."""
    return _walk(doc, lambda s: _MARK.sub(r"%(\1)s", s.replace("%", "%%")))


def fill(doc: Any, values: dict[str, str]) -> Any:
    """A template with its placeholders replaced (the inverse of ``template`` for the default values)."""
    return _walk(doc, lambda s: s % values)


def _number(v: float) -> str:
    return f"{v:.15g}"


def render(kind: str, value: Any) -> dict[str, str]:
    """The text a knob's value puts in a template, by placeholder suffix ('' for the value itself)."""
    if kind == "text":
        return {"": value}
    if kind == "url":  # a base a path is appended to after one "/"
        return {"": value.rstrip("/")}
    if kind == "number":
        return {"": _number(value)}
    if kind == "float":  # as Python writes a float: 1.0, not 1
        s = _number(value)
        return {"": s if re.search(r"[.en]", s) else s + ".0"}
    if kind == "alternation":  # a regex matching any of the values
        return {"": "|".join(_number(v) for v in value)}
    if kind == "selector":  # label matchers, for a selector of its own or beside others
        return {"": value, "_braced": "{" + value + "}" if value else "", "_comma": "," + value if value else ""}
    raise ValueError(f"unknown knob kind {kind!r}")


def params(knobs: tuple[Knob, ...], config: dict[str, Any] | None = None) -> dict[str, str]:
    """Placeholder -> text for ``knobs``, each from ``config`` (a mixin ``_config``) or, without one, its default."""
    out = {}
    for k in knobs:
        value = k.default
        if config is not None:
            value = config
            for key in k.path:
                value = value[key]
        for suffix, text in render(k.kind, value).items():
            out[k.param + suffix] = text
    return out
