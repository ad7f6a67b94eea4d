"""Prometheus's HTTP API, many range queries at once (httpx, asyncio), answers as numpy series.

A Prometheus that cannot be reached is one ``ConfigError`` naming its URL; a query it refuses names
the query. Series come back as ``Series(labels, times, values)`` with NaN-free float arrays.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import numpy as np

from goodput.foundation.errors import ConfigError

__all__ = ["Query", "Series", "run_queries"]

MAX_POINTS = 11000  # Prometheus refuses a range query with more points per series


@dataclass(frozen=True)
class Query:
    key: str
    expr: str
    start: float  # unix seconds; start == end makes an instant query
    end: float
    step: float = 300.0


@dataclass
class Series:
    labels: dict[str, str]
    times: np.ndarray
    values: np.ndarray


def _parse(result: list[dict], instant: bool) -> list[Series]:
    out = []
    for r in result:
        pts = [r["value"]] if instant else r["values"]
        t = np.array([float(p[0]) for p in pts])
        v = np.array([float(p[1]) for p in pts])
        ok = np.isfinite(v)
        out.append(Series(r["metric"], t[ok], v[ok]))
    return out


async def _one(client: httpx.AsyncClient, q: Query, limit: asyncio.Semaphore) -> list[Series]:
    instant = q.start == q.end
    params = {"query": q.expr, "time": q.end} if instant else {"query": q.expr, "start": q.start, "end": q.end,
                                                               "step": max(q.step, (q.end - q.start) / MAX_POINTS)}
    async with limit:
        r = await client.post("/api/v1/query" if instant else "/api/v1/query_range", data=params)
    try:
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    except ValueError:
        body = {}
    if r.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", r.text[:200]) if isinstance(body, dict) else r.text[:200]
        raise ConfigError(str(client.base_url), q.key, f"query refused ({r.status_code}): {error}")
    try:
        return _parse(body["data"]["result"], instant)
    except (KeyError, IndexError, TypeError, ValueError) as e:  # a server that is not Prometheus' API
        raise ConfigError(str(client.base_url), q.key,
                          f"not a Prometheus answer ({type(e).__name__}: {e})") from None


async def _all(url: str, queries: list[Query], concurrency: int, timeout: float) -> dict[str, list[Series]]:
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        got = await asyncio.gather(*(_one(client, q, limit) for q in queries))
    return {q.key: s for q, s in zip(queries, got, strict=True)}


def run_queries(url: str, queries: list[Query], concurrency: int = 16, timeout: float = 60.0) -> dict[str, list[Series]]:
    """Every query, ``concurrency`` at a time; keyed by ``Query.key``."""
    try:
        return asyncio.run(_all(url.rstrip("/"), queries, concurrency, timeout))
    except httpx.TransportError as e:
        raise ConfigError(url, "--prometheus", f"cannot reach Prometheus ({type(e).__name__}: {e})") from None
