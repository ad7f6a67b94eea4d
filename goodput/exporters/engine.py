"""Engine exporter: scrape every replica's engine ``/metrics``, publish one canonical catalog.

Scrapes run in the background on an interval, concurrently, each with a timeout and a size limit;
normalization happens then, so serving ``/metrics`` is only joining pre-rendered lines. A target
that is down, slow, broken or unknown is reported with ``llm_engine_up 0`` and loses only its own
series; the others keep being served. No error of one target, and no failed round, ends the loop:
each is counted by kind in ``llm_exporter_errors_total``, and ``/healthz`` answers 503 when rounds
stop finishing (see ``goodput.exporters.liveness``).

Given a ``TargetsFile``, each round starts by polling it: an added target is scraped from that round on, a
removed one's series leave ``/metrics`` at once, an unchanged one keeps its state. A bad edit keeps the last good
set; ``/healthz`` then answers 200 ``degraded: ...`` (the exporter still serves every target it knows, so a
readiness probe should not take it out) with the reason, the file and when.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from goodput.contracts.catalog import ENGINE, ENGINE_LABELS, by_name
from goodput.exporters.config import Plan, Target, Targets
from goodput.exporters.exposition import SELF_COLLECTION, fmt_float, labels, render, self_metrics
from goodput.exporters.liveness import Heartbeat
from goodput.exporters.normalize import TooManySeries, UnknownDialect, normalize
from goodput.exporters.targets_file import TargetsFile
from goodput.foundation.http import Response

__all__ = ["EngineExporter", "TargetState"]

EXPORTER = "engine"
CONCURRENCY = 64  # scrapes in flight at once (and the connection pool's size)
log = logging.getLogger(__name__)
# a target listed after this exporter started whose process is older than this was running already: not a cold start.
# A replica may be listed only once Ready (endpoints-based discovery; `fleet serve` lists it when it serves), so its
# whole start precedes the listing: an hour holds the longest weights load, not a replica that ran for days
LISTED_LATE_S = 3600.0
# the process collector's start time (vLLM, SGLang and TGI all publish it): a replica's cold start runs from it
PROCESS_START = re.compile(r"^process_start_time_seconds(?:\{[^}]*\})?[ \t]+(\S+)", re.MULTILINE)


@dataclass
class TargetState:
    target: Target
    up: bool = False
    duration_s: float = 0.0
    error: str = ""
    dialect: str = ""
    lines: dict[str, list[str]] = field(default_factory=dict)
    samples_in: int = 0
    model: str = ""  # the target's model, else what the engine reports
    process_start: float | None = None  # the engine process's start (unix s) as of the last good scrape
    cold_start_s: float | None = None  # its start to this exporter's first successful scrape of that process
    first_request_s: float | None = None  # its start to the first scrape counting a request it finished
    listed_at: float = 0.0  # when this exporter first listed it (its start, for the targets it started with)
    listed_late: bool = False  # listed after this exporter started: a replica added, or one running that was not listed


FINISHED = by_name("llm_requests_finished_total").name


def _served(lines: Iterable[str]) -> bool:
    """Whether the normalized ``llm_requests_finished_total`` lines count a request finished other than aborted."""
    for line in lines:
        head, _, value = line.rpartition(" ")
        if 'finished_reason="abort"' not in head and float(value) > 0:
            return True
    return False


class _TooLarge(Exception):
    pass


class EngineExporter:
    """One collector over all targets. ``scrape_once`` does a round; ``render`` builds the exposition."""

    def __init__(self, targets: Targets, plan: Plan | None = None, *, timeout_s: float = 3.0,
                 max_bytes: int = 8 * 1024 * 1024, interval_s: float = 5.0, clock=time.time,
                 targets_file: TargetsFile | None = None) -> None:
        self.targets = targets
        self.targets_file = targets_file
        self.plan = plan
        self.timeout_s, self.max_bytes, self.interval_s = timeout_s, max_bytes, interval_s
        self.clock = clock
        self.started = clock()  # a process older than this exporter may have ended its cold start unseen
        self.states = [TargetState(t, listed_at=self.started) for t in targets.targets]
        self.lock = threading.Lock()
        self.errors: dict[str, int] = defaultdict(int)
        self.last_duration = 0.0
        self.last_success = 0.0
        self.rounds = 0
        self._stop = threading.Event()
        self.heartbeat = Heartbeat("scrape", grace_s=3 * (interval_s + timeout_s))

    # ------------------------------------------------------------------ scraping

    async def _fetch(self, client: httpx.AsyncClient, url: str) -> str:
        async with client.stream("GET", url, headers={"Accept": "text/plain"}) as r:
            if r.status_code != 200:
                raise httpx.HTTPStatusError(f"HTTP {r.status_code}", request=r.request, response=r)
            chunks, size = [], 0
            async for chunk in r.aiter_bytes():
                size += len(chunk)
                if size > self.max_bytes:
                    raise _TooLarge(f"body over {self.max_bytes} bytes")
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    async def _scrape(self, client: httpx.AsyncClient, st: TargetState, slots: asyncio.Semaphore) -> None:
        async with slots:  # the timeout runs from the target's own request, not from its wait for a slot
            await self._scrape_now(client, st)

    async def _scrape_now(self, client: httpx.AsyncClient, st: TargetState) -> None:
        t0 = time.perf_counter()
        try:
            text = await asyncio.wait_for(self._fetch(client, st.target.url), self.timeout_s)
            norm = normalize(text, st.target.engine)
        except (TimeoutError, httpx.TimeoutException):
            self._down(st, "timeout", t0)
        except _TooLarge:
            self._down(st, "too_large", t0)
        except httpx.HTTPStatusError as e:
            self._down(st, f"http_{e.response.status_code}", t0)
        except httpx.HTTPError:
            self._down(st, "connect", t0)
        except UnicodeDecodeError:
            self._down(st, "parse", t0)
        except UnknownDialect:
            self._down(st, "unknown_dialect", t0)
        except TooManySeries as e:
            self._down(st, "too_many_series", t0, str(e))
        except httpx.InvalidURL:
            self._down(st, "invalid_url", t0)
        except Exception:  # noqa: BLE001 - whatever one target does (a bug included), the others keep being scraped
            self._down(st, "internal", t0)
        else:
            target = st.target
            # one model: the targets file may name it; several: each series keeps the engine's own name
            single = not norm.others
            model = (target.model or norm.model or "") if single else (norm.model or "")
            lines = norm.lines_by_model(lambda m: labels(
                ENGINE_LABELS, ((target.model or m) if single else m, target.deployment, target.replica)))
            with self.lock:
                st.up, st.error, st.dialect, st.lines = True, "", norm.dialect, lines
                st.samples_in = norm.samples_in
                st.duration_s = time.perf_counter() - t0
                st.model = model
                self._note_start(st, text)
                for kind, n in norm.errors.items():
                    self.errors[kind] += n

    def _note_start(self, st: TargetState, text: str) -> None:
        """A process start not seen before is a (re)started engine: its cold start ends with this first good scrape,
        so it is measured once per process, to within a scrape interval, and a restart measures again. The first
        process of a target is measured only if it started after the target was listed (a target listed later: at most
        LISTED_LATE_S before, as a replica listed once it is Ready trails its process): one that ran
        before says how long it has been up (an exporter restart, a running replica newly listed), not how long it took
        to start. A measured process's first request served ends at the first scrape that counts one finished."""
        if (m := PROCESS_START.search(text)) is None:
            return
        try:
            start = float(m.group(1))
        except ValueError:
            self.errors["parse"] += 1
            return
        if start != st.process_start:
            older = st.process_start is None and start < st.listed_at - (LISTED_LATE_S if st.listed_late else 0.0)
            st.process_start = start
            st.cold_start_s = None if older else max(0.0, self.clock() - start)
            st.first_request_s = None
        if st.cold_start_s is not None and st.first_request_s is None and _served(st.lines.get(FINISHED, ())):
            st.first_request_s = max(0.0, self.clock() - start)

    def _down(self, st: TargetState, kind: str, t0: float, detail: str = "") -> None:
        if detail and st.error != kind:  # once as the target goes down for this reason, not every round
            t = st.target
            log.warning("engine exporter: target %s/%s is down: %s", t.deployment, t.replica, detail)
        with self.lock:
            st.up, st.error, st.lines = False, kind, {}
            st.duration_s = time.perf_counter() - t0
            self.errors[kind] += 1

    async def _round(self) -> None:
        t0 = time.perf_counter()
        limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
        slots = asyncio.Semaphore(CONCURRENCY)  # httpx's pool scans every queued request per assignment: O(n^2)
        with self.lock:
            states = list(self.states)
        async with httpx.AsyncClient(timeout=self.timeout_s, limits=limits) as client:
            await asyncio.gather(*(self._scrape(client, st, slots) for st in states))
        self.last_duration = time.perf_counter() - t0
        self.last_success = self.clock()
        self.rounds += 1

    def scrape_once(self) -> None:
        if (f := self.targets_file) is not None:
            before = f.rejected
            if (new := f.poll()) is not None:
                self.set_targets(new)
            elif f.rejected is not None and f.rejected is not before:
                with self.lock:
                    self.errors["targets_file"] += 1
        asyncio.run(self._round())

    def set_targets(self, targets: Targets) -> None:
        """Serve ``targets`` from now on: a target whose entry is unchanged keeps its state and series, the
        others start down until scraped, and a removed one's series are gone from the next render."""
        with self.lock:
            kept = {st.target: st for st in self.states}
            now = self.clock()
            self.states = [kept.get(t) or TargetState(t, listed_at=now, listed_late=True) for t in targets.targets]
            self.targets = targets
        log.warning("engine exporter: targets file reloaded: %d targets", len(targets.targets))

    def healthz(self, h: object, body: bytes) -> Response:
        """``/healthz``: 503 when rounds stop finishing; 200 ``degraded: ...`` while a bad targets file is refused
        and the last good set is served; else 200 ``ok``."""
        if (problem := self.heartbeat.problem()) is not None:
            return 503, "text/plain", f"unhealthy: {problem}\n".encode(), {}
        f = self.targets_file
        if f is not None and (bad := f.rejected) is not None:
            text = (f"degraded: targets file {f.path} rejected at {_iso(bad.at)}: {bad.reason}; serving the last "
                    f"good set of {len(f.targets.targets)} targets, loaded at {_iso(f.loaded_at)}\n")
            return 200, "text/plain", text.encode(), {}
        return 200, "text/plain", b"ok\n", {}

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.scrape_once()
            except Exception as e:  # noqa: BLE001 - no failed round (or reload) ends the loop: counted, the next one runs
                with self.lock:
                    self.errors[f"round_{type(e).__name__}"] += 1
            else:
                self.heartbeat.beat()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def start(self) -> None:
        self.heartbeat.beat()
        self.heartbeat.thread = threading.Thread(target=self._loop, name="engine-scraper", daemon=True)
        self.heartbeat.thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.heartbeat.thread is not None:
            self.heartbeat.thread.join(timeout=self.interval_s + self.timeout_s + 1)

    # ------------------------------------------------------------------ exposition

    def render(self) -> str:
        with self.lock:
            states = list(self.states)
            per_family: dict[str, list[str]] = defaultdict(list)
            errors = dict(self.errors)
            for st in states:
                model = st.model or st.target.model or ""
                prefix = labels(ENGINE_LABELS, (model, st.target.deployment, st.target.replica))
                per_family["llm_engine_up"].append(f"llm_engine_up{{{prefix}}} {1.0 if st.up else 0.0}")
                per_family["llm_engine_scrape_duration_seconds"].append(
                    f"llm_engine_scrape_duration_seconds{{{prefix}}} {fmt_float(st.duration_s)}")
                for fam, value in (("llm_replica_cold_start_seconds", st.cold_start_s),
                                   ("llm_replica_first_request_seconds", st.first_request_s)):
                    if value is not None:
                        per_family[fam].append(f"{fam}{{{prefix}}} {fmt_float(value)}")
                for fam, lines in st.lines.items():
                    per_family[fam].extend(lines)
        available: dict[str, int] = defaultdict(int)
        for st in states:
            available[st.target.deployment] += 1 if st.up else 0
        desired = dict(self.targets.desired)
        if self.plan is not None:
            desired.update(self.plan.desired)
        for dep in sorted(set(available) | set(desired)):
            for state, n in (("desired", desired.get(dep)), ("available", available.get(dep, 0))):
                if n is not None:
                    per_family["llm_deployment_replicas"].append(
                        f'llm_deployment_replicas{{{labels(("deployment", "state"), (dep, state))}}} {float(n)}')
        if self.plan is not None:
            for dep, g in sorted(self.plan.goodput.items()):
                per_family["llm_capacity_replica_goodput_tokens_per_second"].append(
                    f'llm_capacity_replica_goodput_tokens_per_second{{deployment="{dep}"}} {fmt_float(g)}')
            for dep, c in sorted(self.plan.cold_start.items()):
                per_family["llm_capacity_cold_start_seconds"].append(
                    f'llm_capacity_cold_start_seconds{{deployment="{dep}"}} {fmt_float(c)}')
        per_family.update(self_metrics(EXPORTER, self.last_duration, self.last_success, errors))
        return render((spec, per_family.get(spec.name, ())) for spec in (*ENGINE, *SELF_COLLECTION))


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
