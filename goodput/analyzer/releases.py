"""The releases file of docs/design.md (YAML or CSV): time (RFC 3339), deployment (or *), kind, from, to, note. Kind
``scale`` is a replica-count change (from / to replicas) the fleet and the autoscaler record beside releases."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from goodput.contracts.vocabulary import RELEASE_KINDS, SCALE_KIND
from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import parse_yaml, read_text

__all__ = ["KINDS", "Release", "load_releases"]

KINDS = (*RELEASE_KINDS, SCALE_KIND)


@dataclass(frozen=True)
class Release:
    time: datetime
    deployment: str
    kind: str
    from_version: str
    to_version: str
    note: str

    def label(self) -> str:
        return f"{self.kind} {self.from_version} -> {self.to_version}".strip()


def _parse(rows: list, src: str) -> list[Release]:
    out = []
    for i, r in enumerate(rows):
        key = f"[{i}]"
        if not isinstance(r, dict):
            raise ConfigError(src, key, "expected a mapping with time, deployment, kind, from, to, note")
        t = r.get("time")
        if isinstance(t, datetime):
            ts = t
        else:
            try:
                ts = datetime.fromisoformat(str(t).replace("Z", "+00:00"))
            except ValueError:
                raise ConfigError(src, f"{key}.time", f"not an RFC 3339 time: {t!r}") from None
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        if not r.get("deployment"):
            raise ConfigError(src, f"{key}.deployment", "is required (a deployment name or *)")
        if r.get("kind") not in KINDS:
            raise ConfigError(src, f"{key}.kind", f"must be one of {', '.join(KINDS)}; got {r.get('kind')!r}")
        out.append(Release(ts, str(r["deployment"]), r["kind"], str(r.get("from", "") or ""), str(r.get("to", "") or ""),
                           str(r.get("note", "") or "")))
    return sorted(out, key=lambda r: r.time)


def load_releases(path: str | Path) -> list[Release]:
    p = Path(path)
    text = read_text(p)
    if p.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        missing = {"time", "deployment", "kind"} - set(rows[0] if rows else {})
        if rows and missing:
            raise ConfigError(str(p), "header", f"missing columns {sorted(missing)}")
        return _parse(rows, str(p))
    data = parse_yaml(text, str(p))
    if isinstance(data, dict):
        data = data.get("releases")
    if not isinstance(data, list):
        raise ConfigError(str(p), "", "expected a list of releases (or a mapping with a 'releases' list)")
    return _parse(data, str(p))
