"""Prometheus' and Alertmanager's HTTP APIs, read with httpx. An unreachable or failing server raises
``Unreachable`` with one line saying which and why; the pages turn it into a banner."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import httpx

__all__ = ["Alertmanager", "Prometheus", "Sample", "Series", "Unreachable"]

TIMEOUT_S = 3.0


class Unreachable(Exception):
    """The server did not answer, or answered with an error."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    times: list[float]  # unix seconds
    values: list[float]


def _get(url: str, params: dict | None = None) -> dict | list:
    try:
        r = httpx.get(url, params=params, timeout=TIMEOUT_S)
    except httpx.HTTPError as e:
        raise Unreachable(f"{url}: {type(e).__name__}: {e}") from None
    try:
        body = r.json()
    except ValueError:
        raise Unreachable(f"{url}: HTTP {r.status_code}, not JSON") from None
    if r.status_code != 200 or (isinstance(body, dict) and body.get("status") == "error"):
        err = body.get("error", "") if isinstance(body, dict) else ""
        raise Unreachable(f"{url}: HTTP {r.status_code} {err}".strip())
    return body


def _float(v: str) -> float:
    x = float(v)
    return x if math.isfinite(x) else math.nan


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def query(self, expr: str, at: datetime | None = None) -> list[Sample]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        data = _get(f"{self.url}/api/v1/query", params)["data"]
        if data["resultType"] == "scalar":
            return [Sample({}, _float(data["result"][1]))]
        return [Sample(s["metric"], _float(s["value"][1])) for s in data["result"]]

    def query_range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        params = {"query": expr, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}",
                  "step": f"{max(step_s, 1):g}"}
        data = _get(f"{self.url}/api/v1/query_range", params)["data"]
        return [Series(s["metric"], [float(t) for t, _ in s["values"]], [_float(v) for _, v in s["values"]])
                for s in data["result"]]


class Alertmanager:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def alerts(self) -> list[dict]:
        """Active alerts (not silenced, not inhibited), as Alertmanager's v2 API returns them."""
        return _get(f"{self.url}/api/v2/alerts", {"active": "true", "silenced": "false", "inhibited": "false"})
