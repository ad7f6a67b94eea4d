"""Prometheus' and Alertmanager's HTTP APIs for the pages, through ``goodput.foundation.promapi``. An unreachable
or failing server raises ``Unreachable`` (promapi's ``PromError``: one line saying which server and why); the pages
turn it into a banner."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from goodput.foundation.promapi import Client, Query, Series
from goodput.foundation.promapi import PromError as Unreachable

__all__ = ["Alertmanager", "Prometheus", "Sample", "Series", "Unreachable"]

TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


def _float(x: float) -> float:
    return x if math.isfinite(x) else math.nan


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def query(self, expr: str, at: datetime | None = None) -> list[Sample]:
        t = (at or datetime.now()).timestamp()
        with Client(self.url, TIMEOUT_S) as c:
            return [Sample(s.labels, _float(s.values[0])) for s in c.run(Query(expr, expr, t, t))]

    def query_range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        with Client(self.url, TIMEOUT_S) as c:
            got = c.run(Query(expr, expr, start.timestamp(), end.timestamp(), max(step_s, 1)))
        return [Series(s.labels, s.times, [_float(v) for v in s.values]) for s in got]


class Alertmanager:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def alerts(self) -> list[dict]:
        """Active alerts (not silenced, not inhibited), as Alertmanager's v2 API returns them."""
        with Client(self.url, TIMEOUT_S) as c:
            return c.get_json("/api/v2/alerts", {"active": "true", "silenced": "false", "inhibited": "false"}, "alerts")
