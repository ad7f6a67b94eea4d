"""Generated documents as templates: the configurable parts of a rule or dashboard are named placeholders.

A generator writes ``mark(name)`` where a configurable value goes (a threshold, a selector, a URL base): the name
between a NUL and a SOH, characters no rule or dashboard holds, so a template needs no escaping. ``fill`` with the
defaults gives the committed files; the monitoring mixin (mixin/, docs/mixin.md) fills the same templates from its
``_config`` with the same ``render`` rules (mixin/lib/render.libsonnet), so both come from one build and never
from two copies of the generator.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from goodput.foundation.errors import ConfigError

__all__ = ["KINDS", "Knob", "check", "fill", "mark", "matchers", "params", "re2_problem", "render"]

# how a value is written into text; mixin/lib/render.libsonnet implements each the same way
# "strings" has no placeholder: the mixin sets it on the documents themselves (mixin/mixin.libsonnet)
KINDS = ("text", "url", "number", "float", "alternation", "selector", "pattern", "strings", "bool", "grouping")
_MARK = re.compile("\x00([A-Za-z][A-Za-z0-9_]*)\x01")


@dataclass(frozen=True)
class Knob:
    """One configurable value: its placeholder, its place in the mixin's ``_config``, how it is written, its default."""

    param: str
    path: tuple[str, ...]
    kind: str
    default: Any
    help: str
    check: Callable[[Any, str, str], Any] | None = None  # (value, source, key): raises ConfigError when it is bad
    derived: bool = False  # set by mixin/mixin.libsonnet from other fields: not in config.libsonnet, not checked


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


def fill(doc: Any, values: dict[str, str]) -> Any:
    """A template with every mark replaced by its value."""
    return _walk(doc, lambda s: _MARK.sub(lambda m: values[m.group(1)], s))


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
    if kind == "pattern":  # a string with one %s, written around what the template puts between _pre and _post
        pre, post = value.split("%s")
        return {"_pre": pre, "_post": post}
    if kind in ("strings", "bool"):
        return {}
    if kind == "grouping":  # a label first in a grouping list, by (LABEL, a, b), or nothing
        return {"": f"{value}, " if value else ""}
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


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_KIND_OK: dict[str, tuple[Callable[[Any], bool], str]] = {
    "text": (lambda v: isinstance(v, str) and "\n" not in v, "a string without newlines"),
    "url": (lambda v: isinstance(v, str), "a URL (a string)"),
    "number": (_is_number, "a finite number"),
    "float": (_is_number, "a finite number"),
    "alternation": (lambda v: isinstance(v, list) and bool(v) and all(_is_number(x) for x in v), "a list of numbers"),
    # copied between braces of PromQL: a brace or newline there would end or break the selector
    "selector": (lambda v: isinstance(v, str) and not re.search(r"[{}\n]", v),
                 'label matchers without braces (job="x",namespace=~"y"), or ""'),
    "pattern": (lambda v: isinstance(v, str) and "\n" not in v and v.count("%s") == 1 and v.count("%") == 1,
                "a string with one %s (and no other %)"),
    "strings": (lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) and x and "\n" not in x for x in v),
                "a list of one or more strings"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "grouping": (lambda v: isinstance(v, str) and bool(re.fullmatch(r"|[A-Za-z_][A-Za-z0-9_]*", v)), "a label name or \"\""),
}


# RE2 (Prometheus' regex engine) has no lookaround and no backreferences, which Python's re would accept (numbered
# ones need a backslash)
_NOT_RE2 = re.compile(r"\(\?(?:<?[=!]|P=)")


def re2_problem(pattern: str) -> str | None:
    """Why ``pattern`` is no RE2 regex Prometheus compiles, as far as Python's re can tell (promtool has the last word:
    ``goodput rules mixin`` runs it on what it writes), or None."""
    try:
        re.compile(pattern)
    except re.error as e:
        return f"not a regular expression ({e})"
    if _NOT_RE2.search(pattern):
        return "uses lookaround or a backreference, which Prometheus' RE2 has not"
    return None


# one PromQL label matcher: a label name, an operator, a string in double, single or back quotes
_MATCHER = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"
                      r"(\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)\s*(,|$)")


def _unquote(lit: str) -> str | None:
    """A PromQL string literal's value (JSON's escapes, a subset of Go's), or None when it is not one."""
    if lit[0] == "`":
        return lit[1:-1]
    inner = lit[1:-1] if lit[0] == '"' else lit[1:-1].replace("\\'", "'").replace('"', '\\"')
    try:
        return json.loads(f'"{inner}"')
    except ValueError:
        return None


def matchers(v: str, src: str, key: str) -> str:
    """Label matchers copied between the braces of every selector of a source: ``name="v"`` (``=``, ``!=``, ``=~``,
    ``!~``) separated by commas, each string a PromQL string and each regex one RE2 compiles; ``""`` for none."""
    pos = 0
    while pos < len(v) and v[pos:].strip():
        m = _MATCHER.match(v, pos)
        if m is None or (m.group(4) == "," and not v[m.end():].strip()):
            raise ConfigError(src, key, f'expected label matchers (name="value", op one of = != =~ !~, comma-separated) '
                                        f"at character {pos + 1}: {v!r}")
        value = _unquote(m.group(3))
        if value is None:
            raise ConfigError(src, key, f"{m.group(3)} is not a PromQL string (bad escape): {v!r}")
        problem = re2_problem(value) if m.group(2) in ("=~", "!~") else None
        if problem:
            raise ConfigError(src, key, f"the regex of {m.group(1)}{m.group(2)}: {problem}: {value!r}")
        pos = m.end()
    return v


def check(knobs: tuple[Knob, ...], config: dict[str, Any], src: str) -> None:
    """Refuse a ``_config`` whose value for a knob is missing or not of its kind (``ConfigError`` naming the key)."""
    for k in (k for k in knobs if not k.derived):
        key = "_config"
        value: Any = config
        for part in k.path:
            key += f".{part}"
            if not isinstance(value, dict) or part not in value:
                raise ConfigError(src, key, "is required")
            value = value[part]
        ok, expected = _KIND_OK[k.kind]
        if not ok(value):
            raise ConfigError(src, key, f"expected {expected}, got {value!r}")
        if k.kind == "selector":
            matchers(value, src, key)
        if k.check is not None:
            k.check(value, src, key)
