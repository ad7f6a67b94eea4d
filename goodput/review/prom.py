"""The review's reading of Prometheus: many range queries at once through ``goodput.foundation.promapi``, answers
as numpy series.

Any failure is one ``ConfigError`` (``promapi.config_error``): an unreachable server names its URL and
``--prometheus``; a refused query or an answer that is not Prometheus' API names the server and the query. Series
come back as ``Series(labels, times, values)`` with NaN-free float arrays, the shape the trace store's review
builds too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from goodput.foundation import promapi
from goodput.foundation.promapi import Query

__all__ = ["Query", "Series", "run_queries"]


@dataclass
class Series:
    labels: dict[str, str]
    times: np.ndarray
    values: np.ndarray


def _series(s: promapi.Series) -> Series:
    """Without the points that cannot be a figure of the review: every series it asks for counts or measures
    something (requests, tokens, seconds, ratios, replicas), so a NaN, an infinity or a negative is no point, not a
    figure to print."""
    t, v = np.array(s.times, dtype=float), np.array(s.values, dtype=float)
    ok = np.isfinite(v) & (v >= 0)
    return Series(s.labels, t[ok], v[ok])


def run_queries(server: promapi.Endpoint | str, queries: list[Query], concurrency: int = 16,
                timeout: float = 60.0) -> dict[str, list[Series]]:
    """Every query, ``concurrency`` at a time; keyed by ``Query.key``. ``server``: a URL or an ``Endpoint`` (a
    long-term store behind a prefix, a tenant, credentials)."""
    server = promapi.endpoint(server)
    try:
        got = promapi.run_queries(server, queries, concurrency, timeout)
    except promapi.PromError as e:
        raise promapi.config_error(server.url, e, "--prometheus") from None
    return {k: [_series(s) for s in v] for k, v in got.items()}
