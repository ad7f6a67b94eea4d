"""The SLO thresholds of ``rules/slos.yaml`` (the spec the rules are generated from), as SQL list parameters."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping

__all__ = ["slo_params"]


@cache
def _load(path: Path) -> tuple[tuple[str, str, float, float], ...]:
    rows = []
    for i, s in enumerate(load_mapping(path, "a mapping with slos").get("slos") or []):
        try:
            rows.append((str(s["tier"]), str(s["route"]), float(s["ttft_seconds"]), float(s["tpot_seconds"])))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(str(path), f"slos[{i}]", "expected tier, route, ttft_seconds, tpot_seconds") from None
    return tuple(rows)


def slo_params(path: Path) -> dict[str, list]:
    rows = _load(Path(path)) if Path(path).exists() else ()
    return {"slo_tier": [r[0] for r in rows], "slo_route": [r[1] for r in rows],
            "slo_ttft": [r[2] for r in rows], "slo_tpot": [r[3] for r in rows]}
