"""The simulated fleet in real time: every replica an HTTP server, the engine model advancing with the clock.

One engine thread owns the fleet. Every tick (``TICK_S``, or sooner when a request arrives) it takes what
the HTTP side posted (submissions, aborts, refusals, each stamped with its own virtual arrival time), runs
the fleet up to each of those instants and then to "now", and hands the progress of every watched
request to the event loop in one ``call_soon_threadsafe`` (``openai_api.deliver``). The replicas' HTTP
servers all live on one asyncio loop (``http_host.HttpHost``); they never take the fleet's lock.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from goodput.foundation.errors import ConfigError
from goodput.simulator.admin_api import AdminError, is_loopback, make_admin_app
from goodput.simulator.cold_start import ColdStart
from goodput.simulator.config import FleetConfig
from goodput.simulator.distributions import QuantileDistribution
from goodput.simulator.fleet import Deployment, Fleet
from goodput.simulator.http_host import HttpHost, Site
from goodput.simulator.openai_api import Ticket, deliver, make_app
from goodput.simulator.openai_protocol import Generation
from goodput.simulator.records import replica_id
from goodput.simulator.releases import write_releases
from goodput.simulator.replica import Replica
from goodput.simulator.request import Request
from goodput.simulator.request_meta import LabelGuard
from goodput.simulator.span_sink import SpanSink
from goodput.simulator.vllm_metrics import VllmMetrics
from goodput.simulator.workload import scaled

__all__ = ["LiveFleet", "ReplicaServer", "serve"]

log = logging.getLogger(__name__)

TRAFFIC_WINDOW_S = 3600.0
TICK_S = 0.002
DRAIN_S = 10.0  # fleet serve's close: wall seconds the requests in flight get to finish before what is left is aborted
ARRIVED_BIN_S = 10.0  # LiveFleet.arrived: the true arrivals, counted in bins of this many virtual seconds
NEW, DONE = 0, 4  # Request.state of one not yet in an engine (waiting at the gateway), of a finished one
DEFAULT_OUTPUT = QuantileDistribution.from_quantiles({"p50": 200, "p95": 600, "p99": 900, "max": 2048})


class _AdmittingFleet(Fleet):
    """The fleet, telling the span sink when its own traffic is admitted (the ``llm.gateway`` span ends then)."""

    sink: SpanSink | None = None

    def submit(self, req: Request, t: float) -> None:
        super().submit(req, t)
        if self.sink is not None and req.state != DONE:
            self.sink.admitted(req)


class _ObservedMetrics(VllmMetrics):
    """A replica's vLLM metrics, also telling the span sink when a request is first scheduled (``llm.queue`` ends)."""

    sink: SpanSink | None = None

    def on_scheduled(self, rep, req, t: float) -> None:
        super().on_scheduled(rep, req, t)
        if self.sink is not None:
            self.sink.scheduled(req)


@dataclass(eq=False)
class ReplicaServer:
    """One replica as served over HTTP: the ``openai_api.Backend`` of its application."""

    live: LiveFleet
    deployment: Deployment
    replica: Replica
    vllm: VllmMetrics
    port: int
    model: str
    max_model_len: int
    name: str
    guard: LabelGuard
    created: int
    registry: CollectorRegistry  # its VllmMetrics', exposed at /metrics
    site: Site | None = None
    started: bool = False  # once served, a replica stays in the targets file (a dead one shows as down)
    error: str = ""  # why it could not be served (its port could not be had)

    @property
    def tokenizer(self) -> str | None:
        return self.deployment.cfg.tokenizer

    def metrics(self) -> bytes:
        return generate_latest(self.registry)

    def submit(self, ticket: Ticket, gen: Generation, tier: str, meta: dict) -> None:
        self.live.post(("submit", self.live.virtual_now(), self, ticket, gen, tier, meta))

    def abort(self, ticket: Ticket) -> None:
        self.live.post(("abort", self.live.virtual_now(), ticket))

    def refuse(self, reason: str, tier: str, meta: dict) -> None:
        self.live.post(("refuse", self.live.virtual_now(), self, reason, tier, meta))


class LiveFleet:
    def __init__(self, cfg: FleetConfig, *, host: str = "127.0.0.1", base_port: int = 8100, speed: float = 1.0,
                 traffic: float = 1.0, seed: int | None = None, targets: Path | None = None,
                 sink: SpanSink | None = None, releases: Path | None = None, http: HttpHost | None = None,
                 admin_port: int | None = None, admin_token: str | None = None) -> None:
        """``admin_port``: serve the admin API (``goodput.simulator.admin_api``) there, on ``host``: for loopback peers, or
        for callers with ``admin_token`` (required when ``host`` is not loopback)."""
        if admin_port is not None and not admin_token and not (host == "localhost" or is_loopback(host)):
            raise ConfigError(host, "--admin-token", "the admin API on a non-loopback address needs a token "
                                                     "(--admin-token or GOODPUT_ADMIN_TOKEN)")
        self.cfg = cfg
        self.host, self.base_port, self.speed = host, base_port, speed
        self.admin_port, self.admin_token = admin_port, admin_token or None
        self.serving = False  # set once start() has its replicas listening
        self.draining = False  # set by close(): no new traffic, HTTP submissions refused, the rest finishes
        self.traffic = traffic
        self.seed = cfg.seed if seed is None else seed
        self.targets_path = targets
        self.releases_path = releases
        self._releases_written = -1
        self.sink = sink
        self.lock = threading.RLock()
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.inbox: deque[tuple] = deque()  # from the event loop to the engine thread
        self.watching: dict[int, Ticket] = {}  # rid -> the handler waiting on it
        self.guard = LabelGuard.of(cfg)
        self.http = http or HttpHost()
        self.started = time.time()
        self.t0 = time.monotonic()
        if sink is not None:
            sink.base_ns = int(self.started * 1e9)  # span timestamps are wall-clock instants
        self.servers: list[ReplicaServer] = []
        self._metrics: dict[tuple[int, str, int], VllmMetrics] = {}  # (deployment, role, replica)
        self.fleet = _AdmittingFleet(cfg, None, observer_factory=self._observer)
        self.fleet.sink = sink
        self.window = -1
        # the ground truth the store's arrival figures are checked against: arrivals fed, per (deployment, ARRIVED_BIN_S bin)
        self.arrived: Counter[tuple[str, int]] = Counter()
        self.rng = np.random.default_rng(self.seed)
        self.output_dist = {d.index: next((w.output_tokens for w in cfg.workloads
                                           if w.deployment == d.cfg.name and w.output_tokens), DEFAULT_OUTPUT)
                            for d in self.fleet.deployments}
        self.engine_thread = threading.Thread(target=self._engine_loop, name="engine", daemon=True)

    # ------------------------------------------------------------------ wiring

    def _observer(self, dep: Deployment, idx: int) -> VllmMetrics:
        m = _ObservedMetrics(dep.cfg.model, dep.cfg.engine, dep.num_blocks, dep.cfg.engine.max_model_len,
                             kv_connector=bool(dep.role))
        m.sink = self.sink
        self._metrics[(dep.index, dep.role, idx)] = m
        return m

    def virtual_now(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def _sync_servers(self) -> None:
        """Start a server for every new replica, stop the servers of lost ones, rewrite the targets file."""
        changed = False
        known = {(s.deployment.index, s.deployment.role, s.replica.index) for s in self.servers}
        created = int(self.started)
        for dep in self.fleet.pools():
            for rep in dep.replicas:
                if (dep.index, dep.role, rep.index) in known:
                    continue
                m = self._metrics[(dep.index, dep.role, rep.index)]
                m.replica = rep
                m.process_start = self._process_start(dep, rep)
                rs = ReplicaServer(self, dep, rep, m, self.base_port + len(self.servers), dep.cfg.model,
                                   dep.cfg.engine.max_model_len, replica_id(dep.cfg.name, dep.role, rep.index),
                                   self.guard, created, m.registry())
                self.servers.append(rs)
                changed = True
        for rs in self.servers:
            up = rs.replica.alive and rs.replica.available_from <= self.fleet.now
            if up and rs.site is None and not rs.started:
                rs.started = True
                changed = True
                try:
                    rs.site = self.http.add(make_app(rs), self.host, rs.port)
                except ConfigError as e:  # at start, fleet serve says so and exits; later, the fleet serves on
                    if not self.serving:
                        raise
                    rs.error = str(e)
                    log.error("%s: %s", rs.name, e)
            elif not rs.replica.alive and rs.site is not None:
                site, rs.site = rs.site, None
                self.http.remove(site)
                changed = True
        if changed:
            self.write_targets()

    def write_targets(self) -> None:
        if self.targets_path is None:
            return
        doc = {
            "targets": [
                {"deployment": rs.deployment.cfg.name, "replica": rs.name, "model": rs.model, "engine": "vllm",
                 "url": f"http://{self.host}:{rs.port}/metrics"}
                for rs in self.servers if rs.started
            ],
            "deployments": {d.cfg.name: {"desired_replicas": d.cfg.replicas} for d in self.fleet.deployments},
        }
        tmp = self.targets_path.with_suffix(self.targets_path.suffix + ".tmp")
        tmp.write_text("# written by `goodput fleet serve`; read by `goodput exporter engine --targets`\n"
                       + yaml.safe_dump(doc, sort_keys=False))
        os.replace(tmp, self.targets_path)

    # ------------------------------------------------------------------ clock

    def _feed_traffic(self, now: float) -> None:
        if self.traffic <= 0 or self.draining:
            return
        window = int(now // TRAFFIC_WINDOW_S)
        if window == self.window:
            return
        self.window = window
        arr = scaled(self.cfg, TRAFFIC_WINDOW_S, self.seed + window, self.traffic).shifted(window * TRAFFIC_WINDOW_S)
        self.fleet.arrivals = fed = arr.select(arr.queue_start >= now)
        self.fleet.next_arrival = 0
        if not len(fed):
            return
        keys, counts = np.unique(np.stack([fed.workload, fed.arrival // ARRIVED_BIN_S]).astype(np.int64), axis=1,
                                 return_counts=True)
        for (w, b), n in zip(keys.T, counts, strict=True):
            self.arrived[(self.cfg.workloads[w].deployment, int(b))] += int(n)

    def advance(self, to: float | None = None) -> float:
        """Bring the fleet up to virtual time ``to`` (default: now; call with the lock held)."""
        now = self.virtual_now() if to is None else to
        self._feed_traffic(now)
        if now > self.fleet.now:
            self.fleet.run(now)
        if self.fleet.done:
            done, self.fleet.done[:] = list(self.fleet.done), []
            if self.sink is not None:
                self.sink.add(done)
        return now

    def _write_releases(self) -> None:
        """Releases of the fleet file that have happened, in docs/design.md's format, for `goodput analyze regressions`."""
        if self.releases_path is None or len(self.fleet.releases) == self._releases_written:
            return
        self._releases_written = len(self.fleet.releases)
        tmp = self.releases_path.with_suffix(".tmp")
        write_releases(self.fleet.releases, datetime.fromtimestamp(self.started, UTC), tmp)
        os.replace(tmp, self.releases_path)

    def _engine_loop(self) -> None:
        while not self.stop_event.is_set():
            with self.lock:
                self._take_inbox()
                now = self.advance()
                self._sync_servers()
                self._write_releases()
                updates = self._progress(now)
            if updates:
                self.http.loop.call_soon_threadsafe(deliver, updates)
            self.wake.wait(TICK_S)
            self.wake.clear()

    def kill_replica(self, deployment: str, index: int) -> None:
        """The replica's engine dies now: its requests fail, its server stops (the targets file keeps it)."""
        with self.lock:
            now = self.advance()
            self.fleet.lose_replica(self.fleet.by_name[deployment], index, now)
            self._sync_servers()
        self.http.settle()  # its port is closed when this returns

    # ------------------------------------------------------------------ admin API (goodput.simulator.admin_api)

    def _deployment(self, name: str) -> Deployment:
        dep = self.fleet.by_name.get(name)
        if dep is None:
            raise AdminError(404, f"no deployment {name!r}; the fleet has {', '.join(sorted(self.fleet.by_name))}")
        return dep

    def _describe(self, rs: ReplicaServer) -> dict:
        out = {"deployment": rs.deployment.cfg.name, "index": rs.replica.index, "name": rs.name,
               "url": f"http://{self.host}:{rs.port}", "alive": bool(rs.replica.alive),
               "available_from_s": rs.replica.available_from, "error": rs.error}
        if (started := self.fleet.cold_starts.get((rs.deployment.index, rs.deployment.role, rs.replica.index))):
            out["cold_start"] = {"asked_at_s": started[0], **started[1].as_dict()}
        return out

    def _process_start(self, dep: Deployment, rep: Replica) -> float:
        """The unix time ``rep``'s engine process started, as its ``process_start_time_seconds`` says: the cold start's
        in-process part before the wall instant it serves from. At ``speed`` 1 that is its start (after scheduling and
        image pull); faster, the in-process part stays in virtual seconds, as the replica's latency histograms are, so
        the engine exporter measures the configured cold start at any speed. The fleet's first replicas start with it."""
        _, cold = self.fleet.cold_starts.get((dep.index, dep.role, rep.index), (0.0, ColdStart()))
        return self.started + max(0.0, rep.available_from) / self.speed - cold.in_process_s

    def replicas(self) -> list[dict]:
        with self.lock:
            return [self._describe(rs) for rs in self.servers]

    def lose_replica(self, deployment: str, index: int | None) -> dict:
        """Kill replica ``index`` of ``deployment`` (default: its highest-numbered alive one) now."""
        with self.lock:
            dep = self._deployment(deployment)
            alive = [r.index for r in dep.replicas if r.alive]
            if index is None:
                if not alive:
                    raise AdminError(409, f"{deployment}: no replica is alive")
                index = alive[-1]
            elif index not in alive:
                raise AdminError(409, f"{deployment}: replica {index} is not alive (alive: {alive})")
            now = self.advance()
            self.fleet.lose_replica(dep, index, now)
            self._sync_servers()
            lost = self._describe(next(rs for rs in self.servers if rs.deployment is dep and rs.replica.index == index))
        self.http.settle()  # answer once its port is closed
        return lost

    def add_replica(self, deployment: str, cold_start_s: float | None = None) -> dict:
        """A new replica of ``deployment`` on the next port that serves after ``cold_start_s`` virtual seconds (None:
        a cold start drawn from the deployment's ``cold_start`` model, 0 without one)."""
        with self.lock:
            dep = self._deployment(deployment)
            now = self.advance()
            self.fleet.start_replica(dep, now, cold_start_s)  # the fleet's replica_added path
            self._sync_servers()
            rs = self.servers[-1]
            if rs.error:
                raise AdminError(409, f"{rs.name}: {rs.error}")
            return self._describe(rs)

    # ------------------------------------------------------------------ requests from HTTP

    def post(self, item: tuple) -> None:
        """From the event loop: hand ``item`` (kind, virtual time, ...) to the engine thread and wake it."""
        self.inbox.append(item)
        self.wake.set()

    def _take_inbox(self) -> None:
        """Apply what the HTTP side posted, each at its own instant (never before the fleet's present)."""
        inbox = self.inbox
        while inbox:
            kind, t, *rest = inbox.popleft()
            now = self.advance(max(t, self.fleet.now))
            if kind == "submit":
                self._submit(now, *rest)
            elif kind == "abort":
                self._abort(now, *rest)
            else:
                self._refuse(now, *rest)

    def _submit(self, now: float, rs: ReplicaServer, ticket: Ticket, gen: Generation, tier: str, meta: dict) -> None:
        dep = rs.deployment
        cap = gen.max_tokens or max(1, dep.cfg.engine.max_model_len - gen.prompt_tokens)
        natural = cap if gen.ignore_eos else int(self.output_dist[dep.index].sample(self.rng, 1)[0])
        self.fleet.next_rid += 1
        req = Request(self.fleet.next_rid, 0, 0, tier, now, now, gen.prompt_tokens, min(natural, cap), natural < cap,
                      dep.index, send_s=0.0)
        req.meta = meta
        req.max_tokens = cap
        ticket.req = req
        self.watching[req.rid] = ticket
        # a decode replica's own API takes a request to the deployment's prefill pool, as llm-d's sidecar does
        to_prefill = rs.deployment.role == "decode"
        if self.draining:  # shutting down: refused as by a replica that is gone (503), a rejected request's span
            rs.replica.reject(req, now, "overloaded")
        elif self.fleet.gateway is not None:  # quotas and tier queues first; sent to this replica when admitted
            self.fleet.gateway.arrive(req, now, None if to_prefill else rs.replica)
        elif to_prefill:
            self.fleet.submit(req, now)
        elif rs.replica.alive:
            if rs.replica.submit(req, now):
                self.fleet.reschedule(rs.replica)
        else:
            rs.replica.reject(req, now, "overloaded")
        if self.sink is not None and req.state not in (NEW, DONE):
            self.sink.admitted(req)

    def _abort(self, now: float, ticket: Ticket) -> None:
        req = ticket.submitted
        if self.fleet.gateway is not None and self.fleet.gateway.cancel(req, now):
            return
        self.fleet.abort(req, now)

    def _refuse(self, now: float, rs: ReplicaServer, reason: str, tier: str, meta: dict) -> None:
        """A request the HTTP face refused: it still becomes a (rejected) request span, counted with its reason."""
        self.fleet.next_rid += 1
        req = Request(self.fleet.next_rid, 0, 0, tier, now, now, 0, 0, False, rs.deployment.index)
        req.meta = meta
        req.replica = rs.replica.index
        req.finish_reason, req.reject_reason, req.completed, req.state = "rejected", reason, now, DONE
        if self.sink is not None:
            self.sink.add([req])

    def _progress(self, now: float) -> list[tuple[Ticket, int, bool]]:
        """(ticket, tokens so far, finished) of every watched request that moved since the last tick."""
        updates = []
        finished = []
        for rid, ticket in self.watching.items():
            req = ticket.submitted
            done = req.state == DONE
            # the replica serving it now: a backup's when it fell back, the decode replica once its KV arrived there
            rep = self.fleet.replica_of(req)
            seen = (rep.decoded_at(req, now) if rep is not None else req.generated, done)
            if seen != ticket.seen:
                ticket.seen = seen
                updates.append((ticket, seen[0], done))
            if done:
                finished.append(rid)
        for rid in finished:
            del self.watching[rid]
        return updates

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.http.start()
        with self.lock:
            self._sync_servers()
        if self.admin_port is not None:
            self.http.add(make_admin_app(self, self.host, self.admin_token), self.host, self.admin_port)
        self.serving = True
        if self.sink is not None:
            self.sink.start()
        self.engine_thread.start()

    def close(self, drain_s: float = 0.0) -> int:
        """Stop as a server is stopped: no new traffic (HTTP submissions are refused), ``drain_s`` wall seconds for
        what is in flight to finish while the engine thread still runs (`fleet serve`: ``DRAIN_S`` or its --drain;
        default none, so a test's teardown does not wait; none when the engine thread was already stopped), then every
        request left is aborted (finish_reason ``abort``) and handed to the span sink, so each one's final spans are
        exported; its HTTP clients see their streams end. Only then do the servers and the sink close. Returns the
        number of requests aborted."""
        with self.lock:
            self.draining = True
            self.fleet.arrivals, self.fleet.next_arrival = None, 0  # the traffic not yet arrived never comes
        deadline = time.monotonic() + drain_s
        while self.engine_thread.is_alive() and time.monotonic() < deadline:
            with self.lock:
                if not self.inbox and not self.fleet.in_flight():
                    break
            time.sleep(0.05)
        self.stop_event.set()
        self.wake.set()
        if self.engine_thread.is_alive():
            self.engine_thread.join(timeout=5)
        with self.lock:
            self._take_inbox()
            aborted = self.fleet.in_flight()
            self.fleet.drain(self.fleet.now)  # the clock has stopped: what is left is aborted now
            self.advance(self.fleet.now)  # hands the sink what finished or was aborted
            updates = self._progress(self.fleet.now)
        if updates and self.http.thread.is_alive():
            self.http.loop.call_soon_threadsafe(deliver, updates)
        self.http.close()
        for rs in self.servers:
            rs.site = None
        with self.lock:
            self._take_inbox()  # the aborts of handlers cancelled by the close: their requests are done already
            self.advance(self.fleet.now)
        if self.sink is not None:
            self.sink.close()
        return aborted


def serve(cfg: FleetConfig, *, host: str, base_port: int, speed: float, targets: Path | None,
          otlp_endpoint: str | None, spans_file: Path | None, traffic: float, seed: int | None,
          duration: float | None, span_format: str = "goodput", admin_port: int | None = None,
          admin_token: str | None = None, drain_s: float = DRAIN_S) -> int:
    sink = SpanSink(cfg, cfg.seed if seed is None else seed, otlp_endpoint, spans_file, span_format=span_format)
    live = LiveFleet(cfg, host=host, base_port=base_port, speed=speed, traffic=traffic, seed=seed,
                     targets=targets, sink=sink, admin_port=admin_port, admin_token=admin_token)
    stop = threading.Event()
    aborted = 0
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        live.start()
        started = datetime.now(UTC).isoformat(timespec="seconds")
        print(f"goodput fleet {cfg.name!r} serving since {started} (speed x{speed:g}, traffic x{traffic:g})")
        for rs in live.servers:
            print(f"  {rs.name:28s} {rs.model:16s} http://{host}:{rs.port}/v1  metrics http://{host}:{rs.port}/metrics")
        if admin_port is not None:
            who = "token holders" if live.admin_token else "loopback peers only"
            print(f"  admin API ({who}): http://{host}:{admin_port}/admin/replicas")
        if targets is not None:
            print(f"  targets file: {targets}")
        if otlp_endpoint:
            print(f"  spans -> {otlp_endpoint}")
        if spans_file:
            print(f"  spans -> {spans_file}")
        print("Ctrl-C to stop.", flush=True)
        deadline = time.monotonic() + duration if duration else None
        while not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            stop.wait(0.2)
        print(f"goodput fleet stopping: up to {drain_s:g} s for the requests in flight to finish.", flush=True)
    finally:
        aborted = live.close(drain_s)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"goodput fleet stopped. {aborted} request(s) still in flight were aborted; every request's spans were "
          "handed to the exporter.", flush=True)
    return 0
