"""Prometheus' HTTP query API, once: the request of an instant or range query, the checks of an answer, its series
as plain dataclasses, and what went wrong as one of four errors, each one line naming the server and the query.
Alertmanager's API v2 (its alerts and silences) goes through the same client, so its answers meet the same limits
and its errors are the same four, naming Alertmanager.

``Unreachable``: no whole answer (refused, reset, or not done within the deadline). ``Refused``: an HTTP error or
``"status": "error"``, with Prometheus' own error text. ``Malformed``: an answer that is not Prometheus' API (not
JSON, nested too deep, not a mapping, no ``data``, a series without values, a value that is not a number) or not
Alertmanager's (not a list of alerts whose labels are a mapping).
``TooLarge``: a body over ``Limits.max_bytes``, cut off as it streams in. Callers turn these into their own behaviour
(a banner, a ``ConfigError``, a counted failure); the sync ``Client`` (GET) and the async ``run_queries`` (POST, so
long alert expressions meet no URL limit) are the two thin transports over httpx, the client the project uses; both
hold every answer to ``Limits`` (a connect timeout, one deadline for the whole exchange, a size cap). A server is a
URL or a ``promendpoint.Endpoint`` (a path prefix, headers, credentials: a long-term store answering the same API).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json
from goodput.foundation.promendpoint import Endpoint

__all__ = ["CONNECT_TIMEOUT_S", "MAX_ANSWER_BYTES", "MAX_POINTS", "Alertmanager", "Client", "Endpoint", "Limits",
           "Malformed", "PromError", "Query", "Refused", "Series", "TooLarge", "Unreachable", "config_error", "endpoint",
           "parse_answer", "read_json", "request", "run_queries"]

MAX_POINTS = 11000  # Prometheus refuses a range query with more points per series
MAX_ANSWER_BYTES = 16 * 2**20  # a week of 5-minute points is ~40 KB a series: room for 400 series
CONNECT_TIMEOUT_S = 5.0
PROMETHEUS, ALERTMANAGER = "Prometheus", "Alertmanager"  # what a server is, in its errors
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
    """No whole answer from the server at ``url``; ``server`` says which it is (Prometheus, Alertmanager)."""

    def __init__(self, url: str, query: str, detail: str, server: str = PROMETHEUS) -> None:
        self.server = server
        super().__init__(url, query, f"cannot reach {server} ({detail})", detail)


class Refused(PromError):
    def __init__(self, url: str, query: str, status: int, detail: str) -> None:
        self.status = status
        super().__init__(url, query, f"query refused (HTTP {status}): {detail}", detail)


class Malformed(PromError):
    def __init__(self, url: str, query: str, detail: str, server: str = PROMETHEUS) -> None:
        self.server = server
        article = "an" if server[:1] in "AEIOU" else "a"
        super().__init__(url, query, f"not {article} {server} answer ({detail})", detail)


class TooLarge(PromError):
    def __init__(self, url: str, query: str, limit: int) -> None:
        self.limit = limit
        super().__init__(url, query, f"answer larger than the limit of {limit} bytes", f"over {limit} bytes")


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
    """The API path and form parameters of ``q``; a range query's step is widened to stay under MAX_POINTS.
    ``nocache=1``: VictoriaMetrics otherwise moves a range's start and end to multiples of its step (so it can
    cache the answer) and evaluates at instants other than those asked, up to a step earlier than Prometheus;
    Prometheus, Thanos and Mimir ignore the parameter."""
    if q.instant:
        return "/api/v1/query", {"query": q.expr, "time": f"{q.end:.3f}"}
    step = math.ceil(max(q.step, (q.end - q.start) / MAX_POINTS, 0.001) * 1000) / 1000  # whole ms, rounded up
    return "/api/v1/query_range", {"query": q.expr, "start": f"{q.start:.3f}", "end": f"{q.end:.3f}",
                                   "step": f"{step:.15g}", "nocache": "1"}


def read_json(url: str, key: str, status: int, body: bytes, server: str = PROMETHEUS) -> Any:
    """An answer's JSON body, checked: an HTTP error or ``"status": "error"`` is ``Refused`` (with Prometheus' error
    text), a body that is not JSON, or nested deeper than ``jsonfile.MAX_DEPTH``, ``Malformed`` (or ``Refused`` when
    the status was an error anyway)."""
    try:
        doc = parse_json(body, url)
    except ConfigError as e:
        if status >= 400:
            raise Refused(url, key, status, _line(body.decode("utf-8", "replace")) or "no body") from None
        raise Malformed(url, key, e.problem, server) from None
    error = doc.get("error") if isinstance(doc, dict) else None
    if status >= 400 or (isinstance(doc, dict) and doc.get("status") == "error"):
        raise Refused(url, key, status, _line(str(error or body.decode("utf-8", "replace"))) or "no body")
    return doc


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


@dataclass(frozen=True)
class Limits:
    """What one answer may cost: ``deadline_s`` for the whole exchange (connect, headers, body: a server that
    trickles a byte at a time is cut off when it is spent), ``connect_s`` to connect, ``max_bytes`` of body (decoded;
    checked against Content-Length first, then while it streams in; the body is asked for uncompressed, so what
    streams in is what is kept)."""

    deadline_s: float = 60.0
    connect_s: float = CONNECT_TIMEOUT_S
    max_bytes: int = MAX_ANSWER_BYTES

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.deadline_s, connect=min(self.connect_s, self.deadline_s))

    def client(self, server: Endpoint, name: str = PROMETHEUS) -> httpx.AsyncClient:
        """A client for one run of queries; credentials that cannot be read are ``Unreachable`` (of ``name``)."""
        try:
            headers, auth = server.auth()
        except ConfigError as e:
            raise Unreachable(server.url, "", f"credentials: {e}", name) from None
        return httpx.AsyncClient(base_url=server.url + "/", timeout=self.timeout(), trust_env=False, auth=auth,
                                 headers={**headers, "accept-encoding": "identity"})


def endpoint(server: Endpoint | str) -> Endpoint:
    """``server`` as an ``Endpoint`` (a bare URL has no headers and no credentials)."""
    return server if isinstance(server, Endpoint) else Endpoint(server)


async def _fetch(client: httpx.AsyncClient, url: str, key: str, limits: Limits, method: str, path: str,
                 params: dict[str, str], name: str = PROMETHEUS) -> Any:
    """One checked JSON answer within ``limits``; what went wrong is one ``PromError`` naming the server (``name``)."""
    get = method == "GET"  # a GET's parameters go in the URL, a POST's in its form body
    try:
        async with asyncio.timeout(limits.deadline_s):
            async with client.stream(method, path, params=params if get else None, data=None if get else params) as r:
                declared = r.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limits.max_bytes:
                    raise TooLarge(url, key, limits.max_bytes)
                encoding = r.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):  # one compressed chunk could decode to gigabytes at once
                    raise Malformed(url, key, f"content-encoding {encoding!r} though identity was asked for", name)
                body = bytearray()
                async for chunk in r.aiter_raw():
                    body += chunk
                    if len(body) > limits.max_bytes:
                        raise TooLarge(url, key, limits.max_bytes)
    except TimeoutError:
        raise Unreachable(url, key, f"no whole answer within {limits.deadline_s:g} s", name) from None
    except (httpx.RequestError, httpx.StreamError) as e:
        raise Unreachable(url, key, _why(e), name) from None
    return read_json(url, key, r.status_code, bytes(body), name)


class Client:
    """Synchronous queries against one server (the console's pages, the load test's per-step view). Each call runs
    the async transport on a loop of its own (in a helper thread when the caller's thread already runs one), which
    is what gives it a deadline for the whole exchange."""

    def __init__(self, server: Endpoint | str, timeout: float = 5.0, max_bytes: int = MAX_ANSWER_BYTES, *,
                 name: str = PROMETHEUS, connect_s: float = CONNECT_TIMEOUT_S) -> None:
        self.server = endpoint(server)
        self.url = self.server.url
        self.name = name  # what the server is, in errors
        self.limits = Limits(deadline_s=timeout, connect_s=connect_s, max_bytes=max_bytes)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing stays open between calls."""

    def get_json(self, path: str, params: dict[str, str], key: str = "") -> Any:
        """A checked JSON answer of any API on the server (Alertmanager's too)."""
        async def one() -> Any:
            async with self.limits.client(self.server, self.name) as c:
                return await _fetch(c, self.url, key, self.limits, "GET", path, params, self.name)
        return _run(one())

    def run(self, q: Query) -> list[Series]:
        """One query, as a GET (short interactive queries; the async transport POSTs its long ones)."""
        path, params = request(q)
        return parse_answer(self.url, q.key, self.get_json(path, params, q.key))


class Alertmanager:
    """Alertmanager's API v2 through ``Client``: its alerts and silences, checked, as mappings whose labels,
    annotations and status are mappings of strings; any failure a ``PromError`` naming Alertmanager and its URL."""

    def __init__(self, url: str, timeout: float = 5.0, *, connect_s: float = CONNECT_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self._client = Client(self.url, timeout, name=ALERTMANAGER, connect_s=connect_s)

    def alerts(self, matcher: str = "") -> list[dict]:
        """Active alerts (not silenced, not inhibited); ``matcher`` (e.g. ``severity="page"``): only those it
        matches, filtered by Alertmanager."""
        params = {"active": "true", "silenced": "false", "inhibited": "false", **({"filter": matcher} if matcher else {})}
        body = self._client.get_json("/api/v2/alerts", params, "alerts")
        return self._records("alerts", body, ("labels", "annotations"))

    def silences(self) -> list[dict]:
        """Every silence Alertmanager holds (active, pending and expired), its matchers as mappings."""
        rows = self._records("silences", self._client.get_json("/api/v2/silences", {}, "silences"), ("status",))
        for s in rows:
            m = s.get("matchers")
            if not isinstance(m, list) or not all(isinstance(x, dict) for x in m):
                raise Malformed(self.url, "silences", "matchers is not a list of mappings", ALERTMANAGER)
        return rows

    def _records(self, key: str, body: Any, nested: tuple[str, ...]) -> list[dict]:
        """``body`` as a list of mappings whose ``nested`` keys hold mappings of strings; else ``Malformed``."""
        if not isinstance(body, list) or not all(isinstance(a, dict) for a in body):
            raise Malformed(self.url, key, f"answered {type(body).__name__}, not a list of {key}", ALERTMANAGER)
        out = []
        for a in body:
            for n in nested:
                if not isinstance(a.get(n, {}), dict):
                    raise Malformed(self.url, key, f"{n} is a {type(a[n]).__name__}, not a mapping", ALERTMANAGER)
            out.append({**a, **{n: {str(k): str(v) for k, v in a.get(n, {}).items()} for n in nested}})
        return out


def _run(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:  # called from a coroutine: its loop cannot run another
        return pool.submit(asyncio.run, coro).result()


async def _one(client: httpx.AsyncClient, url: str, q: Query, limits: Limits, slots: asyncio.Semaphore) -> list[Series]:
    path, params = request(q)
    async with slots:
        body = await _fetch(client, url, q.key, limits, "POST", path, params)
    return parse_answer(url, q.key, body)


async def _all(server: Endpoint, queries: list[Query], concurrency: int, limits: Limits) -> dict[str, list[Series]]:
    slots = asyncio.Semaphore(concurrency)
    async with limits.client(server) as client:
        got = await asyncio.gather(*(_one(client, server.url, q, limits, slots) for q in queries))
    return {q.key: s for q, s in zip(queries, got, strict=True)}


def run_queries(server: Endpoint | str, queries: Iterable[Query], concurrency: int = 16, timeout: float = 60.0,
                max_bytes: int = MAX_ANSWER_BYTES) -> dict[str, list[Series]]:
    """Every query, ``concurrency`` at a time (asyncio); keyed by ``Query.key``. Each answer gets ``timeout`` seconds
    in all and at most ``max_bytes``; the first failure is raised."""
    return _run(_all(endpoint(server), list(queries), concurrency, Limits(timeout, max_bytes=max_bytes)))
