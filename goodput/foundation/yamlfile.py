"""Reading a file a user wrote, with ConfigError (file, line, problem) instead of a traceback.

Every way a user file can be unusable — missing, a directory, unreadable, not UTF-8, not YAML,
empty, a list where a mapping belongs — becomes one ``FILE: WHERE: PROBLEM`` line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from goodput.foundation.errors import ConfigError

__all__ = ["load_mapping", "load_yaml", "read_text"]


def read_text(path: str | Path) -> str:
    """The file's text (UTF-8); ``ConfigError`` when it is missing, a directory, unreadable or not UTF-8."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(str(p), f"line {line}", f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") \
            from None


def load_yaml(path: str | Path) -> Any:
    p = Path(path)
    text = read_text(p)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise ConfigError(str(p), where, f"not valid YAML: {getattr(e, 'problem', e)}") from None


def load_mapping(path: str | Path, expected: str) -> dict:
    """A YAML file whose top level must be a mapping; ``expected`` says what it should hold, for the error."""
    data = load_yaml(path)
    if data is None:
        raise ConfigError(str(path), "", f"the file is empty; expected {expected}")
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", f"expected {expected}, got a {_kind(data)}")
    return data


def _kind(v: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(v), type(v).__name__)
