"""The request exporter's ClickHouse store: the insert path on the real ClickHouse engine (chDB), the failure paths
against a real HTTP server that speaks ClickHouse's insert interface, backed by chDB, and misbehaves on cue."""

import json
import signal
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from chdb import session as chdb_session

from exporters.clickhouse_sink import _MINIMAL_DDL, ClickHouseSink, ClickHouseTarget, insert_token, parse_store
from exporters.otlp import Span, decode_json
from exporters.requests import RequestMetrics, TraceReceiver
from exporters.trace_store import TraceStore
from goodput.foundation.errors import ConfigError
from goodput.foundation.http import Server
from tests.conftest import REPO, free_port_block

DEDUP_DDL = _MINIMAL_DDL.format(db="otel", table="otel_traces") + " SETTINGS non_replicated_deduplication_window = 1000"


def _spans(tenant: str, n: int, seed: int = 0) -> list[Span]:
    t0 = 1795424400_000_000_000
    return [Span(f"{zlib.crc32(tenant.encode()):08x}{seed:08x}{i:016x}", f"{i + 1:016x}", "", "llm.request", 2,
                 t0 + i * 10**6, t0 + i * 10**6 + 10**9 + i, 1, "", "gw",
                 {"llm.tenant": tenant, "llm.output_tokens": i}, {"service.name": "gw"}) for i in range(n)]


def _doc(spans: list[Span]) -> bytes:
    def value(v):
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "gw"}}]}, "scopeSpans": [{"spans": [
            {"traceId": s.trace_id, "spanId": s.span_id, "name": s.name, "kind": s.kind,
             "startTimeUnixNano": str(s.start_ns), "endTimeUnixNano": str(s.end_ns), "status": {"code": 1},
             "attributes": [{"key": k, "value": value(v)} for k, v in s.attributes.items()]}
            for s in spans]}]}]}).encode()


class FakeClickHouse:
    """ClickHouse's HTTP insert interface in front of a chDB session; ``script`` says how each insert goes:
    ``ok``, ``500`` (refused), ``reset`` (connection dropped, nothing stored), ``lost`` (stored, then the
    connection dropped before the reply), ``stall`` (no answer for ``stall_s``, nothing stored) or ``late``
    (stored, then no answer for ``stall_s``). Once the
    script is used up every insert is ``ok``."""

    def __init__(self, path, ddl: str = DEDUP_DDL, stall_s: float = 3.0) -> None:
        self.session = chdb_session.Session(str(path))
        self.session.query("CREATE DATABASE IF NOT EXISTS otel")
        self.session.query(ddl)
        self.script: list[str] = []
        self.seen: list[tuple[str, str]] = []  # (what happened, token)
        self.lock = threading.Lock()
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                q = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with fake.lock:
                    what = fake.script.pop(0) if fake.script else "ok"
                    fake.seen.append((what, q.get("insert_deduplication_token", "")))
                if what == "stall":
                    fake.release.wait(stall_s)
                    self.close_connection = True
                    return
                if what == "500":
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"Code: 242. DB::Exception: Table is in readonly mode. (TABLE_IS_READ_ONLY)\n")
                    return
                if what in ("ok", "lost", "late"):
                    sql = q["query"].replace(" FORMAT ", " SETTINGS insert_deduplication_token="
                                                         f"'{q['insert_deduplication_token']}' FORMAT ")
                    with fake.lock:
                        fake.session.query(sql + "\n" + body.decode())
                if what == "late":
                    fake.release.wait(stall_s)
                if what in ("reset", "lost", "late"):
                    self.connection.shutdown(2)
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def target(self, **kw) -> ClickHouseTarget:
        return ClickHouseTarget(database="otel", table="otel_traces", host="127.0.0.1", port=self.port, **kw)

    def span_counts(self) -> dict[tuple[str, str], int]:
        with self.lock:
            out = self.session.query("SELECT TraceId, SpanId, count() FROM otel.otel_traces GROUP BY TraceId, SpanId",
                                     "JSONCompact")
        return {(t, s): int(n) for t, s, n in json.loads(out.bytes())["data"]}

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.session.close()


@pytest.fixture
def ch(tmp_path):
    fake = FakeClickHouse(tmp_path / "ch")
    yield fake
    fake.close()


def _exactly_once(ch: FakeClickHouse, spans: list[Span]) -> None:
    counts = ch.span_counts()
    assert counts == {(s.trace_id, s.span_id): 1 for s in spans}


# ---------------------------------------------------------------------------------------------- the insert path


def test_spans_become_otel_traces_rows_in_chdb(tmp_path):
    spans = _spans("acme", 5)
    target = ClickHouseTarget(database="otel", table="otel_traces", path=tmp_path / "chdb")
    store = TraceStore(tmp_path / "wal", sink=ClickHouseSink(target), flush_interval_s=3600)
    doc = _doc(spans)
    store.accept(decode_json(doc), doc, "J")
    assert store.flush() == 5 and store.health() is None
    store.close()
    s = chdb_session.Session(str(tmp_path / "chdb"))
    try:
        rows = json.loads(s.query(
            "SELECT TraceId, SpanId, SpanName, SpanKind, ServiceName, toUnixTimestamp64Nano(Timestamp), Duration, "
            "StatusCode, SpanAttributes['llm.tenant'], SpanAttributes['llm.output_tokens'], "
            "ResourceAttributes['service.name'] FROM otel.otel_traces ORDER BY SpanId", "JSONCompact").bytes())["data"]
    finally:
        s.close()
    assert rows == [[x.trace_id, x.span_id, "llm.request", "Server", "gw", x.start_ns, x.end_ns - x.start_ns,
                     "Ok", "acme", str(x.attributes["llm.output_tokens"]), "gw"] for x in spans]
    assert not list((tmp_path / "wal" / "_wal").iterdir())


def test_the_log_is_replayed_into_chdb_on_start(tmp_path):
    target = ClickHouseTarget(database="otel", table="otel_traces", path=tmp_path / "chdb")
    doc = _doc(_spans("acme", 7))
    store = TraceStore(tmp_path / "wal", sink=ClickHouseSink(target), flush_interval_s=3600)
    store.accept(decode_json(doc), doc, "J")  # acknowledged, then the process dies before any flush
    store.sink.close()
    del store
    again = TraceStore(tmp_path / "wal", sink=ClickHouseSink(target), flush_interval_s=3600)
    assert again.recovered == 7
    n = again.sink._insert.session.query("SELECT count() FROM otel.otel_traces", "CSV").bytes()
    again.close()
    assert n.strip() == b"7"


# ---------------------------------------------------------------------------------------------- failure paths


def _store(tmp_path, ch, **kw) -> TraceStore:
    sink = ClickHouseSink(ch.target(), insert_rows=kw.pop("insert_rows", 4), timeout_s=kw.pop("timeout_s", 0.5))
    return TraceStore(tmp_path / "wal", sink=sink, flush_interval_s=3600, **kw)


@pytest.mark.parametrize("failure", ["500", "reset", "lost", "stall", "late"])
def test_a_failed_insert_keeps_its_spans_and_the_retry_stores_each_once(tmp_path, ch, failure):
    metrics = RequestMetrics()
    store = _store(tmp_path, ch)
    recv = TraceReceiver(metrics, store)
    otlp = Server("127.0.0.1", 0, recv.routes()).start()
    first, later = _spans("acme", 10), _spans("globex", 6)
    try:
        assert httpx.post(f"{otlp.url}/v1/traces", content=_doc(first)).status_code == 200
        ch.script = ["ok", failure]  # the first insert of 4 lands, the second fails
        assert store.flush() == 4
        r = httpx.get(f"{otlp.url}/healthz")
        assert r.status_code == 503 and f"clickhouse://127.0.0.1:{ch.port}/otel.otel_traces" in r.text
        assert store.buffered == 6 and list((tmp_path / "wal" / "_wal").glob("*.wal"))
        assert 'llm_exporter_store_write_errors_total{exporter="requests",sink="clickhouse"} 1.0' in metrics.render(store)
        assert httpx.post(f"{otlp.url}/v1/traces", content=_doc(later)).status_code == 200  # arrives meanwhile
        assert store.flush() == 12
        assert httpx.get(f"{otlp.url}/healthz").status_code == 200
    finally:
        otlp.stop()
        store.close()
    _exactly_once(ch, first + later)
    tokens = [t for _, t in ch.seen]
    assert tokens[1] == tokens[2]  # the retry is the same insert, so a lost reply is deduplicated
    assert not list((tmp_path / "wal" / "_wal").iterdir())


def test_a_lost_reply_before_a_restart_is_still_recognised(tmp_path, ch):
    """The log is rewritten after a failed write, so the next start retries the very insert whose reply was lost,
    not a batch cut afresh from every logged payload (which would straddle two flushes and store some spans twice)."""
    a, b = _spans("acme", 10), _spans("globex", 6)
    store = _store(tmp_path, ch)
    ch.script = ["ok", "500"]
    store.accept(a, _doc(a), "J")
    assert store.flush() == 4  # a[4:] waits for a retry
    store.accept(b, _doc(b), "J")
    ch.script = ["ok", "ok", "lost"]
    assert store.flush() == 6  # the rest of a is stored, b's first insert is stored but its reply is lost
    ch.script = ["500"]
    store.close()  # ClickHouse refuses the last flush: b stays in the log
    assert store.error is not None
    again = _store(tmp_path, ch)
    assert again.recovered == 6
    again.close()
    _exactly_once(ch, a + b)


def test_without_the_token_a_lost_reply_would_store_spans_twice(tmp_path, ch):
    """What the token is for: the same rows inserted again under another token are stored again."""
    store = _store(tmp_path, ch)
    spans = _spans("acme", 4)
    ch.script = ["lost"]
    store.accept(spans, b"{}", "J")
    assert store.flush() == 0
    store.sink.write = lambda rows, real=store.sink.write: real(rows[::-1])  # same spans, another insert
    assert store.flush() == 4
    store.close()
    assert set(ch.span_counts().values()) == {2}


def test_a_full_buffer_while_clickhouse_is_down_answers_503_and_loses_nothing(tmp_path, ch):
    store = _store(tmp_path, ch, max_buffered_spans=8)
    recv = TraceReceiver(RequestMetrics(), store)
    otlp = Server("127.0.0.1", 0, recv.routes()).start()
    acked: list[Span] = []
    try:
        ch.script = ["500"] * 4
        for seed in range(4):
            spans = _spans("acme", 4, seed)
            r = httpx.post(f"{otlp.url}/v1/traces", content=_doc(spans))
            if r.status_code == 200:
                acked += spans
            else:
                assert r.status_code == 503 and r.headers["Retry-After"]
            store.flush()
        assert len(acked) == 8 and store.health() is not None
        while store.buffered:
            store.flush()
    finally:
        otlp.stop()
        store.close()
    _exactly_once(ch, acked)


def test_clickhouse_unreachable_at_shutdown_leaves_the_log_for_the_next_start(tmp_path, ch):
    port = free_port_block(1)  # nothing listens here
    dead = ClickHouseTarget(database="otel", table="otel_traces", host="127.0.0.1", port=port)
    store = TraceStore(tmp_path / "wal", sink=ClickHouseSink(dead, timeout_s=0.5), flush_interval_s=3600)
    spans = _spans("acme", 9)
    doc = _doc(spans)
    store.accept(decode_json(doc), doc, "J")
    store.close()
    assert "Connection refused" in (store.error or "") and list((tmp_path / "wal" / "_wal").glob("*.wal"))
    again = _store(tmp_path, ch)
    assert again.recovered == 9
    again.close()
    _exactly_once(ch, spans)
    assert not list((tmp_path / "wal" / "_wal").iterdir())


def test_the_token_names_the_spans_in_order():
    a, b = _spans("acme", 3), _spans("acme", 3, seed=1)
    assert insert_token(a) == insert_token(list(a)) != insert_token(b)
    assert insert_token(a) != insert_token(a[::-1])


def test_sigterm_under_load_stores_every_acknowledged_span_once(tmp_path, ch):
    port, otlp = free_port_block(1), free_port_block(1)
    ch.script = ["500", "reset"]  # the exporter starts against a ClickHouse that fails, then recovers
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests",
                          "--store", f"clickhouse://127.0.0.1:{ch.port}/otel", "--wal", str(tmp_path / "wal"),
                          "--port", str(port), "--otlp-port", str(otlp), "--flush-interval", "0.2"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked: list[Span] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{otlp}/healthz")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        stop = threading.Event()

        def load():
            seed = 0
            while not stop.is_set():
                spans = _spans("acme", 50, seed)
                seed += 1
                try:
                    if httpx.post(f"http://127.0.0.1:{otlp}/v1/traces", content=_doc(spans)).status_code == 200:
                        acked.extend(spans)
                except httpx.HTTPError:
                    pass  # the exporter has stopped listening: not acknowledged

        t = threading.Thread(target=load)
        t.start()
        while len(acked) < 500 and t.is_alive():
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)  # under load
        out, err = p.communicate(timeout=60)
        stop.set()
        t.join(30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "stopped" in out, err
    _store(tmp_path, ch).close()  # the next start replays whatever the last flush could not store
    _exactly_once(ch, acked)
    assert not list((tmp_path / "wal" / "_wal").iterdir())


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("spec, problem", [
    ("postgres://h:1/db", "unknown scheme"),
    ("clickhouse://h/db", "needs a host and an HTTP port"),
    ("clickhouse://h:8123/db;drop", "not a plain ClickHouse identifier"),
    ("clickhouse://h:8123/db?table=a.b", "not a plain ClickHouse identifier"),
    ("clickhouse://h:8123/db?tabel=x", "unknown parameter 'tabel'"),
    ("chdb:", "needs a directory"),
])
def test_a_bad_store_is_one_line_naming_it(spec, problem):
    with pytest.raises(ConfigError, match=problem):
        parse_store(spec)


def test_a_store_url_parses_to_its_parts(tmp_path):
    t = parse_store("clickhouse://writer:s%40cret@ch.internal:8123/otel?table=traces")
    assert (t.host, t.port, t.database, t.table, t.user, t.password) == ("ch.internal", 8123, "otel", "traces",
                                                                          "writer", "s@cret")
    assert str(t) == "clickhouse://ch.internal:8123/otel.traces"  # no password in health or logs
    assert parse_store(str(tmp_path)) == tmp_path


def test_cli_wants_a_wal_for_clickhouse(tmp_path):
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "requests", "--store", "clickhouse://h:8123/otel"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--wal DIR" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
