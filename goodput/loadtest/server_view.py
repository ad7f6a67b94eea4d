"""The server's side of a load test, per step, beside the client's: what the engines said while it ran.

A background thread scrapes every target's ``/metrics`` each ``interval_s`` and reads it through the
engine exporter's normalizer (``goodput.exporters.normalize``), so vLLM, SGLang, TGI and Triton targets give the
same canonical families. ``per_step`` then reduces the scrapes that fall in each step: gauges are averaged
over the step's scrape rounds (summed over targets for running/waiting), counters and the queue-time
histogram are differenced from the last scrape at or before the step's start to the last at or before its
end. A target that fails a scrape is counted (``failures``), never fatal: a lost replica is part of a test.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from goodput.contracts.catalog import by_name
from goodput.exporters.normalize import UnknownDialect, normalize
from goodput.foundation.histogram import quantile

if TYPE_CHECKING:
    import httpx  # for the annotations; the scraping imports it where it starts

__all__ = ["Round", "ServerView", "TargetScrape", "metrics_url", "parse_engine", "parse_gpu_utilization",
           "queue_p95", "step_view"]

RUNNING = by_name("llm_requests_running").name
WAITING = by_name("llm_requests_waiting").name
KV_USAGE = by_name("llm_kv_cache_usage_ratio").name
PREEMPTIONS = by_name("llm_preemptions_total").name
PREFIX_QUERIED = by_name("llm_prefix_cache_queried_tokens_total").name
PREFIX_HIT = by_name("llm_prefix_cache_hit_tokens_total").name
QUEUE_TIME = by_name("llm_queue_time_seconds").name
GPU_UTIL = by_name("llm_gpu_utilization_ratio").name
_GAUGES = (RUNNING, WAITING, KV_USAGE)
_COUNTERS = (PREEMPTIONS, PREFIX_QUERIED, PREFIX_HIT)


@dataclass(frozen=True, slots=True)
class TargetScrape:
    """One target's canonical values at one scrape."""

    gauges: dict[str, float]
    counters: dict[str, float]
    queue_buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), ascending, +Inf last


@dataclass(frozen=True, slots=True)
class Round:
    """One scrape of every target at run-clock time ``t``; a failed target maps to None."""

    t: float
    targets: dict[str, TargetScrape | None]
    gpu_util: float | None = None  # mean over the GPU exporter's GPUs, when one is given and answered


def metrics_url(target: str) -> str:
    """The ``/metrics`` URL of a load-test target given as its base URL (``http://h:p`` or ``http://h:p/v1``)."""
    base = target.rstrip("/")
    return base.removesuffix("/v1") + "/metrics"


def _le(extra: str) -> float:
    raw = extra[extra.index('le="') + 4:]
    raw = raw[:raw.index('"')]
    return math.inf if raw == "+Inf" else float(raw)


def parse_engine(text: str) -> TargetScrape:
    """The values the server view needs from one engine's exposition text (any dialect; UnknownDialect if none)."""
    fams = normalize(text).families
    gauges = {g: sum(fams[g].values()) for g in _GAUGES if fams.get(g)}
    if KV_USAGE in gauges:  # data-parallel engines are summed by the normalizer; a ratio is their mean
        gauges[KV_USAGE] /= len(fams[KV_USAGE])
    counters = {c: sum(fams[c].values()) for c in _COUNTERS if fams.get(c)}
    buckets = sorted((_le(extra), v) for (name, extra), v in fams.get(QUEUE_TIME, {}).items() if name.endswith("_bucket"))
    return TargetScrape(gauges, counters, tuple(buckets))


def parse_gpu_utilization(text: str) -> float | None:
    """Mean ``llm_gpu_utilization_ratio`` over the GPUs in a GPU exporter's text (None when it has none)."""
    values = []
    for line in text.splitlines():
        if line.startswith(GPU_UTIL) and line[len(GPU_UTIL):len(GPU_UTIL) + 1] in ("{", " "):
            try:
                values.append(float(line.rsplit(None, 1)[1]))
            except (IndexError, ValueError):
                continue
    return sum(values) / len(values) if values else None


def queue_p95(buckets) -> dict | None:
    """summary.json's ``queue_wait_p95_s``: the bounded quantile as a mapping (``Quantile.to_dict``), None when
    no request was scheduled in the step."""
    q = quantile(0.95, buckets)
    return q.to_dict() if q is not None else None


def _at(rounds: Sequence[Round], target: str, t: float) -> TargetScrape | None:
    """The target's last successful scrape at or before ``t``."""
    for r in reversed(rounds):
        if r.t <= t and r.targets.get(target) is not None:
            return r.targets[target]
    return None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def step_view(rounds: Sequence[Round], start_s: float, end_s: float) -> dict:
    """The server's view of one step ``[start_s, end_s]`` (pure: rounds in time order in, a dict out)."""
    inside = [r for r in rounds if start_s <= r.t <= end_s]
    targets = sorted({name for r in rounds for name in r.targets})
    running: list[float] = []
    waiting: list[float] = []
    kv: list[float] = []
    gpu: list[float] = []
    for r in inside:
        ok = [s for s in r.targets.values() if s is not None]
        if ok:
            running.append(sum(s.gauges.get(RUNNING, 0.0) for s in ok))
            waiting.append(sum(s.gauges.get(WAITING, 0.0) for s in ok))
            kv.extend(s.gauges[KV_USAGE] for s in ok if KV_USAGE in s.gauges)
        if r.gpu_util is not None:
            gpu.append(r.gpu_util)
    deltas = dict.fromkeys(_COUNTERS, 0.0)
    queue: dict[float, float] = {}
    for name in targets:
        end = _at(rounds, name, end_s)
        if end is None:
            continue
        # the last scrape before the step, else the step's first: ``end`` itself at the latest
        base = _at(rounds, name, start_s) or next((s for r in inside if (s := r.targets.get(name)) is not None), end)
        for c in _COUNTERS:
            now, before = end.counters.get(c, 0.0), base.counters.get(c, 0.0)
            deltas[c] += now - before if now >= before else now  # a reset (restarted replica) counts from zero
        before_q = dict(base.queue_buckets)
        reset = end.queue_buckets and end.queue_buckets[-1][1] < before_q.get(math.inf, 0.0)
        for le, count in end.queue_buckets:
            queue[le] = queue.get(le, 0.0) + (count if reset else count - before_q.get(le, 0.0))
    queried = deltas[PREFIX_QUERIED]
    return {
        "scrape_rounds": len(inside),
        "failed_scrapes": sum(1 for r in inside for s in r.targets.values() if s is None),
        "queue_wait_p95_s": queue_p95(sorted(queue.items())),
        "running_mean": _mean(running),
        "waiting_mean": _mean(waiting),
        "kv_usage_mean": _mean(kv),
        "kv_usage_max": max(kv) if kv else None,
        "preemptions": deltas[PREEMPTIONS],
        "prefix_cache_hit_ratio": deltas[PREFIX_HIT] / queried if queried > 0 else None,
        "gpu_util_mean": _mean(gpu),
    }


@dataclass
class ServerView:
    """Scrape ``metrics_urls`` (each an engine's ``/metrics``) every ``interval_s`` between ``start()`` and
    ``stop()``; ``gpu_url`` is a GPU exporter's ``/metrics``. ``clock`` is the run clock the steps use."""

    metrics_urls: Sequence[str]
    interval_s: float = 1.0
    gpu_url: str | None = None
    clock: Callable[[], float] = time.monotonic
    timeout_s: float = 2.0
    rounds: list[Round] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.metrics_urls:
            raise ValueError("ServerView needs at least one /metrics URL")
        if not self.interval_s > 0:
            raise ValueError(f"ServerView: interval_s must be > 0, got {self.interval_s}")
        self._stop = threading.Event()
        self._running: tuple[httpx.Client, threading.Thread] | None = None  # from start() on

    def start(self) -> None:
        import httpx

        client = httpx.Client(timeout=self.timeout_s)
        thread = threading.Thread(target=self._loop, args=(client,), name="server-view", daemon=True)
        self._running = client, thread
        thread.start()

    def stop(self) -> None:
        """Stop scraping after one last round, so the last step has an end to difference against."""
        if self._running is None or self._stop.is_set():
            return  # never started, or already stopped
        client, thread = self._running
        self._stop.set()
        thread.join(timeout=self.timeout_s * (len(self.metrics_urls) + 2) + self.interval_s)
        self._scrape_round(client)
        client.close()

    def _loop(self, client: httpx.Client) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self._scrape_round(client)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def _get(self, client: httpx.Client, url: str) -> str | None:
        import httpx

        try:
            resp = client.get(url)
            resp.raise_for_status()
            return resp.text
        except httpx.HTTPError as e:
            self._fail(url, f"{type(e).__name__}: {e}")
        return None

    def _fail(self, url: str, why: str) -> None:
        self.failures[url] = self.failures.get(url, 0) + 1
        self.last_error[url] = why

    def _scrape_round(self, client: httpx.Client) -> None:
        targets: dict[str, TargetScrape | None] = {}
        for url in self.metrics_urls:
            text = self._get(client, url)
            scrape = None
            if text is not None:
                try:
                    scrape = parse_engine(text)
                except (UnknownDialect, ValueError) as e:
                    self._fail(url, f"not an engine's metrics: {e}")
            targets[url] = scrape
        gpu = None
        if self.gpu_url is not None and (text := self._get(client, self.gpu_url)) is not None:
            gpu = parse_gpu_utilization(text)
        self.rounds.append(Round(self.clock(), targets, gpu))

    def per_step(self, steps: Iterable[Mapping]) -> dict[int, dict]:
        """``{step index: server view}`` for steps given as mappings with ``index``, ``start_s`` and ``end_s``."""
        rounds = list(self.rounds)
        return {int(s["index"]): step_view(rounds, float(s["start_s"]), float(s["end_s"])) for s in steps}
