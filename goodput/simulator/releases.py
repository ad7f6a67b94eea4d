"""The releases file of docs/design.md: ``time`` (RFC 3339), ``deployment`` (or ``*``), ``kind``, ``from``, ``to``, ``note``."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import yaml

from goodput.simulator.fleet import ReleaseRecord

__all__ = ["write_releases"]


def write_releases(records: list[ReleaseRecord], start: datetime, path: Path) -> None:
    rows = [
        {
            "time": (start + timedelta(seconds=r.time)).isoformat().replace("+00:00", "Z"),
            "deployment": r.deployment,
            "kind": r.kind,
            "from": r.from_version,
            "to": r.to_version,
            "note": r.note,
        }
        for r in records
    ]
    path.write_text(yaml.safe_dump(rows, sort_keys=False))
