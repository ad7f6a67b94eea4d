"""The simulated fleet in real time: every replica an HTTP server, the engine model advancing with the clock.

One engine thread advances the fleet's virtual clock to ``(wall - start) x speed`` every few
milliseconds; HTTP handler threads submit requests and read progress under the same lock, first
bringing the clock up to "now" so a request never joins a step that began before it arrived.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import yaml

from simulator.config import FleetConfig
from simulator.distributions import QuantileDistribution
from simulator.fleet import Deployment, Fleet
from simulator.openai_api import ReplicaHTTPServer, make_server
from simulator.releases import write_releases
from simulator.replica import Replica
from simulator.request import Request
from simulator.span_sink import SpanSink
from simulator.vllm_metrics import VllmMetrics
from simulator.workload import scaled

__all__ = ["LiveFleet", "ReplicaServer", "serve"]

log = logging.getLogger(__name__)

TRAFFIC_WINDOW_S = 3600.0
DEFAULT_OUTPUT = QuantileDistribution.from_quantiles({"p50": 200, "p95": 600, "p99": 900, "max": 2048})


@dataclass
class ReplicaServer:
    deployment: Deployment
    replica: Replica
    metrics: VllmMetrics
    port: int
    model: str
    max_model_len: int
    name: str
    server: ReplicaHTTPServer | None = None
    thread: threading.Thread | None = None
    started: bool = False  # once served, a replica stays in the targets file (a dead one shows as down)
    registry: object = field(default=None)


class LiveFleet:
    def __init__(self, cfg: FleetConfig, *, host: str = "127.0.0.1", base_port: int = 8100, speed: float = 1.0,
                 traffic: float = 1.0, seed: int | None = None, targets: Path | None = None,
                 sink: SpanSink | None = None, releases: Path | None = None) -> None:
        self.cfg = cfg
        self.host, self.base_port, self.speed = host, base_port, speed
        self.traffic = traffic
        self.seed = cfg.seed if seed is None else seed
        self.targets_path = targets
        self.releases_path = releases
        self._releases_written = -1
        self.sink = sink
        self.lock = threading.RLock()
        self.stop_event = threading.Event()
        self.started = time.time()
        self.t0 = time.monotonic()
        if sink is not None:
            sink.base_ns = int(self.started * 1e9)  # span timestamps are wall-clock instants
        self.servers: list[ReplicaServer] = []
        self._metrics: dict[tuple[int, int], VllmMetrics] = {}
        self.fleet = Fleet(cfg, None, observer_factory=self._observer)
        self.window = -1
        self.rng = np.random.default_rng(self.seed)
        self.output_dist = {d.index: next((w.output_tokens for w in cfg.workloads
                                           if w.deployment == d.cfg.name and w.output_tokens), DEFAULT_OUTPUT)
                            for d in self.fleet.deployments}
        self.engine_thread = threading.Thread(target=self._engine_loop, name="engine", daemon=True)

    # ------------------------------------------------------------------ wiring

    def _observer(self, dep: Deployment, idx: int) -> VllmMetrics:
        m = VllmMetrics(dep.cfg.model, dep.cfg.engine, dep.num_blocks, dep.cfg.engine.max_model_len)
        self._metrics[(dep.index, idx)] = m
        return m

    def virtual_now(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def _sync_servers(self) -> None:
        """Start a server for every new replica, stop the servers of lost ones, rewrite the targets file."""
        changed = False
        known = {(s.deployment.index, s.replica.index) for s in self.servers}
        for dep in self.fleet.deployments:
            for rep in dep.replicas:
                if (dep.index, rep.index) in known:
                    continue
                m = self._metrics[(dep.index, rep.index)]
                m.replica = rep
                rs = ReplicaServer(dep, rep, m, self.base_port + len(self.servers), dep.cfg.model,
                                   dep.cfg.engine.max_model_len, f"{dep.cfg.name}-{rep.index}")
                rs.registry = m.registry()
                self.servers.append(rs)
                changed = True
        for rs in self.servers:
            up = rs.replica.alive and rs.replica.available_from <= self.fleet.now
            if up and rs.server is None and not rs.started:
                rs.started = True
                rs.server = make_server(self.host, rs.port, self, rs)
                rs.thread = threading.Thread(target=rs.server.serve_forever, name=rs.name, daemon=True)
                rs.thread.start()
                changed = True
            elif not rs.replica.alive and rs.server is not None:
                srv, rs.server = rs.server, None
                threading.Thread(target=lambda s=srv: (s.shutdown(), s.server_close()), daemon=True).start()
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
        if self.traffic <= 0:
            return
        window = int(now // TRAFFIC_WINDOW_S)
        if window == self.window:
            return
        self.window = window
        arr = scaled(self.cfg, TRAFFIC_WINDOW_S, self.seed + window, self.traffic).shifted(window * TRAFFIC_WINDOW_S)
        self.fleet.arrivals = arr.select(arr.queue_start >= now)
        self.fleet.next_arrival = 0

    def advance(self) -> float:
        """Bring the fleet up to the current virtual time (call with the lock held)."""
        now = self.virtual_now()
        self._feed_traffic(now)
        if now > self.fleet.now:
            self.fleet.run(now)
        if self.fleet.done:
            done, self.fleet.done[:] = list(self.fleet.done), []
            if self.sink is not None:
                self.sink.add(done)
        return now

    def _write_releases(self) -> None:
        """Releases of the fleet file that have happened, in DESIGN.md's format, for `goodput analyze regressions`."""
        if self.releases_path is None or len(self.fleet.releases) == self._releases_written:
            return
        self._releases_written = len(self.fleet.releases)
        tmp = self.releases_path.with_suffix(".tmp")
        write_releases(self.fleet.releases, datetime.fromtimestamp(self.started, UTC), tmp)
        os.replace(tmp, self.releases_path)

    def _engine_loop(self) -> None:
        while not self.stop_event.is_set():
            with self.lock:
                self.advance()
                self._sync_servers()
                self._write_releases()
            self.stop_event.wait(0.002)

    def kill_replica(self, deployment: str, index: int) -> None:
        """The replica's engine dies now: its requests fail, its server stops (the targets file keeps it)."""
        with self.lock:
            now = self.advance()
            self.fleet.lose_replica(self.fleet.by_name[deployment], index, now)
            self._sync_servers()

    # ------------------------------------------------------------------ requests from HTTP

    def submit_http(self, rs: ReplicaServer, prompt: int, max_tokens: int | None, tier: str, meta: dict,
                    ignore_eos: bool) -> Request:
        with self.lock:
            now = self.advance()
            dep = rs.deployment
            cap = max_tokens or max(1, dep.cfg.engine.max_model_len - prompt)
            natural = cap if ignore_eos else int(self.output_dist[dep.index].sample(self.rng, 1)[0])
            self.fleet.next_rid += 1
            req = Request(self.fleet.next_rid, 0, 0, tier, now, now, prompt, min(natural, cap), natural < cap,
                          dep.index, send_s=0.0)
            req.meta = meta
            req.max_tokens = cap
            if rs.replica.alive:
                if rs.replica.submit(req, now):
                    self.fleet.reschedule(rs.replica)
            else:
                rs.replica.reject(req, now, "overloaded")
            return req

    def progress(self, req: Request, rs: ReplicaServer) -> tuple[int, bool]:
        with self.lock:
            now = self.advance()
            return rs.replica.decoded_at(req, now), req.state == 4

    def wait(self, req: Request, rs: ReplicaServer) -> int:
        while True:
            produced, done = self.progress(req, rs)
            if done:
                return produced
            time.sleep(0.005)

    def abort(self, req: Request) -> None:
        with self.lock:
            now = self.advance()
            dep = self.fleet.deployments[req.deployment]
            rep = dep.replicas[req.replica] if 0 <= req.replica < len(dep.replicas) else None
            if rep is not None and rep.abort(req, now):
                self.fleet.reschedule(rep)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        with self.lock:
            self._sync_servers()
        if self.sink is not None:
            self.sink.start()
        self.engine_thread.start()

    def close(self) -> None:
        self.stop_event.set()
        if self.engine_thread.is_alive():
            self.engine_thread.join(timeout=5)
        for rs in self.servers:
            if rs.server is not None:
                rs.server.shutdown()
                rs.server.server_close()
                rs.server = None
        with self.lock:
            if self.fleet.done and self.sink is not None:
                self.sink.add(list(self.fleet.done))
                self.fleet.done.clear()
        if self.sink is not None:
            self.sink.close()


def serve(cfg: FleetConfig, *, host: str, base_port: int, speed: float, targets: Path | None,
          otlp_endpoint: str | None, spans_file: Path | None, traffic: float, seed: int | None,
          duration: float | None, span_format: str = "goodput") -> int:
    sink = SpanSink(cfg, cfg.seed if seed is None else seed, otlp_endpoint, spans_file, span_format=span_format)
    live = LiveFleet(cfg, host=host, base_port=base_port, speed=speed, traffic=traffic, seed=seed,
                     targets=targets, sink=sink)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        live.start()
        started = datetime.now(UTC).isoformat(timespec="seconds")
        print(f"goodput fleet {cfg.name!r} serving since {started} (speed x{speed:g}, traffic x{traffic:g})")
        for rs in live.servers:
            print(f"  {rs.name:28s} {rs.model:16s} http://{host}:{rs.port}/v1  metrics http://{host}:{rs.port}/metrics")
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
    except KeyboardInterrupt:
        pass
    finally:
        live.close()
        signal.signal(signal.SIGTERM, previous)
        print("goodput fleet stopped.", flush=True)
    return 0
