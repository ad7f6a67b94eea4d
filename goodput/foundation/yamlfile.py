"""Reading a YAML file a user wrote, with ConfigError (file, line, problem) instead of a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from goodput.foundation.errors import ConfigError

__all__ = ["load_yaml"]


def load_yaml(path: str | Path) -> Any:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read: {e.strerror or e}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise ConfigError(str(p), where, f"not valid YAML: {getattr(e, 'problem', e)}") from None
