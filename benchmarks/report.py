"""How every benchmark reports: a title, the figures as JSON on stdout, and optionally in a file."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["emit"]


def emit(title: str, figures: dict, path: Path | None) -> dict:
    print(title)
    print(json.dumps(figures, indent=2))
    if path is not None:
        path.write_text(json.dumps(figures, indent=2))
    return figures
