"""Prometheus' HTTP query API, once: the request of an instant or range query, the checks of an answer, its series
as plain dataclasses, and what went wrong as one of three errors, each one line naming the server and the query.

``Unreachable``: no answer (refused, reset, timed out). ``Refused``: an HTTP error or ``"status": "error"``, with
Prometheus' own error text. ``Malformed``: an answer that is not Prometheus' API (not JSON, not a mapping, no
``data``, a series without values, a value that is not a number). Callers turn these into their own behaviour (a
banner, a ``ConfigError``, a counted failure); the sync ``Client`` (GET) and the async ``run_queries`` (POST, so
long alert expressions meet no URL limit) are the two thin transports over httpx, the client the project uses.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from goodput.foundation.errors import ConfigError

__all__ = ["MAX_POINTS", "Client", "Malformed", "PromError", "Query", "Refused", "Series", "Unreachable", "config_error",
           "parse_answer", "read_json", "request", "run_queries"]

MAX_POINTS = 11000  # Prometheus refuses a range query with more points per series
_TEXT = 200  # characters of a non-Prometheus body quoted in an error


@dataclass(frozen=True)
class Query:
    """``start == end`` makes an instant query at ``end``; ``key`` names it in answers and errors."""

    key: str
    expr: str
    start: float  # unix seconds
    end: float
    step: float = 300.0

    @property
    def instant(self) -> bool:
        return self.start == self.end


@dataclass(frozen=True)
class Series:
    """One series of an answer; an instant vector or a scalar is one point. Values are as Prometheus gave them
    (NaN and ±Inf included): what to do with them is the caller's business."""

    labels: dict[str, str]
    times: list[float]  # unix seconds
    values: list[float]


class PromError(Exception):
    """A query that gave no series. ``url``: the server; ``query``: the query's key; ``problem``: what happened;
    ``detail``: the cause alone (an exception's name and text, Prometheus' error)."""

    def __init__(self, url: str, query: str, problem: str, detail: str) -> None:
        self.url, self.query, self.problem, self.detail = url, query, problem, detail
        super().__init__(f"{url}: {query}: {problem}" if query else f"{url}: {problem}")


class Unreachable(PromError):
    def __init__(self, url: str, query: str, detail: str) -> None:
        super().__init__(url, query, f"cannot reach Prometheus ({detail})", detail)


class Refused(PromError):
    def __init__(self, url: str, query: str, status: int, detail: str) -> None:
        self.status = status
        super().__init__(url, query, f"query refused (HTTP {status}): {detail}", detail)


class Malformed(PromError):
    def __init__(self, url: str, query: str, detail: str) -> None:
        super().__init__(url, query, f"not a Prometheus answer ({detail})", detail)


def config_error(url: str, e: PromError, flag: str) -> ConfigError:
    """What a command prints for ``e`` (exit 2): an unreachable server is the ``flag`` that named it, anything else
    the query that failed."""
    if isinstance(e, Unreachable):
        return ConfigError(url, flag, e.problem)
    return ConfigError(e.url, e.query, e.problem)


def _line(text: str) -> str:
    return " ".join(text.split())[:_TEXT]


def _why(e: BaseException) -> str:
    return _line(f"{type(e).__name__}: {e}")


def request(q: Query) -> tuple[str, dict[str, str]]:
    """The API path and form parameters of ``q``; a range query's step is widened to stay under MAX_POINTS."""
    if q.instant:
        return "/api/v1/query", {"query": q.expr, "time": f"{q.end:.3f}"}
    step = math.ceil(max(q.step, (q.end - q.start) / MAX_POINTS, 0.001) * 1000) / 1000  # whole ms, rounded up
    return "/api/v1/query_range", {"query": q.expr, "start": f"{q.start:.3f}", "end": f"{q.end:.3f}",
                                   "step": f"{step:.15g}"}


def read_json(url: str, key: str, status: int, text: str) -> Any:
    """An answer's JSON body, checked: an HTTP error or ``"status": "error"`` is ``Refused`` (with Prometheus' error
    text), a body that is not JSON ``Malformed`` (or ``Refused`` when the status was an error anyway)."""
    try:
        body = json.loads(text)
    except ValueError as e:
        if status >= 400:
            raise Refused(url, key, status, _line(text) or "no body") from None
        raise Malformed(url, key, _why(e)) from None
    error = body.get("error") if isinstance(body, dict) else None
    if status >= 400 or (isinstance(body, dict) and body.get("status") == "error"):
        raise Refused(url, key, status, _line(str(error or text)) or "no body")
    return body


def _point(p: Any) -> tuple[float, float]:
    t, v = p  # a [time, "value"] pair; anything else is a ValueError / TypeError
    if not isinstance(v, str):
        raise TypeError(f"value {v!r} is not a string")
    return float(t), float(v)


def parse_answer(url: str, key: str, body: Any) -> list[Series]:
    """The series of a successful answer (vector, matrix or scalar); anything else is ``Malformed``."""
    try:
        if not isinstance(body, dict):
            raise TypeError(f"a {type(body).__name__}, not a mapping")
        data = body["data"]
        kind, result = data["resultType"], data["result"]
        if kind == "scalar":
            t, v = _point(result)
            return [Series({}, [t], [v])]
        if kind not in ("vector", "matrix"):
            raise ValueError(f"resultType {kind!r}")
        out = []
        for s in result:
            points = [_point(s["value"])] if kind == "vector" else [_point(p) for p in s["values"]]
            out.append(Series({str(k): str(v) for k, v in s["metric"].items()}, [t for t, _ in points],
                              [v for _, v in points]))
        return out
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise Malformed(url, key, _why(e)) from None


class Client:
    """Synchronous queries against one server (the console's pages, the load test's per-step view)."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout, trust_env=False)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def get_json(self, path: str, params: dict[str, str], key: str = "") -> Any:
        """A checked JSON answer of any API on the server (Alertmanager's too)."""
        try:
            r = self._http.get(path, params=params)
        except httpx.RequestError as e:
            raise Unreachable(self.url, key, _why(e)) from None
        return read_json(self.url, key, r.status_code, r.text)

    def run(self, q: Query) -> list[Series]:
        """One query, as a GET (short interactive queries; the async transport POSTs its long ones)."""
        path, params = request(q)
        return parse_answer(self.url, q.key, self.get_json(path, params, q.key))


async def _one(client: httpx.AsyncClient, url: str, q: Query, limit: asyncio.Semaphore) -> list[Series]:
    path, params = request(q)
    async with limit:
        try:
            r = await client.post(path, data=params)
        except httpx.RequestError as e:
            raise Unreachable(url, q.key, _why(e)) from None
    return parse_answer(url, q.key, read_json(url, q.key, r.status_code, r.text))


async def _all(url: str, queries: list[Query], concurrency: int, timeout: float) -> dict[str, list[Series]]:
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, trust_env=False) as client:
        got = await asyncio.gather(*(_one(client, url, q, limit) for q in queries))
    return {q.key: s for q, s in zip(queries, got, strict=True)}


def run_queries(url: str, queries: Iterable[Query], concurrency: int = 16, timeout: float = 60.0) -> dict[str, list[Series]]:
    """Every query, ``concurrency`` at a time (asyncio); keyed by ``Query.key``. The first failure is raised."""
    return asyncio.run(_all(url.rstrip("/"), list(queries), concurrency, timeout))
