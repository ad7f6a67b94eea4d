"""The server's side of a load test read from a Prometheus that scrapes goodput's engine exporter, per step.

The same figures as ``server_view``'s direct scrape (``step_view``'s keys), asked of Prometheus's HTTP API over
each step's wall-clock window: gauges averaged over the window (``avg_over_time``, summed over replicas for
running/waiting), counters as their ``increase`` over it, and the queue-time histogram's buckets as their
``increase`` by ``le``, whose 95th percentile is ``server_view.queue_p95``'s (a bound in the first bucket and in
+Inf, where ``histogram_quantile`` would make up a number). Names are the catalog's
canonical ones (``goodput exporter engine`` exposes them for any engine dialect); ``selector`` narrows every series
to the deployment under test (``{deployment="chat"}``). A query that fails is counted in ``failed_scrapes`` and its
figure is None, never fatal. The requests and answer checks are ``goodput.foundation.promapi``'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from goodput.foundation.errors import ConfigError
from goodput.foundation.promapi import Client, PromError, Query
from goodput.loadtest.server_view import (
    GPU_UTIL,
    KV_USAGE,
    PREEMPTIONS,
    PREFIX_HIT,
    PREFIX_QUERIED,
    QUEUE_TIME,
    RUNNING,
    WAITING,
    queue_p95,
)

__all__ = ["PrometheusView", "check_prometheus", "step_queries"]

TIMEOUT_S = 5.0
FRESH_WAIT_S = 15.0  # at the end, how long to wait for Prometheus to scrape past the run's last instant


def step_queries(window_s: float, selector: str = "") -> dict[str, str]:
    """The PromQL of each server-view figure over a window of ``window_s`` seconds ending at the query time."""
    w = f"[{max(1, round(window_s * 1000))}ms]"
    s = selector

    def inc(name: str) -> str:
        return f"sum(increase({name}{s}{w}))"
    return {
        "running_mean": f"sum(avg_over_time({RUNNING}{s}{w}))",
        "waiting_mean": f"sum(avg_over_time({WAITING}{s}{w}))",
        "kv_usage_mean": f"avg(avg_over_time({KV_USAGE}{s}{w}))",
        "kv_usage_max": f"max(max_over_time({KV_USAGE}{s}{w}))",
        "preemptions": inc(PREEMPTIONS),
        "prefix_cache_hit_ratio": f"{inc(PREFIX_HIT)} / {inc(PREFIX_QUERIED)}",
        "queue_wait_p95_s": f"sum by (le) (increase({QUEUE_TIME}_bucket{s}{w}))",
        "gpu_util_mean": f"avg(avg_over_time({GPU_UTIL}{w}))",
    }


def _value(client: Client, expr: str, at: float) -> float | None:
    """The first sample of an instant query at ``at``; None when there is none or it is not finite."""
    result = client.run(Query(expr, expr, at, at))
    value = result[0].values[0] if result else None
    return value if value is not None and math.isfinite(value) else None  # NaN: nothing to divide


def _queue_p95(client: Client, expr: str, at: float) -> dict | None:
    """The bounded p95 of the bucket increases an instant query by ``le`` answers at ``at``."""
    buckets = sorted((math.inf if x.labels.get("le") == "+Inf" else float(x.labels["le"]), x.values[0])
                     for x in client.run(Query(expr, expr, at, at)) if "le" in x.labels and x.values)
    return queue_p95(buckets)


def check_prometheus(url: str) -> None:
    """Before the run: ``url`` answers a Prometheus instant query, else one ConfigError line."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError("--prometheus", url, "expected an http(s):// URL of a Prometheus server")
    try:
        with Client(url, TIMEOUT_S) as client:
            _value(client, "1", time.time())
    except PromError as e:
        raise ConfigError("--prometheus", url, f"not a Prometheus query API: {e.detail}") from None


@dataclass
class PrometheusView:
    """Per-step server figures from Prometheus at ``url``; ``clock`` is the run clock, whose time 0 is pinned to
    wall time at ``start()``."""

    url: str
    selector: str = ""
    clock: Callable[[], float] = time.monotonic
    failures: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    wall0: float = 0.0

    def start(self) -> None:
        self.wall0 = time.time() - self.clock()

    def stop(self) -> None:
        """Wait (at most FRESH_WAIT_S) until Prometheus holds a sample of the running gauge newer than now, so the
        last step's window is covered."""
        end, deadline = time.time(), time.monotonic() + FRESH_WAIT_S
        with Client(self.url, TIMEOUT_S) as client:
            while time.monotonic() < deadline:
                try:
                    newest = _value(client, f"max(timestamp({RUNNING}{self.selector}))", time.time())
                    if newest is not None and newest >= end:
                        return
                except PromError as e:
                    self._fail("freshness", e.problem)
                    return
                time.sleep(0.5)

    def _fail(self, what: str, why: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1
        self.last_error[what] = why

    def step_view(self, client: Client, start_s: float, end_s: float) -> dict:
        """One step's figures: each query evaluated at the step's wall-clock end over the step's length."""
        view: dict = {"source": "prometheus", "scrape_rounds": None, "failed_scrapes": 0}
        for key, query in step_queries(end_s - start_s, self.selector).items():
            try:
                read = _queue_p95 if key == "queue_wait_p95_s" else _value
                view[key] = read(client, query, self.wall0 + end_s)
            except PromError as e:
                view["failed_scrapes"] += 1
                self._fail(key, e.problem)
                view[key] = None
        return view

    def per_step(self, steps: Iterable[Mapping]) -> dict[int, dict]:
        """``{step index: server view}`` for steps given as mappings with ``index``, ``start_s`` and ``end_s``."""
        with Client(self.url, TIMEOUT_S) as client:
            return {int(s["index"]): self.step_view(client, float(s["start_s"]), float(s["end_s"])) for s in steps}
