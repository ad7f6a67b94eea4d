"""Exporter benchmarks, each beside its baseline in the same run.

1. Engine normalization throughput over the /metrics dumps of a 200-replica simulated vLLM fleet,
   against parsing with ``prometheus_client.parser`` and re-exposing with prometheus_client; and whole process,
   ``goodput exporter engine normalize`` of one ~232k-sample dump with many distinct series (the fleet's replicas
   as one vLLM's data-parallel engines) against a prometheus_client script parsing and re-exposing the same file,
   wall and CPU time (user + system: the fair figure on a shared machine). Goal: 20x.
2. One scrape of the engine exporter's /metrics (real HTTP) while it serves those 200 replicas; and
   ``goodput exporter engine`` pinned to one core scraping 200 and 1,000 targets (each a vLLM /metrics text on
   its own local port) every 15 s: round time, CPU per interval, its own /metrics answer time. Goal: 1,000 in 15 s.
3. OTLP receiver (``goodput exporter requests``, Parquet store on): sustained spans per second, receiver pinned to
   one core, two clients on the other, JSON and protobuf, on the simulator's request spans and on spans of 20
   attributes (the Collector's published test); spans per receiver CPU-second beside the Collector's published
   per-core figure, and a check that every acknowledged span is in the store. Goal: no slower.
4. The trace store's flush, the same spans through each sink: Parquet (the baseline) and ClickHouse's
   ``otel_traces`` on chDB (the engine in-process: mapping, JSON rows, the INSERT), with a check of the row count.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import httpx
import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.report import emit
from goodput.exporters.config import Target, Targets
from goodput.exporters.engine import EngineExporter
from goodput.exporters.exposition import CONTENT_TYPE
from goodput.exporters.normalize import normalize
from goodput.foundation.http import Server
from goodput.simulator.config import parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.records import RequestTable
from goodput.simulator.spans import span_documents
from goodput.simulator.vllm_metrics import VllmMetrics
from goodput.simulator.workload import generate

REPO = Path(__file__).resolve().parents[1]


def fleet_dumps(replicas: int = 200, seconds: float = 120.0) -> list[str]:
    """/metrics text of every replica of a simulated 8B fleet after ``seconds`` of Poisson chat load."""
    cfg = parse_fleet({
        "name": "bench-200", "seed": 2,
        "deployments": [{"name": "chat", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "replicas": replicas,
                         "engine": {"prefix_cache": True}}],
        "workloads": [{"name": "chat", "scene": "chat", "tier": "P0", "deployment": "chat", "tenants": {"t": 1},
                       "input_tokens": {"p50": 800, "p95": 3000, "p99": 4000, "max": 8000},
                       "output_tokens": {"p50": 150, "p95": 500, "p99": 700, "max": 1000},
                       "arrival": {"process": "poisson", "rate": 3.0 * replicas}}],
    }, "bench")
    observers: dict[int, VllmMetrics] = {}

    def factory(dep, idx):
        m = VllmMetrics(dep.cfg.model, dep.cfg.engine, dep.num_blocks, dep.cfg.engine.max_model_len)
        observers[idx] = m
        return m

    fleet = Fleet(cfg, generate(cfg, seconds, 2), observer_factory=factory)
    fleet.run(seconds)
    dumps = []
    for rep in fleet.deployments[0].replicas:
        m = observers[rep.index]
        m.replica = rep
        dumps.append(generate_latest(m.registry()).decode())
    return dumps


PROMETHEUS_CLIENT = """
import sys
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

class Families:
    def __init__(self, fams):
        self.fams = fams

    def collect(self):
        return self.fams

with open(sys.argv[1]) as f:
    families = list(text_string_to_metric_families(f.read()))
registry = CollectorRegistry(auto_describe=False)
registry.register(Families(families))
sys.stdout.buffer.write(generate_latest(registry))
"""


def data_parallel_dump(dumps: list[str], samples: int) -> tuple[str, int]:
    """One exposition holding ``samples`` samples: replica dumps in turn, each under its own ``engine`` label (as a
    vLLM server with that many data-parallel engines would expose them), one HELP/TYPE per family."""
    per_dump = sum(1 for ln in dumps[0].splitlines() if ln and ln[0] != "#")
    engines = max(1, samples // per_dump)
    families: dict[str, list[str]] = {}
    for i in range(engines):
        name = ""
        for line in dumps[i % len(dumps)].splitlines():
            if line.startswith("# HELP "):
                name = line.split(" ", 3)[2]
                if name in families:
                    continue
                families[name] = [line]
            elif line.startswith("#"):
                if i == 0:
                    families[name].append(line)
            elif line:
                families[name].append(line.replace('engine="0"', f'engine="{i}"', 1))
    text = "\n".join(ln for lines in families.values() for ln in lines) + "\n"
    return text, engines * per_dump


def whole_process(dumps: list[str], samples: int = 232_000, runs: int = 3) -> dict:
    """Whole-process normalize of one large dump beside prometheus_client's parse + re-expose, taking turns."""
    text, n = data_parallel_dump(dumps, samples)
    with tempfile.TemporaryDirectory(prefix="goodput-bench-dump-") as tmp:
        big = Path(tmp) / "engines.txt"
        big.write_text(text)
        commands = {"goodput_normalize": [sys.executable, "-m", "goodput", "exporter", "engine", "normalize", str(big)],
                    "prometheus_client": [sys.executable, "-c", PROMETHEUS_CLIENT, str(big)]}
        wall: dict[str, list[float]] = {k: [] for k in commands}
        cpu: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(runs):
            for label, cmd in commands.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, check=True)
                wall[label].append(time.perf_counter() - t0)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[label].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    ours, base = "goodput_normalize", "prometheus_client"
    return {"samples": n, "bytes": len(text.encode()),
            **{f"{k}_best_s": {"wall": round(min(wall[k]), 3), "cpu": round(min(cpu[k]), 3)} for k in commands},
            "speedup_x_wall_best": round(min(wall[base]) / min(wall[ours]), 1),
            "speedup_x_wall_median": round(statistics.median(wall[base]) / statistics.median(wall[ours]), 1),
            "speedup_x_cpu_best": round(min(cpu[base]) / min(cpu[ours]), 1), "goal_x": 20}


class _Families:
    def __init__(self, fams):
        self.fams = fams

    def collect(self):
        return self.fams


def baseline(dumps: list[str]) -> tuple[int, float]:
    t0 = time.perf_counter()
    samples = 0
    for text in dumps:
        fams = list(text_string_to_metric_families(text))
        samples += sum(len(f.samples) for f in fams)
        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Families(fams))
        generate_latest(reg)
    return samples, time.perf_counter() - t0


def ours(dumps: list[str], rounds: int = 5) -> tuple[int, float]:
    t0 = time.perf_counter()
    samples = 0
    for _ in range(rounds):
        for i, text in enumerate(dumps):
            n = normalize(text)
            n.lines(f'model="Llama-3.1-8B",deployment="chat",replica="chat-{i}"')
            samples += n.samples_in
    return samples, time.perf_counter() - t0


def scrape_200(dumps: list[str], scrapes: int = 20) -> dict:
    bodies = [d.encode() for d in dumps]

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            body = bodies[int(self.path.strip("/").split("/")[0])]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    engines = ThreadingHTTPServer(("127.0.0.1", 0), H)
    engines.daemon_threads = True
    threading.Thread(target=engines.serve_forever, daemon=True).start()
    port = engines.server_address[1]
    targets = Targets(tuple(Target("chat", f"chat-{i}", f"http://127.0.0.1:{port}/{i}/metrics", "vllm", "Llama-3.1-8B")
                            for i in range(len(dumps))), {"chat": len(dumps)})
    exp = EngineExporter(targets, timeout_s=10)
    t0 = time.perf_counter()
    exp.scrape_once()
    round_s = time.perf_counter() - t0
    srv = Server("127.0.0.1", 0, {("GET", "/metrics"): lambda h, b: (200, CONTENT_TYPE, exp.render().encode(), {})})
    srv.start()
    times, size, series = [], 0, 0
    with httpx.Client() as client:
        for _ in range(scrapes):
            t = time.perf_counter()
            r = client.get(f"{srv.url}/metrics")
            times.append(time.perf_counter() - t)
            size, series = len(r.content), sum(1 for ln in r.text.splitlines() if ln and ln[0] != "#")
    srv.stop()
    engines.shutdown()
    up = sum(1 for s in exp.states if s.up)
    return {"targets_up": up, "series": series, "bytes": size, "scrape_ms_median": round(statistics.median(times) * 1e3, 1),
            "scrape_ms_max": round(max(times) * 1e3, 1), "background_round_s": round(round_s, 2)}


class _Answer(asyncio.Protocol):
    """Answers every request on its connection with ``body()`` (a GET has no body of its own to read)."""

    def __init__(self, body: Callable[[], bytes]) -> None:
        self.body, self.buf = body, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0 and self.transport is not None:
            self.buf = self.buf[end + 4:]
            body = self.body()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def _serve(bodies: Sequence[Callable[[], bytes]], conn, cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        servers = [await loop.create_server(lambda b=b: _Answer(b), "127.0.0.1", 0, backlog=1024) for b in bodies]
        conn.send([srv.sockets[0].getsockname()[1] for srv in servers])
        await asyncio.Event().wait()

    asyncio.run(main())


class MetricsStub:
    """Targets on local sockets, one port each, in a process of their own (pinned to ``cpu``): port ``i`` answers
    any GET with ``bodies[i]()``, as a replica's engine answers ``/metrics``. A raw asyncio protocol, so the
    targets cost little next to what scrapes them."""

    def __init__(self, bodies: Sequence[Callable[[], bytes]], cpu: int | None = None) -> None:
        ctx = multiprocessing.get_context("fork")
        mine, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(bodies, theirs, cpu), daemon=True)
        self.proc.start()
        self.ports: list[int] = mine.recv()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(10)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return None


def engine_fleet(dumps: list[str], sizes: tuple[int, ...] = (200, 1000), interval_s: float = 15.0,
                 rounds: int = 3) -> dict:
    """``goodput exporter engine`` pinned to one core (``taskset -c 0``) scraping ``n`` targets, each a vLLM's
    /metrics text on its own local port (the stub on the other core), every ``interval_s``: each round's duration as
    the exporter reports it, its CPU per interval, and how long its own /metrics takes to answer, polled every 3 s.
    Goal: every one of 1,000 targets up within the interval."""
    bodies = [dumps[i % len(dumps)].encode() for i in range(max(sizes))]
    stub = MetricsStub([lambda b=b: b for b in bodies], cpu=1 if (os.cpu_count() or 1) > 1 else None)
    out: dict = {"interval_s": interval_s, "target_body_bytes": round(statistics.mean(map(len, bodies)))}
    try:
        for n in sizes:
            out[f"targets_{n}"] = _engine_run(stub.ports[:n], interval_s, rounds)
    finally:
        stub.stop()
    return out


def _engine_run(ports: list[int], interval_s: float, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="goodput-bench-engine-") as tmp:
        path = Path(tmp) / "targets.yaml"
        path.write_text(yaml.safe_dump({"targets": [
            {"deployment": f"chat-{i // 20}", "replica": f"chat-{i // 20}-{i % 20}", "model": "Llama-3.1-8B",
             "engine": "vllm", "url": f"http://127.0.0.1:{port}/metrics"} for i, port in enumerate(ports)]}))
        port = free_port()
        proc = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "goodput", "exporter", "engine",
                                 "--targets", str(path), "--port", str(port), "--interval", str(interval_s),
                                 "--timeout", "10"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/metrics"
        durations: dict[float, float] = {}
        answer_s: list[float] = []
        up = series = size = 0
        try:
            with httpx.Client(timeout=30) as client:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:  # the first round: connections, imports, warm-up
                    try:
                        if (_sample(client.get(url).text, "llm_exporter_last_success_timestamp_seconds") or 0) > 0:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.5)
                cpu0, t0 = _cpu_s(proc.pid), time.monotonic()
                while len(durations) < rounds + 1 and time.monotonic() < t0 + (rounds + 2) * interval_s:
                    time.sleep(3)
                    t = time.perf_counter()
                    r = client.get(url)
                    answer_s.append(time.perf_counter() - t)
                    last = _sample(r.text, "llm_exporter_last_success_timestamp_seconds") or 0.0
                    durations[last] = _sample(r.text, "llm_exporter_collection_duration_seconds") or 0.0
                    up = r.text.count("} 1.0\n", r.text.find("# TYPE llm_engine_up"),
                                      r.text.find("# HELP", r.text.find("# TYPE llm_engine_up")))
                    series = sum(1 for ln in r.text.splitlines() if ln and ln[0] != "#")
                    size = len(r.content)
                cpu, wall = _cpu_s(proc.pid) - cpu0, time.monotonic() - t0
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
    rounds_s = list(durations.values())[1:] or list(durations.values())  # after the first (warm-up) round
    return {"targets": len(ports), "targets_up": up, "series": series, "metrics_bytes": size,
            "round_s_max": round(max(rounds_s), 2), "round_s_median": round(statistics.median(rounds_s), 2),
            "cpu_s_per_interval": round(cpu / wall * interval_s, 2), "one_core_share": round(cpu / wall, 2),
            "metrics_answer_ms_median": round(statistics.median(answer_s) * 1e3, 1),
            "metrics_answer_ms_max": round(max(answer_s) * 1e3, 1), "goal_round_s": interval_s}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The OpenTelemetry Collector's published per-core figure for traces, OTLP in and out (20 attributes a span, 1 CPU,
# 2 GB): ~12K spans/s sustained, 10K recommended; github.com/open-telemetry/opentelemetry-collector, docs/performance.md.
COLLECTOR_SPANS_PER_CORE = {"sustained": 12_000, "recommended_max": 10_000}


def _protobuf(doc: str) -> bytes:
    """An OTLP JSON document as OTLP protobuf (ids are hex in OTLP JSON, base64 in protobuf's own JSON mapping)."""
    d = json.loads(doc)
    for rs in d["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if sp.get(k):
                        sp[k] = base64.b64encode(bytes.fromhex(sp[k])).decode()
    return json_format.ParseDict(d, ExportTraceServiceRequest()).SerializeToString()


def otlp_payloads(requests: int = 20_000) -> tuple[list[str], int]:
    """The spans of ``requests`` simulated chat requests (20 tenants, 8 replicas) as OTLP JSON documents of 256
    requests each (~1,500 spans, the shape ``goodput simulate --spans`` writes), and how many spans they hold."""
    from goodput.simulator.run import simulate

    cfg = parse_fleet({
        "name": "bench-otlp", "seed": 3,
        "deployments": [{"name": "chat", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "replicas": 8}],
        "workloads": [{"name": "chat", "scene": "chat", "tier": "P0", "deployment": "chat",
                       "tenants": {f"tenant-{i}": 1 for i in range(20)},
                       "input_tokens": {"p50": 800, "p95": 3000, "p99": 4000, "max": 8000},
                       "output_tokens": {"p50": 150, "p95": 500, "p99": 700, "max": 1000},
                       "arrival": {"process": "poisson", "rate": 40.0}}],
    }, "bench")
    table: RequestTable = simulate(cfg, requests / 40.0).table
    docs = list(span_documents(table))
    return docs, sum(doc.count('"spanId"') for doc in docs)


def collector_payloads(spans: int = 120_000, per_payload: int = 1_000) -> tuple[list[str], int]:
    """Spans shaped as in the Collector's published test: 20 string attributes each (its Synthetic Load Generator's
    spans), traces of 10 spans, ``per_payload`` spans a post, as OTLP JSON documents."""
    docs, t0 = [], 1_795_424_400 * 10**9
    for first in range(0, spans, per_payload):
        out = []
        for i in range(first, min(first + per_payload, spans)):
            parent = f'"parentSpanId":"{i - i % 10 + 1:016x}",' if i % 10 else ""
            attrs = ",".join(f'{{"key":"attr.{k:02d}","value":{{"stringValue":"value-{k}-{i % 97}"}}}}' for k in range(20))
            out.append(f'{{"traceId":"{i // 10 + 1:032x}","spanId":"{i + 1:016x}",{parent}"name":"op-{i % 10}",'
                       f'"kind":2,"startTimeUnixNano":"{t0 + i * 10**6}","endTimeUnixNano":"{t0 + i * 10**6 + 5 * 10**6}",'
                       f'"attributes":[{attrs}]}}')
        docs.append('{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"load"}}]},'
                    '"scopeSpans":[{"scope":{"name":"bench"},"spans":[' + ",".join(out) + "]}]}]}")
    return docs, spans


def otlp_throughput(docs: list[str], spans_sent: int, encoding: str = "json", clients: int = 2) -> dict:
    """``goodput exporter requests`` pinned to one core (``taskset -c 0``), its Parquet store on, posted every
    document by ``clients`` connections at once from the other core (a 503's Retry-After honoured): spans per second
    acknowledged (wall), spans per CPU-second of the receiver (from ready to exit, its last flush included), and a
    check that every acknowledged span is in the store."""
    proto = encoding == "protobuf"
    bodies = [_protobuf(d) for d in docs] if proto else [d.encode() for d in docs]
    content_type = "application/x-protobuf" if proto else "application/json"
    store = Path(tempfile.mkdtemp(prefix="goodput-bench-store-"))
    port, otlp = free_port(), free_port()  # other benchmarks and servers may share this machine
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "goodput", "exporter", "requests", "--store", str(store),
           "--port", str(port), "--otlp-port", str(otlp), "--flush-interval", "2"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1} if (os.cpu_count() or 1) > 1 else {0})
    url = f"http://127.0.0.1:{otlp}/v1/traces"
    retries = [0]
    with httpx.Client(timeout=30) as probe:
        for _ in range(200):
            try:
                probe.get(f"http://127.0.0.1:{otlp}/healthz")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
    ready_cpu = _cpu_s(proc.pid)

    def post(share: list[bytes]) -> None:
        with httpx.Client(timeout=30) as client:
            for body in share:
                while (r := client.post(url, content=body, headers={"Content-Type": content_type})).status_code != 200:
                    retries[0] += 1
                    time.sleep(float(r.headers.get("Retry-After", "1")))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=post, args=(bodies[i::clients],)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    accepted_s = time.perf_counter() - t0
    proc.terminate()
    proc.communicate(timeout=120)
    total_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime - ready_cpu
    stored = duckdb.sql(f"SELECT count(*) FROM (SELECT DISTINCT trace_id, span_id FROM "
                        f"read_parquet('{store}/**/*.parquet', hive_partitioning=true))").fetchall()[0][0]
    assert stored == spans_sent, (stored, spans_sent)
    return {"encoding": encoding, "payload_bytes_mean": round(statistics.mean(map(len, bodies))),
            "spans_sent": spans_sent, "spans_in_store": stored, "retries_after_503": retries[0],
            "accept_s": round(accepted_s, 2), "receiver_cpu_s": round(cpu, 2),
            "spans_per_s_acknowledged": round(spans_sent / accepted_s),
            "spans_per_s_including_final_flush": round(spans_sent / total_s),
            "spans_per_receiver_cpu_s": round(spans_sent / cpu),
            "collector_spans_per_core": COLLECTOR_SPANS_PER_CORE}


def store_sinks(n: int = 200_000) -> dict:
    """Spans per second of one ``TraceStore.flush`` of ``n`` gateway-like spans, Parquet beside chDB."""
    from goodput.exporters.clickhouse_sink import ClickHouseSink
    from goodput.exporters.otlp import Span
    from goodput.exporters.trace_store import TraceStore
    from goodput.foundation.clickhouse import connect, parse_target

    t0 = 1795424400_000_000_000
    spans = [Span(f"{i:032x}", f"{i + 1:016x}", "", "llm.request", 2, t0 + i * 10**6, t0 + i * 10**6 + 10**9, 1, "",
                  "gw", {"llm.tenant": f"t{i % 50}", "llm.deployment": "chat", "llm.tier": "P1", "llm.outcome": "ok",
                         "llm.input_tokens": 800 + i % 400, "llm.output_tokens": 150 + i % 100},
                  {"service.name": "gw"}) for i in range(n)]
    out = {"spans": n}
    with tempfile.TemporaryDirectory() as d:
        target = parse_target(f"chdb:{d}/chdb?database=bench", "--store")
        for name, sink in (("parquet_baseline", None), ("chdb_otel_traces", ClickHouseSink(target))):
            store = TraceStore(Path(d) / name, sink=sink, max_buffered_spans=n, flush_interval_s=3600)
            store.accept(spans, b"{}", "J")
            start = time.perf_counter()
            assert store.flush() == n
            out[f"{name}_spans_per_s"] = round(n / (time.perf_counter() - start))
            store.close()
        rows = connect(target).query_df("SELECT count() AS n FROM bench.otel_traces")["n"][0]
        assert int(rows) == n, rows
    out["chdb_vs_parquet_x"] = round(out["chdb_otel_traces_spans_per_s"] / out["parquet_baseline_spans_per_s"], 2)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.exporters", description=__doc__)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])
    dumps = fleet_dumps()
    n_base, t_base = baseline(dumps)
    n_ours, t_ours = ours(dumps)
    out = {
        "normalization": {
            "dumps": len(dumps), "samples_per_dump": n_base // len(dumps),
            "baseline_prometheus_client_samples_per_s": round(n_base / t_base),
            "goodput_normalize_samples_per_s": round(n_ours / t_ours),
            "speedup_x": round((n_ours / t_ours) / (n_base / t_base), 1),
        },
        "normalization_whole_process_232k_samples": whole_process(dumps),
        "engine_exporter_scrape_200_replicas": scrape_200(dumps),
        "engine_exporter_fleet_one_core": engine_fleet(dumps),
        "otlp_receiver_one_core": {f"{shape}_{enc}": otlp_throughput(docs, spans, enc)
                                   for shape, (docs, spans) in (("llm_requests", otlp_payloads()),
                                                                ("20_attributes", collector_payloads()))
                                   for enc in ("json", "protobuf")},
        "trace_store_flush_by_sink": store_sinks(),
    }
    return emit("exporter benchmarks", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
