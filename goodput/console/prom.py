"""Prometheus' and Alertmanager's HTTP APIs for the pages, through ``goodput.foundation.promapi``. An unreachable
or failing server, or an answer of the wrong shape (not a list of alerts, JSON nested past Python's recursion
limit), raises ``Unreachable`` (promapi's ``PromError``: one line saying which server and why); the pages turn it
into a banner. What comes back is checked here, so the pages read plain lists of mappings of strings."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from goodput.foundation.promapi import Client, Endpoint, Malformed, Query, Series, endpoint
from goodput.foundation.promapi import PromError as Unreachable

__all__ = ["Alertmanager", "Prometheus", "Sample", "Series", "Unreachable"]

TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


def _float(x: float) -> float:
    return x if math.isfinite(x) else math.nan


@contextmanager
def _client(server: Endpoint | str, key: str) -> Iterator[Client]:
    try:
        with Client(server, TIMEOUT_S) as c:
            yield c
    except RecursionError:
        raise Malformed(endpoint(server).url, key, "JSON nested too deeply to read") from None


def _records(url: str, key: str, body: Any, nested: tuple[str, ...]) -> list[dict]:
    """``body`` as a list of mappings whose ``nested`` keys hold mappings of strings; else ``Malformed``."""
    if not isinstance(body, list) or not all(isinstance(a, dict) for a in body):
        raise Malformed(url, key, f"answered {type(body).__name__}, not a list of {key}")
    out = []
    for a in body:
        for n in nested:
            if not isinstance(a.get(n, {}), dict):
                raise Malformed(url, key, f"{n} is a {type(a[n]).__name__}, not a mapping")
        out.append({**a, **{n: {str(k): str(v) for k, v in a.get(n, {}).items()} for n in nested}})
    return out


class Prometheus:
    """Prometheus, or any store that answers its API (``Endpoint``: a prefix, a tenant, credentials)."""

    def __init__(self, server: Endpoint | str) -> None:
        self.server = endpoint(server)
        self.url = self.server.url

    def query(self, expr: str, at: datetime | None = None) -> list[Sample]:
        t = (at or datetime.now()).timestamp()
        with _client(self.server, expr) as c:
            return [Sample(s.labels, _float(s.values[0])) for s in c.run(Query(expr, expr, t, t))]

    def query_range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        with _client(self.server, expr) as c:
            got = c.run(Query(expr, expr, start.timestamp(), end.timestamp(), max(step_s, 1)))
        return [Series(s.labels, s.times, [_float(v) for v in s.values]) for s in got]


class Alertmanager:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def alerts(self) -> list[dict]:
        """Active alerts (not silenced, not inhibited), as Alertmanager's v2 API returns them."""
        with _client(self.url, "alerts") as c:
            body = c.get_json("/api/v2/alerts", {"active": "true", "silenced": "false", "inhibited": "false"}, "alerts")
        return _records(self.url, "alerts", body, ("labels", "annotations"))

    def silences(self) -> list[dict]:
        """Every silence Alertmanager holds (active, pending and expired), its matchers as mappings."""
        with _client(self.url, "silences") as c:
            body = c.get_json("/api/v2/silences", {}, "silences")
        rows = _records(self.url, "silences", body, ("status",))
        for s in rows:
            m = s.get("matchers")
            if not isinstance(m, list) or not all(isinstance(x, dict) for x in m):
                raise Malformed(self.url, "silences", "matchers is not a list of mappings")
        return rows
