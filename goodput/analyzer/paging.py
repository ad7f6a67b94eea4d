"""Which deployment ``goodput analyze triage`` looks at when none is named: the one paging now, from Alertmanager's API
v2 (active, neither silenced nor inhibited, ``severity="page"``, the longest-firing first), else the one with the worst
SLO attainment in the store (rules/slos.yaml's TTFT and TPOT thresholds per tier and route). The choice comes with
the reason, said to the reader; an Alertmanager that does not answer within ``DEADLINE_S`` is said and passed over.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from goodput.analyzer.backend import Backend, backend
from goodput.foundation.errors import ConfigError
from goodput.foundation.promapi import Alertmanager, PromError
from goodput.foundation.yamlfile import load_mapping

if TYPE_CHECKING:
    import duckdb

__all__ = ["Pick", "paging_alerts", "pick_deployment"]

CONNECT_TIMEOUT_S = 2.0
DEADLINE_S = 5.0  # the whole answer, connect to last byte


@dataclass(frozen=True)
class Pick:
    deployment: str
    reason: str


def paging_alerts(url: str) -> list[tuple[str, str, str]]:
    """(deployment, alert name, startsAt) of every paging alert Alertmanager holds active, the longest-firing first;
    a ``PromError`` naming Alertmanager and its URL when it gives no usable answer."""
    alerts = Alertmanager(url, DEADLINE_S, connect_s=CONNECT_TIMEOUT_S).alerts('severity="page"')
    out = [(a["labels"]["deployment"], a["labels"].get("alertname", "?"), str(a.get("startsAt", "")))
           for a in alerts if a["labels"].get("severity") == "page" and a["labels"].get("deployment")]
    return sorted(out, key=lambda x: (x[2], x[0], x[1]))


def _attainment(con: Backend | duckdb.DuckDBPyConnection, slos: Path, since: datetime | None,
                until: datetime | None) -> list[tuple[str, int, float]]:
    rows = load_mapping(slos, "a mapping with slos").get("slos") or []
    try:
        lists = {"slo_tier": [str(s["tier"]) for s in rows], "slo_route": [str(s["route"]) for s in rows],
                 "slo_ttft": [float(s["ttft_seconds"]) for s in rows], "slo_tpot": [float(s["tpot_seconds"]) for s in rows]}
    except (KeyError, TypeError, ValueError):
        raise ConfigError(str(slos), "slos", "each SLO needs tier, route, ttft_seconds and tpot_seconds") from None
    if not rows:
        return []
    return backend(con).rows("slo_attainment", {**lists, "since": since, "until": until}).rows


def pick_deployment(con: Backend | duckdb.DuckDBPyConnection, alertmanager: str | None, *, slos: Path,
                    since: datetime | None = None, until: datetime | None = None) -> Pick:
    """The deployment to triage and why (``ConfigError`` when the store holds no requests)."""
    stored = [d for d, _ in backend(con).rows("stored_deployments", {}).rows]
    if not stored:
        raise ConfigError("--db", "requests", "the store holds no requests to triage")
    why = []
    if alertmanager:
        try:
            paging = paging_alerts(alertmanager)
        except PromError as e:
            why.append(f"Alertmanager unreachable ({e})")
        else:
            here = [p for p in paging if p[0] in stored]
            if here:
                dep, alert, since_t = here[0]
                others = sorted({p[0] for p in here} - {dep})
                more = f"; also paging: {', '.join(others)}" if others else ""
                return Pick(dep, f"paging: {alert} since {since_t} (Alertmanager {alertmanager}){more}")
            elsewhere = sorted({p[0] for p in paging})
            why.append(f"Alertmanager {alertmanager}: nothing paging" if not paging else
                       f"Alertmanager {alertmanager}: paging only for {', '.join(elsewhere)}, not in the store")
    else:
        why.append("no Alertmanager named")
    ranked = _attainment(con, slos, since, until)
    if ranked:
        dep, n, share = ranked[0]
        return Pick(dep, f"{'; '.join(why)}; worst SLO attainment in the store: {share:.1%} of {n:,} requests met "
                         f"their TTFT and TPOT thresholds ({slos.name})")
    return Pick(stored[0], f"{'; '.join(why)}; no SLO of {slos.name} covers the stored requests: the busiest deployment")
