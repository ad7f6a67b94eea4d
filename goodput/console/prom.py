"""Prometheus' and Alertmanager's HTTP APIs for the pages, through ``goodput.foundation.promapi`` (its ``Client``
and ``Alertmanager``), within the pages' deadline. An unreachable or failing server, or an answer of the wrong shape
(not a list of alerts, JSON nested past Python's recursion limit), raises promapi's ``PromError``
(one line saying which server, its URL, and why); the pages turn it into a banner. What comes back is checked, so
the pages read plain lists of mappings of strings."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from goodput.foundation import promapi
from goodput.foundation.promapi import Client, Endpoint, Malformed, Query, Series, endpoint

__all__ = ["Alertmanager", "Prometheus", "Sample", "Series"]

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


class Alertmanager(promapi.Alertmanager):
    """Alertmanager's alerts and silences (``promapi.Alertmanager``) within the pages' deadline."""

    def __init__(self, url: str) -> None:
        super().__init__(url, TIMEOUT_S)
